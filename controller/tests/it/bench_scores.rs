//! Issue 25: benchmark scores you can trust, against a real Docker engine and judged by
//! Harbor's own models: an agent that tries to write its own reward fails and is shown doing
//! it; every trial counts for what it was; any Harbor dataset runs; a task's network is the
//! one each phase asks for.

use std::time::Duration;

use serde_json::Value;

use crate::benchmarks::harbor_task::HarborTask;
use crate::benchmarks::{batch_args, bench_rows, dataset, harbor_accepts, json, run_batch};
use crate::common::{self, events, harness, repo_root};

/// §1: the reward hacker of `examples/agents` starts a loop that keeps writing a passing
/// `reward.json`, and plants `conftest.py` files that turn failures into passes; it never does
/// the task. The loop is ended, the files removed, the test fails, and the log, the trial's
/// `result.json` and the report all say what it tried.
#[tokio::test]
#[cfg_attr(
    not(all(harness_docker, harness_harbor_python)),
    ignore = "needs HARNESS_TEST_DOCKER=1 and HARNESS_TEST_HARBOR_PYTHON=PATH (bash .ci/run sets them up)"
)]
async fn issue_25_an_agent_that_writes_its_own_reward_fails_and_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job");
    let hacker = repo_root().join("examples/agents/reward-hacker.yaml");
    let model = format!("script:{}", hacker.display());
    let run = run_batch(
        &dataset().join("reward-hack"),
        &out,
        &["--model", &model],
        600,
    )
    .await;
    assert_eq!(
        run.code, 9,
        "the trial fails\n{}\n{}",
        run.stdout, run.stderr
    );
    let log = events(&out.join("reward-hack"));
    let isolated = &log
        .iter()
        .find(|e| e["type"] == "verifier_isolated")
        .expect("verifier_isolated")["data"];
    assert_eq!(isolated["tampered"], true, "{isolated}");
    assert_eq!(isolated["restored"], true, "{isolated}");
    let ended: Vec<&str> = isolated["processes_ended"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["command"].as_str().unwrap())
        .collect();
    assert!(ended.contains(&"sh keep-passing.sh"), "{isolated}");
    let changed: Vec<&str> = isolated["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    for path in [
        "/logs/verifier/reward.json",
        "/tests/conftest.py",
        "/conftest.py",
        "/pytest.ini",
    ] {
        assert!(changed.contains(&path), "{path} in {changed:?}");
    }
    let writes = isolated["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["write"] == true)
        .count();
    assert_eq!(writes, 3, "{isolated}");
    // The verifier ran its own tests only, after the agent's evidence was put aside.
    let verifier = &log
        .iter()
        .find(|e| e["type"] == "verifier_finished")
        .unwrap()["data"];
    assert_eq!(verifier["reward"], 0.0, "{verifier}");
    let output = verifier["output"]["text"].as_str().unwrap();
    assert!(output.contains("rootdir: /tests"), "{output}");
    assert!(output.contains("1 failed"), "{output}");
    let seqs: Vec<u64> = ["verifier_isolated", "verifier_finished"]
        .iter()
        .map(|kind| {
            log.iter().find(|e| e["type"] == *kind).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(seqs[0] < seqs[1]);
    // The trial's result and the report carry it.
    let result = json(&out.join("reward-hack/result.json"));
    assert_eq!(result["tampering"]["tampered"], true, "{result}");
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 0.0);
    let row = &bench_rows(&out)[0];
    assert_eq!(
        (row["tampered"].as_u64(), row["passed"].as_u64()),
        (Some(1), Some(0)),
        "{row}"
    );
    assert!(run.stdout.contains("TAMPERING"), "{}", run.stdout);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("Tampering"), "the HTML report shows it");
    harbor_accepts(&out);
}

/// Issue 55 §3: the agent sets its own reward through the container's programs (a `.pth` file
/// and a `sitecustomize.py` that end Python at start with success, its own `python3` earlier on
/// `PATH`, a patched module) in a task whose tests always fail: whatever the reward, the log,
/// `result.json` and the report say `tampered`, naming each change.
#[tokio::test]
#[cfg_attr(
    not(all(harness_docker, harness_harbor_python)),
    ignore = "needs HARNESS_TEST_DOCKER=1 and HARNESS_TEST_HARBOR_PYTHON=PATH (bash .ci/run sets them up)"
)]
async fn issue_55_an_agent_that_changes_what_runs_the_tests_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    HarborTask::quick(
        "true",
        "python3 -c 'import sys; sys.exit(1)' && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
    )
    .write(&data.join("always-fails"));
    let script = dir.path().join("forger.yaml");
    std::fs::write(
        &script,
        r#"turns:
  - text: "The tests will pass, whatever they say."
    tool_calls:
      - name: bash
        arguments:
          cmd: |
            site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
            module=$(python3 -c 'import json; print(json.__file__)')
            mkdir -p "$site"
            echo 'import os; os._exit(0)' > "$site/zz_forge.pth"
            echo 'import os; os._exit(0)' > "$site/sitecustomize.py"
            printf '#!/bin/sh\nexit 0\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3
            echo '# patched' >> "$module"
  - text: "Done."
"#,
    )
    .unwrap();
    let out = dir.path().join("job");
    let model = format!("script:{}", script.display());
    // Whatever the policy would let through: the routes are the container's, not the rules'.
    let flags = ["--model", &model, "--policy", "allow-all"];
    let run = run_batch(&data, &out, &flags, 600).await;
    assert!(matches!(run.code, 0 | 9), "{}\n{}", run.stdout, run.stderr);
    let log = events(&out.join("always-fails"));
    let isolated = &log
        .iter()
        .find(|e| e["type"] == "verifier_isolated")
        .expect("verifier_isolated")["data"];
    assert_eq!(isolated["tampered"], true, "{isolated}");
    let runtime: Vec<&str> = isolated["runtime"]
        .as_array()
        .expect("runtime changes")
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    for wanted in [
        "zz_forge.pth",
        "sitecustomize.py",
        "/usr/local/bin/python3",
        "json/__init__.py",
    ] {
        assert!(
            runtime.iter().any(|p| p.ends_with(wanted)),
            "{wanted} in {runtime:?}"
        );
    }
    let result = json(&out.join("always-fails/result.json"));
    assert_eq!(result["tampering"]["tampered"], true, "{result}");
    let row = &bench_rows(&out)[0];
    assert_eq!(row["tampered"].as_u64(), Some(1), "{row}");
    assert!(run.stdout.contains("TAMPERING"), "{}", run.stdout);
    harbor_accepts(&out);
}

/// The `data` of each event of `kind` in a log.
fn all_of<'a>(log: &'a [Value], kind: &str) -> Vec<&'a Value> {
    log.iter()
        .filter(|e| e["type"] == kind)
        .map(|e| &e["data"])
        .collect()
}

/// §2: a trial whose verifier gives no reward is an error (Harbor's rule for its format) and
/// counts as 0 in the mean over every trial, beside the mean over the scored ones and the
/// errors by class; the job's `result.json` says the same as Harbor reads it. It is never
/// retried (only the infrastructure is), and a resume leaves it: it has its score.
#[tokio::test]
#[cfg_attr(
    not(all(harness_docker, harness_harbor_python)),
    ignore = "needs HARNESS_TEST_DOCKER=1 and HARNESS_TEST_HARBOR_PYTHON=PATH (bash .ci/run sets them up)"
)]
async fn issue_25_every_trial_counts_for_what_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    HarborTask::quick(
        "echo ok > /app/out",
        "[ \"$(cat /app/out)\" = ok ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
    )
    .write(&data.join("good"));
    HarborTask::quick("echo ok > /app/out", "echo 'tests ran; no reward written'")
        .write(&data.join("silent"));
    let out = dir.path().join("job");
    let args = batch_args(
        &data,
        &out,
        &["--agent", "oracle", "--retries", "2", "--parallel", "1"],
    );
    let run = harness(&args, Duration::from_secs(600)).await;
    assert_eq!(run.code, 9, "{}\n{}", run.stdout, run.stderr);
    let report = json(&out.join("report.json"));
    let bench = &report["benchmark"];
    assert_eq!(
        (bench["trials"].as_u64(), bench["passed"].as_u64()),
        (Some(2), Some(1)),
        "{bench}"
    );
    assert_eq!(
        bench["mean_reward"], 0.5,
        "every trial, the errored one as 0: {bench}"
    );
    assert_eq!(
        (bench["mean_scored"].as_f64(), bench["scored"].as_u64()),
        (Some(1.0), Some(1)),
        "{bench}"
    );
    assert_eq!(bench["errors"]["RewardFileNotFoundError"], 1, "{bench}");
    common::assert_contains(
        &run.stdout,
        &[
            "mean reward 0.500 over every trial, 1.000 over the 1 scored",
            "errored trials: 1 (RewardFileNotFoundError 1)",
        ],
    );
    // Harbor's own reading of the job: the same counts, its mean over the scored trial.
    let job = json(&out.join("result.json"));
    let stats = &job["stats"];
    assert_eq!(
        (
            stats["n_completed_trials"].as_u64(),
            stats["n_errored_trials"].as_u64()
        ),
        (Some(2), Some(1)),
        "{stats}"
    );
    let eval = &stats["evals"]["agent-harness__oracle__data"];
    assert_eq!(eval["metrics"][0]["mean"], 1.0, "{eval}");
    assert_eq!(
        stats["n_retries"], 0,
        "a verifier's failure is not retried: {stats}"
    );
    harbor_accepts(&out);
    let started = events(&out)
        .iter()
        .filter(|e| e["type"] == "task_started")
        .count();
    assert_eq!(started, 2, "one attempt each");

    // A resume runs what has no score: a trial whose result went missing, not the errored one.
    std::fs::remove_file(out.join("good/result.json")).unwrap();
    let mut resume = args.clone();
    resume.push("--resume".to_owned());
    let run = harness(&resume, Duration::from_secs(300)).await;
    assert_eq!(run.code, 9, "{}", run.stderr);
    let log = events(&out);
    let last = log
        .iter()
        .rposition(|e| e["type"] == "batch_started")
        .unwrap();
    let tasks = |kind: &str| -> Vec<String> {
        log[last..]
            .iter()
            .filter(|e| e["type"] == kind)
            .map(|e| e["data"]["task"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(tasks("task_started"), ["good"]);
    assert_eq!(tasks("task_skipped"), ["silent"]);
    harbor_accepts(&out);
}

/// §3: a multi-step task runs its steps in order in one container, each with its own
/// instruction, workdir files, tests and trajectory; the trial's reward is the steps' mean, and
/// a step below its `min_reward` stops the task there. Harbor's models read every file.
#[tokio::test]
#[cfg_attr(
    not(all(harness_docker, harness_harbor_python)),
    ignore = "needs HARNESS_TEST_DOCKER=1 and HARNESS_TEST_HARBOR_PYTHON=PATH (bash .ci/run sets them up)"
)]
async fn issue_25_a_multi_step_task_runs_its_steps_and_stops_when_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let task = dataset().join("multi-step-notes");
    let out = dir.path().join("oracle");
    let run = run_batch(&task, &out, &["--agent", "oracle"], 600).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let log = events(&out.join("multi-step-notes"));
    let started: Vec<&str> = all_of(&log, "step_started")
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(started, ["01-create", "02-extend"]);
    assert_eq!(all_of(&log, "verifier_finished").len(), 2);
    let steps = all_of(&log, "steps_finished");
    assert_eq!(steps.len(), 1);
    assert_eq!(
        (steps[0]["reward"].as_f64(), steps[0]["passed"].as_bool()),
        (Some(1.0), Some(true)),
        "{}",
        steps[0]
    );
    let result = json(&out.join("multi-step-notes/result.json"));
    let names: Vec<&str> = result["step_results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["01-create", "02-extend"], "{result}");
    assert_eq!(
        result["verifier_result"]["rewards"]["reward"], 1.0,
        "{result}"
    );
    for step in names {
        let trajectory = json(&out.join(format!(
            "multi-step-notes/steps/{step}/agent/trajectory.json"
        )));
        assert!(
            !trajectory["steps"].as_array().unwrap().is_empty(),
            "{step}: {trajectory}"
        );
    }
    harbor_accepts(&out);

    let out = dir.path().join("nop");
    let run = run_batch(&task, &out, &["--agent", "nop"], 600).await;
    assert_eq!(run.code, 9, "{}\n{}", run.stdout, run.stderr);
    let log = events(&out.join("multi-step-notes"));
    assert_eq!(
        all_of(&log, "step_started").len(),
        1,
        "stopped after the first step"
    );
    let steps = all_of(&log, "steps_finished");
    assert_eq!(steps[0]["reward"], 0.0, "{}", steps[0]);
    let stopped = steps[0]["stopped"].as_str().unwrap();
    assert!(stopped.contains("min_reward"), "{stopped}");
    let result = json(&out.join("multi-step-notes/result.json"));
    assert_eq!(
        result["step_results"].as_array().unwrap().len(),
        1,
        "{result}"
    );
    harbor_accepts(&out);
}

/// §4: an allow list holds per phase. Two web servers stand in for the internet on a network
/// of this test's own (`examples/network/hosts.sh`); the agent's phase reaches `allowed.test`
/// through the task's egress proxy and nothing else (not another name, not the allowed host's
/// address, not around the proxy, not a resolver), and the verifier's phase reaches nothing.
/// The proxy's decisions are in the log.
#[tokio::test]
#[cfg_attr(
    not(all(harness_docker, harness_harbor_python)),
    ignore = "needs HARNESS_TEST_DOCKER=1 and HARNESS_TEST_HARBOR_PYTHON=PATH (bash .ci/run sets them up)"
)]
async fn issue_25_an_allow_list_holds_in_each_phase() {
    let network = format!("harness-test-net-{}", std::process::id());
    let hosts = repo_root().join("examples/network/hosts.sh");
    let up = std::process::Command::new("bash")
        .arg(&hosts)
        .arg("up")
        .env("HOSTS_NETWORK", &network)
        .output()
        .unwrap();
    struct Down<'a>(&'a std::path::Path, &'a str);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("bash")
                .arg(self.0)
                .arg("down")
                .env("HOSTS_NETWORK", self.1)
                .output();
        }
    }
    let _down = Down(&hosts, &network);
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job");
    let run = run_batch(
        &repo_root().join("examples/network/allowlist-fetch"),
        &out,
        &["--agent", "oracle", "--task-internet", &network],
        600,
    )
    .await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let log = events(&out.join("allowlist-fetch"));
    let verifier = all_of(&log, "verifier_finished");
    let output = verifier[0]["output"]["text"].as_str().unwrap();
    assert!(output.contains("every check held"), "{output}");
    let started = all_of(&log, "session_started");
    let network = &started[0]["config"]["benchmark"]["network"];
    assert_eq!(
        (network["agent"].as_str(), network["verifier"].as_str()),
        (Some("allowlist allowed.test"), Some("no-network")),
        "{network}"
    );
    let isolated = all_of(&log, "verifier_isolated");
    let egress = isolated[0]["egress"].as_array().unwrap();
    let decided = |host: &str| {
        egress
            .iter()
            .find(|r| r["host"].as_str().unwrap().starts_with(host))
            .map(|r| r["allowed"].as_bool().unwrap())
    };
    assert_eq!(decided("allowed.test"), Some(true), "{egress:?}");
    assert_eq!(decided("blocked.test"), Some(false), "{egress:?}");
    assert_eq!(decided("1.1.1.1"), Some(false), "{egress:?}");
    harbor_accepts(&out);
}

/// Harbor's users: the agent's phase runs as `[agent].user` (the image's non-root USER here),
/// the verifier as `[verifier].user` (root), and a step that asks for another agent user is
/// refused by name rather than run as the wrong one.
#[tokio::test]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn issue_25_each_phase_runs_as_its_user() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let users = "[agent]\ntimeout_sec = 60\nuser = \"agent\"\n[verifier]\ntimeout_sec = 30\nuser = \"root\"\n[environment]\nallow_internet = false\n";
    HarborTask {
        toml: users,
        dockerfile: "FROM agent-harness/base:bookworm\nRUN useradd -m agent && mkdir -p /app && chown agent /app\nUSER agent\nWORKDIR /app\n",
        ..HarborTask::quick(
            "id -un > /app/out",
            "[ \"$(cat /app/out)\" = agent ] && [ \"$(stat -c %U /app/out)\" = agent ] && [ \"$(id -un)\" = root ] && echo 1 > /logs/verifier/reward.txt || { echo \"agent=$(cat /app/out) verifier=$(id -un)\"; echo 0 > /logs/verifier/reward.txt; }",
        )
    }
    .write(&data.join("users"));
    let out = dir.path().join("job");
    let run = run_batch(&data, &out, &["--agent", "oracle"], 600).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let verifier = all_of(&events(&out.join("users")), "verifier_finished")[0].clone();
    assert_eq!(verifier["reward"], 1.0, "{verifier}");

    // The same task with a step whose agent is another user: not run, and said why, beside
    // the task that runs.
    let task = data.join("users-steps");
    std::fs::create_dir_all(task.join("steps/one/solution")).unwrap();
    std::fs::create_dir_all(task.join("steps/one/tests")).unwrap();
    std::fs::create_dir_all(task.join("environment")).unwrap();
    let from = data.join("users");
    for (src, dst) in [
        ("environment/Dockerfile", "environment/Dockerfile"),
        ("tests/test.sh", "steps/one/tests/test.sh"),
        ("solution/solve.sh", "steps/one/solution/solve.sh"),
        ("instruction.md", "steps/one/instruction.md"),
    ] {
        std::fs::copy(from.join(src), task.join(dst)).unwrap();
    }
    let toml = format!("{users}[[steps]]\nname = \"one\"\n[steps.agent]\nuser = \"root\"\n");
    std::fs::write(task.join("task.toml"), toml).unwrap();
    let out = dir.path().join("refused");
    let run = run_batch(&data, &out, &["--agent", "oracle"], 300).await;
    assert_eq!(run.code, 11, "{}\n{}", run.stdout, run.stderr);
    let report = json(&out.join("report.json"));
    let not_runnable = &report["benchmark"]["not_runnable"];
    assert_eq!(not_runnable[0]["task"], "users-steps", "{not_runnable}");
    let said = not_runnable[0]["reason"].as_str().unwrap();
    assert!(
        said.contains("steps.one.agent.user") && said.contains("not `root`"),
        "{said}"
    );
}

//! Issue 25: benchmark scores you can trust, against a real Docker engine and judged by
//! Harbor's own models: an agent that tries to write its own reward fails and is shown doing
//! it; every trial counts for what it was; any Harbor dataset runs; a task's network is the
//! one each phase asks for.

use std::time::Duration;

use serde_json::Value;

use crate::benchmarks::{
    batch_args, bench_rows, dataset, events, harbor_accepts, harness, json, repo,
};
use crate::common;

fn docker() -> bool {
    common::needs(
        "HARNESS_TEST_DOCKER",
        "a Docker engine and the sandbox image",
    )
    .is_some()
}

/// §1: the reward hacker of `examples/agents` starts a loop that keeps writing a passing
/// `reward.json`, and plants `conftest.py` files that turn failures into passes; it never does
/// the task. The loop is ended, the files removed, the test fails, and the log, the trial's
/// `result.json` and the report all say what it tried.
#[tokio::test]
async fn issue_25_an_agent_that_writes_its_own_reward_fails_and_is_shown() {
    if !docker() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job");
    let hacker = repo().join("examples/agents/reward-hacker.yaml");
    let model = format!("script:{}", hacker.display());
    let run = harness(
        &batch_args(&dataset().join("reward-hack"), &out, &["--model", &model]),
        Duration::from_secs(600),
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

/// The `data` of each event of `kind` in a log.
#[allow(dead_code)]
fn all_of<'a>(log: &'a [Value], kind: &str) -> Vec<&'a Value> {
    log.iter()
        .filter(|e| e["type"] == kind)
        .map(|e| &e["data"])
        .collect()
}

/// Writes a Harbor task: `test` is its tests/test.sh, `solve` its solution.
fn harbor_task(root: &std::path::Path, name: &str, toml: &str, solve: &str, test: &str) {
    let task = root.join(name);
    for dir in ["environment", "solution", "tests"] {
        std::fs::create_dir_all(task.join(dir)).unwrap();
    }
    let write = |rel: &str, text: &str| std::fs::write(task.join(rel), text).unwrap();
    write("task.toml", toml);
    write("instruction.md", "Write ok to /app/out.\n");
    write(
        "environment/Dockerfile",
        "FROM agent-harness/base:bookworm\nWORKDIR /app\n",
    );
    write("solution/solve.sh", &format!("#!/bin/bash\n{solve}\n"));
    write("tests/test.sh", &format!("#!/bin/bash\n{test}\n"));
}

const QUICK: &str = "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n[environment]\nallow_internet = false\n";

/// §2: a trial whose verifier gives no reward is an error (Harbor's rule for its format) and
/// counts as 0 in the mean over every trial, beside the mean over the scored ones and the
/// errors by class; the job's `result.json` says the same as Harbor reads it. It is never
/// retried (only the infrastructure is), and a resume leaves it: it has its score.
#[tokio::test]
async fn issue_25_every_trial_counts_for_what_it_was() {
    if !docker() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    harbor_task(
        &data,
        "good",
        QUICK,
        "echo ok > /app/out",
        "[ \"$(cat /app/out)\" = ok ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
    );
    harbor_task(
        &data,
        "silent",
        QUICK,
        "echo ok > /app/out",
        "echo 'tests ran; no reward written'",
    );
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
    assert!(
        run.stdout
            .contains("mean reward 0.500 over every trial, 1.000 over the 1 scored"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("errored trials: 1 (RewardFileNotFoundError 1)"),
        "{}",
        run.stdout
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

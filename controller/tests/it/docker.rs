//! `--sandbox docker` against a real Docker engine and the sandbox image (docker/README.md).
//!
//! These need the engine and the image, so they run when `HARNESS_TEST_DOCKER=1` is set
//! (CI sets it after starting the engine and building the image;
//! `HARNESS_TEST_IMAGE` names another image). Without it they are ignored, saying so (and the
//! build warns).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::batches::of_type;
use crate::common::{self, events};

fn image() -> String {
    std::env::var("HARNESS_TEST_IMAGE").unwrap_or_else(|_| "agent-harness/sandbox".to_owned())
}

fn docker(args: &[&str]) -> (bool, String) {
    let output = Command::new("docker")
        .args(args)
        .output()
        .expect("run docker");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).trim().to_owned(),
    )
}

/// A task in `dir` playing `turns` (YAML) in a container with `sandbox` (YAML flow mapping).
fn task(dir: &Path, turns: &str, sandbox: &str, extra: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("script.yaml"), format!("turns:\n{turns}")).unwrap();
    let path = dir.join("task.yaml");
    std::fs::write(
        &path,
        format!(
            "prompt: probe the container\nmodel: {{name: 'script:script.yaml'}}\n\
             sandbox: {{provider: docker, image: '{}', {sandbox}}}\n{extra}",
            image()
        ),
    )
    .unwrap();
    path
}

/// The tool results' texts, in order.
pub fn outputs(events: &[Value]) -> Vec<String> {
    of_type(events, "tool_result")
        .iter()
        .map(|e| {
            e["data"]["output"]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

use common::bash_turn;

/// The id of the container the harness with this pid started, once it exists (bounded).
fn container_of(harness_pid: u32) -> String {
    let label = format!("label=agent-harness.controller.pid={harness_pid}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, id) = docker(&["ps", "-q", "--filter", &label]);
        if !id.is_empty() {
            return id;
        }
        assert!(
            Instant::now() < deadline,
            "no container appeared within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn a_session_runs_in_a_fresh_container_that_is_gone_after_it() {
    let example = common::repo_root().join("examples/hello/task.yaml");
    let mut command = common::command(&[
        "run",
        "--policy",
        "allow-all",
        "--sandbox",
        "docker",
        "--image",
        &image(),
        "--memory",
        "256m",
        "--cpus",
        "1",
        "--pids",
        "128",
        "--task",
        example.to_str().unwrap(),
    ]);
    command.current_dir(tempfile::tempdir().unwrap().keep());
    let run = common::run(command, Duration::from_secs(120)).await;
    run.assert_stderr_has(0, "check: passed");
    let events = events(&run.log_dir());
    let config = &events[0]["data"]["config"];
    assert_eq!(config["sandbox"], "docker");
    assert_eq!(config["container"]["memory_bytes"], 256 * 1024 * 1024);
    assert_eq!(config["container"]["pids"], 128);
    let id = config["container"]["id"].as_str().unwrap();
    assert_eq!(config["workspace_root"], "/workspace");
    let (found, _) = docker(&["inspect", id]);
    assert!(!found, "container {id} is still there after the session");
}

#[tokio::test]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn the_memory_limit_kills_a_memory_bomb_and_the_session_records_it() {
    let dir = tempfile::tempdir().unwrap();
    let turns =
        bash_turn("python3 -c 'a = []\nwhile True: a.append(bytearray(10**7))'; echo status=$?")
            + &bash_turn("echo the server survived")
            + "  - text: done\n";
    let path = task(dir.path(), &turns, "memory: 128m", "");
    let mut command = common::command(&["run", "--policy", "allow-all", "--task"]);
    command.arg(&path).current_dir(dir.path());
    let run = common::run(command, Duration::from_secs(120)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let events = events(&run.log_dir());
    let outputs = outputs(&events);
    assert!(
        outputs[0].contains("status=137") && outputs[0].contains("Killed"),
        "the bomb was not killed by the limit: {outputs:?}"
    );
    assert!(outputs[1].contains("the server survived"), "{outputs:?}");
}

/// The docker bridge's gateway: the host as the containers see it. Some engines leave
/// `Gateway` out of the network's IPAM config; the bridge then takes the subnet's first address.
fn bridge_gateway() -> String {
    let (ok, config) = docker(&[
        "network",
        "inspect",
        "bridge",
        "--format",
        "{{(index .IPAM.Config 0).Gateway}}|{{(index .IPAM.Config 0).Subnet}}",
    ]);
    assert!(ok, "inspecting the bridge network: {config}");
    let mut fields = config.split('|');
    let (gateway, subnet) = (fields.next().unwrap_or(""), fields.next().unwrap_or(""));
    if gateway.parse::<std::net::Ipv4Addr>().is_ok() {
        return gateway.to_owned();
    }
    let network: std::net::Ipv4Addr = subnet
        .split('/')
        .next()
        .and_then(|address| address.parse().ok())
        .unwrap_or_else(|| panic!("no bridge gateway or subnet: {config}"));
    std::net::Ipv4Addr::from(u32::from(network) + 1).to_string()
}

/// Runs a connect to a listener on the bridge gateway from inside a container; returns what the
/// command printed and whether the listener saw a connection.
async fn connect_from_container(network: &str) -> (String, bool) {
    let gateway = bridge_gateway();
    let listener = std::net::TcpListener::bind((gateway.as_str(), 0)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let probe = format!(
        "python3 -c \"import socket; socket.create_connection(('{gateway}', {port}), 5); print('connected')\" 2>&1 | tail -1"
    );
    let turns = bash_turn(&probe) + "  - text: done\n";
    let path = task(dir.path(), &turns, "", &format!("network: {network}\n"));
    let mut command = common::command(&["run", "--policy", "allow-all", "--task"]);
    command.arg(&path).current_dir(dir.path());
    let run = common::run(command, Duration::from_secs(120)).await;
    assert_eq!(
        run.code, 0,
        "the controller must reach the server: {}",
        run.stderr
    );
    let output = outputs(&events(&run.log_dir())).remove(0);
    let accepted = listener.accept().is_ok();
    (output, accepted)
}

#[tokio::test]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn offline_commands_reach_no_address_while_the_controller_reaches_the_server() {
    let (output, accepted) = connect_from_container("none").await;
    assert!(
        !output.contains("connected")
            && (output.contains("Permission denied") || output.contains("not permitted")),
        "an offline command opened a connection: {output}"
    );
    assert!(
        !accepted,
        "the listener saw a connection from an offline container"
    );
    // The same probe with the network open does connect: the refusal above is the mode's.
    let (output, accepted) = connect_from_container("host").await;
    assert!(output.contains("connected"), "{output}");
    assert!(accepted);
}

#[tokio::test]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn containment_holds_inside_the_container() {
    let dir = tempfile::tempdir().unwrap();
    let turns = [
        "id -u",
        "touch /etc/harness-probe 2>&1; echo status=$?",
        "cat /run/secrets/sandbox-token 2>&1; echo status=$?",
        "echo count=$(tr '\\0' '\\n' < /proc/1/environ | grep -c '^SANDBOX_TOKEN=')",
        "touch /workspace/written && echo wrote",
        "mount -t tmpfs none /mnt 2>&1; echo status=$?",
    ]
    .iter()
    .map(|cmd| bash_turn(cmd))
    .collect::<String>()
        + "  - text: done\n";
    let path = task(dir.path(), &turns, "pids: 64", "");
    let mut command = common::command(&["run", "--policy", "allow-all", "--task"]);
    command.arg(&path).current_dir(dir.path());
    let run = common::run(command, Duration::from_secs(120)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let outputs = outputs(&events(&run.log_dir()));
    assert!(
        outputs[0].contains("10001"),
        "commands run as the image's user: {outputs:?}"
    );
    assert!(
        outputs[1].contains("Permission denied") && outputs[1].contains("status=1"),
        "a write outside the workspace: {outputs:?}"
    );
    assert!(
        outputs[2].contains("Permission denied") && outputs[2].contains("status=1"),
        "the token file: {outputs:?}"
    );
    assert!(
        outputs[3].contains("count=0"),
        "the token in the environment: {outputs:?}"
    );
    assert!(outputs[4].contains("wrote"), "{outputs:?}");
    assert!(
        outputs[5].contains("status=") && !outputs[5].contains("status=0"),
        "{outputs:?}"
    );
}

#[tokio::test]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn a_killed_controller_leaves_a_container_that_prune_removes() {
    let dir = tempfile::tempdir().unwrap();
    let turns = bash_turn("sleep 60") + "  - text: done\n";
    let path = task(dir.path(), &turns, "", "");
    let mut command = common::command(&["run", "--policy", "allow-all", "--task"]);
    command.arg(&path).current_dir(dir.path());
    let mut child = command.spawn().unwrap();
    let container = container_of(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    let (found, _) = docker(&["inspect", &container]);
    assert!(found, "a SIGKILLed controller cannot remove its container");
    let prune = common::harness(&["sandboxes", "prune"], Duration::from_secs(60)).await;
    assert_eq!(prune.code, 0, "{}", prune.stderr);
    assert!(
        prune.stdout.contains(&container) && prune.stdout.contains("is gone"),
        "{}",
        prune.stdout
    );
    let (found, _) = docker(&["inspect", &container]);
    assert!(!found, "prune left {container}");
}

#[tokio::test]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn a_container_that_dies_mid_session_is_an_infrastructure_failure() {
    let dir = tempfile::tempdir().unwrap();
    let turns = bash_turn("sleep 60") + "  - text: done\n";
    let path = task(dir.path(), &turns, "", "check: 'true'\n");
    let mut command = common::command(&["run", "--policy", "allow-all", "--task"]);
    command
        .arg(&path)
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = command.spawn().unwrap();
    let container = container_of(child.id());
    // Let the command start, then take the container away under it.
    std::thread::sleep(Duration::from_millis(500));
    let (killed, _) = docker(&["kill", &container]);
    assert!(killed);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(8), "{stderr}");
    let log_dir = stderr
        .lines()
        .find_map(|line| line.strip_prefix("log: "))
        .unwrap();
    let events = events(Path::new(log_dir));
    let finished = of_type(&events, "session_finished");
    assert_eq!(finished[0]["data"]["failure"], "infrastructure");
    assert!(
        of_type(&events, "error").iter().any(|e| {
            e["data"]["class"] == "infrastructure"
                && e["data"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("exited with 137")
        }),
        "the log says the container died: {events:?}"
    );
    assert!(
        of_type(&events, "check_result").is_empty(),
        "no check ran: never a pass"
    );
    let (found, _) = docker(&["inspect", &container]);
    assert!(!found, "the dead container was removed");
}

/// Three tasks, `c0` to `c2`, each writing its number and checked for it.
fn three_tasks() -> tempfile::TempDir {
    let tasks = tempfile::tempdir().unwrap();
    for i in 0..3 {
        let dir = tasks.path();
        std::fs::write(
            dir.join(format!("c{i}.turns")),
            format!(
                "turns:\n{}  - text: done\n",
                bash_turn(&format!("echo {i} > n"))
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("c{i}.yaml")),
            format!(
                "prompt: p\nmodel: {{name: 'script:c{i}.turns'}}\ncheck: 'test $(cat n) = {i}'\n"
            ),
        )
        .unwrap();
    }
    tasks
}

/// `harness batch --sandbox docker` of `tasks` into `out`, with `extra` flags.
async fn docker_batch(tasks: &tempfile::TempDir, out: &Path, extra: &[&str]) -> common::Run {
    let image = image();
    let mut args = vec!["batch", "--policy", "allow-all", "--sandbox", "docker"];
    args.extend(["--image", &image, "--progress", "lines"]);
    args.extend(extra);
    args.extend([
        "--out",
        out.to_str().unwrap(),
        tasks.path().to_str().unwrap(),
    ]);
    common::harness(&args, Duration::from_secs(180)).await
}

/// The containers (running or not) that the harness process `pid` labelled as its own.
fn containers_of(pid: u32) -> String {
    let label = format!("label=agent-harness.controller.pid={pid}");
    docker(&["ps", "-aq", "--filter", &label]).1
}

/// Of the three tasks' logs in `out`: each passed its check in a container of its own, which
/// is gone.
fn each_task_had_its_own_container_now_gone(out: &Path) {
    let mut ids = Vec::new();
    for i in 0..3 {
        let events = events(&out.join(format!("c{i}")));
        assert_eq!(
            of_type(&events, "check_result")[0]["data"]["passed"],
            true,
            "c{i}"
        );
        let id = events[0]["data"]["config"]["container"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let (found, _) = docker(&["inspect", &id]);
        assert!(!found, "c{i}'s container {id} is still there");
        ids.push(id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "one container per task");
}

#[tokio::test]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn a_batch_runs_each_task_in_its_own_container_and_leaves_none() {
    let tasks = three_tasks();
    let out = tempfile::tempdir().unwrap().path().join("batch");
    let run = docker_batch(&tasks, &out, &["--memory", "256m", "--parallel", "2"]).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    each_task_had_its_own_container_now_gone(&out);
}

/// With `--pool-size`, every task's container comes ready from the pool (a task waits for the
/// one already starting), each is used by one task only, and none is left after the batch.
#[tokio::test]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn a_warm_pool_leases_started_containers_one_per_task_and_leaves_none() {
    let tasks = three_tasks();
    let out = tempfile::tempdir().unwrap().path().join("batch");
    let run = docker_batch(&tasks, &out, &["--parallel", "1", "--pool-size", "1"]).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let said = format!("{}{}", run.stdout, run.stderr);
    assert!(
        said.contains("warm pool: 3 of 3 sandboxes were leased ready, 0 started on demand"),
        "{said}"
    );
    let batch = events(&out);
    assert_eq!(
        of_type(&batch, "batch_finished")[0]["data"]["warm_pool"],
        serde_json::json!({"size": 1, "leased_ready": 3, "started_on_demand": 0})
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["warm_pool"]["leased_ready"], 3, "{report}");
    each_task_had_its_own_container_now_gone(&out);
    // The replacement started for the last lease was removed with the pool.
    assert_eq!(containers_of(run.pid), "", "no pooled container is left");
}

#[test]
fn a_warm_pool_needs_docker() {
    let tasks = three_tasks();
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(common::harness_binary())
        .args(["batch", "--sandbox", "local", "--pool-size", "2", "--out"])
        .arg(out.path().join("batch"))
        .arg(tasks.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--pool-size keeps Docker containers ready: it needs --sandbox docker"),
        "{stderr}"
    );
}

/// Tasks whose container specs differ share one pool of `--pool-size` containers: a spec that
/// needs room evicts the idle containers of another, and none is left after the batch.
#[tokio::test]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn a_warm_pool_serves_tasks_of_different_specs_and_leaves_none() {
    let tasks = three_tasks();
    let c1 = tasks.path().join("c1.yaml");
    let text = std::fs::read_to_string(&c1).unwrap();
    std::fs::write(&c1, format!("{text}sandbox: {{memory: 300m}}\n")).unwrap();
    let out = tempfile::tempdir().unwrap().path().join("batch");
    let run = docker_batch(&tasks, &out, &["--parallel", "1", "--pool-size", "1"]).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let said = format!("{}{}", run.stdout, run.stderr);
    assert!(said.contains(" of 3 sandboxes were leased ready"), "{said}");
    each_task_had_its_own_container_now_gone(&out);
    let memory = events(&out.join("c1"))[0]["data"]["config"]["container"]["memory_bytes"].clone();
    assert_eq!(memory, 300 << 20, "c1 ran in a container of its own spec");
    assert_eq!(containers_of(run.pid), "", "no pooled container is left");
}

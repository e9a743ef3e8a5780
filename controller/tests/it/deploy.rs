//! deploy/: the Kubernetes manifests render with `kubectl kustomize` and validate strictly
//! against the oldest and newest Kubernetes we support (`kubernetes-validate`, from PyPI); the
//! Job's controller arguments are the ones this binary understands, and each of its tasks runs
//! here, picked by its completion index, with its log where the Job's readers look.
//!
//! No cluster runs here: these need `kubectl` and `kubernetes-validate`, so they run when
//! `HARNESS_TEST_DEPLOY=1` (CI installs both and sets it); without it they say so and pass.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::common;

/// The oldest Kubernetes the manifests support (native sidecars, backoffLimitPerIndex,
/// podFailurePolicy's FailIndex) and the newest kubernetes-validate knows.
const VERSIONS: &[&str] = &["1.29.0", "1.37.0"];

fn enabled(test: &str) -> bool {
    let on = std::env::var("HARNESS_TEST_DEPLOY").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("skipped {test}: set HARNESS_TEST_DEPLOY=1 with kubectl and kubernetes-validate");
    }
    on
}

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// `kubectl kustomize DIR`, as documents.
fn render(dir: &str) -> (String, Vec<Value>) {
    let output = Command::new("kubectl")
        .args(["kustomize"])
        .arg(deploy().join(dir))
        .output()
        .expect("run kubectl");
    assert!(
        output.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let docs = serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .collect();
    (text, docs)
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| {
            d["kind"] == kind
                && d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(name))
        })
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendered manifests"))
}

#[test]
fn the_manifests_render_and_validate_strictly() {
    if !enabled("the_manifests_render_and_validate_strictly") {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    for dir in ["sandbox", "evaluation"] {
        let (text, docs) = render(dir);
        assert!(docs.len() >= 4, "{dir}: {} documents", docs.len());
        let file = scratch.path().join(format!("{dir}.yaml"));
        std::fs::write(&file, text).unwrap();
        for version in VERSIONS {
            let output = Command::new("kubernetes-validate")
                .args(["--strict", "--quiet", "-k", version])
                .arg(&file)
                .output()
                .expect("run kubernetes-validate");
            assert!(
                output.status.success(),
                "{dir} against Kubernetes {version}:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

#[test]
fn the_standalone_sandbox_is_locked_down() {
    if !enabled("the_standalone_sandbox_is_locked_down") {
        return;
    }
    let (_, docs) = render("sandbox");
    let pod = &find(&docs, "Deployment", "sandbox")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"][0],
        "ALL"
    );
    assert_eq!(container["args"], serde_json::json!(["--network", "none"]));
    let policy = &find(&docs, "NetworkPolicy", "sandbox")["spec"];
    assert_eq!(policy["egress"], serde_json::json!([]));
    assert_eq!(
        policy["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["agent-harness/role"],
        "controller"
    );
}

/// What a pod of the Job runs, run here: each completion index picks its task from the
/// ConfigMap's files, and the log lands in `<log-dir>/<task name>/`.
/// The Job pod's arguments with this machine's paths for the pod's mounts: `folder` for the
/// ConfigMap, `runs` for the log volume, and a local sandbox instead of the sidecar.
fn local_pod_args(args: &[String], folder: &Path, runs: &Path, job_name: &str) -> Vec<String> {
    let mut pod_args: Vec<String> = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--task" => {
                rest.next();
                pod_args.extend(["--task".into(), folder.display().to_string()]);
            }
            "--sandbox" | "--sandbox-token-file" => {
                rest.next();
            }
            "--log-dir" => {
                let value = rest.next().unwrap().replace("$(JOB_NAME)", job_name);
                let local = value.replacen("/runs", &runs.display().to_string(), 1);
                pod_args.extend(["--log-dir".into(), local]);
            }
            other => pod_args.push(other.to_owned()),
        }
    }
    pod_args
}

#[tokio::test(flavor = "multi_thread")]
async fn each_completion_index_runs_its_task_as_the_job_pod_would() {
    if !enabled("each_completion_index_runs_its_task_as_the_job_pod_would") {
        return;
    }
    let (_, docs) = render("evaluation");
    let job = find(&docs, "Job", "harness-eval");
    let configmap = find(&docs, "ConfigMap", "tasks");
    let tasks: Vec<&String> = configmap["data"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.ends_with(".yaml"))
        .collect();
    assert_eq!(
        job["spec"]["completions"],
        tasks.len(),
        "completions must equal the number of task files"
    );
    let args: Vec<String> =
        serde_json::from_value(job["spec"]["template"]["spec"]["containers"][0]["args"].clone())
            .unwrap();
    assert_eq!(args[..3], ["run", "--task", "/tasks"]);
    // The pod's arguments, with this machine's paths for the pod's mounts: the ConfigMap as a
    // folder, a local sandbox instead of the sidecar, the log volume as a temporary folder.
    let folder = tempfile::tempdir().unwrap();
    for (key, value) in configmap["data"].as_object().unwrap() {
        std::fs::write(folder.path().join(key), value.as_str().unwrap()).unwrap();
    }
    let runs = tempfile::tempdir().unwrap();
    let job_name = "harness-eval";
    for index in 0..tasks.len() {
        let mut pod_args = local_pod_args(&args, folder.path(), runs.path(), job_name);
        let workspace = tempfile::tempdir().unwrap();
        pod_args.push(workspace.path().display().to_string());
        let refs: Vec<&str> = pod_args.iter().map(String::as_str).collect();
        let mut command = common::command(&refs);
        command.env("JOB_COMPLETION_INDEX", index.to_string());
        let run = common::run(command, Duration::from_secs(60)).await;
        let mut sorted = tasks.clone();
        sorted.sort();
        let name = sorted[index].trim_end_matches(".yaml");
        assert_eq!(run.code, 0, "task {name}: {}", run.stderr);
        assert!(run.stderr.contains("check: passed"), "{}", run.stderr);
        assert_eq!(run.log_dir(), runs.path().join(job_name).join(name));
    }
    // The whole Job's logs are one folder of sessions for `replay metrics`.
    let metrics = common::run(
        common::command(&[
            "replay",
            "metrics",
            "--json",
            runs.path().join(job_name).to_str().unwrap(),
        ]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(metrics.code, 0, "{}", metrics.stderr);
    let rows: Vec<Value> = serde_json::from_str(&metrics.stdout).unwrap();
    assert_eq!(rows.len(), tasks.len());
    assert!(
        rows.iter()
            .all(|row| row["outcome"] == "completed" && row["check_passed"] == true)
    );
}

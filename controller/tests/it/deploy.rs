//! deploy/: the Kubernetes manifests render with `kubectl kustomize` and validate strictly
//! against the oldest and newest Kubernetes we support (`kubernetes-validate`, from PyPI); the
//! Job's controller arguments are the ones this binary understands, and each of its tasks runs
//! here, picked by its completion index, with its log where the Job's readers look.
//!
//! No cluster runs here: these need `kubectl` and `kubernetes-validate`, so they run when
//! `HARNESS_TEST_DEPLOY=1` is set (CI installs both and sets it); without it they are ignored,
//! saying so (and the build warns).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::common;

/// The standalone sandbox: locked down, its tokens and audit log, its TLS overlays.
mod sandbox;

/// The oldest Kubernetes the manifests support (native sidecars, backoffLimitPerIndex,
/// podFailurePolicy's FailIndex) and the newest kubernetes-validate knows.
const VERSIONS: &[&str] = &["1.29.0", "1.37.0"];

pub fn deploy() -> PathBuf {
    common::repo_root().join("deploy")
}

/// `kubectl kustomize DIR`, as documents.
pub fn render(dir: &str) -> (String, Vec<Value>) {
    let text = testkit::stdout_of(
        Command::new("kubectl")
            .arg("kustomize")
            .arg(deploy().join(dir)),
    );
    let docs = serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .collect();
    (text, docs)
}

pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
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
#[cfg_attr(
    not(harness_deploy),
    ignore = "needs HARNESS_TEST_DEPLOY=1 (bash .ci/run sets it up)"
)]
fn the_manifests_render_and_validate_strictly() {
    let scratch = tempfile::tempdir().unwrap();
    for dir in [
        "sandbox",
        "sandbox-tls",
        "sandbox-mtls",
        "evaluation",
        "benchmark",
        "benchmark-namespace",
    ] {
        let (text, docs) = render(dir);
        assert!(docs.len() >= 3, "{dir}: {} documents", docs.len());
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
            // Loopback, on a port the system picks, and no wait at the end.
            "--metrics-listen" => {
                rest.next();
                pod_args.extend(["--metrics-listen".into(), "127.0.0.1:0".into()]);
            }
            "--metrics-linger" => {
                rest.next();
                pod_args.extend(["--metrics-linger".into(), "0".into()]);
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

/// What a pod of the Job runs, run here: each completion index picks its task from the
/// ConfigMap's files, and the log lands in `<log-dir>/<task name>/`.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_deploy),
    ignore = "needs HARNESS_TEST_DEPLOY=1 (bash .ci/run sets it up)"
)]
async fn each_completion_index_runs_its_task_as_the_job_pod_would() {
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
    let metrics = common::harness(
        &[
            "replay",
            "metrics",
            "--json",
            runs.path().join(job_name).to_str().unwrap(),
        ],
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

/// A registry on loopback (Debian's `docker-registry`), when the machine has one, for
/// `harness images build --push`.
struct Registry {
    child: std::process::Child,
    address: String,
    _storage: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn registry() -> Option<Registry> {
    let binary = Path::new("/usr/bin/docker-registry");
    if !binary.is_file() {
        eprintln!("no docker-registry: `harness images build --push` is not exercised");
        return None;
    }
    let storage = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let config = storage.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {address}\n",
            storage.path().join("data").display()
        ),
    )
    .unwrap();
    let child = Command::new(binary)
        .arg("serve")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if std::net::TcpStream::connect(&address).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(Registry {
        child,
        address,
        _storage: storage,
    })
}

fn docker(args: &[&str]) -> String {
    testkit::stdout_of(Command::new("docker").args(args))
        .trim()
        .to_owned()
}

/// Kubernetes' `$(VAR)` expansion in a container's arguments.
fn expand(args: &[String], vars: &[(&str, &str)]) -> Vec<String> {
    args.iter()
        .map(|arg| {
            vars.iter()
                .fold(arg.clone(), |a, (k, v)| a.replace(&format!("$({k})"), v))
        })
        .collect()
}

fn strings(value: &Value) -> Vec<String> {
    serde_json::from_value(value.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(all(harness_deploy, harness_docker)),
    ignore = "needs HARNESS_TEST_DEPLOY=1 and HARNESS_TEST_DOCKER=1 (bash .ci/run sets them up)"
)]
async fn a_benchmark_task_job_runs_its_own_image_with_the_injected_server() {
    let repo = common::repo_root();
    let dataset = repo.join("examples/benchmarks");
    let scratch = tempfile::tempdir().unwrap();
    let overlays = scratch.path().join("overlays");
    let registry = registry();
    let mut args: Vec<String> = ["images", "build"].map(str::to_owned).to_vec();
    args.push(dataset.join("hello-file").display().to_string());
    for (flag, value) in [
        ("--kustomize", overlays.display().to_string()),
        (
            "--kustomize-base",
            deploy().join("benchmark").display().to_string(),
        ),
        ("--agent", "oracle".to_owned()),
        ("--attempts", "2".to_owned()),
        (
            "--image-map-file",
            dataset.join("image-map.txt").display().to_string(),
        ),
    ] {
        args.extend([flag.to_owned(), value]);
    }
    if let Some(registry) = &registry {
        args.extend(["--push".to_owned(), registry.address.clone()]);
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = common::harness(&refs, Duration::from_secs(300)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (task, image) = run.stdout.trim().split_once('\t').unwrap();
    assert_eq!(task, "hello-file");
    if let Some(registry) = &registry {
        assert!(image.starts_with(&registry.address), "{image}");
        // What a cluster pulls is in the registry.
        docker(&["rmi", image]);
        docker(&["pull", "-q", image]);
    }
    // The overlay renders and validates like the rest of deploy/.
    let text = testkit::stdout_of(
        Command::new("kubectl")
            .arg("kustomize")
            .arg(overlays.join("hello-file")),
    );
    let rendered = scratch.path().join("rendered.yaml");
    std::fs::write(&rendered, &text).unwrap();
    for version in VERSIONS {
        let status = Command::new("kubernetes-validate")
            .args(["--strict", "--quiet", "-k", version])
            .arg(&rendered)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "the overlay against Kubernetes {version}:\n{text}"
        );
    }
    let docs: Vec<Value> = serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .collect();
    let job = find(&docs, "Job", "harness-task-hello-file");
    assert_eq!(job["spec"]["completions"], 2);
    let pod = &job["spec"]["template"]["spec"];
    let task_container = &pod["initContainers"][2];
    assert_eq!(task_container["image"], image);
    assert_eq!(task_container["restartPolicy"], "Always");
    let config = &find(&docs, "ConfigMap", "benchmark-task")["data"];
    assert_eq!(
        (config["TASK"].as_str(), config["TASK_PATH"].as_str()),
        (Some("hello-file"), Some("hello-file"))
    );

    // Its pod, as Docker containers: the task's image runs the injected static server with the
    // manifest's arguments; the controller runs the agent and the verifier through its API.
    let token = scratch.path().join("token");
    std::fs::write(&token, "job-pod-token-0123456789abcdef").unwrap();
    let server = static_server();
    let mut docker_args: Vec<String> = ["run", "-d", "--entrypoint"].map(str::to_owned).to_vec();
    docker_args.push(strings(&task_container["command"])[0].clone());
    docker_args.extend([
        "-v".to_owned(),
        format!("{}:/harness/sandbox-server:ro", server.display()),
    ]);
    docker_args.extend([
        "-v".to_owned(),
        format!("{}:/run/secrets/sandbox/token:ro", token.display()),
    ]);
    docker_args.push(image.to_owned());
    docker_args.extend(strings(&task_container["args"]));
    let refs: Vec<&str> = docker_args.iter().map(String::as_str).collect();
    let container = docker(&refs);
    let ip = docker(&[
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        &container,
    ]);
    let runs = scratch.path().join("runs");
    let url = format!("http://{ip}:8080");
    let controller = strings(&pod["containers"][0]["args"])
        .into_iter()
        .map(|a| a.replace("/datasets/", &format!("{}/", dataset.display())))
        .map(|a| a.replace("http://127.0.0.1:8080", &url))
        .map(|a| a.replace("/run/secrets/sandbox/token", &token.display().to_string()))
        .map(|a| a.replacen("/runs", &runs.display().to_string(), 1))
        // Metrics on loopback, on a port the system picks, and no wait at the end.
        .map(|a| match a.split_once('=') {
            Some(("--metrics-listen", _)) => "--metrics-listen=127.0.0.1:0".to_owned(),
            Some(("--metrics-linger", _)) => "--metrics-linger=0".to_owned(),
            _ => a,
        })
        .collect::<Vec<_>>();
    let controller = expand(
        &controller,
        &[
            ("TASK_PATH", "hello-file"),
            ("AGENT", "oracle"),
            ("TASK", "hello-file"),
            ("JOB_NAME", "harness-task-hello-file"),
            ("JOB_COMPLETION_INDEX", "0"),
        ],
    );
    let refs: Vec<&str> = controller.iter().map(String::as_str).collect();
    let run = common::harness(&refs, Duration::from_secs(120)).await;
    let logs = Command::new("docker")
        .args(["logs", &container])
        .output()
        .unwrap();
    docker(&["rm", "-f", &container]);
    assert_eq!(
        run.code,
        0,
        "{}\nserver: {}",
        run.stderr,
        String::from_utf8_lossy(&logs.stderr)
    );
    assert!(run.stderr.contains("verifier: reward 1"), "{}", run.stderr);
    let trial = runs.join("harness-task-hello-file/hello-file-trial-0");
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(trial.join("result.json")).unwrap()).unwrap();
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0);
    assert!(
        trial.join("verifier/test-stdout.txt").is_file(),
        "the verifier's files came out through the API"
    );
}

/// The static server the tests inject: HARNESS_SANDBOX_SERVER_STATIC, or this workspace's
/// static build (.ci/run makes it).
fn static_server() -> PathBuf {
    if let Ok(path) = std::env::var("HARNESS_SANDBOX_SERVER_STATIC") {
        return PathBuf::from(path);
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/x86_64-unknown-linux-gnu/server/sandbox-server");
    assert!(
        path.is_file(),
        "no static sandbox-server: build it as .ci/run does"
    );
    path
}

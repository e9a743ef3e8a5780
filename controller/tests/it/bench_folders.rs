//! A benchmark task folder is someone else's (issue 24 §3), without Docker: no file the harness
//! reads or uploads from it leads out of it through a link (refused as the task loads, and
//! again by each upload), a task's server cannot make a download write outside its folder, and
//! a task's big file is hashed without being held in memory.
//!
//! A task that loads meets `--sandbox local`'s refusal (a benchmark task runs in its own
//! image) before any container, which is how these tests tell a load that passed.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::IntoResponse;
use harness_benchmark::host::{ApiHost, TaskHost};
use harness_runtime::sandbox::SandboxClient;
use serde_json::{Value, json};

use crate::benchmarks::harbor_task::LOADS;
use crate::common;

/// What `harness run --task DIR --sandbox local` says of a task that loaded.
const LOADED: &str = "--sandbox local: a benchmark task runs in its own image";
/// What a link out of a task folder is refused with.
const OUTSIDE: &str = "outside the task's folder";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// `at` made a link to `target`, in place of whatever was there.
fn link(target: &Path, at: &Path) {
    let _ = std::fs::remove_file(at);
    let _ = std::fs::remove_dir_all(at);
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// `harness run --task TASK --sandbox local`, with a variable a leak would show.
async fn load(task: &Path) -> common::Run {
    let mut command = common::command(&["run", "--task", task.to_str().unwrap()]);
    command
        .args(["--sandbox", "local"])
        .env("HARNESS_TEST_CANARY", "canary-5ca1ab1e");
    common::run(command, Duration::from_secs(60)).await
}

/// A hostile change to a loading task (its folder, a folder outside it).
type Hostile = fn(&Path, &Path);

/// `file` of `task` made a link to the reading process's environment.
fn environ(task: &Path, file: &str) {
    link(Path::new("/proc/self/environ"), &task.join(file));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_link_out_of_a_task_folder_is_refused_as_the_task_loads() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    for (name, text) in [
        ("test.sh", "#!/bin/bash\ncat ~/.ssh/id_rsa\n"),
        ("solve.sh", "#!/bin/bash\ntrue\n"),
        ("Dockerfile", "FROM x\n"),
        ("env", "K=v\n"),
    ] {
        write(&outside.join(name), text);
    }
    let cases: [(&str, Hostile); 7] = [
        ("instruction.md", |task, _| environ(task, "instruction.md")),
        ("tests", |task, outside| link(outside, &task.join("tests"))),
        ("solution", |task, outside| {
            link(outside, &task.join("solution"))
        }),
        ("environment/Dockerfile", |task, outside| {
            link(
                &outside.join("Dockerfile"),
                &task.join("environment/Dockerfile"),
            );
        }),
        ("environment/.env", |task, outside| {
            let compose = "services:\n  main:\n    build: .\n";
            write(&task.join("environment/docker-compose.yaml"), compose);
            link(&outside.join("env"), &task.join("environment/.env"));
        }),
        // A prebuilt image's environment/ is copied into its working folder.
        ("environment", |task, outside| {
            let toml = "version = \"1.0\"\n[environment]\ndocker_image = \"x\"\n";
            write(&task.join("task.toml"), toml);
            link(outside, &task.join("environment"));
        }),
        ("steps/a/workdir", |task, outside| {
            write(
                &task.join("task.toml"),
                "version = \"1.0\"\n[[steps]]\nname = \"a\"\n",
            );
            write(&task.join("steps/a/instruction.md"), "Step a.\n");
            link(outside, &task.join("steps/a/workdir"));
        }),
    ];
    for (i, (name, hostile)) in cases.into_iter().enumerate() {
        let task = dir.path().join(format!("task-{i}"));
        LOADS.write(&task);
        hostile(&task, &outside);
        let run = load(&task).await;
        assert_eq!(run.code, 1, "{name}: {}", run.stderr);
        common::assert_contains(&run.stderr, &[name, OUTSIDE]);
        assert!(!run.stderr.contains("canary-5ca1ab1e"), "{}", run.stderr);
    }
    // Terminal-Bench 1: run-tests.sh, uploaded alone, would have sent this process's variables.
    let tb1 = dir.path().join("tb1");
    write(&tb1.join("task.yaml"), "instruction: Do it.\n");
    write(
        &tb1.join("docker-compose.yaml"),
        "services:\n  client:\n    image: x\n",
    );
    environ(&tb1, "run-tests.sh");
    let run = load(&tb1).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    common::assert_contains(&run.stderr, &["run-tests.sh", OUTSIDE]);
    // A link that stays inside the task is its own file.
    let inside = dir.path().join("inside");
    LOADS.write(&inside);
    write(&inside.join("docs/prompt.md"), "Do it, from docs.\n");
    link(Path::new("docs/prompt.md"), &inside.join("instruction.md"));
    load(&inside).await.assert_stderr_has(1, LOADED);
}

/// A server already in a task's image (a pod), that lists `names` as 2-byte files in every
/// folder, answers every file with `ok`, and keeps the paths files are sent to.
async fn task_server(names: &[&str]) -> (ApiHost, Arc<Mutex<Vec<String>>>) {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let kept = sent.clone();
    let app = axum::Router::new().fallback(
        move |method: axum::http::Method, uri: axum::http::Uri, _body: axum::body::Bytes| {
            let (kept, names) = (kept.clone(), names.clone());
            async move {
                let path = uri.path().to_owned();
                if method == axum::http::Method::PUT {
                    kept.lock().unwrap().push(path);
                    return axum::Json(json!({})).into_response();
                }
                match path.strip_prefix("/v1/dirs/") {
                    Some(dir) => {
                        let entries: Vec<Value> = names
                            .iter()
                            .map(|name| json!({"name": name, "kind": "file", "size": 2}))
                            .collect();
                        axum::Json(json!({"path": dir, "entries": entries})).into_response()
                    }
                    None => "ok".into_response(),
                }
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = SandboxClient::new(&url, None);
    (ApiHost { client }, sent)
}

/// An upload sends a task's own folder or file, never one through a link (swapped in after the
/// task loaded); links inside a folder are not followed.
#[tokio::test(flavor = "multi_thread")]
async fn an_upload_never_reads_through_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("home/.ssh");
    write(&secret.join("id_rsa"), "PRIVATE KEY\n");
    let task = dir.path().join("task");
    link(&secret, &task.join("tests"));
    link(&secret.join("id_rsa"), &task.join("run-tests.sh"));
    write(&task.join("solution/solve.sh"), "#!/bin/bash\ntrue\n");
    link(&secret, &task.join("solution/keys"));
    let (host, sent) = task_server(&[]).await;
    for (from, only) in [
        (task.join("tests"), None),
        (task.clone(), Some("run-tests.sh")),
    ] {
        let err = host.upload(&from, only, "/tests").await.unwrap_err();
        assert!(err.to_string().contains("is a link"), "{err}");
    }
    assert!(sent.lock().unwrap().is_empty(), "nothing was sent");
    host.upload(&task.join("solution"), None, "/solution")
        .await
        .unwrap();
    let sent = sent.lock().unwrap().clone();
    assert_eq!(
        sent.len(),
        1,
        "only solve.sh, not the link's files: {sent:?}"
    );
    assert!(sent[0].ends_with("solution/solve.sh"), "{sent:?}");
}

/// A task's server names the entries of a folder copied out of its container: a name that is
/// not one plain file name (`../x`, an absolute path) is refused, and nothing is written
/// outside the folder copied into.
#[tokio::test(flavor = "multi_thread")]
async fn a_download_writes_only_inside_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join("trial/logs");
    let absolute = dir.path().join("absolute.txt");
    for name in ["../escaped.txt", absolute.to_str().unwrap(), "..", ""] {
        let (host, _) = task_server(&[name]).await;
        let err = host.download("/logs", &to, 1 << 20).await.unwrap_err();
        assert!(
            err.to_string().contains("not a plain file name"),
            "{name}: {err}"
        );
    }
    assert!(!dir.path().join("trial/escaped.txt").exists() && !absolute.exists());
    let (host, _) = task_server(&["reward.txt"]).await;
    assert_eq!(host.download("/logs", &to, 1 << 20).await.unwrap(), 2);
    assert_eq!(
        std::fs::read_to_string(to.join("reward.txt")).unwrap(),
        "ok"
    );
}

/// A task's data file larger than the harness may hold is hashed as it is read (its digest is
/// Harbor's content hash): the task loads under a memory limit smaller than the file.
#[tokio::test(flavor = "multi_thread")]
async fn a_big_task_file_is_hashed_without_being_held() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("big");
    LOADS.write(&task);
    // Sparse: no disk, but 1200 MiB to read, over the 1 GiB of address space allowed.
    let big = std::fs::File::create(task.join("tests/data.bin")).unwrap();
    big.set_len(1200 << 20).unwrap();
    let mut command = std::process::Command::new("sh");
    command
        .args(["-c", "ulimit -v 1048576 && exec \"$0\" \"$@\""])
        .arg(common::harness_binary())
        .args([
            "run",
            "--task",
            task.to_str().unwrap(),
            "--sandbox",
            "local",
        ])
        .env("RUST_LOG", "warn")
        .env("TOKIO_WORKER_THREADS", "1")
        .env("MALLOC_ARENA_MAX", "2")
        .env("CONTROLLER_LOG_DIR", common::log_root())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let run = common::run(command, Duration::from_secs(180)).await;
    run.assert_stderr_has(1, LOADED);
}

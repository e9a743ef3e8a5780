//! Benchmark runs that are refused, each with the flag or key named.

use std::time::Duration;

use super::dataset;
use crate::common::{self, harness};

#[tokio::test]
async fn what_a_benchmark_task_cannot_do_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let hello = dataset().join("hello-file").display().to_string();
    let refused = |args: Vec<String>, needle: &'static str| async move {
        let run = harness(&args, Duration::from_secs(60)).await;
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(needle), "{args:?}: {}", run.stderr);
    };
    refused(
        ["run", "--task", &hello, "--sandbox", "local"]
            .map(str::to_owned)
            .to_vec(),
        "runs in its own image",
    )
    .await;
    refused(
        ["run", "--task", &hello, "--image", "x"]
            .map(str::to_owned)
            .to_vec(),
        "--image-map",
    )
    .await;
    refused(
        ["run", "--task", &hello, "--agent", "teacher"]
            .map(str::to_owned)
            .to_vec(),
        "expected `model`, `oracle` or `nop`",
    )
    .await;
    refused(
        ["run", "--task", &hello, "do", "it"]
            .map(str::to_owned)
            .to_vec(),
        "give no task words",
    )
    .await;
    let yaml = common::repo_root()
        .join("examples/hello/task.yaml")
        .display()
        .to_string();
    refused(
        ["run", "--task", &yaml, "--agent", "oracle"]
            .map(str::to_owned)
            .to_vec(),
        "only a benchmark task",
    )
    .await;
    // A task without a solution has no oracle; a compose key this harness cannot apply is named.
    let task = dir.path().join("t");
    std::fs::create_dir_all(task.join("environment")).unwrap();
    std::fs::create_dir_all(task.join("tests")).unwrap();
    std::fs::write(task.join("task.toml"), "").unwrap();
    std::fs::write(task.join("instruction.md"), "x").unwrap();
    std::fs::write(task.join("tests/test.sh"), "true").unwrap();
    std::fs::write(task.join("environment/Dockerfile"), "FROM x").unwrap();
    let path = task.display().to_string();
    refused(
        ["run", "--task", &path, "--agent", "oracle"]
            .map(str::to_owned)
            .to_vec(),
        "has none",
    )
    .await;
    std::fs::write(
        task.join("environment/docker-compose.yaml"),
        "services:\n  main:\n    privileged: true\n",
    )
    .unwrap();
    refused(
        ["run", "--task", &path, "--agent", "nop"]
            .map(str::to_owned)
            .to_vec(),
        "services.main.privileged",
    )
    .await;
    refused(
        ["run", "--task", &hello, "--image-map", "nothing"]
            .map(str::to_owned)
            .to_vec(),
        "an image mapping is FROM=TO",
    )
    .await;
}

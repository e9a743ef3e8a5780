//! The arguments of `harness` commands that the benches and the integration tests both run
//! (each includes this file as a module of its own, by its path).

use std::path::Path;

/// The arguments of `harness run --policy allow-all --log-dir LOGS --task TASK TARGET`.
pub(crate) fn run_into<'a>(logs: &'a Path, task: &'a Path, target: &'a Path) -> [&'a str; 8] {
    [
        "run",
        "--policy",
        "allow-all",
        "--log-dir",
        logs.to_str().unwrap(),
        "--task",
        task.to_str().unwrap(),
        target.to_str().unwrap(),
    ]
}

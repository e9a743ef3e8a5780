//! Issue 57 §2: a benchmark batch counts its tasks once, after they are checked, and its end
//! says what was expected and whether it happened. No Docker: a task that cannot run here is
//! found so as the batch loads its tasks, before any container; the other task is a scripted
//! YAML task on a local sandbox.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::batches::{DONE, batch_into, report, write_task};
use crate::common;

/// Copies the folder `from` to `to`, every file in it.
fn copy_folder(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_folder(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A dataset in `dir`: a copy of `examples/benchmarks/windows-only` (without its
/// `expected_not_runnable` unless `expected`) and one scripted task that passes.
fn dataset(dir: &Path, expected: bool) {
    let windows = dir.join("windows-only");
    copy_folder(
        &common::repo_root().join("examples/benchmarks/windows-only"),
        &windows,
    );
    let toml = windows.join("task.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    assert!(
        text.contains("\nexpected_not_runnable = "),
        "the example says it is not runnable on purpose:\n{text}"
    );
    if !expected {
        let kept: Vec<&str> = text
            .lines()
            .filter(|line| !line.starts_with("expected_not_runnable"))
            .collect();
        std::fs::write(&toml, kept.join("\n") + "\n").unwrap();
    }
    write_task(dir, "hello", DONE, "");
}

/// `harness batch DATASET --out OUT` over [`dataset`]; the run and its batch folder.
async fn batch_of(expected: bool) -> (common::Run, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    dataset(&data, expected);
    let out = dir.path().join("out");
    let run = common::run(batch_into(&data, &out, &[]), Duration::from_secs(120)).await;
    (run, out, dir)
}

/// The last line of the report's text, before the line naming its files.
fn verdict(stdout: &str) -> &str {
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines
        .iter()
        .rposition(|line| line.starts_with("report: "))
        .unwrap_or_else(|| panic!("no `report:` line:\n{stdout}"));
    assert!(at > 0, "{stdout}");
    lines[at - 1]
}

/// The Windows task its author marks not runnable: the first line counts it once, among the
/// tasks, after the check; the totals add up to the tasks; the report ends saying the run
/// went as expected. `harness` keeps its own exit code for a task not runnable (11).
#[tokio::test(flavor = "multi_thread")]
async fn a_task_not_runnable_as_expected_is_counted_and_the_end_says_as_expected() {
    let (run, out, _dir) = batch_of(true).await;
    assert_eq!(run.code, 11, "{}\n{}", run.stderr, run.stdout);
    let first = run
        .stderr
        .lines()
        .find(|line| line.starts_with("batch: "))
        .unwrap_or_else(|| panic!("no start line:\n{}", run.stderr));
    assert!(
        first.starts_with("batch: 2 tasks (1 not runnable here: windows-only), "),
        "{first}"
    );
    assert_eq!(
        run.stderr
            .lines()
            .filter(|line| line.starts_with("batch: "))
            .count(),
        1,
        "the tasks are counted once: {}",
        run.stderr
    );
    assert!(
        run.stdout
            .contains("2 tasks: 1 passed, 0 failed, 1 not runnable, 0 not run;"),
        "{}",
        run.stdout
    );
    assert_eq!(
        verdict(&run.stdout),
        "as expected: windows-only not runnable here",
        "{}",
        run.stdout
    );
    let report = report(&out);
    let totals = &report["totals"];
    assert_eq!(
        (
            &totals["tasks"],
            &totals["passed"],
            &totals["failed"],
            &totals["not_runnable"],
            &totals["not_run"]
        ),
        (&json!(2), &json!(1), &json!(0), &json!(1), &json!(0)),
        "{totals}"
    );
    assert_eq!(report["benchmark"]["unexpected"], json!([]), "{report}");
    let not_runnable = &report["benchmark"]["not_runnable"][0];
    assert_eq!(not_runnable["task"], "windows-only", "{not_runnable}");
    assert!(not_runnable["expected"].is_string(), "{not_runnable}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("as expected: windows-only not runnable here"),
        "the HTML report ends with the verdict"
    );
}

/// The same task without its author's word: the report ends saying the run did not go as
/// expected, naming the task and why it could not run.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_not_runnable_unexpectedly_ends_the_report_not_as_expected() {
    let (run, out, _dir) = batch_of(false).await;
    assert_eq!(run.code, 11, "{}\n{}", run.stderr, run.stdout);
    let verdict = verdict(&run.stdout);
    assert!(
        verdict.starts_with("NOT as expected: windows-only not runnable here: "),
        "{}",
        run.stdout
    );
    let unexpected = &report(&out)["benchmark"]["unexpected"];
    assert_eq!(unexpected.as_array().map(Vec::len), Some(1), "{unexpected}");
}

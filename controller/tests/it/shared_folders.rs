//! A shared batch or log folder is hostile: `replay metrics --html` writes nothing through a
//! link planted there and reads no task outside the folder, a log that is a device or a FIFO
//! is refused at once, and what a log says reaches the terminal with its escape sequences
//! shown, not sent.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::batches::{DONE, bash, batch_into, write_task};
use crate::common::{self, harness};

/// OSC 52, a write to the reader's clipboard, as a command's output may carry it.
const CLIPBOARD: &str = "printf '\\033]52;c;aGk=\\a'";

const KEYS: &str = "ssh-ed25519 AAAA owner@host\n";

/// How long a `harness` command here may take.
const LIMIT: Duration = Duration::from_secs(60);

/// A batch of one task, `t1`, whose command prints [`CLIPBOARD`]; the batch's folder.
async fn one_task_batch(root: &Path) -> PathBuf {
    let tasks = root.join("tasks");
    std::fs::create_dir_all(&tasks).unwrap();
    write_task(&tasks, "t1", &(bash(CLIPBOARD) + DONE), "");
    let out = root.join("batch");
    let run = common::run(batch_into(&tasks, &out, &[]), Duration::from_secs(120)).await;
    assert!(
        out.join("t1/events.jsonl").is_file(),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shared_batch_folder_cannot_turn_the_report_against_its_reader() {
    let root = tempfile::tempdir().unwrap();
    let batch = one_task_batch(root.path()).await;
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    escape_sequences_are_shown_not_sent(&batch).await;
    planted_links_are_replaced_not_written_through(&batch, &outside).await;
    a_linked_transcripts_folder_is_refused(&batch, &outside).await;
    a_linked_task_folder_is_refused(&batch, root.path()).await;
    a_task_id_that_leaves_the_folder_is_refused(&batch).await;
}

/// The command's output holds ESC and BEL; `replay show` prints them as `\u001b` and `\u0007`.
async fn escape_sequences_are_shown_not_sent(batch: &Path) {
    let log = batch.join("t1");
    let recorded = std::fs::read_to_string(log.join("events.jsonl")).unwrap();
    assert!(
        recorded.contains("\\u001b]52;c;aGk=\\u0007"),
        "the log holds the sequence: {recorded}"
    );
    let show = harness(&["replay", "show", log.to_str().unwrap()], LIMIT).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(
        !show.stdout.contains(['\u{1b}', '\u{7}']),
        "raw escape on stdout: {:?}",
        show.stdout
    );
    assert!(
        show.stdout.contains("\\u001b]52;c;aGk=\\u0007"),
        "{}",
        show.stdout
    );
    // Written to a file, the Markdown is the same text.
    let file = batch.parent().unwrap().join("t1.md");
    let args = [
        "replay",
        "show",
        log.to_str().unwrap(),
        "-o",
        file.to_str().unwrap(),
    ];
    assert_eq!(harness(&args, LIMIT).await.code, 0);
    assert!(!std::fs::read_to_string(&file).unwrap().contains('\u{1b}'));
}

/// `transcripts/t1.html` and `report.html` planted as links to a file outside: the file is
/// untouched, and each link is replaced by the page.
async fn planted_links_are_replaced_not_written_through(batch: &Path, outside: &Path) {
    let keys = outside.join("authorized_keys");
    std::fs::write(&keys, KEYS).unwrap();
    let (transcript, report) = (batch.join("transcripts/t1.html"), batch.join("report.html"));
    for page in [&transcript, &report] {
        let _ = std::fs::remove_file(page);
        std::os::unix::fs::symlink(&keys, page).unwrap();
    }
    let run = harness(
        &["replay", "metrics", "--html", batch.to_str().unwrap()],
        LIMIT,
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(&keys).unwrap(), KEYS);
    for page in [&transcript, &report] {
        let meta = std::fs::symlink_metadata(page).unwrap();
        assert!(meta.is_file(), "{}: {meta:?}", page.display());
        assert!(std::fs::read_to_string(page).unwrap().contains("</html>"));
    }
}

/// `transcripts` a link to a folder elsewhere: refused, and nothing is written there.
async fn a_linked_transcripts_folder_is_refused(batch: &Path, outside: &Path) {
    let elsewhere = outside.join("pages");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::remove_dir_all(batch.join("transcripts")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, batch.join("transcripts")).unwrap();
    let run = harness(
        &["replay", "metrics", "--html", batch.to_str().unwrap()],
        LIMIT,
    )
    .await;
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("transcripts: a link"), "{}", run.stderr);
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    std::fs::remove_file(batch.join("transcripts")).unwrap();
}

/// A task's folder that links to another session on this machine is not read.
async fn a_linked_task_folder_is_refused(batch: &Path, root: &Path) {
    let moved = root.join("someone-elses-session");
    std::fs::rename(batch.join("t1"), &moved).unwrap();
    std::os::unix::fs::symlink(&moved, batch.join("t1")).unwrap();
    let run = harness(
        &["replay", "metrics", "--html", batch.to_str().unwrap()],
        LIMIT,
    )
    .await;
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("the task's log folder is a link"),
        "{}",
        run.stderr
    );
    assert!(!batch.join("transcripts/t1.html").exists());
    std::fs::remove_file(batch.join("t1")).unwrap();
    std::fs::rename(&moved, batch.join("t1")).unwrap();
}

/// A batch log whose task id is `../x` is refused, naming the id.
async fn a_task_id_that_leaves_the_folder_is_refused(batch: &Path) {
    let log = batch.join("events.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let forged: Vec<String> = text
        .lines()
        .map(|line| {
            let mut event: Value = serde_json::from_str(line).unwrap();
            if event["type"] == "batch_started" {
                event["data"]["tasks"][0]["id"] = json!("../x");
            }
            event.to_string()
        })
        .collect();
    std::fs::write(&log, forged.join("\n") + "\n").unwrap();
    let run = harness(
        &["replay", "metrics", "--html", batch.to_str().unwrap()],
        LIMIT,
    )
    .await;
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("\"../x\""), "{}", run.stderr);
    assert!(!batch.parent().unwrap().join("x").exists());
}

/// A log folder whose `events.jsonl` is a link to `/dev/zero`, or a FIFO no one writes: each
/// is refused at once (not read without end, not waited on).
#[tokio::test(flavor = "multi_thread")]
async fn a_log_that_is_a_device_or_a_fifo_is_refused_at_once() {
    let root = tempfile::tempdir().unwrap();
    let (zero, fifo) = (root.path().join("zero"), root.path().join("fifo"));
    std::fs::create_dir_all(&zero).unwrap();
    std::fs::create_dir_all(&fifo).unwrap();
    std::os::unix::fs::symlink("/dev/zero", zero.join("events.jsonl")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(fifo.join("events.jsonl"))
        .status()
        .unwrap();
    assert!(made.success());
    for dir in [&zero, &fifo] {
        let dir = dir.to_str().unwrap();
        for args in [
            vec!["replay", "metrics", dir],
            vec!["replay", "metrics", "--html", dir],
            vec!["replay", "show", dir],
        ] {
            let run = common::harness(&args, Duration::from_secs(20)).await;
            assert!(
                run.elapsed < Duration::from_secs(10),
                "{args:?} took {:?}",
                run.elapsed
            );
            assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        }
    }
}

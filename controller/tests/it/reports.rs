//! Reports with pictures: two real batches with planted differences compared by `harness
//! replay compare` (table, JSON, HTML), the batch report's charts, the transcript's step times,
//! and both pages rendered and photographed in headless Chromium (HARNESS_TEST_BROWSER=1).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::batches::{DONE, bash, batch_into, write_task};
use crate::common::{self, harness};

const CHECK_OK: &str = "check: \"test $(cat out.txt) = ok\"\n";

/// One turn that writes `out.txt` with the `write_file` tool.
fn write_file_turn(content: &str) -> String {
    format!(
        "  - text: write\n    tool_calls:\n      - name: write_file\n        arguments: {{path: out.txt, content: {}}}\n",
        serde_json::to_string(content).unwrap()
    )
}

/// Side A and side B of one experiment: `steady` passes in both (B's takes two seconds longer
/// and calls bash twice), `breaks` passes in A only, `mends` in B only (with `write_file`), and
/// each side has a task of its own.
fn write_sides(a: &Path, b: &Path) {
    let ok = bash("echo ok > out.txt") + DONE;
    let wrong = bash("echo no > out.txt") + DONE;
    write_task(a, "steady", &ok, CHECK_OK);
    let slower = bash("sleep 2; echo ok > out.txt") + &bash("cat out.txt") + DONE;
    write_task(b, "steady", &slower, CHECK_OK);
    write_task(a, "breaks", &ok, CHECK_OK);
    write_task(b, "breaks", &wrong, CHECK_OK);
    write_task(a, "mends", &wrong, CHECK_OK);
    write_task(b, "mends", &(write_file_turn("ok\n") + DONE), CHECK_OK);
    write_task(a, "only-a", DONE, "");
    write_task(b, "only-b", DONE, "");
}

/// Runs the batch of `tasks` into `out`; one of its tasks fails, so it exits 9.
async fn run_batch(tasks: &Path, out: &Path) {
    let command = batch_into(tasks, out, &["--parallel", "2"]);
    let run = common::run(command, Duration::from_secs(180)).await;
    assert_eq!(
        run.code, 9,
        "one task fails: {}\n{}",
        run.stdout, run.stderr
    );
}

/// How long a `harness` command here may take.
const LIMIT: Duration = Duration::from_secs(60);

/// Two batch folders, A and B, run for real.
async fn two_batches(root: &Path) -> (PathBuf, PathBuf) {
    let (tasks_a, tasks_b) = (root.join("tasks-a"), root.join("tasks-b"));
    std::fs::create_dir_all(&tasks_a).unwrap();
    std::fs::create_dir_all(&tasks_b).unwrap();
    write_sides(&tasks_a, &tasks_b);
    let (a, b) = (root.join("a"), root.join("b"));
    run_batch(&tasks_a, &a).await;
    run_batch(&tasks_b, &b).await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread")]
async fn compare_shows_the_flips_deltas_and_one_sided_tasks_of_two_real_batches() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = two_batches(root.path()).await;
    let (a_arg, b_arg) = (a.to_str().unwrap(), b.to_str().unwrap());
    let page = root.path().join("compare.html");
    let text = harness(
        &[
            "replay",
            "compare",
            a_arg,
            b_arg,
            "--html",
            page.to_str().unwrap(),
        ],
        LIMIT,
    )
    .await;
    assert_eq!(text.code, 0, "{}", text.stderr);
    the_table_shows_the_flips(&text.stdout);
    let json = harness(&["replay", "compare", "--json", a_arg, b_arg], LIMIT).await;
    assert_eq!(json.code, 0, "{}", json.stderr);
    the_json_has_the_deltas(&serde_json::from_str(&json.stdout).unwrap());
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("<tr class=\"broke\"><td>breaks</td>"),
        "{html}"
    );
    assert!(
        html.contains("<tr class=\"fixed\"><td>mends</td>"),
        "{html}"
    );
    assert!(html.contains("<ul id=\"only-in-a\"><li>only-a</li></ul>"));
    assert!(html.contains("<ul id=\"only-in-b\"><li>only-b</li></ul>"));
    assert!(html.contains("<tr><td>write_file</td><td>0</td><td>1</td><td>+1</td></tr>"));

    // A folder that is not a batch is named.
    let tasks = root.path().join("tasks-a");
    let wrong = harness(
        &["replay", "compare", a_arg, tasks.to_str().unwrap()],
        LIMIT,
    )
    .await;
    assert_eq!(wrong.code, 1, "{}", wrong.stderr);
    assert!(
        wrong
            .stderr
            .contains(&format!("{}: not a batch folder", tasks.display())),
        "{}",
        wrong.stderr
    );
    each_report_has_its_charts_and_step_times(&a, &b);
}

fn the_table_shows_the_flips(table: &str) {
    let line = |task: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{task} ")))
            .unwrap_or_else(|| panic!("no row for {task}: {table}"))
            .to_owned()
    };
    let breaks = line("breaks");
    assert!(breaks.contains("broke") && breaks.contains("passed") && breaks.contains("check"));
    assert!(line("mends").contains("fixed"), "{table}");
    assert!(line("mends").contains("bash -1, write_file +1"), "{table}");
    assert!(line("steady").contains("still passing"), "{table}");
    assert!(table.contains("only in A: only-a"), "{table}");
    assert!(table.contains("only in B: only-b"), "{table}");
    assert!(
        table.contains(
            "1 fixed (fail -> pass), 1 broke (pass -> fail), 1 unchanged, of 3 tasks in both"
        ),
        "{table}"
    );
}

fn the_json_has_the_deltas(c: &Value) {
    let task = |name: &str| {
        c["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["task"] == name)
            .unwrap_or_else(|| panic!("no {name}: {c}"))
            .clone()
    };
    let (breaks, mends, steady) = (task("breaks"), task("mends"), task("steady"));
    assert_eq!(breaks["change"], "broke");
    assert_eq!(
        (&breaks["a"]["passed"], &breaks["b"]["passed"]),
        (&json!(true), &json!(false))
    );
    assert_eq!(breaks["b"]["status"], "check");
    assert_eq!(mends["change"], "fixed");
    assert_eq!(mends["tools_delta"], json!({"bash": -1, "write_file": 1}));
    assert_eq!(steady["change"], "still_passing");
    assert_eq!(steady["tools_delta"], json!({"bash": 1}));
    assert_eq!(steady["turns_delta"], 1);
    let slower = steady["duration_delta_ms"].as_i64().unwrap();
    // Wall time of real runs on a machine that may be loaded (A's own run slowed by as much as
    // 400 ms was seen): the margin is a second under the sleep.
    assert!(
        slower >= 1000,
        "B's steady sleeps two seconds: {slower} ms slower"
    );
    let ms = |side: &str| steady[side]["duration_ms"].as_i64().unwrap();
    assert_eq!(slower, ms("b") - ms("a"));
    assert_eq!(
        steady["reward_delta"],
        Value::Null,
        "no rewards without a verifier"
    );
    assert_eq!(
        (c["fixed"].as_u64(), c["broke"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(c["only_in_a"], json!(["only-a"]));
    assert_eq!(c["only_in_b"], json!(["only-b"]));
    let write_file = c["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tool"] == "write_file");
    assert_eq!(
        write_file,
        Some(&json!({"tool": "write_file", "a": 0, "b": 1, "delta": 1}))
    );
    assert_eq!(c["a"]["passed"], 3);
    assert_eq!(c["b"]["passed"], 3);
}

/// The report pages have their six charts, a bar per task where a chart is per task, and the
/// transcripts their step times with the slowest listed.
fn each_report_has_its_charts_and_step_times(a: &Path, b: &Path) {
    for dir in [a, b] {
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert_eq!(html.matches("<svg ").count(), 6, "six charts");
        for id in harness_replay::charts::NAMES {
            assert!(html.contains(&format!("id=\"chart-{id}\"")), "chart {id}");
        }
        let turns = &html[html.find("id=\"chart-turns\"").unwrap()..];
        let turns = &turns[..turns.find("</figure>").unwrap()];
        assert_eq!(
            turns.matches("<g class=\"bar\">").count(),
            4,
            "a bar per task"
        );
    }
    let html = std::fs::read_to_string(b.join("report.html")).unwrap();
    assert!(
        html.contains("<title>passed: 3 of 4 tasks</title>"),
        "{html}"
    );
    assert!(html.contains("<title>failed: check: 1 of 4 tasks</title>"));
    // B's steady sleeps two seconds in its first command: its result is the slowest step.
    let transcript = std::fs::read_to_string(b.join("transcripts/steady.html")).unwrap();
    assert!(transcript.contains("<section class=\"slowest\"><h2>Slowest steps</h2>"));
    assert_eq!(transcript.matches("<span class=\"slow-mark\">").count(), 3);
    let first = &transcript[transcript.find("<ol><li>").unwrap()..];
    assert!(first.starts_with("<ol><li><a href=\"#e"), "{first}");
    assert!(first[..200].contains("result of `bash`"), "{first}");
    let bars = transcript.matches("<div class=\"steptime\"").count();
    assert_eq!(
        bars,
        transcript.matches("<li class=\"event ").count(),
        "a bar per step"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_browser),
    ignore = "needs HARNESS_TEST_BROWSER=1 (bash .ci/run sets it up)"
)]
async fn the_report_and_a_transcript_render_with_their_pictures_in_a_browser() {
    let root = tempfile::tempdir().unwrap();
    let (_, b) = two_batches(root.path()).await;
    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("test-artifacts/reports");
    std::fs::create_dir_all(&artifacts).unwrap();
    let dom = photograph(&b.join("report.html"), &artifacts.join("report.png"));
    assert_eq!(
        dom.matches("<svg ").count(),
        6,
        "six charts in the page as drawn"
    );
    assert!(dom.contains("id=\"chart-outcomes\"") && dom.contains("<g class=\"bar\">"));
    let transcript = b.join("transcripts/steady.html");
    let dom = photograph(&transcript, &artifacts.join("transcript.png"));
    assert!(dom.contains("Slowest steps") && dom.contains("class=\"steptime\""));
}

/// Opens `page` in headless Chromium: writes its screenshot to `png` (checked to be a real,
/// non-trivial PNG of the window's size) and returns its DOM.
fn photograph(page: &Path, png: &Path) -> String {
    let _ = std::fs::remove_file(png);
    let url = format!("file://{}", page.display());
    let shot = common::chromium(&[
        "--hide-scrollbars".to_owned(),
        format!("--screenshot={}", png.display()),
        "--window-size=1280,2000".to_owned(),
        url.clone(),
    ]);
    assert!(
        shot.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let bytes = std::fs::read(png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    assert_eq!(
        &bytes[..8],
        b"\x89PNG\r\n\x1a\n",
        "{} is a PNG",
        png.display()
    );
    let size = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    assert_eq!((size(16), size(20)), (1280, 2000), "the window's size");
    assert!(
        bytes.len() > 20_000,
        "{} has something drawn: {} bytes",
        png.display(),
        bytes.len()
    );
    eprintln!("screenshot: {}", png.display());
    let dump = common::chromium(&["--hide-scrollbars".to_owned(), "--dump-dom".to_owned(), url]);
    assert!(
        dump.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    String::from_utf8_lossy(&dump.stdout).into_owned()
}

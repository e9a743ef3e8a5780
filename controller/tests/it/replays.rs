use std::path::{Path, PathBuf};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::common::{self, bash_call as bash, events, harness};

/// A task with a few files, edits, a deletion and a command, on the scripted model.
pub fn write_task(dir: &Path) -> PathBuf {
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(workspace.join("src")).unwrap();
    std::fs::write(
        workspace.join("src/app.py"),
        "def main():\n    print('v1')\n",
    )
    .unwrap();
    std::fs::write(workspace.join("notes.txt"), "remove me\n").unwrap();
    std::fs::write(workspace.join("data.csv"), "a,b\n1,2\n").unwrap();
    let script = json!({"turns": [
        {"text": "Look first.", "tool_calls": [{"name": "bash", "arguments": {"cmd": "ls -R && wc -l data.csv"}}]},
        {"text": "Edit.", "tool_calls": [
            {"name": "search_replace", "arguments": {"path": "src/app.py", "search": "v1", "replace": "v2"}},
            {"name": "write_file", "arguments": {"path": "src/new.py", "content": "X = 1\n"}},
        ]},
        {"text": "Clean up.", "tool_calls": [{"name": "bash", "arguments": {"cmd": "rm notes.txt && cat data.csv | wc -c"}}]},
        {"text": "Check.", "tool_calls": [{"name": "read_file", "arguments": {"path": "src/app.py"}}]},
        {"text": "Done: app prints v2."},
    ], "verdicts": [
        {"risk": 0.3, "authorized": 0.9, "rationale": "the edit the task asks for"},
        {"risk": 0.2, "authorized": 0.9, "rationale": "the new file the task asks for"},
        {"risk": 0.6, "authorized": 0.8, "rationale": "removes the file the task names"},
    ]});
    let task = json!({
        "prompt": "Make app print v2, add src/new.py, remove notes.txt",
        "workspace": {"dir": "workspace"},
        "check": "grep -q v2 src/app.py && test ! -e notes.txt",
    });
    common::scripted_task(dir, &script, task)
}

/// How long a `harness` command here may take.
pub(crate) const LIMIT: Duration = Duration::from_secs(60);

/// The task of [`write_task`] written in `dir` and run to a good end: the task file and the
/// session's log folder.
pub async fn recorded_session(dir: &Path) -> (PathBuf, PathBuf) {
    let task = write_task(dir);
    let run = harness(&["run", "--task", task.to_str().unwrap()], LIMIT).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    (task, run.log_dir())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recorded_session_renders_restores_measures_and_reruns() {
    let dir = tempfile::tempdir().unwrap();
    let (task, log) = recorded_session(dir.path()).await;
    let all = events(&log);
    every_line_is_one_envelope_in_order(&log, &all);
    let changed = every_change_is_recorded(&all);
    the_transcript_renders_as_markdown_and_html(&log, dir.path()).await;
    let after_edit = changed[0]["seq"].as_u64().unwrap();
    the_workspace_restores_at_several_steps(&log, dir.path(), &all, after_edit).await;
    the_metrics_count_what_happened(&log, all.len(), after_edit).await;
    a_rerun_finds_no_divergence(&log).await;
    the_recorded_replies_replay_the_session(&log, &task).await;
}

/// One envelope, gap-free seq, header first, finished last, every blob resolves.
fn every_line_is_one_envelope_in_order(log: &Path, all: &[Value]) {
    for (idx, event) in all.iter().enumerate() {
        assert_eq!(event["seq"], idx as u64);
        assert!(event["ts"].as_str().unwrap().ends_with('Z'));
    }
    let kinds: Vec<&str> = all.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"session_started"));
    assert_eq!(kinds.last(), Some(&"session_finished"));
    for kind in [
        "workspace_snapshot",
        "model_request",
        "model_response",
        "tool_call",
        "policy_decision",
        "tool_result",
        "workspace_changed",
        "state_fingerprint",
        "check_result",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
    }
    assert_blobs_resolve(log);
    let header = &all[0]["data"];
    assert_eq!(header["format_version"], 1);
    assert_eq!(
        header["config"]["tool_names"],
        json!(["bash", "read_file", "write_file", "search_replace"])
    );
    let finished = &all.last().unwrap()["data"];
    assert_eq!(finished["outcome"], "completed");
    assert_eq!(
        (finished["turns"].as_u64(), finished["tool_calls"].as_u64()),
        (Some(5), Some(5))
    );
}

/// Every tool that changed a file, with before and after hashes.
fn every_change_is_recorded(all: &[Value]) -> Vec<&Value> {
    let changed: Vec<&Value> = all
        .iter()
        .filter(|e| e["type"] == "workspace_changed")
        .collect();
    let paths: Vec<(String, String)> = changed
        .iter()
        .flat_map(|e| e["data"]["changes"].as_array().unwrap().iter())
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_owned(),
                c["change"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("src/app.py", "modified"),
        ("src/new.py", "added"),
        ("notes.txt", "deleted"),
    ];
    assert_eq!(
        paths,
        expected.map(|(p, c)| (p.to_owned(), c.to_owned())).to_vec()
    );

    changed
}

async fn the_transcript_renders_as_markdown_and_html(log: &Path, dir: &Path) {
    let md = harness(&["replay", "show", log.to_str().unwrap()], LIMIT).await;
    assert_eq!(md.code, 0, "{}", md.stderr);
    common::assert_contains(
        &md.stdout,
        &["-    print('v1')\n+    print('v2')", "### Check passed"],
    );
    // Titles read as sentences: no `(turn 1, turn)`, no `1 paths`.
    common::assert_contains(
        &md.stdout,
        &["Model request, turn 1: ", "Workspace changed by call "],
    );
    assert!(!md.stdout.contains(" 1 paths"), "{}", md.stdout);
    let html_path = dir.join("session.html");
    let html = render_html(log, &html_path).await;
    assert_eq!(html.code, 0, "{}", html.stderr);
    let page = std::fs::read_to_string(&html_path).unwrap();
    assert!(page.contains("<ol class=\"timeline\">") && page.contains("class=\"del\""));
    for external in ["src=\"http", "href=\"http", "<script src", "<link"] {
        assert!(
            !page.contains(external),
            "the page must be self-contained ({external})"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_browser),
    ignore = "needs HARNESS_TEST_BROWSER=1 (bash .ci/run sets it up)"
)]
async fn a_transcript_renders_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let (_, log) = recorded_session(dir.path()).await;
    let html_path = dir.path().join("session.html");
    let html = render_html(&log, &html_path).await;
    assert_eq!(html.code, 0, "{}", html.stderr);
    check_in_browser(&html_path, events(&log).len());
}

/// State replay at several steps, each verified against the recorded hashes.
async fn the_workspace_restores_at_several_steps(
    log: &Path,
    dir: &Path,
    all: &[Value],
    after_edit: u64,
) {
    let initial = all
        .iter()
        .find(|e| e["type"] == "workspace_snapshot")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    let last = all.len() as u64 - 1;
    for (step, app, notes, new) in [
        (initial, "v1", true, false),
        (after_edit, "v2", true, false),
        (last, "v2", false, true),
    ] {
        let to = dir.join(format!("restored-{step}"));
        let restore = harness(&common::restore_args(log, &step.to_string(), &to), LIMIT).await;
        assert_eq!(restore.code, 0, "{}", restore.stderr);
        assert!(
            restore
                .stderr
                .contains("verified against the recorded hashes"),
            "{}",
            restore.stderr
        );
        assert!(
            std::fs::read_to_string(to.join("src/app.py"))
                .unwrap()
                .contains(app),
            "step {step}"
        );
        assert_eq!(to.join("notes.txt").exists(), notes, "step {step}");
        assert_eq!(to.join("src/new.py").exists(), new, "step {step}");
    }
}

async fn the_metrics_count_what_happened(log: &Path, n_events: usize, after_edit: u64) {
    let metrics = harness(
        &["replay", "metrics", log.to_str().unwrap(), "--json"],
        LIMIT,
    )
    .await;
    assert_eq!(metrics.code, 0, "{}", metrics.stderr);
    let figures: Value = serde_json::from_str(&metrics.stdout).unwrap();
    let figures = &figures[0];
    assert_eq!(figures["outcome"], "completed");
    assert_eq!(figures["events"], n_events);
    assert_eq!(figures["model_calls"], 5);
    assert_eq!(
        figures["tool_calls"],
        json!({"bash": 2, "read_file": 1, "search_replace": 1, "write_file": 1})
    );
    assert_eq!(figures["first_modification_seq"], after_edit);
    assert_eq!(figures["check_passed"], true);
}

/// Regression replay: nothing changed, nothing diverges.
async fn a_rerun_finds_no_divergence(log: &Path) {
    let rerun = harness(&["replay", "rerun", log.to_str().unwrap()], LIMIT).await;
    assert_eq!(rerun.code, 0, "{}\n{}", rerun.stdout, rerun.stderr);
    assert!(
        rerun
            .stderr
            .contains("5 calls re-executed, 0 refused calls skipped, 0 refused by the current policy, 0 divergences"),
        "{}",
        rerun.stderr
    );
}

/// The recorded replies, fed into a live loop, produce the same session.
async fn the_recorded_replies_replay_the_session(log: &Path, task: &Path) {
    let replayed = harness(
        &[
            "run",
            "--model",
            &format!("replay:{}", log.display()),
            "--task",
            task.to_str().unwrap(),
        ],
        LIMIT,
    )
    .await;
    assert_eq!(replayed.code, 0, "{}", replayed.stderr);
    assert_eq!(replayed.stdout, "Done: app prints v2.\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_initial_state_diverges_at_the_right_step() {
    let dir = tempfile::tempdir().unwrap();
    let (_, log) = recorded_session(dir.path()).await;
    // Change data.csv in the recorded initial state: the first bash call counts its lines.
    overwrite_recorded_file(&log, "data.csv", "a,b\n1,2\n3,4\n");
    // Restore now refuses to pretend: the file no longer hashes as recorded.
    let restore = harness(
        &common::restore_args(&log, "1", &dir.path().join("r")),
        LIMIT,
    )
    .await;
    assert_eq!(restore.code, 1);
    assert!(
        restore.stderr.contains("mismatch: data.csv"),
        "{}",
        restore.stderr
    );
    the_rerun_diverges_at_the_first_call(&log, dir.path()).await;
}

/// Rewrites a file's content in a log's initial snapshot, as if the workspace had differed.
fn overwrite_recorded_file(log: &Path, path: &str, content: &str) {
    let snapshot = events(log)
        .into_iter()
        .find(|e| e["type"] == "workspace_snapshot")
        .unwrap();
    let manifest_sha = snapshot["data"]["manifest"]["sha256"]
        .as_str()
        .unwrap()
        .to_owned();
    let manifest: Vec<Value> =
        serde_json::from_slice(&std::fs::read(log.join("blobs").join(&manifest_sha)).unwrap())
            .unwrap();
    let data_sha = manifest.iter().find(|e| e["path"] == path).unwrap()["sha256"]
        .as_str()
        .unwrap()
        .to_owned();
    let blob = log.join("blobs").join(&data_sha);
    let mut permissions = std::fs::metadata(&blob).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    permissions.set_readonly(false);
    std::fs::set_permissions(&blob, permissions).unwrap();
    std::fs::write(&blob, content).unwrap();
}

/// Reruns the calls against the changed state, through the same code path as a real rerun.
async fn the_rerun_diverges_at_the_first_call(log: &Path, dir: &Path) {
    let log = log.to_owned();
    let recording = harness_replay::rerun::load(&log).unwrap();
    let (state, _) = harness_replay::restore::state_at(&log, recording.initial_seq).unwrap();
    let workspace = dir.join("changed");
    let restored = harness_replay::restore::write_state(&log, &state, &workspace).unwrap();
    assert_eq!(restored.problems.len(), 1);
    let sandbox = harness_runtime::sandbox::local::LocalSandbox::start_binary(
        &common::sandbox_server(),
        &workspace,
        "a-token-for-the-rerun-test",
        harness_runtime::sandbox::local::LocalOptions::plain(),
    )
    .await
    .unwrap();
    let normalizer = harness_replay::rerun::Normalizer::new(&[]).unwrap();
    let with = harness_replay::rerun::Rerun {
        normalizer: &normalizer,
        check: None,
        mcp: None,
        forker: None,
    };
    let report = harness_replay::rerun::rerun(&recording, &sandbox.client, with)
        .await
        .unwrap();
    sandbox.stop().await;
    let first = report.divergences.first().expect("a divergence");
    let first_call = events(&log)
        .into_iter()
        .find(|e| e["type"] == "tool_call")
        .unwrap();
    assert_eq!(
        first.seq,
        first_call["seq"].as_u64().unwrap(),
        "the first call is where it diverges"
    );
    assert_eq!(first.field, "output");
    assert!(
        first.recorded.contains("2 data.csv") && first.rerun.contains("3 data.csv"),
        "{first:?}"
    );
    let text = harness_replay::rerun::describe(first);
    assert!(
        text.contains(&format!("first divergence at seq {}", first.seq)),
        "{text}"
    );
}

/// Every blob a complete line names exists, with the size it says.
pub fn assert_blobs_resolve(log: &Path) {
    fn walk(value: &Value, found: &mut Vec<(String, u64)>) {
        match value {
            Value::Object(map) => {
                if let (Some(Value::String(sha)), Some(Value::Number(size)), 2) =
                    (map.get("sha256"), map.get("size"), map.len())
                {
                    found.push((sha.clone(), size.as_u64().unwrap()));
                }
                map.values().for_each(|v| walk(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
            _ => {}
        }
    }
    let text = std::fs::read_to_string(log.join("events.jsonl")).unwrap();
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let event: Value = serde_json::from_str(line)
            .unwrap_or_else(|err| panic!("an invalid complete line: {err}: {line}"));
        let mut refs = Vec::new();
        walk(&event["data"], &mut refs);
        for (sha, size) in refs {
            let path = log.join("blobs").join(&sha);
            let meta = std::fs::metadata(&path)
                .unwrap_or_else(|_| panic!("blob {sha} named by seq {} is missing", event["seq"]));
            assert_eq!(meta.len(), size, "blob {sha}");
        }
    }
}

/// `harness replay show LOG --format html -o PAGE`.
async fn render_html(log: &Path, page: &Path) -> common::Run {
    harness(
        &[
            "replay",
            "show",
            log.to_str().unwrap(),
            "--format",
            "html",
            "-o",
            page.to_str().unwrap(),
        ],
        LIMIT,
    )
    .await
}

/// Opens the page in a real headless Chromium and checks the rendered DOM.
fn check_in_browser(page: &Path, n_events: usize) {
    let output = common::chromium(&[
        "--dump-dom".to_owned(),
        format!("file://{}", page.display()),
    ]);
    let dom = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        dom.matches("<li class=\"event ").count(),
        n_events,
        "one timeline entry per event"
    );
    assert!(dom.contains("Session finished: completed"));
}

/// A host's listener that comes and goes while a session runs (a local sandbox shares the
/// host's network) is recorded in the fingerprints the sandbox's own changes make, but is not
/// a change itself: it adds no event to the log.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_listener_coming_and_going_is_not_a_change_of_the_sandbox_state() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let script = json!({"turns": [
        // Waits (bounded) for the test to open a listener of its own and say so.
        {"text": "wait", "tool_calls": [bash("for i in $(seq 200); do [ -e go ] && break; sleep 0.05; done; rm -f go")]},
        // The call ends once the background process is `sleep` (not yet the shell's fork of
        // itself), so the fingerprint after it is the one the session ends with.
        {"text": "leave a process", "tool_calls": [bash("sleep 60 >/dev/null 2>&1 & for i in $(seq 200); do [ \"$(cat /proc/$!/comm 2>/dev/null)\" = sleep ] && break; sleep 0.01; done")]},
        {"text": "done"},
    ]});
    let task = common::scripted_task(
        dir.path(),
        &script,
        json!({
            "prompt": "Wait, then leave a process.",
            "workspace": {"dir": "workspace"},
        }),
    );
    let (logs, target) = (dir.path().join("logs"), dir.path().join("target"));
    let session = tokio::spawn(common::run(
        common::run_into(&logs, &task, &target),
        Duration::from_secs(60),
    ));
    // Once the first call runs: a listener of this process, then the word to go on.
    let mut listener = None;
    for _ in 0..400 {
        let started = std::fs::read_dir(&logs)
            .ok()
            .and_then(|mut entries| entries.next())
            .and_then(|entry| entry.ok())
            .map(|entry| entry.path().join("events.jsonl"))
            .and_then(|path| std::fs::read_to_string(path).ok())
            .is_some_and(|text| text.contains("\"tool_call\""));
        if started {
            listener = Some(std::net::TcpListener::bind("127.0.0.1:0").unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let listener = listener.expect("the first call started within 10 s");
    let port = listener.local_addr().unwrap().port();
    let served = common::first_entry(&logs);
    std::fs::write(target.join("go"), "").unwrap();
    let run = session.await.unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    drop(listener);
    let all = events(&served);
    let fingerprints: Vec<&Value> = all
        .iter()
        .filter(|e| e["type"] == "state_fingerprint")
        .collect();
    let calls: Vec<Value> = fingerprints
        .iter()
        .map(|e| e["data"]["call_id"].clone())
        .collect();
    // The start, then the call that left a process: none for the first call, after which
    // only the host's listener had changed.
    assert_eq!(calls.len(), 2, "fingerprints after {calls:?}");
    assert_eq!(calls[0], Value::Null);
    assert_eq!(calls[1], "script_2_1");
    let after = &fingerprints[1]["data"];
    assert_eq!(after["processes"].as_array().unwrap().len(), 1, "{after}");
    let host = after["listening"]
        .as_array()
        .unwrap()
        .iter()
        .find(|socket| socket["port"] == port)
        .unwrap_or_else(|| panic!("the host's listener {port} is recorded: {after}"));
    assert_eq!(host["pid"], Value::Null);
}

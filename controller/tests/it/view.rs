//! `harness view` over logs made here with the scripted model and real local sandboxes: its
//! guard over HTTP (always), and the whole app in Debian's Chromium driven by Playwright
//! (`HARNESS_TEST_PLAYWRIGHT_PYTHON`, which `.ci/run` sets up): the runs list, a search hit, a
//! hostile string shown as text, the workspace at a middle step equal to `replay restore`'s, a
//! compare grid with its flips and a first divergence, and a live batch whose grid changes
//! while it runs.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use serde_json::{Value, json};

use crate::batches::{self, DONE, bash, write_task};
use crate::common;

/// A viewer process, killed when dropped.
struct Viewer {
    child: Child,
    base: String,
    /// Its stdout, kept open for as long as it runs.
    _stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Drop for Viewer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_viewer(args: &[&str]) -> Viewer {
    let mut all = vec!["view", "--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let mut child = common::command(&all).spawn().expect("start harness view");
    let mut line = String::new();
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
    stdout
        .read_line(&mut line)
        .expect("the viewer prints its address");
    let base = line
        .trim()
        .strip_prefix("view: ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("the address line: {line:?}"))
        .to_owned();
    Viewer {
        child,
        base,
        _stdout: stdout,
    }
}

fn get(url: &str, headers: &[&str]) -> (u16, String) {
    let mut command = Command::new("curl");
    command.args([
        "-s",
        "--noproxy",
        "*",
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
        url,
    ]);
    for header in headers {
        command.args(["-H", header]);
    }
    let output = command.output().expect("curl");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// A session log made by hand: enough for the guard's checks.
fn one_log(root: &Path) {
    let dir = root.join("s1");
    std::fs::create_dir_all(dir.join("blobs")).unwrap();
    std::fs::write(
        dir.join("events.jsonl"),
        "{\"seq\":0,\"ts\":\"2026-01-01T00:00:00.000Z\",\"type\":\"session_started\",\"data\":{\"task\":\"t\"}}\n",
    )
    .unwrap();
}

#[test]
fn the_viewer_answers_only_its_own_pages_never_writes_and_wants_its_token_off_loopback() {
    let root = tempfile::tempdir().unwrap();
    one_log(root.path());
    let dir = root.path().to_str().unwrap();
    let viewer = start_viewer(&[dir]);
    let runs = format!("{}api/runs", viewer.base);
    let (code, body) = get(&runs, &[]);
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["runs"][0]["id"],
        "0/s1"
    );
    let (code, body) = get(&runs, &["Host: evil.example"]);
    assert!(code == 403 && body.contains("rebound"), "{code} {body}");
    let (code, body) = get(&runs, &["Origin: http://evil.example"]);
    assert!(code == 403 && body.contains("Origin"), "{code} {body}");
    let output = Command::new("curl")
        .args([
            "-s",
            "--noproxy",
            "*",
            "-X",
            "POST",
            "-w",
            "\n%{http_code}",
            &runs,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.ends_with("403") && text.contains("read-only"),
        "{text}"
    );
    let (code, body) = get(&format!("{}api/run?id=..%2F..%2Fetc", viewer.base), &[]);
    assert!(code == 404 && body.contains("no run"), "{code} {body}");
    let output = Command::new("curl")
        .args([
            "-s",
            "--noproxy",
            "*",
            "-D",
            "-",
            "-o",
            "/dev/null",
            &viewer.base,
        ])
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&output.stdout).to_lowercase();
    assert!(
        headers.contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{headers}"
    );
    drop(viewer);

    // Off loopback: refused without a token, and with one every request must carry it.
    let refused = common::command(&["view", "--listen", "0.0.0.0:0", dir])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("--token-file"),
        "{stderr}"
    );
    let token_file = root.path().join("token");
    std::fs::write(&token_file, "0123456789abcdef-view\n").unwrap();
    let viewer = start_viewer(&["--token-file", token_file.to_str().unwrap(), dir]);
    let (code, body) = get(&runs_of(&viewer), &[]);
    assert!(code == 401 && body.contains("token"), "{code} {body}");
    let (code, _) = get(
        &runs_of(&viewer),
        &["Authorization: Bearer 0123456789abcdef-view"],
    );
    assert_eq!(code, 200);
    let (code, _) = get(
        &runs_of(&viewer),
        &["Cookie: harness_view_token=wrong-token-of-length"],
    );
    assert_eq!(code, 401);
    let output = Command::new("curl")
        .args(["-s", "--noproxy", "*", "-D", "-", "-o", "/dev/null"])
        .arg(format!("{}?token=0123456789abcdef-view", viewer.base))
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&output.stdout).to_lowercase();
    assert!(
        headers.starts_with("http/1.1 303")
            && headers.contains(
                "set-cookie: harness_view_token=0123456789abcdef-view; httponly; samesite=strict"
            ),
        "{headers}"
    );
    let (code, _) = get(
        &runs_of(&viewer),
        &["Cookie: harness_view_token=0123456789abcdef-view"],
    );
    assert_eq!(code, 200);
}

fn runs_of(viewer: &Viewer) -> String {
    format!("{}api/runs", viewer.base)
}

/// The hostile strings: a prompt and a file name that are markup.
const HOSTILE: &str = "<img src=x onerror=window.__pwned=1>";

/// Two batches of the same two tasks where each task passes in one only: `alpha` writes a
/// file in two steps (so the workspace has a middle step) and a hostile file name.
fn two_batches(root: &Path) -> (PathBuf, PathBuf) {
    let mut made = Vec::new();
    for (side, alpha_passes) in [("a", true), ("b", false)] {
        let tasks = root.join(format!("tasks-{side}"));
        std::fs::create_dir_all(&tasks).unwrap();
        let answer = |passes: bool| if passes { "yes" } else { "no" };
        let first = format!("mkdir -p src && echo one > src/a.txt && echo x > 'src/{HOSTILE}.txt'");
        let second = format!(
            "echo two >> src/a.txt && echo {} > out.txt",
            answer(alpha_passes)
        );
        let check = "check: \"test $(cat out.txt) = yes\"\n";
        let turns = format!("{}{}{DONE}", bash(&first), bash(&second));
        write_task(&tasks, "alpha", &turns, check);
        let beta = bash(&format!("echo {} > out.txt", answer(!alpha_passes)));
        write_task(&tasks, "beta", &format!("{beta}{DONE}"), check);
        // The prompt of alpha carries the hostile string too.
        let file = tasks.join("alpha.yaml");
        let yaml = std::fs::read_to_string(&file).unwrap();
        std::fs::write(
            &file,
            yaml.replace(
                "prompt: task alpha",
                &format!("prompt: 'task alpha {HOSTILE}'"),
            ),
        )
        .unwrap();
        let out = root.join("logs").join(format!("batch-{side}"));
        made.push((tasks, out));
    }
    let outs: Vec<PathBuf> = made.iter().map(|(_, out)| out.clone()).collect();
    for (tasks, out) in made {
        let status = batches::batch(&["--out", out.to_str().unwrap(), tasks.to_str().unwrap()])
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(9), "one task of each batch fails");
    }
    (outs[0].clone(), outs[1].clone())
}

/// The workspace `harness replay restore` writes at `step`, as path → kind and content.
fn restored(session: &Path, step: u64, into: &Path) -> serde_json::Map<String, Value> {
    let step = step.to_string();
    testkit::stdout_of(&mut common::command(&common::restore_args(
        session, &step, into,
    )));
    let mut map = serde_json::Map::new();
    for path in common::files_under(into) {
        let full = into.join(&path);
        let name = path.to_str().unwrap().to_owned();
        let content = std::fs::read_to_string(&full).unwrap();
        map.insert(name, json!({"kind": "file", "content": content}));
        let mut parent = path.parent();
        while let Some(dir) = parent.filter(|p| !p.as_os_str().is_empty()) {
            map.insert(dir.to_str().unwrap().to_owned(), json!({"kind": "dir"}));
            parent = dir.parent();
        }
    }
    map
}

fn workspace_steps(session: &Path) -> Vec<u64> {
    batches::events_so_far(session)
        .iter()
        .filter(|e| e["type"] == "workspace_changed")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_playwright_python),
    ignore = "needs HARNESS_TEST_PLAYWRIGHT_PYTHON=PATH (bash .ci/run sets it up)"
)]
async fn the_viewer_in_a_real_browser_lists_searches_compares_shows_a_step_and_follows_a_live_batch()
 {
    let python = testkit::gates::value("HARNESS_TEST_PLAYWRIGHT_PYTHON");
    // Deep, as a user's folders are: the runs list must still fit the window.
    let base = tempfile::tempdir().unwrap();
    let root = base
        .path()
        .join("home/alice/src/agent-harness/experiments/2026-12/runs");
    std::fs::create_dir_all(&root).unwrap();
    let (batch_a, _) = two_batches(root.as_path());
    let session = batch_a.join("alpha");
    let steps = workspace_steps(&session);
    assert_eq!(steps.len(), 2, "alpha changed the workspace twice");
    let restored_dir = root.as_path().join("restored");
    let restored = restored(&session, steps[0], &restored_dir);
    assert_eq!(
        restored["src/a.txt"]["content"], "one\n",
        "the middle step is before the second write"
    );
    assert!(!restored.contains_key("out.txt"));

    // A fork of the session at the middle step: its children show under it.
    let child_script = root.as_path().join("child.turns");
    std::fs::write(&child_script, format!("turns:\n{DONE}")).unwrap();
    let forked = common::command(&[
        "replay",
        "fork",
        session.to_str().unwrap(),
        "--step",
        &steps[0].to_string(),
        "--count",
        "2",
        "--policy",
        "allow-all",
        "--model",
        &format!("script:{}", child_script.display()),
    ])
    .output()
    .unwrap();
    assert!(
        forked.status.success(),
        "{}",
        String::from_utf8_lossy(&forked.stderr)
    );

    // The live batch: each task waits for its release file, so the page sees it run.
    let live_tasks = root.as_path().join("tasks-live");
    let marks = root.as_path().join("marks");
    std::fs::create_dir_all(&live_tasks).unwrap();
    std::fs::create_dir_all(&marks).unwrap();
    let mut release = serde_json::Map::new();
    let names = ["one", "two", "three"];
    for name in names {
        let go = marks.join(format!("go-{name}"));
        let wait = format!(
            "for i in $(seq 1 1200); do [ -f {} ] && break; sleep 0.1; done; echo yes > out.txt",
            go.display()
        );
        write_task(
            &live_tasks,
            name,
            &format!("{}{DONE}", bash(&wait)),
            "check: \"test $(cat out.txt) = yes\"\n",
        );
        release.insert(name.to_owned(), json!(go));
    }
    // A fork child's log ends with a crafted line whose fields have the wrong types.
    let fork = common::first_entry(&session.join("forks"));
    let crafted = r#"{"seq":99,"ts":5,"type":"tool_call","data":{"call_id":7,"name":[],"arguments":{"x":1}}}"#;
    let child_log = fork.join("child-2").join("events.jsonl");
    let mut text = std::fs::read_to_string(&child_log).unwrap();
    text.push_str(crafted);
    text.push('\n');
    std::fs::write(&child_log, text).unwrap();
    let crafted_run = format!(
        "0/batch-a/alpha/forks/{}/child-2",
        fork.file_name().unwrap().to_str().unwrap()
    );
    let logs = root.as_path().join("logs");
    let viewer = start_viewer(&[logs.to_str().unwrap()]);
    let live_out = logs.join("batch-live");
    let live = batches::batch(&[
        "--parallel",
        "1",
        "--writable",
        marks.to_str().unwrap(),
        "--out",
        live_out.to_str().unwrap(),
        live_tasks.to_str().unwrap(),
    ]);
    let live = tokio::spawn(common::run(live, Duration::from_secs(240)));

    let config = json!({
        "base": viewer.base,
        "chromium": std::env::var("HARNESS_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
        "batch_a": "0/batch-a",
        "batch_b": "0/batch-b",
        "session": "0/batch-a/alpha",
        "crafted": crafted_run,
        "middle_step": steps[0],
        "final_step": steps[1],
        "changed_file": "src/a.txt",
        "restored": restored,
        "hostile": HOSTILE,
        "hostile_file": format!("src/{HOSTILE}.txt"),
        "search": "echo two >>",
        "search_what": "command",
        "search_run": "0/batch-a/alpha",
        "flips": {"alpha": "broke", "beta": "fixed"},
        "diverging_task": "alpha",
        "divergence_step": 2,
        "live_batch": "0/batch-live",
        "live_tasks": names,
        "release": release,
        "screenshots": std::env::var("HARNESS_VIEW_SCREENSHOTS").ok(),
    });
    let config_file = root.as_path().join("browser.json");
    std::fs::write(&config_file, config.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/view/browser.py");
    let browser = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .arg(config_file)
            .output()
            .unwrap()
    });
    let browser = tokio::time::timeout(Duration::from_secs(240), browser)
        .await
        .expect("the browser checks end within 4 minutes")
        .unwrap();
    // Whatever the page saw, the live batch must not be left waiting.
    for name in names {
        let _ = std::fs::write(marks.join(format!("go-{name}")), "go");
    }
    let live = live.await.unwrap();
    let stdout = String::from_utf8_lossy(&browser.stdout);
    let stderr = String::from_utf8_lossy(&browser.stderr);
    assert!(
        browser.status.success(),
        "the browser checks failed:\n{stdout}\n{stderr}\nthe live batch: {}",
        live.stderr
    );
    // What the browser saw, check by check, in the test's output.
    eprintln!("{stdout}");
    assert!(stdout.contains("every live task passed"), "{stdout}");
    assert_eq!(live.code, 0, "{}", live.stderr);
    drop(viewer);
}

/// The tree at a step comes a page at a time: the pages, followed by `next`, are the whole
/// tree once each, in path order; `changed=true` lists only what changed; a page size out of
/// range is refused by name.
#[test]
fn the_workspace_tree_pages_and_filters_what_changed() {
    let root = tempfile::tempdir().unwrap();
    let tasks = root.path().join("tasks");
    std::fs::create_dir_all(&tasks).unwrap();
    let first =
        bash("mkdir -p d && for i in $(seq 10 34); do echo $i > d/f$i; done && echo 1 > gone");
    let second = bash("echo changed > d/f20 && rm gone && echo new > d/g");
    write_task(&tasks, "many", &format!("{first}{second}{DONE}"), "");
    let out = root.path().join("logs").join("batch");
    let status = batches::batch(&["--out", out.to_str().unwrap(), tasks.to_str().unwrap()])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let steps = workspace_steps(&out.join("many"));
    let viewer = start_viewer(&[root.path().join("logs").to_str().unwrap()]);
    let id = "0/batch/many";
    let tree = |more: &str| -> Value {
        let url = format!(
            "{}api/workspace/tree?id={}&step={}{more}",
            viewer.base,
            id.replace('/', "%2F"),
            steps[1]
        );
        let (code, body) = get(&url, &[]);
        assert_eq!(code, 200, "{url}: {body}");
        serde_json::from_str(&body).unwrap()
    };
    let whole = tree("");
    // d, 25 files and g after the second step; `gone` listed as deleted.
    assert_eq!(
        (whole["total"].as_u64(), whole["listed"].as_u64()),
        (Some(27), Some(28))
    );
    assert!(whole["next"].is_null());
    let paths = |page: &Value| -> Vec<String> {
        page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap().to_owned())
            .collect()
    };
    let everything = paths(&whole);
    let mut sorted = everything.clone();
    sorted.sort();
    assert_eq!(everything, sorted, "in path order");
    let mut paged = Vec::new();
    let mut after = String::new();
    for _ in 0..10 {
        let page = tree(&format!("&limit=6{after}"));
        assert!(page["entries"].as_array().unwrap().len() <= 6);
        paged.extend(paths(&page));
        match page["next"].as_str() {
            Some(next) => after = format!("&after={}", next.replace('/', "%2F")),
            None => break,
        }
    }
    assert_eq!(paged, everything, "the pages are the tree once each");
    let changed = tree("&changed=true");
    let changes: Vec<(String, String)> = changed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let path = e["path"].as_str().unwrap().to_owned();
            (path, e["change"].as_str().unwrap().to_owned())
        })
        .collect();
    let expected = [("d/f20", "modified"), ("d/g", "added"), ("gone", "deleted")];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(p, c)| ((*p).to_owned(), (*c).to_owned()))
        .collect();
    assert_eq!(changes, expected);
    assert_eq!(changed["changed"], 3);
    let url = format!("{}api/workspace/tree?id={id}&step=1&limit=0", viewer.base);
    let (code, body) = get(&url, &[]);
    assert!(code == 400 && body.contains("limit: 0"), "{code} {body}");
}

/// Issue 57 §9: a second viewer on a port in use says what to do, port 0 among it.
#[test]
fn a_port_in_use_is_named_with_the_way_to_a_free_one() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap().to_string();
    let root = tempfile::tempdir().unwrap();
    let output = common::command(&["view", "--listen", &at, root.path().to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("--listen {at}")) && stderr.contains("--listen 127.0.0.1:0"),
        "{stderr}"
    );
}

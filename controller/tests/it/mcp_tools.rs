//! Tools from MCP servers (a server written for the tests on the official Python SDK, over
//! stdio and over streamable HTTP, a slow-starting one and a broken one) reach a scripted
//! model as `mcp__<server>__<tool>` and pass the same hooks, rules and log as every tool.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::batches::{events_so_far, of_type, write_task};
use crate::common::{self, call_turn};
use crate::docker::outputs;

fn server_script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/mcp_server.py")
}

/// The HTTP server, killed on drop.
struct HttpServer(std::process::Child);

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_http(python: &str) -> (HttpServer, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = std::process::Command::new(python)
        .arg(server_script())
        .args(["http", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = HttpServer(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the HTTP MCP server did not listen"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (server, format!("http://127.0.0.1:{port}/mcp"))
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_mcp_python),
    ignore = "needs HARNESS_TEST_MCP_PYTHON=PATH (bash .ci/run sets it up)"
)]
async fn mcp_tools_pass_the_hooks_rules_and_log_like_any_tool() {
    let python = testkit::gates::value("HARNESS_TEST_MCP_PYTHON");
    let dir = tempfile::tempdir().unwrap();
    let (_web, url) = start_http(&python);
    let script = server_script().display().to_string();
    let servers = json!({"mcpServers": {
        "local": {"command": python, "args": [script, "stdio"], "deny": ["secret"], "call_timeout": 1},
        "web": {"type": "http", "url": url, "allow": ["add"]},
        "sluggish": {"command": python, "args": [script, "stdio", "--delay", "20"], "start_timeout": 1},
        "broken": {"command": "false"},
    }});
    std::fs::write(dir.path().join("mcp.json"), servers.to_string()).unwrap();
    std::fs::write(
        dir.path().join("rules.yaml"),
        "deny: ['mcp__local__echo(*forbidden*)']\nallow: ['mcp__*']\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("hooks.yaml"), "hooks:\n  - {event: pre_tool_use, matcher: 'mcp__*', command: 'cat >> seen.jsonl; echo >> seen.jsonl'}\n  - {event: pre_tool_use, name: no-docs, matcher: 'mcp__local__search_*', command: 'echo not the docs >&2; exit 2'}\n").unwrap();
    let turns = [
        call_turn("mcp__local__echo", &json!({"text": "hi"})),
        call_turn("mcp__web__add", &json!({"a": 2, "b": 3})),
        call_turn("mcp__local__fail", &json!({})),
        call_turn("mcp__local__slow", &json!({"seconds": 5})),
        call_turn("mcp__local__search_docs", &json!({"query": "hooks"})),
        call_turn("mcp__local__echo", &json!({"text": "forbidden"})),
        call_turn("mcp__local__secret", &json!({})),
        "  - text: done\n".to_owned(),
    ]
    .concat();
    std::fs::write(dir.path().join("t.turns"), format!("turns:\n{turns}")).unwrap();
    let task = dir.path().join("task.yaml");
    std::fs::write(&task, "prompt: use the tools\nmodel: {name: 'script:t.turns'}\nmcp: mcp.json\nhooks: hooks.yaml\n").unwrap();
    let rules = dir.path().join("rules.yaml").display().to_string();
    let mut command = common::command(&["run", "--approve", "never", "--policy", &rules, "--task"]);
    command.arg(&task);
    let started = Instant::now();
    let run = common::run(command, Duration::from_secs(120)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the slow server did not hold the session"
    );
    common::assert_contains(
        &run.stderr,
        &[
            "mcp: server sluggish left out: not ready within 1 s",
            "mcp: server broken left out",
        ],
    );

    let events = events_so_far(&run.log_dir());
    let results: Vec<(String, String)> = of_type(&events, "tool_result")
        .iter()
        .map(|e| {
            (
                e["data"]["status"].as_str().unwrap().to_owned(),
                e["data"]["output"]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(results[0], ("ok".to_owned(), "echo: hi".to_owned()));
    assert_eq!(results[1], ("ok".to_owned(), "5".to_owned()));
    assert_eq!(results[2].0, "error");
    assert!(
        results[2].1.starts_with("ERROR: ") && results[2].1.contains("fail"),
        "{}",
        results[2].1
    );
    assert_eq!(results[3].0, "error");
    assert!(
        results[3].1.contains("did not answer within 1 s"),
        "{}",
        results[3].1
    );
    // A deny hook blocks an MCP tool like any tool.
    assert_eq!(results[4].0, "blocked");
    assert!(
        results[4].1.contains("hook no-docs: not the docs"),
        "{}",
        results[4].1
    );
    assert_eq!(
        results[5].0, "blocked",
        "a rule names an MCP tool and its arguments"
    );
    assert!(
        results[5].1.contains("mcp__local__echo(*forbidden*)"),
        "{}",
        results[5].1
    );
    assert_eq!(
        results[6].0, "error",
        "a denied tool is not given to the model"
    );
    assert!(
        results[6].1.contains("unknown tool mcp__local__secret"),
        "{}",
        results[6].1
    );

    // The header lists the exposed tools; the hook saw every call that reached the policy.
    let header = &of_type(&events, "session_started")[0]["data"];
    let sha = header["tools"]["sha256"].as_str().unwrap();
    let tools: Vec<Value> =
        serde_json::from_slice(&std::fs::read(run.log_dir().join("blobs").join(sha)).unwrap())
            .unwrap();
    let names: Vec<&str> = tools
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| n.starts_with("mcp__"))
        .collect();
    assert_eq!(
        names,
        [
            "mcp__local__echo",
            "mcp__local__add",
            "mcp__local__slow",
            "mcp__local__fail",
            "mcp__local__whereami",
            "mcp__local__search_docs",
            "mcp__web__add"
        ]
    );
    let seen = std::fs::read_to_string(dir.path().join("seen.jsonl")).unwrap();
    assert_eq!(seen.lines().filter(|l| !l.trim().is_empty()).count(), 6);

    // A rerun takes the MCP results from the log: nothing diverges.
    let mut rerun = common::command(&["replay", "rerun", "--trust-log"]);
    rerun.arg(run.log_dir());
    let rerun = common::run(rerun, Duration::from_secs(120)).await;
    assert_eq!(rerun.code, 0, "{}\n{}", rerun.stdout, rerun.stderr);
    assert!(
        rerun.stderr.contains("5 MCP calls taken from the log"),
        "{}",
        rerun.stderr
    );
    // Told to, it calls the servers again and compares their answers: the same.
    let mut again = common::command(&["replay", "rerun", "--trust-log", "--mcp"]);
    again.arg(dir.path().join("mcp.json")).arg(run.log_dir());
    let again = common::run(again, Duration::from_secs(120)).await;
    assert_eq!(again.code, 0, "{}\n{}", again.stdout, again.stderr);
    assert!(
        again.stderr.contains("4 calls re-executed")
            && again.stderr.contains("1 MCP calls taken from the log")
            && again.stderr.contains("0 divergences"),
        "{}",
        again.stderr
    );
}

/// Runs `turns` as a session with the servers file `mcp.json` of `dir`; the run and its events.
async fn session(dir: &Path, name: &str, turns: &str) -> (common::Run, Vec<Value>) {
    let task = write_task(dir, name, turns, "mcp: mcp.json\n");
    // The test's Python (a virtual environment of a Python under /root) and its server script
    // are root's: a server run in the sandbox needs its commands to run as root to start them.
    let mut command =
        common::command(&["run", "--run-as", "root", "--policy", "allow-all", "--task"]);
    command
        .arg(&task)
        .env("HARNESS_MCP_CACHE", dir.join("cache"));
    let run = common::run(command, Duration::from_secs(120)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let events = events_so_far(&run.log_dir());
    (run, events)
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_mcp_python),
    ignore = "needs HARNESS_TEST_MCP_PYTHON=PATH (bash .ci/run sets it up)"
)]
async fn a_lazy_server_starts_at_its_first_call_and_many_tools_are_found_by_search() {
    let python = testkit::gates::value("HARNESS_TEST_MCP_PYTHON");
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let script = server_script().display().to_string();
    let servers = json!({"toolBudget": 10, "mcpServers": {
        "local": {"command": python, "args": [script, "stdio", "--marker", marker], "lazy": true},
    }});
    std::fs::write(dir.path().join("mcp.json"), servers.to_string()).unwrap();
    let starts = || {
        std::fs::read_to_string(&marker)
            .unwrap_or_default()
            .lines()
            .count()
    };

    // No list known yet: the server starts to list its tools. Over the budget, the model has
    // only the search tool, which loads what it finds.
    let turns = call_turn("mcp__tool_search", &json!({"query": "echo the text"}))
        + &call_turn("mcp__local__echo", &json!({"text": "found"}))
        + "  - text: done\n";
    let (run, events) = session(dir.path(), "first", &turns).await;
    assert!(
        run.stderr
            .contains("the model finds them with mcp__tool_search"),
        "{}",
        run.stderr
    );
    let outputs_1 = outputs(&events);
    assert!(
        outputs_1[0].starts_with("Loaded ")
            && outputs_1[0].contains("- mcp__local__echo: Echo the text back."),
        "{}",
        outputs_1[0]
    );
    assert_eq!(outputs_1[1], "echo: found");
    let header = &of_type(&events, "session_started")[0]["data"];
    let sha = header["tools"]["sha256"].as_str().unwrap();
    let tools: Vec<Value> =
        serde_json::from_slice(&std::fs::read(run.log_dir().join("blobs").join(sha)).unwrap())
            .unwrap();
    let mcp: Vec<&str> = tools
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| n.starts_with("mcp__"))
        .collect();
    assert_eq!(mcp, ["mcp__tool_search"]);
    // The second model request offers the loaded tool.
    let requests = of_type(&events, "model_request");
    assert_eq!(requests.len(), 3);
    let offered = |n: usize| {
        let sha = requests[n]["data"]["body"]["sha256"].as_str().unwrap();
        let body: Value =
            serde_json::from_slice(&std::fs::read(run.log_dir().join("blobs").join(sha)).unwrap())
                .unwrap();
        body["tools"].clone()
    };
    assert!(
        !offered(0).to_string().contains("mcp__local__echo"),
        "{}",
        offered(0)
    );
    assert!(
        offered(1).to_string().contains("mcp__local__echo"),
        "{}",
        offered(1)
    );
    assert_eq!(starts(), 1);

    // Its list is known now: a session that calls none of its tools never starts it.
    session(dir.path(), "second", "  - text: done\n").await;
    assert_eq!(
        starts(),
        1,
        "a lazy server with a known list starts only when called"
    );

    // One that calls a tool starts it then.
    let turns = call_turn("mcp__tool_search", &json!({"query": "add integers"}))
        + &call_turn("mcp__local__add", &json!({"a": 1, "b": 2}))
        + "  - text: done\n";
    let (_, events) = session(dir.path(), "third", &turns).await;
    assert_eq!(outputs(&events)[1], "3");
    assert_eq!(starts(), 2);
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_mcp_python),
    ignore = "needs HARNESS_TEST_MCP_PYTHON=PATH (bash .ci/run sets it up)"
)]
async fn a_server_can_run_inside_the_sandbox() {
    let python = testkit::gates::value("HARNESS_TEST_MCP_PYTHON");
    let dir = tempfile::tempdir().unwrap();
    // A tag the server ignores, to find its process (the sandbox lets it write only in the
    // workspace, so it cannot leave a marker file here).
    let tag = format!("boxed-{}", std::process::id());
    let script = server_script().display().to_string();
    let servers = json!({"mcpServers": {
        "boxed": {"command": python, "args": [script, "stdio", "--tag", tag], "where": "sandbox"},
    }});
    std::fs::write(dir.path().join("mcp.json"), servers.to_string()).unwrap();
    let turns = call_turn("mcp__boxed__echo", &json!({"text": "inside"}))
        + &call_turn("mcp__boxed__whereami", &json!({}))
        + "  - text: done\n";
    let (run, events) = session(dir.path(), "boxed", &turns).await;
    let outputs = outputs(&events);
    assert_eq!(outputs[0], "echo: inside", "{}", run.stderr);
    // It ran in the sandbox: in the workspace, as a process of the sandbox (gone with it).
    let header = &of_type(&events, "session_started")[0]["data"];
    let root = header["config"]["workspace_root"].as_str().unwrap();
    assert_eq!(outputs[1], root);
    let left = std::process::Command::new("pgrep")
        .args(["-f", &tag])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "the server's process is gone: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_mcp_python),
    ignore = "needs HARNESS_TEST_MCP_PYTHON=PATH (bash .ci/run sets it up)"
)]
async fn the_workspace_mcp_json_is_used_only_when_asked_and_runs_in_the_sandbox() {
    let python = testkit::gates::value("HARNESS_TEST_MCP_PYTHON");
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    // No `where`: a workspace's stdio server runs in the sandbox all the same.
    let servers =
        json!({"mcpServers": {"ws": {"command": python, "args": [server_script(), "stdio"]}}});
    std::fs::write(workspace.join(".mcp.json"), servers.to_string()).unwrap();
    let turns = call_turn("mcp__ws__whereami", &json!({})) + "  - text: done\n";
    std::fs::write(dir.path().join("t.turns"), format!("turns:\n{turns}")).unwrap();
    let task = dir.path().join("task.yaml");
    std::fs::write(
        &task,
        "prompt: where\nmodel: {name: 'script:t.turns'}\nworkspace: {dir: ws}\n",
    )
    .unwrap();
    for opted_in in [false, true] {
        // As in `session`: the test's Python is root's.
        let mut args = vec!["run", "--run-as", "root", "--policy", "allow-all", "--task"];
        let path = task.display().to_string();
        args.push(&path);
        if opted_in {
            args.push("--mcp-workspace");
        }
        let run = common::harness(&args, Duration::from_secs(120)).await;
        assert_eq!(run.code, 0, "{}", run.stderr);
        let events = events_so_far(&run.log_dir());
        let answer = &outputs(&events)[0];
        if opted_in {
            let header = &of_type(&events, "session_started")[0]["data"];
            assert_eq!(
                answer,
                header["config"]["workspace_root"].as_str().unwrap(),
                "{}",
                run.stderr
            );
        } else {
            assert_eq!(
                answer, "ERROR: unknown tool mcp__ws__whereami",
                "the file is not read unless asked"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_mcp_servers_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("task.yaml");
    std::fs::write(
        &task,
        "prompt: x\nmodel: {name: 'script:t.turns'}\nmcp: mcp.json\n",
    )
    .unwrap();
    for (file, why) in [
        (
            r#"{"mcpServers": {"a__b": {"command": "x"}}}"#,
            "server a__b: a name is letters",
        ),
        (
            r#"{"mcpServers": {"s": {"url": "ftp://x"}}}"#,
            "server s: give a `command` (stdio) or an http(s) `url`",
        ),
        (
            r#"{"mcpServers": {"s": {"command": "x", "where": "elsewhere"}}}"#,
            "server s: `where: elsewhere`: expected controller or sandbox",
        ),
        (
            r#"{"mcpServers": {"s": {"url": "http://x/mcp", "where": "sandbox"}}}"#,
            "`where: sandbox` is for a stdio server",
        ),
        (
            r#"{"mcpServers": {"s": {"command": "x", "colour": 1}}}"#,
            "unknown field `colour`",
        ),
    ] {
        std::fs::write(dir.path().join("mcp.json"), file).unwrap();
        let mut command = common::command(&["run", "--task"]);
        command.arg(&task);
        let run = common::run(command, Duration::from_secs(60)).await;
        assert_eq!(run.code, 1);
        assert!(run.stderr.contains(why), "{why}: {}", run.stderr);
    }
}

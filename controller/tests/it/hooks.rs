//! Hooks, run for real: command hooks (shell scripts) and an HTTP hook (a server in the test),
//! around sessions of a scripted model against a real sandbox-server. The conformance test
//! enumerates every tool the sandbox-server can register and proves a deny hook blocks each.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::batches::{events_so_far, of_type, write_task};
use crate::common::{self, call_turn};

/// Writes `<dir>/<name>.yaml`, its script and `hooks.yaml`, and returns the task's path.
fn task(dir: &Path, name: &str, turns: &str, tools: &str, hooks: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("hooks.yaml"), hooks).unwrap();
    let extra = format!("tools: [{tools}]\nhooks: hooks.yaml\nworkspace: {{dir: .}}\n");
    write_task(dir, name, turns, &extra)
}

async fn harness_run(task: &Path, extra: &[&str]) -> common::Run {
    let mut args = vec!["run", "--task"];
    let task = task.display().to_string();
    args.push(&task);
    args.extend_from_slice(extra);
    if !extra.contains(&"--approve") {
        args.extend(["--approve", "never"]);
    }
    common::harness(&args, Duration::from_secs(120)).await
}

fn results(events: &[Value]) -> Vec<(String, String, String)> {
    of_type(events, "tool_result")
        .iter()
        .map(|e| {
            let d = &e["data"];
            let text = d["output"]["text"].as_str().unwrap_or_default().to_owned();
            (
                d["name"].as_str().unwrap().to_owned(),
                d["status"].as_str().unwrap().to_owned(),
                text,
            )
        })
        .collect()
}

/// A hook script that reads its input and prints `answer`.
fn script(dir: &Path, name: &str, answer: &str) {
    let text = format!("cat > /dev/null\ncat <<'EOF'\n{answer}\nEOF\n");
    std::fs::write(dir.join(name), text).unwrap();
}

/// Every tool the sandbox-server registers, with the example arguments of its schema, from
/// its own OpenAPI document.
fn every_tool() -> Vec<(String, Value)> {
    let output = std::process::Command::new(common::sandbox_server())
        .arg("print-openapi")
        .output()
        .unwrap();
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    let example = |operation: &Value| {
        let body = &operation["post"]["requestBody"]["content"]["application/json"]["schema"];
        let name = body["$ref"].as_str().unwrap().rsplit('/').next().unwrap();
        document["components"]["schemas"][name]["example"].clone()
    };
    let tools: Vec<(String, Value)> = document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .filter_map(|(path, operation)| Some((path.strip_prefix("/v1/tools/")?, operation)))
        .filter(|(name, _)| !name.contains('{'))
        .map(|(name, operation)| (name.to_owned(), example(operation)))
        .collect();
    assert!(tools.len() >= 7, "{tools:?}");
    for (name, example) in &tools {
        assert!(
            example.is_object(),
            "{name} has no example in the OpenAPI document"
        );
    }
    tools
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deny_hook_blocks_every_tool_the_sandbox_registers() {
    let dir = tempfile::tempdir().unwrap();
    let tools = every_tool();
    let turns: String = tools
        .iter()
        .map(|(tool, args)| call_turn(tool, args))
        .collect::<String>()
        + "  - text: done\n";
    // The hook keeps what it was given, and refuses with exit 2.
    let hooks = "hooks:\n  - event: pre_tool_use\n    name: refuse-all\n    command: cat >> seen.jsonl; echo >> seen.jsonl; echo 'not in this test' >&2; exit 2\n  - {event: session_end, command: cat > ended.json}\n";
    let names: Vec<&str> = tools.iter().map(|(tool, _)| tool.as_str()).collect();
    let path = task(dir.path(), "every", &turns, &names.join(", "), hooks);
    let run = harness_run(&path, &["--policy", "allow-all"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let events = events_so_far(&run.log_dir());
    let results = results(&events);
    let called: Vec<&str> = results.iter().map(|(name, _, _)| name.as_str()).collect();
    assert_eq!(called, names);
    for (name, status, text) in &results {
        assert_eq!(status, "blocked", "{name}: {text}");
        assert!(
            text.contains("hook refuse-all: not in this test"),
            "{name}: {text}"
        );
    }
    for decision in of_type(&events, "policy_decision") {
        assert_eq!(decision["data"]["source"], "hook");
        assert_eq!(decision["data"]["allowed"], false);
    }
    let mut runs = of_type(&events, "hook_run");
    runs.retain(|r| r["data"]["event"] == "pre_tool_use");
    assert_eq!(runs.len(), tools.len());
    assert!(
        runs.iter()
            .all(|r| r["data"]["outcome"] == "blocked" && r["data"]["decision"] == "deny")
    );
    // Nothing ran: no file, no process.
    assert!(
        !of_type(&events, "workspace_changed")
            .iter()
            .any(|e| !e["data"]["changes"].as_array().unwrap().is_empty())
    );
    let seen = std::fs::read_to_string(dir.path().join("seen.jsonl")).unwrap();
    let inputs: Vec<Value> = seen
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(inputs.len(), tools.len());
    assert_eq!(inputs[0]["event"], "pre_tool_use");
    for (input, (tool, args)) in inputs.iter().zip(&tools) {
        assert_eq!((&input["tool"], &input["tool_input"]), (&json!(tool), args));
    }
    assert!(inputs[0]["session_id"].is_string() && inputs[0]["call_id"].is_string());
    assert_described(&inputs);
    let ended = std::fs::read_to_string(dir.path().join("ended.json")).unwrap();
    assert_described(&[serde_json::from_str(&ended).unwrap()]);
}

/// Each document is a hook input as the committed `proto-docs/hooks.schema.json` describes it.
fn assert_described(inputs: &[Value]) {
    let path = common::repo_root().join("proto-docs/hooks.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let root = json!({"$ref": "#/$defs/HookInput", "$defs": schema["$defs"]});
    let validator = jsonschema::validator_for(&root).unwrap();
    let unnamed = json!({"event": "stop", "turn": 1, "answer": "no session"});
    assert!(
        !validator.is_valid(&unnamed),
        "the schema requires what a hook is always given"
    );
    for input in inputs {
        let errors: Vec<String> = validator
            .iter_errors(input)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{input}: {errors:?}");
    }
}

/// A hook endpoint: answers each POST with `answer(body)`, and keeps the bodies.
async fn http_hook(answer: fn(&Value) -> Value) -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let kept = kept.clone();
            async move {
                let reply = answer(&body);
                kept.lock().unwrap().push(body);
                axum::Json(reply)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

fn secret_reads_denied(body: &Value) -> Value {
    if body["tool"] == "read_file" && body["tool_input"]["path"] == "secret.txt" {
        json!({"decision": "deny", "reason": "secrets stay secret"})
    } else {
        json!({})
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn hooks_deny_ask_rewrite_add_context_and_fail_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (url, seen) = http_hook(secret_reads_denied).await;
    let turns = [
        call_turn("bash", &json!({"cmd": "echo original"})),
        call_turn("read_file", &json!({"path": "secret.txt"})),
        call_turn("write_file", &json!({"path": "a.txt", "content": "kept"})),
        call_turn(
            "search_replace",
            &json!({"path": "a.txt", "search": "kept", "replace": "changed"}),
        ),
        call_turn("read_file", &json!({"path": "a.txt"})),
        "  - text: done\n".to_owned(),
    ]
    .concat();
    script(
        dir.path(),
        "rewrite.sh",
        r#"{"updated_input": {"cmd": "echo rewritten"}, "additional_context": "the hook rewrote your command"}"#,
    );
    script(
        dir.path(),
        "note.sh",
        r#"{"additional_context": "read noted"}"#,
    );
    let hooks = format!(
        "hooks:
  - {{event: pre_tool_use, name: rewrite, matcher: bash, command: sh rewrite.sh}}
  - {{event: pre_tool_use, name: guard, url: '{url}'}}
  - {{event: pre_tool_use, name: flaky, matcher: write_file, command: exit 1, on_error: allow}}
  - {{event: pre_tool_use, name: slow, matcher: search_replace, command: sleep 5, timeout: 0.5}}
  - {{event: post_tool_use, name: note, matcher: 'read_*', command: sh note.sh}}
"
    );
    let path = task(
        dir.path(),
        "steer",
        &turns,
        "bash, read_file, write_file, search_replace",
        &hooks,
    );
    std::fs::write(dir.path().join("secret.txt"), "s3cret").unwrap();
    let run = harness_run(&path, &["--policy", "allow-all"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let events = events_so_far(&run.log_dir());
    let results = results(&events);
    let (_, status, text) = &results[0];
    assert_eq!(status, "ok");
    assert!(
        text.contains("rewritten") && !text.contains("original"),
        "{text}"
    );
    assert!(
        text.ends_with("[hook] the hook rewrote your command"),
        "{text}"
    );
    let (_, status, text) = &results[1];
    assert_eq!(status, "blocked");
    assert!(text.contains("hook guard: secrets stay secret"), "{text}");
    assert!(
        text.ends_with("[hook] read noted"),
        "post_tool_use sees refused calls too: {text}"
    );
    assert_eq!(
        results[2].1, "ok",
        "a failing hook with on_error: allow lets the call run"
    );
    let (_, status, text) = &results[3];
    assert_eq!(status, "blocked");
    assert!(text.contains("hook slow: timed out after"), "{text}");
    let (_, status, text) = &results[4];
    assert_eq!(status, "ok");
    assert!(
        text.contains("kept") && text.ends_with("[hook] read noted"),
        "{text}"
    );
    // The HTTP hook saw every call; each run is logged with its outcome.
    assert_eq!(seen.lock().unwrap().len(), 5);
    let runs = of_type(&events, "hook_run");
    let outcome = |name: &str| {
        runs.iter()
            .find(|r| r["data"]["hook"] == name)
            .map(|r| r["data"]["outcome"].clone())
    };
    assert_eq!(outcome("flaky"), Some(json!("failed")));
    assert_eq!(outcome("slow"), Some(json!("timed_out")));
    let rewrite = runs
        .iter()
        .find(|r| r["data"]["hook"] == "rewrite")
        .unwrap();
    assert_eq!(
        rewrite["data"]["updated_input"],
        json!({"cmd": "echo rewritten"})
    );

    // The rerun runs what ran: the rewritten command, the same refusals; nothing diverges.
    let mut rerun = common::command(&["replay", "rerun", "--trust-log"]);
    rerun.arg(run.log_dir());
    let rerun = common::run(rerun, Duration::from_secs(120)).await;
    assert_eq!(rerun.code, 0, "{}\n{}", rerun.stdout, rerun.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_hooks_send_the_model_back_and_post_tool_use_can_end_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let turns = [
        "  - text: finished early\n".to_owned(),
        call_turn("bash", &json!({"cmd": "echo more work"})),
        "  - text: never reached\n".to_owned(),
    ]
    .concat();
    // The first stop is refused (a marker file makes the second pass); the bash call's
    // post_tool_use hook then stops the session.
    std::fs::write(
        dir.path().join("not-yet.sh"),
        "if [ -e stopped-once ]; then exit 0; fi\ntouch stopped-once\necho '{\"decision\": \"deny\", \"reason\": \"run the tests first\"}'\n",
    )
    .unwrap();
    script(
        dir.path(),
        "enough.sh",
        r#"{"stop": true, "reason": "one command is enough"}"#,
    );
    script(
        dir.path(),
        "watching.sh",
        r#"{"additional_context": "hooks are watching"}"#,
    );
    let hooks = "hooks:
  - {event: stop, name: not-yet, command: sh not-yet.sh}
  - {event: post_tool_use, name: enough, command: sh enough.sh}
  - {event: session_start, command: sh watching.sh}
  - {event: session_end, command: cat > ended.json}
";
    let path = task(dir.path(), "stops", &turns, "bash", hooks);
    let run = harness_run(&path, &["--policy", "allow-all"]).await;
    assert_ne!(run.code, 0, "a hook's stop is not a success");
    let events = events_so_far(&run.log_dir());
    let requests = of_type(&events, "model_request");
    assert_eq!(requests.len(), 2, "the stop hook sent the model back once");
    let errors = of_type(&events, "error");
    let error = errors.last().unwrap();
    assert_eq!(error["data"]["class"], "policy");
    assert!(
        error["data"]["message"]
            .as_str()
            .unwrap()
            .contains("one command is enough")
    );
    let ended: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("ended.json")).unwrap())
            .unwrap();
    assert_eq!(ended["event"], "session_end");
    assert_eq!(ended["end"], "error");
    // The session_start hook's context is logged with its run (the scripted model's request
    // bodies carry no prompt; `hooked::with_context` puts it after the system prompt).
    let runs = of_type(&events, "hook_run");
    let start = runs
        .iter()
        .find(|r| r["data"]["event"] == "session_start")
        .unwrap();
    assert_eq!(start["data"]["additional_context"], "hooks are watching");
    let stop = runs.iter().find(|r| r["data"]["event"] == "stop").unwrap();
    assert_eq!(stop["data"]["decision"], "deny");
    assert_eq!(stop["data"]["reason"], "run the tests first");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_prompt_hook_can_refuse_the_task_and_a_bad_hooks_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    script(
        dir.path(),
        "refuse.sh",
        r#"{"decision": "deny", "reason": "not today"}"#,
    );
    let hooks = "hooks:\n  - {event: user_prompt, command: sh refuse.sh}\n";
    let path = task(dir.path(), "refused", "  - text: never\n", "bash", hooks);
    let run = harness_run(&path, &[]).await;
    assert_ne!(run.code, 0);
    let events = events_so_far(&run.log_dir());
    assert!(of_type(&events, "model_request").is_empty());
    assert!(run.stderr.contains("not today"), "{}", run.stderr);

    std::fs::write(
        dir.path().join("hooks.yaml"),
        "hooks:\n  - {event: pre_tool_use, matcher: bash}\n",
    )
    .unwrap();
    let run = harness_run(&path, &[]).await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .contains("hooks.yaml: hook pre_tool_use#1: give a `command` or a `url`"),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hook_ask_is_settled_like_any_ask() {
    let dir = tempfile::tempdir().unwrap();
    script(
        dir.path(),
        "ask.sh",
        r#"{"decision": "ask", "reason": "check with a person"}"#,
    );
    let hooks = "hooks:\n  - {event: pre_tool_use, name: careful, command: sh ask.sh}\n";
    let turns = call_turn("bash", &json!({"cmd": "echo asked"})) + "  - text: done\n";
    let path = task(dir.path(), "asks", &turns, "bash", hooks);
    for (approve, allowed, settled) in [
        ("never", false, "approve_never"),
        ("auto", true, "approve_auto"),
    ] {
        let run = harness_run(&path, &["--policy", "allow-all", "--approve", approve]).await;
        assert_eq!(run.code, 0, "{}", run.stderr);
        let events = events_so_far(&run.log_dir());
        let decisions = of_type(&events, "policy_decision");
        let decision = &decisions[0]["data"];
        assert_eq!(decision["decision"], "ask");
        assert_eq!(decision["source"], "hook");
        assert_eq!(decision["allowed"], allowed);
        assert_eq!(decision["settled_by"], settled);
        assert_eq!(decision["reason"], "hook careful: check with a person");
        let ran = results(&events)[0].2.contains("  asked");
        assert_eq!(ran, allowed, "{approve}");
    }
}

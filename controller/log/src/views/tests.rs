use serde_json::{Value, json};

use super::*;

/// `data` as a line of kind `kind`, checked first by the strict types (every field they
/// require, none they do not know), then viewed.
fn viewed(kind: &str, data: Value) -> Line<'static> {
    let mut line = json!({"seq": 7, "ts": "2026-01-02T03:04:05.678Z", "type": kind});
    line["data"] = data;
    if let Err(err) = serde_json::from_value::<crate::Envelope>(line.clone()) {
        panic!("the writer's types refuse the {kind} fixture: {err}");
    }
    let line = Line::of(Box::leak(Box::new(line)));
    assert_eq!(
        (line.seq, line.ts),
        (Some(7), Some("2026-01-02T03:04:05.678Z"))
    );
    assert_eq!(line.kind.as_str(), kind);
    line
}

fn text(text: &str) -> Value {
    json!({"text": text, "size": text.len()})
}

#[test]
fn every_type_the_schema_lists_is_a_kind_with_the_same_name() {
    fn types(schema: &Value, out: &mut Vec<String>) {
        match schema {
            Value::Object(map) => {
                if let Some(tag) = map.get("properties").and_then(|p| p.get("type")) {
                    let names = tag.get("enum").and_then(Value::as_array);
                    let one = tag.get("const").into_iter();
                    for name in names.into_iter().flatten().chain(one) {
                        out.extend(name.as_str().map(str::to_owned));
                    }
                }
                map.values().for_each(|v| types(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| types(v, out)),
            _ => {}
        }
    }
    let mut names = Vec::new();
    types(&crate::schema(), &mut names);
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 28, "{names:?}");
    for name in &names {
        let kind: EventKind = name.parse().unwrap();
        assert_ne!(kind, EventKind::Other, "{name}");
        assert_eq!(kind.as_str(), name);
    }
    assert_eq!("a_newer_kind".parse::<EventKind>(), Ok(EventKind::Other));
}

#[test]
fn a_session_is_viewed_as_the_writer_wrote_it() {
    let config = json!({
        "model": "m-1", "model_description": "scripted", "reasoning_effort": null,
        "web_search": false, "max_turns": 5, "max_cost": 1.0, "compact_at": 1000,
        "tool_names": ["bash"], "policy": "rules", "sandbox": "local", "sandbox_url": "",
        "workspace_root": null, "working_dir": null, "setup": [], "check": null,
        "log_durability": "durable", "agent": "oracle",
    });
    let fork = json!({"session_id": "parent", "log_dir": "runs/p", "seq": 12, "turns": 2,
        "n_messages": 5, "fork_id": "f", "child": 1});
    let started = viewed(
        "session_started",
        json!({"format_version": 1, "session_id": "s-1", "harness_version": "0",
            "task": "fix it", "config": config, "system_prompt": null, "tools": null,
            "forked_from": fork}),
    );
    let expected = SessionStarted {
        task: Some("fix it"),
        session_id: Some("s-1"),
        model: Some("m-1"),
        agent: Some("oracle"),
        forked_from: Some(("parent", 12)),
    };
    assert_eq!(started.event, View::SessionStarted(expected));
    the_session_ends_as_written();
}

/// A session's `session_finished`: the outcome, the totals and the tokens added up.
fn the_session_ends_as_written() {
    let usage = json!({"input_tokens": 10, "cached_input_tokens": 0,
        "cache_write_tokens": 0, "output_tokens": 5});
    let finished = viewed(
        "session_finished",
        json!({"outcome": "check_failed",
        "failure": "check", "answer": text("done"), "turns": 2, "model_calls": 2,
        "tool_calls": 4, "usage": usage, "cost": 0.25, "cost_known": true,
        "duration_ms": 1500}),
    );
    let expected = SessionFinished {
        outcome: Some("check_failed"),
        failure: Some("check"),
        cost: Some(0.25),
        turns: Some(2),
        tool_calls: Some(4),
        duration_ms: Some(1500),
        tokens: 15,
    };
    assert_eq!(finished.event, View::SessionFinished(expected));
}

#[test]
fn a_sessions_steps_are_viewed_as_the_writer_wrote_them() {
    let request = viewed(
        "model_request",
        json!({"turn": 3, "purpose": "turn",
        "n_messages": 2, "estimated_tokens": 1, "body": {"sha256": "a", "size": 1}}),
    );
    assert_eq!(request.event, View::ModelRequest { turn: Some(3) });

    let call = viewed(
        "tool_call",
        json!({"call_id": "c", "name": "bash", "arguments": "{}"}),
    );
    assert_eq!(
        call.event,
        View::ToolCall {
            arguments: Some("{}")
        }
    );

    let result = viewed(
        "tool_result",
        json!({"call_id": "c", "name": "bash",
        "status": "error", "output": text("ERROR: no"), "exit_code": null,
        "timed_out": null, "duration_ms": 40, "outputs": []}),
    );
    let expected = ToolResult {
        name: Some("bash"),
        status: Some("error"),
        duration_ms: Some(40),
        output: Some("ERROR: no"),
    };
    assert_eq!(result.event, View::ToolResult(expected));

    let change = json!({"path": "a.txt", "change": "added", "before": null, "after": null});
    let changed = viewed(
        "workspace_changed",
        json!({"call_id": "c", "snapshot_id": "s", "changes": [change]}),
    );
    assert_eq!(
        changed.event,
        View::WorkspaceChanged {
            paths: vec!["a.txt"]
        }
    );
}

#[test]
fn an_error_and_a_grade_are_viewed_as_the_writer_wrote_them() {
    let error = viewed(
        "error",
        json!({"class": "tool", "message": "bad", "call_id": null}),
    );
    assert_eq!(
        error.event,
        View::Error {
            message: Some("bad")
        }
    );

    let graded = viewed(
        "verifier_finished",
        json!({"rewards": {"reward": 0.5},
        "reward": 0.5, "passed": false, "pass_threshold": 1.0, "message": "half",
        "exit_code": 1, "duration_ms": 9, "output": text("")}),
    );
    let expected = View::VerifierFinished {
        reward: Some(0.5),
        message: Some("half"),
    };
    assert_eq!(graded.event, expected);
}

#[test]
fn a_batch_is_viewed_as_the_writer_wrote_it() {
    let tasks = json!([{"id": "t-1", "file": "a.toml", "task": "first", "trial": 2}]);
    let started = viewed(
        "batch_started",
        json!({"format_version": 1, "batch_id": "b",
        "harness_version": "0", "tasks": tasks, "parallel": 2, "parallel_reason": "",
        "sandbox": "local", "retries": 0, "resumed": false}),
    );
    let View::BatchStarted(batch) = started.event else {
        panic!("{started:?}")
    };
    let listed = Listed {
        id: Some("t-1"),
        task: Some("first"),
        trial: Some(2),
    };
    assert_eq!(
        (batch.n_tasks(), batch.tasks().collect()),
        (1, vec![listed])
    );

    let begun = viewed(
        "task_started",
        json!({"task": "t-1", "attempt": 2, "log_dir": "x"}),
    );
    let expected = Task {
        task: Some("t-1"),
        attempt: Some(2),
        ..Task::default()
    };
    assert_eq!(begun.event, View::TaskStarted(expected));

    let ended = viewed(
        "task_finished",
        json!({"task": "t-1", "attempt": 1,
        "outcome": "completed", "passed": true, "duration_ms": 3,
        "cost": 0.5}),
    );
    let expected = Task {
        task: Some("t-1"),
        attempt: Some(1),
        passed: Some(true),
        outcome: Some("completed"),
        cost: Some(0.5),
        duration_ms: Some(3),
        ..Task::default()
    };
    assert_eq!(ended.event, View::TaskFinished(expected));
}

#[test]
fn a_batchs_retries_refusals_and_end_are_viewed_as_the_writer_wrote_them() {
    let why = |task: &'static str| Task {
        task: Some(task),
        reason: Some("r"),
        ..Task::default()
    };
    let retried = viewed(
        "task_retried",
        json!({"task": "t-1", "attempt": 1, "reason": "r",
        "previous_log": "x"}),
    );
    let expected = Task {
        attempt: Some(1),
        ..why("t-1")
    };
    assert_eq!(retried.event, View::TaskRetried(expected));
    let skipped = viewed("task_skipped", json!({"task": "t-2", "reason": "r"}));
    assert_eq!(skipped.event, View::TaskSkipped(why("t-2")));
    let refused = viewed(
        "task_not_runnable",
        json!({"task": "t-3", "file": "f",
        "reason": "r"}),
    );
    assert_eq!(refused.event, View::TaskNotRunnable(why("t-3")));

    let done = viewed(
        "batch_finished",
        json!({"interrupted": true, "n_passed": 1,
        "n_failed": 0, "n_not_run": 0, "n_retries": 0, "duration_ms": 70,
        "rate_limits": []}),
    );
    let expected = View::BatchFinished {
        interrupted: Some(true),
        duration_ms: Some(70),
    };
    assert_eq!(done.event, expected);
}

#[test]
fn a_hostile_line_reads_as_far_as_it_can() {
    let line = json!({"seq": "x", "type": "tool_result", "data": {"name": 3,
        "status": "weird", "duration_ms": -1, "output": [1]}});
    let line = Line::of(&line);
    assert_eq!(
        (line.seq, line.ts, line.kind),
        (None, None, EventKind::ToolResult)
    );
    let expected = ToolResult {
        status: Some("weird"),
        ..ToolResult::default()
    };
    assert_eq!(line.event, View::ToolResult(expected));
    for junk in [
        json!([1, 2]),
        json!("text"),
        json!({"type": 3}),
        json!({"type": "new"}),
    ] {
        let line = Line::of(&junk);
        assert_eq!((line.kind, line.event), (EventKind::Other, View::Other));
    }
    let started = json!({"type": "batch_started", "data": {"tasks": {"not": "a list"}}});
    let View::BatchStarted(batch) = Line::of(&started).event else {
        panic!()
    };
    assert_eq!(batch.n_tasks(), 0);
}

//! A shared log is someone else's: `replay fork` takes from its header only what runs nothing
//! of this machine's and spends no more than `harness run` would (no check, no `allow-all`, no
//! scripted model, no web search, limits capped), saying so per key; `--trust-log` takes it all.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{self, events};
use crate::forks::{first, recorded, seq_of};

/// The check a crafted header adds: a shell command of the log's choosing.
const CHECK: &str = "echo FROM-LOG > from-log.txt";

/// Rewrites the header (`session_started`, the log's first event) of the log in `log`.
fn edit_header(log: &Path, edit: impl Fn(&mut Value)) {
    let mut all = events(log);
    assert_eq!(all[0]["type"], "session_started");
    edit(&mut all[0]["data"]["config"]);
    let text: String = all.iter().map(|event| format!("{event}\n")).collect();
    std::fs::write(log.join("events.jsonl"), text).unwrap();
}

async fn fork(log: &Path, step: u64, more: &[&str]) -> common::Run {
    let step = step.to_string();
    let mut args = vec!["replay", "fork", log.to_str().unwrap(), "--step", &step];
    args.extend_from_slice(&["--count", "2"]);
    args.extend_from_slice(more);
    common::harness(&args, Duration::from_secs(120)).await
}

/// The header's config and the events of the first child of the fork in `out`.
fn first_child(out: &Path) -> (Value, Vec<Value>) {
    let child = events(&out.join("child-1"));
    (child[0]["data"]["config"].clone(), child)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_of_a_shared_log_takes_no_check_policy_or_budget_from_it_unless_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let (log, all) = recorded(dir.path()).await;
    let model = all[0]["data"]["config"]["model"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(model.starts_with("script:"), "{model}");
    edit_header(&log, |config| {
        config["check"] = json!(CHECK);
        config["policy"] = json!("allow_all");
        config["max_cost"] = json!(1e9);
        config["max_turns"] = json!(100_000);
        config["web_search"] = json!(true);
    });
    // Before the last turn, whose reply calls no tool.
    let sixth = first(&all, "model_request", |d| {
        d["purpose"] == "turn" && d["turn"] == 6
    });
    let step = seq_of(sixth) - 1;

    // The log's scripted model is a file the log chose: refused by name (never replaced by
    // another model), and nothing is written.
    let run = fork(&log, step, &[]).await;
    assert_ne!(run.code, 0, "{}", run.stdout);
    common::assert_contains(
        &run.stderr,
        &[
            "the log's `model`",
            "names a file of this machine",
            "give the children's model with --model, or --trust-log",
        ],
    );
    assert!(!run.stderr.contains("OPENAI_API_KEY"), "{}", run.stderr);
    assert!(!log.join("forks").exists(), "a refused fork leaves nothing");

    // The operator names the model: the rest of the header is still not taken.
    let out = dir.path().join("untrusted");
    let more = ["--model", model.as_str(), "--out", out.to_str().unwrap()];
    let run = fork(&log, step, &more).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    common::assert_contains(
        &run.stderr,
        &[
            "the log's `check` is not run (a log is someone else's; --trust-log to run it)",
            "the log's `policy` (allow_all) is not taken",
            "the log's `max_cost` leaves the children $1000000000.00: they get $1.00",
            "the log's `max_turns` leaves the children 99995 turns: they get 30",
            "the log's `web_search` is not taken",
        ],
    );
    let notes = run.stderr.matches("a log is someone else's").count();
    assert_eq!(notes, 5, "each key is said once: {}", run.stderr);
    let (config, child) = first_child(&out);
    assert_ne!(config["policy"], "allow_all", "{config}");
    assert_eq!(config["check"], Value::Null, "{config}");
    assert_eq!(config["max_cost"], 1.0, "{config}");
    assert_eq!(config["max_turns"], 30, "{config}");
    assert_eq!(config["web_search"], false, "{config}");
    assert!(
        child.iter().all(|e| e["type"] != "check_result"),
        "the log's check did not run"
    );

    // --trust-log: the header is taken as it is, and its check runs.
    let out = dir.path().join("trusted");
    let run = fork(&log, step, &["--trust-log", "--out", out.to_str().unwrap()]).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("2 of 2 passed"), "{}", run.stdout);
    assert!(
        !run.stderr.contains("a log is someone else's"),
        "{}",
        run.stderr
    );
    let (config, child) = first_child(&out);
    assert_eq!(config["policy"], "allow_all", "{config}");
    assert_eq!(config["check"], CHECK, "{config}");
    assert_eq!(config["max_cost"], 1e9, "{config}");
    assert_eq!(config["max_turns"], 99_995, "{config}");
    assert_eq!(config["web_search"], true, "{config}");
    let check = first(&child, "check_result", |_| true);
    assert_eq!(check["data"]["command"], CHECK);
    assert_eq!(check["data"]["passed"], true);
}

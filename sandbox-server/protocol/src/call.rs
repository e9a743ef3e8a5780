//! One tool call, parsed once: the built-in tools by name, and a call's arguments as the type
//! its tool takes. The controller's run loop, policy, sandbox client and hooks all read this
//! type; a built-in tool's name is spelled only here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::process::{ExecArgs, ShellRunRequest, WriteStdinArgs};
use crate::tools::{BashArgs, ReadFileArgs, SearchReplaceArgs, WriteFileArgs};

/// A tool the sandbox-server builds in (the first four on by default, the rest opt-in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BuiltIn {
    Bash,
    ReadFile,
    WriteFile,
    SearchReplace,
    /// Start a command, return after it ends or after a while (processes).
    Exec,
    /// Type into, or wait on, a process `exec` started.
    WriteStdin,
    /// A command in the model's persistent shell.
    Shell,
}

crate::serde_names!(BuiltIn);

impl BuiltIn {
    pub const ALL: [BuiltIn; 7] = [
        BuiltIn::Bash,
        BuiltIn::ReadFile,
        BuiltIn::WriteFile,
        BuiltIn::SearchReplace,
        BuiltIn::Exec,
        BuiltIn::WriteStdin,
        BuiltIn::Shell,
    ];

    /// The tools a server enables when told nothing.
    pub const DEFAULT: [BuiltIn; 4] = [
        BuiltIn::Bash,
        BuiltIn::ReadFile,
        BuiltIn::WriteFile,
        BuiltIn::SearchReplace,
    ];

    pub fn from_name(name: &str) -> Option<BuiltIn> {
        BuiltIn::ALL.into_iter().find(|tool| tool.as_str() == name)
    }

    /// Whether its answer is a `bash` result (a `shell` run answers as `bash` does).
    pub const fn answers_as_bash(self) -> bool {
        matches!(self, BuiltIn::Bash | BuiltIn::Shell)
    }
}

impl std::fmt::Display for BuiltIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call's arguments, as the type its tool takes. A built-in tool's arguments are parsed by
/// the same types the server parses them with; any other tool (a plugin of the sandbox's, an
/// MCP server's) keeps its arguments as they were written.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolInput {
    Bash(BashArgs),
    ReadFile(ReadFileArgs),
    WriteFile(WriteFileArgs),
    SearchReplace(SearchReplaceArgs),
    Exec(ExecArgs),
    WriteStdin(WriteStdinArgs),
    Shell(ShellRunRequest),
    Other { name: String, args: Value },
}

impl ToolInput {
    /// Parses `args` (a JSON object) as the arguments of the tool `name`. The error names the
    /// field, worded as the server words it.
    pub fn parse(name: &str, args: Value) -> Result<ToolInput, String> {
        let Some(tool) = BuiltIn::from_name(name) else {
            return Ok(ToolInput::Other {
                name: name.to_owned(),
                args,
            });
        };
        if let Some(kind) = not_an_object(&args) {
            return Err(format!("the arguments must be a JSON object, got {kind}"));
        }
        Ok(match tool {
            BuiltIn::Bash => ToolInput::Bash(typed(args)?),
            BuiltIn::ReadFile => ToolInput::ReadFile(typed(args)?),
            BuiltIn::WriteFile => ToolInput::WriteFile(typed(args)?),
            BuiltIn::SearchReplace => ToolInput::SearchReplace(typed(args)?),
            BuiltIn::Exec => ToolInput::Exec(typed(args)?),
            BuiltIn::WriteStdin => ToolInput::WriteStdin(typed(args)?),
            BuiltIn::Shell => ToolInput::Shell(typed(args)?),
        })
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        if let ToolInput::Other { name, .. } = self {
            return name;
        }
        self.built_in().map_or("", BuiltIn::as_str)
    }

    /// The built-in tool it calls; `None` for any other.
    pub fn built_in(&self) -> Option<BuiltIn> {
        Some(match self {
            ToolInput::Bash(_) => BuiltIn::Bash,
            ToolInput::ReadFile(_) => BuiltIn::ReadFile,
            ToolInput::WriteFile(_) => BuiltIn::WriteFile,
            ToolInput::SearchReplace(_) => BuiltIn::SearchReplace,
            ToolInput::Exec(_) => BuiltIn::Exec,
            ToolInput::WriteStdin(_) => BuiltIn::WriteStdin,
            ToolInput::Shell(_) => BuiltIn::Shell,
            ToolInput::Other { .. } => return None,
        })
    }

    /// The timeout a command asked for, in seconds (`bash`, `shell`); `None` for other tools
    /// and when it asked for none.
    pub fn timeout_secs(&self) -> Option<u32> {
        match self {
            ToolInput::Bash(args) => args.timeout,
            ToolInput::Shell(args) => args.timeout,
            _ => None,
        }
    }

    /// The command line a command tool runs (`bash`, `exec`, `shell`).
    pub fn command(&self) -> Option<&str> {
        match self {
            ToolInput::Bash(args) => Some(&args.cmd),
            ToolInput::Exec(args) => Some(&args.cmd),
            ToolInput::Shell(args) => Some(&args.cmd),
            _ => None,
        }
    }

    /// The file a file tool reads or writes.
    pub fn path(&self) -> Option<&str> {
        match self {
            ToolInput::ReadFile(args) => Some(&args.path),
            ToolInput::WriteFile(args) => Some(&args.path),
            ToolInput::SearchReplace(args) => Some(&args.path),
            _ => None,
        }
    }

    /// Whether it changes files by name (`write_file`, `search_replace`).
    pub fn writes_a_file(&self) -> bool {
        matches!(self, ToolInput::WriteFile(_) | ToolInput::SearchReplace(_))
    }
}

/// The arguments as JSON: what is sent to the tool, shown to hooks and judged by rules.
impl Serialize for ToolInput {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ToolInput::Bash(args) => args.serialize(serializer),
            ToolInput::ReadFile(args) => args.serialize(serializer),
            ToolInput::WriteFile(args) => args.serialize(serializer),
            ToolInput::SearchReplace(args) => args.serialize(serializer),
            ToolInput::Exec(args) => args.serialize(serializer),
            ToolInput::WriteStdin(args) => args.serialize(serializer),
            ToolInput::Shell(args) => args.serialize(serializer),
            ToolInput::Other { args, .. } => args.serialize(serializer),
        }
    }
}

/// What a JSON value is, when it is not an object.
fn not_an_object(value: &Value) -> Option<&'static str> {
    Some(match value {
        Value::Object(_) => return None,
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
    })
}

/// Arguments as a typed value; the error names the field ([`field_error`]).
pub fn typed<A: serde::de::DeserializeOwned>(args: Value) -> Result<A, String> {
    serde_path_to_error::deserialize(args).map_err(|err| {
        let path = err.path().to_string();
        field_error(&path, &err.into_inner().to_string())
    })
}

/// An argument's error as both sides word it: the field's path, then what is wrong with it
/// (serde's ` at line 1 column 9` dropped: the path already says where).
pub fn field_error(path: &str, message: &str) -> String {
    let message = match message.rfind(" at line ") {
        Some(at) => &message[..at],
        None => message,
    };
    match path {
        "." | "" => message.to_owned(),
        path => format!("{path}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_built_in_is_found_by_its_name() {
        for tool in BuiltIn::ALL {
            assert_eq!(BuiltIn::from_name(tool.as_str()), Some(tool));
        }
        assert_eq!(BuiltIn::from_name("mcp__files__read"), None);
    }

    #[test]
    fn a_built_in_call_is_typed_and_round_trips() {
        let input = ToolInput::parse("bash", json!({"cmd": "ls", "timeout": 30.0})).unwrap();
        assert_eq!(
            input,
            ToolInput::Bash(BashArgs {
                cmd: "ls".to_owned(),
                timeout: Some(30)
            })
        );
        assert_eq!(input.name(), "bash");
        assert_eq!(input.timeout_secs(), Some(30));
        assert_eq!(
            serde_json::to_value(&input).unwrap(),
            json!({"cmd": "ls", "timeout": 30})
        );
        let read = ToolInput::parse("read_file", json!({"path": "a.txt"})).unwrap();
        assert_eq!(read.path(), Some("a.txt"));
        assert!(!read.writes_a_file());
    }

    #[test]
    fn errors_name_the_field_as_the_server_does() {
        let err = ToolInput::parse("bash", json!({"cmd": 3})).unwrap_err();
        assert_eq!(err, "cmd: invalid type: integer `3`, expected a string");
        let err = ToolInput::parse("read_file", json!({"path": "a", "colour": 1})).unwrap_err();
        assert!(err.starts_with("colour: unknown field `colour`"), "{err}");
        let err = ToolInput::parse("bash", json!(["ls"])).unwrap_err();
        assert_eq!(err, "the arguments must be a JSON object, got an array");
    }

    #[test]
    fn another_tool_keeps_its_arguments() {
        let args = json!({"anything": [1, 2]});
        let input = ToolInput::parse("mcp__files__read", args.clone()).unwrap();
        assert_eq!(input.name(), "mcp__files__read");
        assert_eq!(input.built_in(), None);
        assert_eq!(serde_json::to_value(&input).unwrap(), args);
    }
}

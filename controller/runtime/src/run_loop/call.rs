//! A call parsed once, when it comes from the model: its typed input (what the hooks see and
//! the policy judges) and its route (what runs it). Nothing after this looks at a call's name
//! to decide where it goes.

use sandbox_protocol::{ToolInput, ToolSpec};
use serde_json::Value;

use crate::mcp::McpTools;
use crate::subagent::{AGENT_TOOL, AgentArgs};
use harness_models::ToolCall;

/// What runs a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// The sandbox: a built-in tool or one of its plugins.
    Sandbox,
    /// One of the session's MCP servers (or their tool search).
    Mcp,
    /// The `agent` tool: a child session, with its arguments.
    Subagent(AgentArgs),
}

/// A call as the session handles it.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub input: ToolInput,
    pub route: Route,
}

impl Parsed {
    /// The same call with other arguments (a `pre_tool_use` hook's `updated_input`), parsed
    /// and routed as the model's own were. The error names the field.
    pub fn with_args(&self, args: Value) -> Result<Parsed, String> {
        routed(self.input.name(), args, self.route == Route::Mcp)
    }
}

/// Refuses a call to a tool the model was not offered. The error is the text the model gets.
pub fn offered(tools: &[ToolSpec], call: &ToolCall) -> Result<(), String> {
    match tools.iter().any(|tool| tool.name == call.name) {
        true => Ok(()),
        false => Err(format!("ERROR: unknown tool {}", call.name)),
    }
}

/// Parses a call's arguments (JSON; for a built-in tool the arguments it takes, worded as the
/// sandbox words a refusal; for `agent` a sub-task) and routes it: to `mcp` when one of its
/// servers has the tool, else to the sandbox. The error is the text the model gets.
pub fn parse_call(call: &ToolCall, mcp: Option<&McpTools>) -> Result<Parsed, String> {
    let args = match call.arguments.trim() {
        "" => Value::Object(Default::default()),
        text => serde_json::from_str(text).map_err(|err| {
            format!(
                "ERROR: the arguments are not valid JSON ({err}): {}",
                call.arguments
            )
        })?,
    };
    let mcp = mcp.is_some_and(|mcp| mcp.owns(&call.name));
    routed(&call.name, args, mcp).map_err(|err| format!("ERROR: {err}"))
}

fn routed(name: &str, args: Value, mcp: bool) -> Result<Parsed, String> {
    let route = match name {
        AGENT_TOOL => Route::Subagent(AgentArgs::parse(&args)?),
        _ if mcp => Route::Mcp,
        _ => Route::Sandbox,
    };
    let input = match route {
        // An MCP server's tool keeps its arguments as written, whatever its name.
        Route::Mcp => ToolInput::Other {
            name: name.to_owned(),
            args,
        },
        _ => ToolInput::parse(name, args)?,
    };
    Ok(Parsed { input, route })
}

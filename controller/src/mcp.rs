//! Tools from MCP servers (the official Rust SDK, `rmcp`, as the client): servers from a file
//! (`--mcp FILE` or a task's `mcp:`, Claude's `.mcp.json` shape), started by the controller
//! (stdio children, in their own process group) or reached over streamable HTTP, each with a
//! start timeout and a call timeout. Their tools reach the model as `mcp__<server>__<tool>`
//! and pass the same hooks, policy and log as every other tool (`run_loop::tool_call`).
//!
//! A server that fails or times out at start is left out of the session, which says so; its
//! tools are simply absent.

mod config;
mod naming;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use futures::FutureExt as _;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt as _};
use sandbox_protocol::ToolSpec;
use serde_json::Value;

pub use config::{McpConfig, ServerSpec, Transport};
pub use naming::{PREFIX, exposed_name};

/// One connected server.
struct Connected {
    name: String,
    client: RunningService<RoleClient, ()>,
    /// A stdio child's process group, killed whole at the end.
    group: Option<u32>,
    call_timeout: Duration,
}

/// The session's MCP servers and the tools they give.
#[derive(Default)]
pub struct McpTools {
    servers: Vec<Connected>,
    /// Exposed name → (server, the tool's own name).
    routes: HashMap<String, (usize, String)>,
}

impl std::fmt::Debug for McpTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTools")
            .field(
                "servers",
                &self.servers.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .field("tools", &self.routes.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// What a call of an MCP tool gave.
#[derive(Debug, Clone, PartialEq)]
pub struct McpAnswer {
    /// The server said the tool failed (`isError`), or the call did not complete.
    pub failed: bool,
    /// The text for the model.
    pub text: String,
}

impl McpTools {
    /// Starts (or reaches) every server of `config` at once; their tools as the model sees
    /// them, and a line for each server left out. A stdio server's stderr goes to
    /// `logs/mcp-<server>.log`.
    pub async fn start(config: &McpConfig, logs: &Path) -> (McpTools, Vec<ToolSpec>, Vec<String>) {
        let starts = config
            .servers
            .iter()
            .map(|(name, spec)| async move { (name, spec, connect(name, spec, logs).await) });
        let mut tools = McpTools::default();
        let (mut specs, mut notes) = (Vec::new(), Vec::new());
        for (name, spec, connected) in futures::future::join_all(starts).await {
            match connected {
                Ok((connected, listed)) => {
                    let index = tools.servers.len();
                    for tool in listed.into_iter().filter(|t| spec.exposes(&t.name)) {
                        let exposed =
                            exposed_name(name, &tool.name, |n| tools.routes.contains_key(n));
                        specs.push(ToolSpec {
                            name: exposed.clone(),
                            description: tool
                                .description
                                .map(|d| d.to_string())
                                .unwrap_or_default(),
                            parameters: Value::Object((*tool.input_schema).clone()),
                        });
                        tools.routes.insert(exposed, (index, tool.name.to_string()));
                    }
                    tools.servers.push(connected);
                }
                Err(why) => notes.push(format!("mcp: server {name} left out: {why}")),
            }
        }
        (tools, specs, notes)
    }

    /// Whether `tool` is one of these servers' tools.
    pub fn owns(&self, tool: &str) -> bool {
        self.routes.contains_key(tool)
    }

    /// Calls `tool` with `args`, bounded by its server's call timeout (a timed-out call is
    /// cancelled at the server).
    pub async fn call(&self, tool: &str, args: Value) -> McpAnswer {
        let Some((index, own)) = self.routes.get(tool) else {
            return failure(format!("no MCP tool {tool}"));
        };
        let server = &self.servers[*index];
        let mut params = CallToolRequestParams::new(own.clone());
        if let Value::Object(args) = args {
            params = params.with_arguments(args);
        }
        match tokio::time::timeout(server.call_timeout, server.client.call_tool(params)).await {
            Ok(Ok(result)) => answer(&result),
            Ok(Err(err)) => failure(format!("MCP server {}: {err}", server.name)),
            Err(_) => failure(format!(
                "MCP server {} did not answer within {} s",
                server.name,
                server.call_timeout.as_secs_f64()
            )),
        }
    }

    /// Ends every server: closes the connections, and kills each stdio child's process group.
    pub async fn stop(self) {
        for server in self.servers {
            let _ = tokio::time::timeout(Duration::from_secs(5), server.client.cancel()).await;
            kill_group(server.group);
        }
    }
}

fn failure(text: String) -> McpAnswer {
    McpAnswer { failed: true, text }
}

/// The text of a result: its text blocks, else its structured content as JSON.
fn answer(result: &CallToolResult) -> McpAnswer {
    let texts: Vec<String> = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect();
    let text = if texts.is_empty() {
        result
            .structured_content
            .as_ref()
            .map(Value::to_string)
            .unwrap_or_else(|| "(no text)".to_owned())
    } else {
        texts.join("\n")
    };
    McpAnswer {
        failed: result.is_error == Some(true),
        text,
    }
}

/// Starts or reaches one server and lists its tools, within its start timeout; a stdio child
/// that does not make it is killed with its whole process group.
async fn connect(
    name: &str,
    spec: &ServerSpec,
    logs: &Path,
) -> Result<(Connected, Vec<rmcp::model::Tool>), String> {
    let (handshake, group) = match &spec.transport {
        Transport::Stdio { .. } => {
            let (transport, group) = config::child(spec, &logs.join(format!("mcp-{name}.log")))?;
            (().serve(transport).boxed(), group)
        }
        Transport::Http { url, headers } => {
            let config = config::http(url, headers)?;
            let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
            (().serve(transport).boxed(), None)
        }
    };
    let started = async {
        let client = handshake.await.map_err(|err| err.to_string())?;
        let tools = client
            .list_all_tools()
            .await
            .map_err(|err| err.to_string())?;
        Ok::<_, String>((client, tools))
    };
    let outcome = match tokio::time::timeout(spec.start_timeout, started).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!(
            "not ready within {} s (start_timeout)",
            spec.start_timeout.as_secs_f64()
        )),
    };
    match outcome {
        Ok((client, tools)) => Ok((
            Connected {
                name: name.to_owned(),
                client,
                group,
                call_timeout: spec.call_timeout,
            },
            tools,
        )),
        Err(why) => {
            kill_group(group);
            Err(why)
        }
    }
}

fn kill_group(group: Option<u32>) {
    if let Some(group) = group.and_then(|g| i32::try_from(g).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(group),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

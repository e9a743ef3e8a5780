//! Tools from MCP servers (the official Rust SDK, `rmcp`, as the client): servers from a file
//! (`--mcp FILE` or a task's `mcp:`, Claude's `.mcp.json` shape), started by the controller
//! (stdio children, in their own process group) or reached over streamable HTTP, each with a
//! start timeout and a call timeout. Their tools reach the model as `mcp__<server>__<tool>`
//! and pass the same hooks, policy and log as every other tool (`run_loop::tool_call`).
//!
//! A server that fails or times out at start is left out of the session, which says so; its
//! tools are simply absent.

mod cache;
mod config;
mod naming;
mod sandboxed;
mod search;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use futures::FutureExt as _;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt as _};
use sandbox_protocol::{ToolInput, ToolSpec};
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::sandbox::SandboxClient;

pub use config::{DEFAULT_TOOL_BUDGET, McpConfig, ServerSpec, Transport};
pub use naming::{PREFIX, exposed_name};

/// One connected server.
struct Connected {
    client: RunningService<RoleClient, ()>,
    /// A stdio child's process group, killed whole at the end.
    group: Option<u32>,
    /// A server inside the sandbox: its process there, deleted at the end.
    process: Option<(SandboxClient, String)>,
}

/// Where a stdio server runs.
enum Place<'a> {
    /// On the controller's machine, its stderr to this file.
    Controller(&'a Path),
    /// Inside the sandbox, as the process of this id.
    Sandbox(&'a SandboxClient, &'a str),
}

/// One server of the session: connected at the start, or (lazy) at its first call.
struct Server {
    name: String,
    spec: ServerSpec,
    /// Where a stdio child's stderr goes.
    log: PathBuf,
    /// The session's sandbox, for a server that runs inside it, and its process id there.
    sandbox: Option<SandboxClient>,
    process_id: String,
    connected: OnceCell<Result<Connected, String>>,
}

/// The name of the search tool the model gets when the MCP tools are over the budget.
pub const SEARCH_TOOL: &str = "mcp__tool_search";

/// The session's MCP servers and the tools they give.
#[derive(Default)]
pub struct McpTools {
    servers: Vec<Server>,
    /// Exposed name → (server, the tool's own name).
    routes: HashMap<String, (usize, String)>,
    /// Every MCP tool, when they are found through the search tool rather than given.
    searchable: Vec<ToolSpec>,
    /// The tools the search has loaded so far.
    loaded: Mutex<Vec<ToolSpec>>,
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
    /// Starts (or reaches) every server of `config` at once, but a lazy one whose tools are
    /// known from an earlier session; the tools the model gets (or the search tool, past the
    /// budget), and a line for each server left out. A stdio server's stderr goes to
    /// `logs/mcp-<server>.log`.
    pub async fn start(
        config: &McpConfig,
        logs: &Path,
        sandbox: &SandboxClient,
    ) -> (McpTools, Vec<ToolSpec>, Vec<String>) {
        let servers: Vec<Server> = config
            .servers
            .iter()
            .map(|(name, spec)| Server {
                name: name.clone(),
                spec: spec.clone(),
                log: logs.join(format!("mcp-{name}.log")),
                sandbox: Some(sandbox.clone()),
                process_id: format!("mcp-{name}"),
                connected: OnceCell::new(),
            })
            .collect();
        let listed = futures::future::join_all(servers.iter().map(Server::tools)).await;
        let mut tools = McpTools::default();
        let (mut specs, mut notes) = (Vec::new(), Vec::new());
        for (index, (server, listed)) in servers.iter().zip(listed).enumerate() {
            let listed = match listed {
                Ok(listed) => listed,
                Err(why) => {
                    notes.push(format!("mcp: server {} left out: {why}", server.name));
                    continue;
                }
            };
            for tool in listed.into_iter().filter(|t| server.spec.exposes(&t.name)) {
                let exposed =
                    exposed_name(&server.name, &tool.name, |n| tools.routes.contains_key(n));
                specs.push(ToolSpec {
                    name: exposed.clone(),
                    description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                    parameters: Value::Object((*tool.input_schema).clone()),
                });
                tools.routes.insert(exposed, (index, tool.name.to_string()));
            }
        }
        tools.servers = servers;
        let tokens = serde_json::to_string(&specs).map_or(0, |text| text.len() / 4);
        if tokens > config.tool_budget {
            notes.push(format!(
                "mcp: {} tools ({tokens} tokens of schemas, over the budget of {}): the model finds them with {SEARCH_TOOL}",
                specs.len(),
                config.tool_budget
            ));
            tools.searchable = specs;
            return (tools, vec![search::tool_spec()], notes);
        }
        (tools, specs, notes)
    }

    /// Whether `tool` is one of these servers' tools (or the search tool).
    pub fn owns(&self, tool: &str) -> bool {
        self.routes.contains_key(tool) || (tool == SEARCH_TOOL && !self.searchable.is_empty())
    }

    /// The tools the search loaded, which the model gets from its next turn on.
    pub fn loaded(&self) -> Vec<ToolSpec> {
        self.loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Calls the tool `input` names with its arguments, bounded by its server's call timeout
    /// (a timed-out call is cancelled at the server); a lazy server starts now.
    pub async fn call(&self, input: &ToolInput) -> McpAnswer {
        let (tool, args) = (
            input.name(),
            serde_json::to_value(input).unwrap_or_default(),
        );
        if tool == SEARCH_TOOL {
            return self.search(&args);
        }
        let Some((index, own)) = self.routes.get(tool) else {
            return failure(format!("no MCP tool {tool}"));
        };
        let server = &self.servers[*index];
        let client = match server.connect().await {
            Ok(connected) => &connected.client,
            Err(why) => {
                return failure(format!("MCP server {} could not start: {why}", server.name));
            }
        };
        let mut params = CallToolRequestParams::new(own.clone());
        if let Value::Object(args) = args {
            params = params.with_arguments(args);
        }
        let timeout = server.spec.call_timeout;
        match tokio::time::timeout(timeout, client.call_tool(params)).await {
            Ok(Ok(result)) => answer(&result),
            Ok(Err(err)) => failure(format!("MCP server {}: {err}", server.name)),
            Err(_) => failure(format!(
                "MCP server {} did not answer within {} s",
                server.name,
                timeout.as_secs_f64()
            )),
        }
    }

    /// Ends every server that started: closes the connections, and kills each stdio child's
    /// process group.
    pub async fn stop(self) {
        for server in self.servers {
            if let Some(Ok(connected)) = server.connected.into_inner() {
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), connected.client.cancel()).await;
                kill_group(connected.group);
                if let Some((sandbox, id)) = connected.process {
                    let _ = sandbox.delete_process(&id).await;
                }
            }
        }
    }
}

impl Server {
    async fn connect_now(&self) -> Result<(Connected, Vec<rmcp::model::Tool>), String> {
        let place = match &self.sandbox {
            Some(sandbox) if self.spec.in_sandbox => Place::Sandbox(sandbox, &self.process_id),
            _ => Place::Controller(&self.log),
        };
        connect(&self.spec, place).await
    }

    /// The server's connection, made on first use (within its start timeout).
    async fn connect(&self) -> Result<&Connected, String> {
        let connected = self
            .connected
            .get_or_init(|| async { self.connect_now().await.map(|(c, _)| c) })
            .await;
        connected.as_ref().map_err(Clone::clone)
    }

    /// Its tools: from the cache for a lazy server that listed them before; else it starts now
    /// and lists them (and a lazy one keeps them for next time).
    async fn tools(&self) -> Result<Vec<rmcp::model::Tool>, String> {
        if self.spec.lazy
            && let Some(tools) = cache::read(&self.spec)
        {
            return Ok(tools);
        }
        let (connected, tools) = self.connect_now().await?;
        let _ = self.connected.set(Ok(connected));
        if self.spec.lazy {
            cache::write(&self.spec, &tools);
        }
        Ok(tools)
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
    spec: &ServerSpec,
    place: Place<'_>,
) -> Result<(Connected, Vec<rmcp::model::Tool>), String> {
    let mut process = None;
    let (handshake, group) = match (&spec.transport, place) {
        (Transport::Stdio { .. }, Place::Sandbox(sandbox, id)) => {
            let pipes = sandboxed::start(sandbox, id, &spec.transport).await?;
            process = Some((sandbox.clone(), id.to_owned()));
            (().serve(pipes).boxed(), None)
        }
        (Transport::Stdio { .. }, Place::Controller(log)) => {
            let (transport, group) = config::child(spec, log)?;
            (().serve(transport).boxed(), group)
        }
        (Transport::Http { url, headers }, _) => {
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
                client,
                group,
                process,
            },
            tools,
        )),
        Err(why) => {
            kill_group(group);
            if let Some((sandbox, id)) = process {
                let _ = sandbox.delete_process(&id).await;
            }
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

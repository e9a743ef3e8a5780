//! The sandbox as an MCP server (the official Rust SDK, `rmcp`): `/mcp` over streamable HTTP,
//! stateless, behind the same token as `/v1`, and `sandbox-server mcp-stdio` for clients that
//! speak only stdio. Its tools are the registry's (the same names, descriptions and argument
//! schemas as the OpenAPI document, run by the same code as `POST /v1/tools/{name}`) and four
//! workspace tools: `workspace_snapshot`, `workspace_changes`, `file_at_version` and
//! `workspace_restore`, each with MCP's annotations (read-only, destructive, idempotent).

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use super::{ApiError, AppState, scopes};
use crate::metrics::Outcome;
use crate::tokens::Caller;

mod workspace;

/// The MCP server over one sandbox. Cheap to clone (one per HTTP request, stateless).
#[derive(Debug, Clone)]
pub struct McpServer {
    state: AppState,
}

impl McpServer {
    pub fn new(state: AppState) -> McpServer {
        McpServer { state }
    }
}

/// `/mcp`: stateless streamable HTTP (no session ids; JSON answers).
pub(crate) fn service(state: AppState) -> StreamableHttpService<McpServer, NeverSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        // The Host header is checked before (`auth::refuse_foreign_pages`, and the token).
        .disable_allowed_hosts();
    StreamableHttpService::new(
        move || Ok(McpServer::new(state.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// (read-only, destructive, idempotent) for a tool, as MCP's annotations say them.
fn hints(name: &str) -> (bool, bool, bool) {
    match name {
        "read_file" | "file_at_version" => (true, false, true),
        "workspace_snapshot" | "workspace_changes" => (true, false, false),
        "write_file" | "workspace_restore" => (false, true, true),
        // bash, search_replace, exec, write_stdin, shell, and any plugin: they may change
        // anything, and running them twice is not running them once.
        _ => (false, true, false),
    }
}

fn tool(name: &str, description: &str, schema: &Value) -> Tool {
    let mut schema = match schema {
        Value::Object(fields) => fields.clone(),
        _ => Map::new(),
    };
    // MCP requires an object schema (a client rejects a whole list otherwise).
    schema.insert("type".to_owned(), json!("object"));
    let (read_only, destructive, idempotent) = hints(name);
    Tool::new(name.to_owned(), description.to_owned(), Arc::new(schema)).with_annotations(
        ToolAnnotations::new()
            .read_only(read_only)
            .destructive(destructive)
            .idempotent(idempotent)
            .open_world(false),
    )
}

/// Who calls: the caller `/mcp`'s authentication put on the HTTP request; over stdio (no HTTP
/// request) the local client that started the server, which may do everything.
fn caller(context: &RequestContext<RoleServer>) -> Option<Caller> {
    match context.extensions.get::<axum::http::request::Parts>() {
        Some(parts) => parts.extensions.get::<Caller>().cloned(),
        None => Some(Caller::Anyone),
    }
}

impl McpServer {
    /// The tools `caller` may call (all of them over stdio).
    fn tools_for(&self, caller: Option<&Caller>) -> Vec<Tool> {
        let registry = &self.state.registry;
        self.tools()
            .into_iter()
            .filter(|tool| {
                let scope = scopes::of_tool(registry, &tool.name);
                caller.is_some_and(|caller| scope.is_none_or(|scope| caller.holds(scope)))
            })
            .collect()
    }

    fn tools(&self) -> Vec<Tool> {
        let mut tools: Vec<Tool> = self
            .state
            .registry
            .specs()
            .iter()
            .map(|spec| tool(&spec.name, &spec.description, &spec.parameters))
            .collect();
        tools.extend(
            workspace::TOOLS
                .iter()
                .map(|(name, description, schema)| tool(name, description, &schema())),
        );
        tools
    }

    /// A registry tool, run as `POST /v1/tools/{name}` runs it: a refusal (bad arguments, a
    /// missing file) is a result with `isError`, which the model reads.
    async fn call_registry(&self, name: &str, args: Map<String, Value>) -> Option<CallToolResult> {
        let tool = self.state.registry.get(name)?;
        let body = serde_json::to_vec(&Value::Object(args)).unwrap_or_default();
        let Ok(_permit) = self.state.permits.clone().try_acquire_owned() else {
            self.state.metrics.overloaded_call(name);
            let busy = ApiError::Overloaded(self.state.limits.max_concurrent_calls as usize);
            return Some(failed(&busy));
        };
        let timer = self.state.metrics.start_call(name);
        let result = tool.call(&body, self.state.ctx.clone()).await;
        timer.finish(match &result {
            Ok(value) => Outcome::of_result(value),
            Err(err) => Outcome::Error(super::error::tool_status(err).1),
        });
        Some(match result {
            Ok(value) => answered(value),
            Err(err) => failed(&ApiError::from(err)),
        })
    }
}

/// A tool's answer: its `output` (the model's text) as the content, the whole as structured.
pub(crate) fn answered(value: Value) -> CallToolResult {
    let text = match value.get("output").and_then(Value::as_str) {
        Some(output) => output.to_owned(),
        None => serde_json::to_string_pretty(&value).unwrap_or_default(),
    };
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    if value.is_object() {
        result.structured_content = Some(value);
    }
    result
}

/// A refusal, as the model should read it.
pub(crate) fn failed(err: &ApiError) -> CallToolResult {
    let (status, kind) = err.status_and_type();
    let message = if status.is_server_error() {
        "internal error; see the server log".to_owned()
    } else {
        err.to_string()
    };
    let text = format!("ERROR ({}): {message}", kind.as_str());
    CallToolResult::error(vec![ContentBlock::text(text)])
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "sandbox-server",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "One isolated workspace. Run commands with `bash`, read and edit files with the \
                 file tools; `workspace_snapshot` and `workspace_changes` record and list what \
                 changed, `workspace_restore` brings a snapshot back.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // A token sees the tools its scopes let it call.
        Ok(ListToolsResult::with_all_items(
            self.tools_for(caller(&context).as_ref()),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let args = request.arguments.unwrap_or_default();
        let caller = caller(&context);
        let scope = scopes::of_tool(&self.state.registry, &name);
        let allowed = caller
            .as_ref()
            .is_some_and(|caller| scope.is_none_or(|scope| caller.holds(scope)));
        if !allowed {
            let refused = ApiError::MissingScope {
                token: caller
                    .as_ref()
                    .and_then(Caller::token_id)
                    .unwrap_or_default()
                    .to_owned(),
                scope,
                request: format!("the MCP tool `{name}`"),
            };
            return Ok(failed(&refused).into());
        }
        if let Some(result) = self.call_registry(&name, args.clone()).await {
            return Ok(result.into());
        }
        if let Some(result) = workspace::call(&self.state, &name, args).await {
            return Ok(result.into());
        }
        let known: Vec<String> = self.tools().iter().map(|t| t.name.to_string()).collect();
        Err(ErrorData::invalid_params(
            format!("no tool `{name}`; the tools are {}", known.join(", ")),
            None,
        ))
    }
}

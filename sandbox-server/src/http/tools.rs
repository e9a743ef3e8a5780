//! Listing tools and calling one.

use axum::Extension;
use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use sandbox_protocol::ToolSpec;
use tracing::Instrument as _;

use super::extract::{PathParam, QueryArgs, RawBody, sent_as_json};
use super::idempotency::CallId;
use super::step::StepQuery;
use super::{ApiError, AppState};
use crate::metrics::Outcome;

/// The enabled tools, in the order to show them to a model, with their argument schemas.
#[utoipa::path(
    get, path = "/v1/tools", tag = "tools",
    responses(
        (status = 200, body = Vec<ToolSpec>),
    ),
)]
pub(crate) async fn list_tools(State(state): State<AppState>) -> Json<Vec<ToolSpec>> {
    let workspace = &state.ctx.workspace;
    let specs = state.registry.specs();
    if workspace.boundary() == workspace.root() {
        return Json(specs);
    }
    Json(reaching_anywhere(
        specs,
        &workspace.root().display().to_string(),
    ))
}

/// Under `--files-anywhere` the file tools reach the whole file system: their descriptions
/// say so, and where relative paths start.
fn reaching_anywhere(specs: Vec<ToolSpec>, root: &str) -> Vec<ToolSpec> {
    let anywhere = format!("An absolute path, or one relative to the working folder {root}");
    specs
        .into_iter()
        .map(|mut spec| {
            spec.description = spec
                .description
                .replace("in the working directory", "anywhere in this container");
            if let Some(serde_json::Value::String(text)) =
                spec.parameters.pointer_mut("/properties/path/description")
            {
                *text = text.replace("Path relative to the workspace root", &anywhere);
            }
            spec
        })
        .collect()
}

/// The header naming a tool call: its processes carry the name, and a `bash` call is followed
/// at `/v1/processes/{name}` while it runs.
pub(crate) const CALL_ID_HEADER: &str = "sandbox-call-id";

/// The call id a client chose (`Sandbox-Call-Id`), checked as a process id.
pub(crate) fn chosen_call_id(headers: &axum::http::HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(CALL_ID_HEADER) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| ApiError::InvalidArguments("Sandbox-Call-Id: not visible ASCII".to_owned()))?;
    crate::sandbox::processes::check_id(text).map_err(|err| {
        let why = err.to_string();
        ApiError::InvalidArguments(format!(
            "Sandbox-Call-Id: {}",
            why.trim_start_matches("id: ")
        ))
    })?;
    Ok(Some(text.to_owned()))
}

/// The tool a call names, enabled on this server; 404 `unknown_tool` otherwise. Extracted
/// first, so a call to a tool that is not there says so whatever its query and body.
pub(crate) struct EnabledTool {
    name: String,
    tool: std::sync::Arc<dyn crate::sandbox::registry::DynTool>,
}

impl FromRequestParts<AppState> for EnabledTool {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let PathParam(name) = PathParam::<String>::from_request_parts(parts, state).await?;
        let Some(tool) = state.registry.get(&name) else {
            let enabled = state.registry.names().join(", ");
            let why = if crate::sandbox::tools::builtin().get(&name).is_some() {
                "is not enabled on this server"
            } else {
                "does not exist"
            };
            return Err(ApiError::UnknownTool(format!(
                "tool `{name}` {why}; enabled tools: {enabled}"
            )));
        };
        // Again where the tool is chosen, whatever spelling of its name the path used.
        let scope = tool.scope();
        match parts.extensions.get::<crate::tokens::Caller>() {
            Some(caller) if caller.holds(scope) => Ok(EnabledTool { name, tool }),
            caller => Err(ApiError::MissingScope {
                token: caller
                    .and_then(|caller| caller.token_id())
                    .unwrap_or_default()
                    .to_owned(),
                scope: Some(scope),
                request: format!("POST /v1/tools/{name}"),
            }),
        }
    }
}

/// Runs one tool. Documented per tool in the OpenAPI document as `POST /v1/tools/{tool}`.
pub(crate) async fn call_tool(
    State(state): State<AppState>,
    EnabledTool { name, tool }: EnabledTool,
    headers: axum::http::HeaderMap,
    call_id: Option<Extension<CallId>>,
    QueryArgs(step_query): QueryArgs<StepQuery>,
    RawBody(body): RawBody,
) -> Result<Json<serde_json::Value>, ApiError> {
    // A body a cross-site form could send (`text/plain`) is never run: browsers cannot send
    // `application/json` to another origin without asking it first.
    if !body.is_empty() && !sent_as_json(&headers) {
        return Err(ApiError::UnsupportedMediaType(
            "a tool call's body must be sent with `Content-Type: application/json`".to_owned(),
        ));
    }
    step_query.check(&state)?;
    let Ok(_permit) = state.permits.clone().try_acquire_owned() else {
        state.metrics.overloaded_call(&name);
        return Err(ApiError::Overloaded(
            state.limits.max_concurrent_calls as usize,
        ));
    };
    let chosen = chosen_call_id(&headers)?;
    let mut ctx = state.ctx.clone();
    ctx.call_id = call_id.map(|Extension(CallId(id))| id).or(chosen);
    let timer = state.metrics.start_call(&name);
    let span = tracing::info_span!("tool", otel.name = %format_args!("tool {name}"), tool = %name, call_id = ctx.call_id.as_deref());
    let result = tool.call(&body, ctx).instrument(span).await;
    timer.finish(match &result {
        Ok(value) => Outcome::of_result(value),
        Err(err) => Outcome::Error(super::error::tool_status(err).1),
    });
    let mut result = result?;
    if step_query.wanted() {
        match super::step::record(&state, step_query, &result).await {
            Ok(step) => {
                if let serde_json::Value::Object(fields) = &mut result {
                    let step = serde_json::to_value(step)
                        .map_err(|err| ApiError::Internal(err.to_string()))?;
                    fields.insert("step".to_owned(), step);
                }
            }
            // The call ran: its result stands. The workspace has passed --scan-max-entries, so
            // its step is left out, and asking for the changes says why (413).
            Err(ApiError::Snapshot(crate::sandbox::snapshot::SnapshotError::TooManyPaths(_))) => {
                tracing::warn!(tool = %name, "the call's step was left out: the workspace is past --scan-max-entries");
            }
            Err(err) => return Err(err),
        }
    }
    Ok(Json(result))
}

//! The HTTP edge: routing, authentication, errors, the OpenAPI document and serving. The only
//! module that knows about axum.

mod artifacts;
pub mod audit;
mod auth;
mod body;
mod docs;
pub mod egress;
mod error;
mod extract;
mod files;
mod idempotency;
mod mcp;
mod observe;
mod openapi;
mod processes;
mod scopes;
mod serve;
mod service;
mod step;
mod streams;
pub mod tls;
mod tokens;
mod tools;
mod workspace;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use axum::middleware;
use sandbox_protocol::Limits;
use tokio::sync::Semaphore;
use tower_http::trace::TraceLayer;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use body::BUDGET_UNIT;
pub use error::ApiError;
pub use idempotency::IdempotencyStore;
pub use mcp::McpServer;
pub use observe::serve_metrics;
pub use openapi::openapi;
pub use serve::serve;
pub(crate) use workspace::MAX_ARCHIVE_STREAMS;

use crate::sandbox::blobs::BlobStore;
use crate::sandbox::snapshot::{IgnoreList, Snapshots};
use crate::sandbox::{Registry, ToolContext};

/// Everything a handler may use. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    pub registry: Registry,
    pub ctx: ToolContext,
    /// The root token and the minted ones.
    pub tokens: Arc<crate::tokens::Tokens>,
    /// One permit per running tool call; none left means 429.
    pub permits: Arc<Semaphore>,
    /// One permit per follower of process output; none left means 429.
    pub followers: Arc<Semaphore>,
    /// The bytes of request bodies buffered at once, in units of [`BUDGET_UNIT`].
    pub body_budget: Arc<Semaphore>,
    /// One permit per workspace archive being written (each holds a blocking thread); none
    /// left means 429.
    pub archive_streams: Arc<Semaphore>,
    pub limits: Arc<Limits>,
    /// The OpenAPI document, serialized at its first request.
    pub openapi: Arc<std::sync::OnceLock<axum::body::Bytes>>,
    /// The containment of commands, for `/healthz` and `/v1/info`.
    pub protections: Arc<Vec<sandbox_protocol::Protection>>,
    /// Snapshots, blobs and the watched paths of the fingerprint.
    pub state: Arc<WorkspaceState>,
    /// The `Idempotency-Key`s of mutating requests and their answers.
    pub idempotency: Arc<IdempotencyStore>,
    /// What `GET /metrics` serves.
    pub metrics: crate::metrics::Metrics,
    /// Whether the main address speaks TLS, for `/healthz`.
    pub transport: Transport,
    /// Where each request's line goes (`--audit-log`).
    pub audit: Option<audit::AuditLog>,
}

/// Whether the main address speaks TLS, and requires client certificates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transport {
    pub tls: bool,
    pub mtls: bool,
}

/// What the workspace-state routes use.
#[derive(Debug)]
pub struct WorkspaceState {
    /// The server's folders (the commands' `TMPDIR` is emptied on a reset).
    pub dirs: crate::state_dir::StateDirs,
    pub snapshots: Snapshots,
    pub blobs: BlobStore,
    pub ignore: IgnoreList,
    pub watch: Vec<String>,
}

/// The documented routes, before authentication is layered on.
fn documented_routes() -> (OpenApiRouter<AppState>, OpenApiRouter<AppState>) {
    let public = OpenApiRouter::new().routes(routes!(service::health));
    let v1 = OpenApiRouter::new()
        .routes(routes!(service::info))
        .routes(routes!(tools::list_tools))
        .routes(routes!(
            processes::list_processes,
            processes::start_process,
            processes::kill_background
        ))
        .routes(routes!(processes::get_process, processes::delete_process))
        .routes(routes!(processes::get_output))
        .routes(routes!(processes::write_stdin))
        .routes(routes!(processes::send_signal))
        .routes(routes!(processes::resize))
        .routes(routes!(processes::start_shell))
        .routes(routes!(processes::run_in_shell))
        .routes(routes!(processes::interrupt_shell))
        .routes(routes!(streams::events))
        .routes(routes!(streams::pty))
        .routes(routes!(artifacts::get_artifact))
        .routes(routes!(workspace::take_snapshot))
        .routes(routes!(workspace::get_snapshot))
        .routes(routes!(workspace::get_changes))
        .routes(routes!(workspace::get_diff))
        .routes(routes!(workspace::get_blob))
        .routes(routes!(workspace::get_archive, workspace::put_archive))
        .routes(routes!(workspace::get_fingerprint))
        .routes(routes!(workspace::reset))
        .routes(routes!(tokens::mint_token, tokens::list_tokens))
        .routes(routes!(tokens::revoke_token));
    (public, v1)
}

/// Builds the full router; tests drive it in-process with `oneshot`.
pub fn app(state: AppState) -> Router {
    let (public, v1) = documented_routes();
    let v1 = v1
        // Each tool is documented as its own operation (see `openapi`); one route serves them.
        .route("/v1/tools/{name}", axum::routing::post(tools::call_tool))
        // Paths with `/` need catch-all routes, which `routes!` cannot register; they are
        // documented through `openapi::FilesDoc`.
        .route(
            "/v1/files/{*path}",
            axum::routing::get(files::get_file).put(files::put_file),
        )
        .route("/v1/dirs", axum::routing::get(files::list_root))
        .route("/v1/dirs/{*path}", axum::routing::get(files::list_dir))
        .route("/v1/paths/{*path}", axum::routing::get(files::trace_path))
        // Inside authentication: no request without the token reaches the key store.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            idempotency::idempotency,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ));
    let max_body = usize::try_from(state.limits.max_body_bytes).unwrap_or(usize::MAX);
    // The metrics are the server's business: behind the token, like /v1 (or on their own
    // address with `--metrics-listen`).
    let metrics = axum::Router::new()
        .route("/metrics", axum::routing::get(observe::get_metrics))
        // The sandbox as an MCP server, behind the same token.
        .route_service("/mcp", mcp::service(state.clone()))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ));
    let (router, _) = public
        .merge(v1)
        .route("/openapi.json", axum::routing::get(openapi::serve_openapi))
        .route("/docs", axum::routing::get(docs::serve_docs))
        .split_for_parts();
    router
        .merge(metrics)
        .route_layer(middleware::from_fn(observe::tag_route))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(state.clone(), body::budget))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::refuse_foreign_pages,
        ))
        .layer(middleware::from_fn(error::json_errors))
        .layer(middleware::from_fn(body::close_unless_body_read))
        .layer(middleware::from_fn(error::log_server_errors))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            observe::observe,
        ))
        // Outside everything but the span: every request gets its line, refused ones too.
        .layer(middleware::from_fn_with_state(state.clone(), audit::audit))
        // 5xx are logged once, with their cause, by `log_server_errors`.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(observe::request_span)
                .on_failure(()),
        )
        .with_state(state)
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!(
        "no route for {method} {}; see /openapi.json or /docs",
        uri.path()
    ))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}

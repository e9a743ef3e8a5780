//! Health and server information.

use axum::Json;
use axum::extract::State;
use sandbox_protocol::{HealthResponse, InfoResponse};

use super::AppState;

/// Liveness: answers 200 as long as the server serves requests. Needs no token.
#[utoipa::path(
    get, path = "/healthz", tag = "service", security(()),
    responses((status = 200, description = "The server is up", body = HealthResponse)),
)]
pub(crate) async fn health(State(state): State<AppState>) -> Json<HealthResponse> {
    Json(HealthResponse {
        status: "ok".to_owned(),
        protections: (*state.protections).clone(),
        tls: state.transport.tls,
        mtls: state.transport.mtls,
    })
}

/// Version, enabled tools, limits and the workspace root.
#[utoipa::path(
    get, path = "/v1/info", tag = "service",
    responses(
        (status = 200, body = InfoResponse),
    ),
)]
pub(crate) async fn info(State(state): State<AppState>) -> Json<InfoResponse> {
    Json(InfoResponse {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        tools: state
            .registry
            .names()
            .into_iter()
            .map(str::to_owned)
            .collect(),
        workspace_root: state.ctx.workspace.root().display().to_string(),
        file_boundary: state.ctx.workspace.boundary().display().to_string(),
        limits: (*state.limits).clone(),
        protections: (*state.protections).clone(),
    })
}

//! Bearer-token authentication for `/v1`, compared in constant time.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use super::{ApiError, AppState};

pub(crate) async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(expected) = &state.token else {
        return Ok(next.run(request).await);
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .ok_or(ApiError::Unauthorized(
            "missing `Authorization: Bearer <token>` header",
        ))?
        .as_bytes();
    let token = presented
        .strip_prefix(b"Bearer ")
        .ok_or(ApiError::Unauthorized(
            "the Authorization header must be `Bearer <token>`",
        ))?;
    if !bool::from(token.ct_eq(expected.expose().as_bytes())) {
        return Err(ApiError::Unauthorized("wrong token"));
    }
    Ok(next.run(request).await)
}

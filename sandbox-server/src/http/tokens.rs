//! `POST/GET /v1/tokens` and `DELETE /v1/tokens/{id}`: mint, list and revoke scoped,
//! expiring tokens (the domain is [`crate::tokens`]).

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use sandbox_protocol::{ErrorResponse, MintedToken, TokenList, TokenRequest, TokenRevoked};

use super::extract::{JsonBody, PathParam};
use super::{ApiError, AppState};
use crate::sandbox::blocking;
use crate::tokens::{Caller, TokenError, is_token_id};

impl From<TokenError> for ApiError {
    fn from(err: TokenError) -> ApiError {
        match err {
            TokenError::Invalid(message) => ApiError::InvalidArguments(message),
            TokenError::NoRoot => ApiError::BadRequest(err.to_string()),
            TokenError::Unknown(_) => ApiError::NotFound(err.to_string()),
            TokenError::Store { .. } => ApiError::Internal(err.to_string()),
        }
    }
}

/// Mints a token with some of the caller's scopes, for at most the caller's remaining life.
/// Its secret is in this answer only: the server keeps its SHA-256. (An `Idempotency-Key` is
/// not honoured here: its stored answer would be the secret.)
#[utoipa::path(
    post, path = "/v1/tokens", tag = "tokens",
    request_body = TokenRequest,
    responses(
        (status = 201, description = "Minted; `token` is shown this once", body = MintedToken),
        (status = 400, description = "The server has no token to mint from (`bad_request`)", body = ErrorResponse),
        (status = 422, description = "A field fails its check, or a scope or lifetime beyond the caller's own; the message names it", body = ErrorResponse),
    ),
)]
pub(crate) async fn mint_token(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<TokenRequest>,
) -> Result<(StatusCode, Json<MintedToken>), ApiError> {
    let tokens = state.tokens.clone();
    let minted = blocking(move || tokens.mint(&caller, &request)).await??;
    tracing::info!(id = %minted.info.id, name = %minted.info.name, scopes = ?minted.info.scopes, by = %minted.info.minted_by, "minted a token");
    Ok((StatusCode::CREATED, Json(minted)))
}

/// The tokens minted and not revoked (an expired one for a day after its expiry), newest
/// first; never their secrets.
#[utoipa::path(
    get, path = "/v1/tokens", tag = "tokens",
    responses((status = 200, body = TokenList)),
)]
pub(crate) async fn list_tokens(State(state): State<AppState>) -> Json<TokenList> {
    Json(TokenList {
        tokens: state.tokens.list(),
    })
}

/// Revokes a token, and every token it minted, directly or not: their next requests are
/// refused (401, naming them revoked).
#[utoipa::path(
    delete, path = "/v1/tokens/{id}", tag = "tokens",
    params(("id" = String, Path, description = "The token's id, `tok_` and 16 hexadecimal digits")),
    responses(
        (status = 200, body = TokenRevoked),
        (status = 404, description = "No token by that id (`not_found`)", body = ErrorResponse),
    ),
)]
pub(crate) async fn revoke_token(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<Json<TokenRevoked>, ApiError> {
    if !is_token_id(&id) {
        return Err(ApiError::NotFound(format!(
            "`{id}` is not a token id (`tok_` and 16 hexadecimal digits)"
        )));
    }
    let tokens = state.tokens.clone();
    let revoked = id.clone();
    let with_it = blocking(move || tokens.revoke(&revoked)).await??;
    tracing::info!(%id, with_it = with_it.len(), "revoked a token and those it minted");
    Ok(Json(TokenRevoked {
        id,
        revoked: true,
        with_it,
    }))
}

//! Authentication and authorisation for `/v1`, `/metrics` and `/mcp`: the bearer token is
//! checked ([`crate::tokens`], in constant time), then the route's scope ([`super::scopes`]).
//! The caller rides on the request (for MCP's per-tool check and the idempotency keys) and on
//! the response (for the audit log).

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};

use super::scopes::{self, Needs};
use super::{ApiError, AppState};

/// The token id a refused request claimed (`sbt_<id>_…`), on its response.
#[derive(Debug, Clone)]
pub(crate) struct Claimed(pub(crate) String);

pub(crate) async fn require_token(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|value| value.as_bytes());
    let caller = match state.tokens.authenticate(presented) {
        Ok(caller) => caller,
        Err(refused) => {
            // The id a refused minted token claims, for the audit log (16 hex digits).
            let claimed = presented
                .and_then(|value| value.strip_prefix(b"Bearer "))
                .and_then(crate::tokens::claimed_id);
            let mut response = ApiError::Unauthorized(refused.to_string()).into_response();
            if let Some(id) = claimed {
                response.extensions_mut().insert(Claimed(id));
            }
            return Ok(response);
        }
    };
    if let Some(route) = request.extensions().get::<MatchedPath>() {
        let (method, path) = (request.method(), request.uri().path());
        match scopes::of_request(&state.registry, method, route.as_str(), path) {
            Some(Needs::Nothing | Needs::AnyToken) => {}
            Some(Needs::Scope(scope)) if caller.holds(scope) => {}
            needs => {
                let refused = ApiError::MissingScope {
                    token: caller.token_id().unwrap_or_default().to_owned(),
                    scope: match needs {
                        Some(Needs::Scope(scope)) => Some(scope),
                        _ => None,
                    },
                    request: format!("{method} {path}"),
                };
                // The refusal names its caller too, for the audit log.
                let mut response = refused.into_response();
                response.extensions_mut().insert(caller);
                return Ok(response);
            }
        }
    }
    request.extensions_mut().insert(caller.clone());
    let mut response = next.run(request).await;
    response.extensions_mut().insert(caller);
    Ok(response)
}

/// What a web page in the user's browser could send: refused. A request with an `Origin` is
/// from a browser and must come from the server's own pages; without a token, `Host` must name
/// the server by IP address or `localhost` (a DNS name rebound to it is refused). (A tool
/// call must also say `Content-Type: application/json`, which no cross-site form can; the
/// call's handler checks that, after authentication.)
pub(crate) async fn refuse_foreign_pages(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let required = state.tokens.required();
    if let Some(reason) =
        sandbox_protocol::origin::refusal_of(request.headers(), required, "server")
    {
        return Err(ApiError::ForeignOrigin(reason));
    }
    Ok(next.run(request).await)
}

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
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if state.token.is_none() && !names_this_machine(host) {
        return Err(ApiError::ForeignOrigin(format!(
            "Host `{host}` is not an IP address or localhost; a server without a token answers only those (a web page's DNS name rebound to it is refused)"
        )));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        let own = [format!("http://{host}"), format!("https://{host}")];
        if !own.iter().any(|o| o == origin) {
            return Err(ApiError::ForeignOrigin(format!(
                "Origin `{origin}` is not this server's: requests from other sites' web pages are refused"
            )));
        }
    }
    Ok(next.run(request).await)
}

/// `127.0.0.1:8080`, `[::1]:8080`, `localhost`, `10.0.0.5`: an address, not a DNS name.
fn names_this_machine(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => {
            return rest
                .split(']')
                .next()
                .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok());
        }
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

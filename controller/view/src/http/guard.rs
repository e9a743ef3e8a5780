//! The guard every request passes (see [`super`]): read-only, `Host` and `Origin` checked,
//! the token when there is one; and the headers every response carries.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::{App, ViewError};

const COOKIE: &str = "harness_view_token";
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

pub(super) async fn guard(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    match admit(&app, request.method(), request.headers(), request.uri()) {
        Ok(Some(redirect)) => secure(redirect),
        Ok(None) => secure(next.run(request).await),
        Err(err) => secure(err.into_response()),
    }
}

/// Whether a request may in; `Some` is the answer to a first visit with `?token=`.
fn admit(
    app: &App,
    method: &Method,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
) -> Result<Option<Response>, ViewError> {
    if method != Method::GET && method != Method::HEAD {
        return Err(ViewError::Forbidden(format!(
            "{method}: the viewer is read-only; every route is GET"
        )));
    }
    let required = app.token.is_some();
    if let Some(reason) = sandbox_protocol::origin::refusal_of(headers, required, "viewer") {
        return Err(ViewError::Forbidden(reason));
    }
    let Some(token) = &app.token else {
        return Ok(None);
    };
    let matches = |presented: &str| bool::from(presented.as_bytes().ct_eq(token.as_bytes()));
    let given = uri.query().and_then(|q| {
        q.split('&')
            .find_map(|pair| pair.strip_prefix("token="))
            .map(str::to_owned)
    });
    if uri.path() == "/"
        && let Some(given) = given
    {
        if !matches(&given) {
            return Err(ViewError::Unauthorized(
                "the token in the address is not this viewer's".into(),
            ));
        }
        let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
        let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().insert(header::SET_COOKIE, value);
        }
        return Ok(Some(response));
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            pair.trim()
                .strip_prefix(&format!("{COOKIE}="))
                .map(str::to_owned)
        });
    if bearer.is_some_and(matches) || cookie.as_deref().is_some_and(matches) {
        return Ok(None);
    }
    Err(ViewError::Unauthorized(
        "this viewer needs its token: open the address it printed (with ?token=…), or send Authorization: Bearer".into(),
    ))
}

fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

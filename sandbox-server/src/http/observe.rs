//! What the server tells its operators: each request's span (continuing the caller's trace
//! when it sends `traceparent`), its metrics (by route template, status and error type), and
//! `GET /metrics`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sandbox_protocol::ErrorType;

use super::{ApiError, AppState};

/// The route template a request matched, carried from the router to [`observe`].
#[derive(Debug, Clone)]
pub(crate) struct Route(pub(crate) MatchedPath);

/// Inside the router: copies the matched route's template to the response.
pub(crate) async fn tag_route(request: Request, next: Next) -> Response {
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let mut response = next.run(request).await;
    if let Some(matched) = matched {
        response.extensions_mut().insert(Route(matched));
    }
    response
}

/// Around everything: counts and times each request by method, route template and status,
/// errors by type, and names the request's span after its route.
pub(crate) async fn observe(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let response = next.run(request).await;
    let route = response
        .extensions()
        .get::<Route>()
        .map_or("unmatched", |route| route.0.as_str());
    let error = response.extensions().get::<ErrorType>().copied();
    let status = response.status().as_u16();
    let span = tracing::Span::current();
    harness_otel::rename(&span, format!("{method} {route}"));
    span.record("http.route", route);
    span.record("http.response.status_code", i64::from(status));
    if response.status().is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    state
        .metrics
        .request(method.as_str(), route, status, error, started.elapsed());
    response
}

/// The span of one request: a server span, child of the caller's span when the request carries
/// a W3C `traceparent`. Named `METHOD /route/{template}` once routed (see [`observe`]).
pub(crate) fn request_span(request: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let span = tracing::info_span!(
        "request",
        otel.name = %format_args!("{} {}", request.method(), request.uri().path()),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %request.method(),
        url.path = request.uri().path(),
        http.route = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
    );
    harness_otel::continue_trace(&span, request.headers());
    span
}

/// `GET /metrics`: the Prometheus exposition (text format 0.0.4).
pub(crate) async fn get_metrics(State(state): State<AppState>) -> Response {
    match state.metrics.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
            )],
            text,
        )
            .into_response(),
        Err(err) => ApiError::Internal(format!("encoding the metrics: {err}")).into_response(),
    }
}

/// Serves `GET /metrics` alone, without the token, on `listener` (`--metrics-listen`), until
/// aborted.
pub fn serve_metrics(
    listener: tokio::net::TcpListener,
    state: AppState,
) -> tokio::task::JoinHandle<()> {
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "serving /metrics without the token");
    }
    let router = metrics_only(state);
    tokio::spawn(super::serve::serve_forever(listener, router))
}

/// The router of `--metrics-listen`: `GET /metrics` alone, without the token.
fn metrics_only(state: AppState) -> axum::Router {
    axum::Router::new()
        .route("/metrics", axum::routing::get(get_metrics))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "this address serves only GET /metrics\n",
            )
        })
        .with_state(state)
}

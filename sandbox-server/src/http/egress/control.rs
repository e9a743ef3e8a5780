//! The control port: the controller sets and reads each phase's policy and reads the
//! decisions, with the token; only peers of the task's network reach it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sandbox_protocol::egress::{AllowedHost, EgressPolicy};

use super::{Decision, Shared, admitted};

/// The control port's routes, behind the same peer check as the proxy.
pub(super) fn router(peers: Arc<Vec<AllowedHost>>, shared: Arc<Shared>) -> axum::Router {
    axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route("/policy", axum::routing::put(put_policy).get(get_policy))
        .route("/decisions", axum::routing::get(get_decisions))
        .layer(axum::middleware::from_fn(
            move |axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
                  request: axum::extract::Request,
                  next: axum::middleware::Next| {
                let allowed = admitted(&peers, peer);
                async move {
                    match allowed {
                        true => next.run(request).await,
                        false => refused(StatusCode::FORBIDDEN, "not from the task's network"),
                    }
                }
            },
        ))
        .with_state(shared)
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    // Constant time in the token's length.
    given.len() == shared.token.len()
        && given
            .bytes()
            .zip(shared.token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

fn refused(status: StatusCode, why: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({"error": why.into()}))).into_response()
}

async fn put_policy(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if !authorized(&shared, &headers) {
        return refused(StatusCode::UNAUTHORIZED, "missing or wrong token");
    }
    let policy: EgressPolicy = match serde_json::from_slice(&body) {
        Ok(policy) => policy,
        Err(err) => {
            return refused(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("the policy: {err}"),
            );
        }
    };
    if let Err(why) = policy.entries() {
        return refused(StatusCode::UNPROCESSABLE_ENTITY, why);
    }
    {
        let mut current = shared
            .policy
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if policy.generation <= current.generation && current.generation > 0 {
            return refused(
                StatusCode::CONFLICT,
                format!(
                    "generation {} is not after the current {}",
                    policy.generation, current.generation
                ),
            );
        }
        tracing::info!(generation = policy.generation, mode = ?policy.mode, hosts = ?policy.allowed_hosts, "policy");
        *current = policy.clone();
    }
    // Every tunnel of an older generation ends.
    shared.generation.send_replace(policy.generation);
    Json(serde_json::json!({"generation": policy.generation})).into_response()
}

async fn get_policy(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !authorized(&shared, &headers) {
        return refused(StatusCode::UNAUTHORIZED, "missing or wrong token");
    }
    Json(shared.policy()).into_response()
}

async fn get_decisions(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !authorized(&shared, &headers) {
        return refused(StatusCode::UNAUTHORIZED, "missing or wrong token");
    }
    let decisions: Vec<Decision> = shared
        .decisions
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .iter()
        .map(|((generation, host, allowed), count)| Decision {
            generation: *generation,
            host: host.clone(),
            allowed: *allowed,
            count: *count,
        })
        .collect();
    let overflow: BTreeMap<String, u64> = shared
        .overflow
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .iter()
        .map(|(generation, n)| (generation.to_string(), *n))
        .collect();
    Json(serde_json::json!({"decisions": decisions, "not_counted": overflow})).into_response()
}

//! `sandbox-server egress-proxy`: the one way out of a benchmark task's network in a phase with
//! an allow list. The task's containers sit on an internal network with no route out; this
//! proxy sits on it and on the internet's, and lets through only what the phase's policy
//! allows: `CONNECT host:port` (HTTPS and any TCP) and plain-HTTP requests in absolute form,
//! judged by the host the client names, then by where that name resolves (never a loopback or
//! link-local address such as a cloud's metadata service, unless an address entry names it).
//! The proxy does the resolving: a task needs no resolver of its own, and a raw address is
//! allowed only when an address or block entry covers it.
//!
//! The controller sets the policy of each phase through the control port (`PUT /policy`, with
//! the token from the environment variable `--token-env` names); a new policy ends every
//! tunnel the last one let through. `GET /decisions` says what was allowed and refused, per
//! policy generation and host: the evidence of where a task tried to go.

mod control;
mod head;
mod proxy;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context;
use sandbox_protocol::egress::{AllowedHost, EgressMode, EgressPolicy};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::config::EgressArgs;
use proxy::serve_client;

/// At most this many (generation, host, verdict) entries are counted.
const DECISIONS_CAP: usize = 4096;

/// One line of `GET /decisions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub generation: u64,
    pub host: String,
    pub allowed: bool,
    pub count: u64,
}

struct Shared {
    policy: RwLock<EgressPolicy>,
    generation: watch::Sender<u64>,
    decisions: Mutex<BTreeMap<(u64, String, bool), u64>>,
    /// Per generation, the decisions not counted once its share of the map was full.
    overflow: Mutex<BTreeMap<u64, u64>>,
    token: String,
}

impl Shared {
    /// The state before the controller sets a policy: nothing is let through.
    fn new(token: String) -> Shared {
        let (generation, _) = watch::channel(0);
        Shared {
            policy: RwLock::new(EgressPolicy {
                generation: 0,
                mode: EgressMode::Nothing,
                allowed_hosts: Vec::new(),
            }),
            generation,
            decisions: Mutex::new(BTreeMap::new()),
            overflow: Default::default(),
            token,
        }
    }

    fn policy(&self) -> EgressPolicy {
        self.policy
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn record(&self, generation: u64, host: &str, allowed: bool) {
        let mut decisions = self
            .decisions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = (generation, host.to_owned(), allowed);
        // Each phase has its own cap: a flood in one cannot hide the next one's decisions.
        let of_generation = decisions.keys().filter(|k| k.0 == generation).count();
        if of_generation >= DECISIONS_CAP && !decisions.contains_key(&key) {
            *self
                .overflow
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .entry(generation)
                .or_default() += 1;
            return;
        }
        *decisions.entry(key).or_default() += 1;
    }
}

/// Serves the proxy and its control port until `shutdown` resolves. Until the controller
/// sets one, the policy lets nothing through.
pub async fn run(
    args: EgressArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let token = control_token(&args)?;
    let peers = Arc::new(allowed_peers(&args)?);
    let shared = Arc::new(Shared::new(token));
    let proxy = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let control = TcpListener::bind(args.control)
        .await
        .with_context(|| format!("binding {}", args.control))?;
    tracing::info!(listen = %args.listen, control = %args.control, "egress proxy ready (nothing allowed yet)");
    let router = control::router(peers.clone(), shared.clone());
    let control_task = tokio::spawn(async move {
        let service = router.into_make_service_with_connect_info::<SocketAddr>();
        let _ = axum::serve(control, service).await;
    });
    let permits = Arc::new(Semaphore::new(args.max_connections.max(1)));
    tokio::select! {
        () = accept(&proxy, &peers, &shared, &permits) => {}
        () = shutdown => {}
    }
    control_task.abort();
    Ok(())
}

/// The control token, from the variable `--token-env` names: refused when shorter than 16.
fn control_token(args: &EgressArgs) -> anyhow::Result<String> {
    std::env::var(&args.token_env)
        .ok()
        .filter(|t| t.len() >= 16)
        .with_context(|| {
            format!(
                "the control token: set {} to at least 16 characters",
                args.token_env
            )
        })
}

/// The networks of `--allow-from`: each an address or a block, nothing else.
fn allowed_peers(args: &EgressArgs) -> anyhow::Result<Vec<AllowedHost>> {
    args.allow_from
        .iter()
        .map(|cidr| match AllowedHost::parse(cidr) {
            Ok(block @ (AllowedHost::Block(..) | AllowedHost::Address(_))) => Ok(block),
            Ok(_) | Err(_) => Err(anyhow::anyhow!("--allow-from {cidr}: expected ADDR/BITS")),
        })
        .collect::<anyhow::Result<_>>()
}

/// Takes clients while a permit is free, each served on its own task until it ends; a peer
/// from outside the task's network is dropped unanswered. Runs until the permits close.
async fn accept(
    proxy: &TcpListener,
    peers: &[AllowedHost],
    shared: &Arc<Shared>,
    permits: &Arc<Semaphore>,
) {
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let Ok((client, peer)) = proxy.accept().await else {
            // Out of descriptors, say: a moment before the next try, not a spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        if !admitted(peers, peer) {
            tracing::debug!(%peer, "refused: not from the task's network");
            continue;
        }
        let shared = shared.clone();
        tokio::spawn(async move {
            if let Err(err) = serve_client(client, &shared).await {
                tracing::debug!(%peer, cause = %err, "egress connection ended");
            }
            drop(permit);
        });
    }
}

/// Whether a peer may use the proxy: from a network of `--allow-from` (any, with none).
fn admitted(peers: &[AllowedHost], peer: SocketAddr) -> bool {
    let address = peer.ip().to_canonical().to_string();
    peers.is_empty() || peers.iter().any(|block| block.allows(&address))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_peers_of_the_task_network_are_admitted() {
        let peers = vec![AllowedHost::parse("172.20.0.0/16").unwrap()];
        assert!(admitted(&peers, "172.20.0.5:4000".parse().unwrap()));
        assert!(admitted(
            &peers,
            "[::ffff:172.20.0.5]:4000".parse().unwrap()
        ));
        assert!(!admitted(&peers, "172.17.0.2:4000".parse().unwrap()));
        assert!(admitted(&[], "172.17.0.2:4000".parse().unwrap()));
    }
}

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

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sandbox_protocol::egress::{AllowedHost, EgressMode, EgressPolicy};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use crate::config::EgressArgs;

/// A request head is at most this long.
const HEAD_CAP: usize = 16 << 10;
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
    let token = std::env::var(&args.token_env)
        .ok()
        .filter(|t| t.len() >= 16)
        .with_context(|| {
            format!(
                "the control token: set {} to at least 16 characters",
                args.token_env
            )
        })?;
    let peers: Vec<AllowedHost> = args
        .allow_from
        .iter()
        .map(|cidr| match AllowedHost::parse(cidr) {
            Ok(block @ (AllowedHost::Block(..) | AllowedHost::Address(_))) => Ok(block),
            Ok(_) | Err(_) => Err(anyhow::anyhow!("--allow-from {cidr}: expected ADDR/BITS")),
        })
        .collect::<anyhow::Result<_>>()?;
    let peers = Arc::new(peers);
    let (generation, _) = watch::channel(0);
    let shared = Arc::new(Shared {
        policy: RwLock::new(EgressPolicy {
            generation: 0,
            mode: EgressMode::Nothing,
            allowed_hosts: Vec::new(),
        }),
        generation,
        decisions: Mutex::new(BTreeMap::new()),
        overflow: Default::default(),
        token,
    });
    let proxy = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let control = TcpListener::bind(args.control)
        .await
        .with_context(|| format!("binding {}", args.control))?;
    tracing::info!(listen = %args.listen, control = %args.control, "egress proxy ready (nothing allowed yet)");
    let control_peers = peers.clone();
    let router = axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route("/policy", axum::routing::put(put_policy).get(get_policy))
        .route("/decisions", axum::routing::get(get_decisions))
        .layer(axum::middleware::from_fn(
            move |axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
                  request: axum::extract::Request,
                  next: axum::middleware::Next| {
                let allowed = admitted(&control_peers, peer);
                async move {
                    match allowed {
                        true => next.run(request).await,
                        false => refused(StatusCode::FORBIDDEN, "not from the task's network"),
                    }
                }
            },
        ))
        .with_state(shared.clone());
    let control_task = tokio::spawn(async move {
        let service = router.into_make_service_with_connect_info::<SocketAddr>();
        let _ = axum::serve(control, service).await;
    });
    let permits = Arc::new(Semaphore::new(args.max_connections.max(1)));
    let accept = async {
        loop {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let Ok((client, peer)) = proxy.accept().await else {
                // Out of descriptors, say: a moment before the next try, not a spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            if !admitted(&peers, peer) {
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
    };
    tokio::select! {
        () = accept => {}
        () = shutdown => {}
    }
    control_task.abort();
    Ok(())
}

/// Whether a peer may use the proxy: from a network of `--allow-from` (any, with none).
fn admitted(peers: &[AllowedHost], peer: SocketAddr) -> bool {
    let address = peer.ip().to_canonical().to_string();
    peers.is_empty() || peers.iter().any(|block| block.allows(&address))
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

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    host: String,
    port: u16,
    /// `CONNECT`: a tunnel; else the request head to send on, in origin form.
    forward: Option<Vec<u8>>,
}

/// Splits `host:port` (`[v6]:port`); `default` when no port is given.
fn authority(text: &str, default: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(port) => port.parse().ok()?,
            None if after.is_empty() => default?,
            None => return None,
        };
        (host.to_owned(), port)
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host.to_owned(), port.parse().ok()?),
            None => (text.to_owned(), default?),
            Some(_) => return None,
        }
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    (!host.is_empty()).then_some((host, port))
}

/// A target must be an address or a DNS name: anything else is refused before it is judged or
/// counted (a flood of invented hosts cannot grow the decisions).
fn valid_host(host: &str) -> Result<(), String> {
    if host.parse::<IpAddr>().is_ok() || sandbox_protocol::egress::is_host_name(host) {
        return Ok(());
    }
    let shown: String = host.chars().take(64).collect();
    Err(format!(
        "`{}`: not a host name or an address",
        shown.escape_default()
    ))
}

/// Reads the request head: the target, and what the client sent past the head.
fn parse_head(head: &[u8]) -> Result<Target, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8".to_owned())?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut words = first.split(' ');
    let (Some(method), Some(target), Some(version)) = (words.next(), words.next(), words.next())
    else {
        return Err(format!("not a request line: `{first}`"));
    };
    if method == "CONNECT" {
        let (host, port) =
            authority(target, None).ok_or_else(|| format!("CONNECT {target}: not host:port"))?;
        valid_host(&host)?;
        return Ok(Target {
            host,
            port,
            forward: None,
        });
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return Err(format!(
            "{method} {target}: a proxy request names an http:// URL (https goes through CONNECT)"
        ));
    };
    let (authority_text, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let (host, port) = authority(authority_text, Some(80))
        .ok_or_else(|| format!("{target}: no host in the URL"))?;
    valid_host(&host)?;
    // The request goes to the host the policy judged: its Host is the URL's, and it is the
    // connection's only request (no keep-alive: a second request would not be judged).
    let mut forward = format!("{method} {path} {version}\r\nHost: {authority_text}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or("").trim();
        let dropped = [
            "host",
            "connection",
            "keep-alive",
            "proxy-connection",
            "proxy-authorization",
        ];
        if dropped.iter().any(|d| name.eq_ignore_ascii_case(d)) {
            continue;
        }
        forward.push_str(line);
        forward.push_str("\r\n");
    }
    forward.push_str("Connection: close\r\n\r\n");
    Ok(Target {
        host,
        port,
        forward: Some(forward.into_bytes()),
    })
}

async fn answer(client: &mut TcpStream, status: &str, why: &str) -> std::io::Result<()> {
    let body = format!("agent-harness egress proxy: {why}\n");
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(text.as_bytes()).await
}

async fn serve_client(mut client: TcpStream, shared: &Shared) -> anyhow::Result<()> {
    let mut ended = shared.generation.subscribe();
    let mut buffer = Vec::with_capacity(1024);
    let head_end = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                return Ok(Some(at + 4));
            }
            if buffer.len() >= HEAD_CAP {
                return Ok(None);
            }
            let mut chunk = [0u8; 4096];
            let n = client.read(&mut chunk).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(None);
            }
            buffer.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    let Ok(Ok(Some(head_end))) = head_end else {
        return Ok(());
    };
    let target = match parse_head(&buffer[..head_end]) {
        Ok(target) => target,
        Err(why) => {
            answer(&mut client, "400 Bad Request", &why).await?;
            return Ok(());
        }
    };
    let policy = shared.policy();
    let verdict = policy.allows(&target.host).unwrap_or(false);
    if !verdict {
        shared.record(policy.generation, &target.host, false);
        let why = match policy.mode {
            EgressMode::Nothing => "this phase of the task has no network".to_owned(),
            _ => format!("{} is not on this phase's allow list", target.host),
        };
        answer(&mut client, "403 Forbidden", &why).await?;
        return Ok(());
    }
    // Counted as what it came to: a name that resolves only where a task may not go
    // (loopback, a metadata service) is refused, not allowed.
    let upstream = match connect(&target, &policy).await {
        Ok(upstream) => {
            shared.record(policy.generation, &target.host, true);
            upstream
        }
        Err(Unreached::Refused(why)) => {
            shared.record(policy.generation, &target.host, false);
            answer(&mut client, "403 Forbidden", &why).await?;
            return Ok(());
        }
        Err(Unreached::Failed(why)) => {
            shared.record(policy.generation, &target.host, true);
            answer(&mut client, "502 Bad Gateway", &why).await?;
            return Ok(());
        }
    };
    let mut upstream = upstream;
    match &target.forward {
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await?
        }
        Some(head) => upstream.write_all(head).await?,
    }
    upstream.write_all(&buffer[head_end..]).await?;
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        // A new policy: what the last one let through ends now.
        _ = ended.changed() => {}
    }
    Ok(())
}

/// Why a connection was not made: the policy refused every address, or none answered.
enum Unreached {
    Refused(String),
    Failed(String),
}

/// Resolves the target (the proxy's resolver, not the task's) and connects to the first
/// address the policy lets it reach.
async fn connect(target: &Target, policy: &EgressPolicy) -> Result<TcpStream, Unreached> {
    let addresses: Vec<SocketAddr> = match target.host.parse::<IpAddr>() {
        Ok(address) => vec![SocketAddr::new(address, target.port)],
        Err(_) => tokio::time::timeout(
            Duration::from_secs(10),
            tokio::net::lookup_host((target.host.as_str(), target.port)),
        )
        .await
        .map_err(|_| Unreached::Failed(format!("resolving {} timed out", target.host)))?
        .map_err(|err| Unreached::Failed(format!("resolving {}: {err}", target.host)))?
        .collect(),
    };
    let reachable: Vec<SocketAddr> = addresses
        .into_iter()
        .filter(|a| policy.reaches(a.ip()).unwrap_or(false))
        .collect();
    if reachable.is_empty() {
        return Err(Unreached::Refused(format!(
            "{} resolves only to addresses a task may not reach (loopback, link-local, a metadata service)",
            target.host
        )));
    }
    let mut last = String::new();
    for address in reachable {
        match tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(err)) => last = format!("connecting to {address}: {err}"),
            Err(_) => last = format!("connecting to {address} timed out"),
        }
    }
    Err(Unreached::Failed(last))
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

    #[test]
    fn request_heads_name_their_target() {
        let connect = parse_head(b"CONNECT Allowed.Test:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!((connect.host.as_str(), connect.port), ("allowed.test", 443));
        assert!(connect.forward.is_none());
        let v6 = parse_head(b"CONNECT [fd00::1]:8443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("fd00::1", 8443));
        // The Host sent on is the URL's (not another site's behind the same address), and the
        // connection carries this one judged request.
        let get = parse_head(
            b"GET http://web.test:8080/a?b=1 HTTP/1.1\r\nHost: evil.test\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert_eq!((get.host.as_str(), get.port), ("web.test", 8080));
        assert_eq!(
            String::from_utf8(get.forward.unwrap()).unwrap(),
            "GET /a?b=1 HTTP/1.1\r\nHost: web.test:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let plain = parse_head(b"GET http://web.test HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(plain.port, 80);
        for bad in [
            &b"GET /direct HTTP/1.1\r\n\r\n"[..],
            b"GET https://x/ HTTP/1.1\r\n\r\n",
            b"CONNECT nohost HTTP/1.1\r\n\r\n",
            b"garbage\r\n\r\n",
            // Invented hosts are refused before they are judged or counted.
            b"CONNECT \x01\x01\x01:443 HTTP/1.1\r\n\r\n",
            b"CONNECT 10.1:443 HTTP/1.1\r\n\r\n",
            b"GET http://a_b.test/ HTTP/1.1\r\n\r\n",
        ] {
            assert!(parse_head(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}

//! One client of the proxy: its request head read, its target judged by the phase's policy
//! (the name, then where it resolves), the connection made and relayed.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use sandbox_protocol::egress::{EgressMode, EgressPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Shared;
use super::head::{Target, parse_head};

/// A request head is at most this long.
const HEAD_CAP: usize = 16 << 10;

async fn answer(client: &mut TcpStream, status: &str, why: &str) -> std::io::Result<()> {
    let body = format!("agent-harness egress proxy: {why}\n");
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(text.as_bytes()).await
}

/// Serves one client: reads its request head, judges its target by the policy, connects,
/// and relays until either side ends or a new policy ends the tunnel.
pub(super) async fn serve_client(mut client: TcpStream, shared: &Shared) -> anyhow::Result<()> {
    let mut ended = shared.generation.subscribe();
    let mut buffer = Vec::with_capacity(1024);
    let Some(head_end) = read_head(&mut client, &mut buffer).await else {
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

/// Reads into `buffer` until the request head ends (at most [`HEAD_CAP`] bytes, within
/// 30 s): where it ends, or `None` when the client closed, sent too much, was too slow or
/// could not be read. Its own step: the rest of a client's service starts from a whole head.
async fn read_head(client: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<usize> {
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
        return None;
    };
    Some(head_end)
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

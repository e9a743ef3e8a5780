//! The connection loop: accepts TCP connections and serves each with hyper's HTTP/1
//! (upgrades included, for the WebSocket), with a bounded write buffer per connection, and a
//! graceful shutdown.
//!
//! Why not `axum::serve`: it cannot bound what hyper buffers for a connection whose client does
//! not read (~400 KiB each by default: 800 idle followers of an event stream held 550 MB), and
//! it takes no TLS (here [`super::tls`], each handshake in its connection's own task). Here
//! each connection buffers at most [`MAX_BUFFER`]; past it hyper stops asking the response
//! body for more, so a slow reader holds back its own stream and nothing else.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use super::tls::Tls;

/// What hyper buffers for one connection, at most: its reads and its writes.
pub(super) const MAX_BUFFER: usize = 64 * 1024;

/// How long a connection may take to send a request's head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

fn builder() -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .max_buf_size(MAX_BUFFER)
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
}

/// Serves `router` on `listener` (over `tls` when given) until `shutdown` resolves; then stops
/// accepting and gives in-flight calls `grace` to finish. Past it, `end_calls` runs (it kills
/// their processes, so they return at once), and whatever is still open 5 s later is abandoned.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<Tls>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
    end_calls: impl Future<Output = ()>,
) -> std::io::Result<()> {
    // Every connection's task holds a sender: the channel closes once all have ended.
    let (open, mut all_closed) = tokio::sync::mpsc::channel::<()>(1);
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let builder = builder();
    tokio::pin!(shutdown);
    loop {
        let (stream, address) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of descriptors, or a connection reset before it was taken: wait a
                    // moment rather than spin.
                    tracing::debug!(cause = %err, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Without TCP_NODELAY, a body written after its headers (a file, a blob, an artifact)
        // waits for the client's delayed ACK: 40 ms per download.
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(cause = %err, "could not set TCP_NODELAY");
        }
        let (builder, stopping, open) = (builder.clone(), stopping.clone(), open.clone());
        match &tls {
            None => {
                let service = with_peer(&router, address, None);
                let connection = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades();
                tokio::spawn(serve_connection(connection, stopping, open));
            }
            Some(tls) => {
                let (tls, router) = (tls.clone(), router.clone());
                tokio::spawn(async move {
                    // The handshake counts as the connection's: shutdown waits for it too.
                    let Some(stream) = tls.accept(stream).await else {
                        return;
                    };
                    let subject = super::tls::peer_subject(stream.get_ref().1);
                    let service = with_peer(&router, address, subject);
                    let connection = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades();
                    serve_connection(connection, stopping, open).await;
                });
            }
        }
    }
    drop(listener);
    let _ = stop.send(true);
    drop(open);
    let drained = all_closed.recv();
    tokio::pin!(drained);
    if tokio::time::timeout(grace, &mut drained).await.is_err() {
        tracing::warn!(
            ?grace,
            "in-flight calls outlived the grace period; killing them"
        );
        end_calls.await;
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut drained).await;
    }
    Ok(())
}

/// The router for one connection, each request carrying who is at the other end.
fn with_peer(
    router: &Router,
    address: std::net::SocketAddr,
    subject: Option<Arc<str>>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future: Send,
> + Clone
+ Send
+ 'static {
    use tower::ServiceExt as _;
    let peer = super::audit::Peer {
        address: Some(address),
        subject,
    };
    TowerToHyperService::new(router.clone().map_request(
        move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(peer.clone());
            request
        },
    ))
}

/// One connection until it ends; once the server stops, its request in flight finishes and
/// the connection then closes (an idle one at once).
async fn serve_connection<C>(
    connection: C,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    _open: tokio::sync::mpsc::Sender<()>,
) where
    C: Future<Output = hyper::Result<()>> + GracefulShutdown,
{
    tokio::pin!(connection);
    let stopped = tokio::select! {
        ended = &mut connection => Some(ended),
        _ = stopping.wait_for(|stop| *stop) => None,
    };
    let ended = match stopped {
        Some(ended) => ended,
        None => {
            connection.as_mut().shut_down();
            connection.await
        }
    };
    if let Err(err) = ended {
        tracing::debug!(cause = %err, "a connection ended with an error");
    }
}

/// A connection that can be asked to finish its request in flight and close.
trait GracefulShutdown {
    fn shut_down(self: std::pin::Pin<&mut Self>);
}

impl<I, S> GracefulShutdown for hyper::server::conn::http1::UpgradeableConnection<I, S>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::HttpService<hyper::body::Incoming>,
    S::ResBody: hyper::body::Body + 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn shut_down(self: std::pin::Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// Serves `router` on `listener` for as long as the task lives (the metrics listener).
pub(super) async fn serve_forever(listener: TcpListener, router: Router) {
    serve(
        listener,
        router,
        None,
        std::future::pending(),
        Duration::ZERO,
        async {},
    )
    .await
    .ok();
}

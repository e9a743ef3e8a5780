//! `--metrics-listen`: `GET /metrics` on a plain HTTP/1 listener, for Prometheus to scrape
//! while the run or batch goes. Anything else is 404 (405 for another method on `/metrics`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The running endpoint; it stops when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    /// Where it listens (the port chosen when the address asked for port 0).
    pub address: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds `address` and serves the process's metrics there until the result is dropped.
pub async fn serve(address: SocketAddr) -> std::io::Result<MetricsServer> {
    let listener = TcpListener::bind(address).await?;
    let address = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // Out of descriptors, most likely: wait rather than spin.
                    tracing::warn!(cause = %err, "the metrics listener could not accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(answer);
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(err) = connection.await {
                    tracing::debug!(cause = %err, "a metrics connection ended badly");
                }
            });
        }
    });
    Ok(MetricsServer { address, task })
}

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, kind, body) = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            super::CONTENT_TYPE,
            super::metrics().encode(),
        ),
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "only GET is served on /metrics\n".to_owned(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "this address serves only GET /metrics\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(kind));
    Ok(response)
}

//! Request bodies: streamed to blocking code in chunks (file and archive uploads never sit in
//! memory whole), and a budget on the bytes of bodies buffered at once (every other route).

use std::io::{self, Read};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use tokio::sync::{Semaphore, mpsc};

use super::{ApiError, AppState};

/// Chunks in flight between the connection and the blocking reader.
const CHANNEL_CHUNKS: usize = 4;
/// How long a request waits for room in the body budget before it is told to retry.
const BUDGET_WAIT: Duration = Duration::from_secs(10);
/// The budget counts in units of this many bytes (a semaphore holds at most 2^61 permits).
pub const BUDGET_UNIT: u64 = 1024;

/// A request body read by blocking code, chunk by chunk, at most `limit` bytes: past it the
/// read fails with `FileTooLarge`.
pub(crate) struct BodyReader {
    receiver: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

/// Starts feeding `body` to a [`BodyReader`]; the feeding stops when the reader is dropped.
pub(crate) fn stream(body: Body, limit: u64) -> BodyReader {
    let (sender, receiver) = mpsc::channel(CHANNEL_CHUNKS);
    tokio::spawn(async move {
        let mut chunks = body.into_data_stream();
        let mut total: u64 = 0;
        while let Some(chunk) = chunks.next().await {
            let item = match chunk {
                Ok(bytes) => {
                    total += bytes.len() as u64;
                    if total > limit {
                        Err(io::Error::new(
                            io::ErrorKind::FileTooLarge,
                            format!("request body is larger than the limit of {limit} bytes"),
                        ))
                    } else {
                        Ok(bytes)
                    }
                }
                Err(err) => Err(io::Error::other(format!("reading the request body: {err}"))),
            };
            let stop = item.is_err();
            if sender.send(item).await.is_err() || stop {
                return;
            }
        }
    });
    BodyReader {
        receiver,
        current: Bytes::new(),
    }
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.receiver.blocking_recv() {
                Some(Ok(bytes)) => self.current = bytes,
                Some(Err(err)) => return Err(err),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// Whether a route streams its body rather than buffering it.
fn streams(method: &Method, path: &str) -> bool {
    *method == Method::PUT && (path.starts_with("/v1/files/") || path == "/v1/workspace/archive")
}

/// Holds room in the body budget for as long as a buffered request is handled: its
/// `Content-Length` (or the body limit when it has none). Requests without a body and
/// streaming routes take none.
pub(crate) async fn budget(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let has_body = matches!(
        *request.method(),
        Method::POST | Method::PUT | Method::PATCH
    );
    if !has_body || streams(request.method(), request.uri().path()) {
        return Ok(next.run(request).await);
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let max_body = state.limits.max_body_bytes;
    if declared.is_some_and(|n| n > max_body) {
        return Err(ApiError::PayloadTooLarge(max_body));
    }
    let bytes = declared.unwrap_or(max_body);
    // Never more than the whole budget (configuration keeps it at least one body).
    let total = state.limits.max_inflight_body_bytes.div_ceil(BUDGET_UNIT);
    let units = u32::try_from(bytes.div_ceil(BUDGET_UNIT).min(total)).unwrap_or(u32::MAX);
    let budget: &Arc<Semaphore> = &state.body_budget;
    let permit = tokio::time::timeout(BUDGET_WAIT, budget.clone().acquire_many_owned(units))
        .await
        .map_err(|_| ApiError::BodiesInFlight(state.limits.max_inflight_body_bytes))?
        .map_err(|_| ApiError::Internal("the body budget was closed".to_owned()))?;
    let response = next.run(request).await;
    drop(permit);
    Ok(response)
}

/// A request whose body was not read to its end gets `Connection: close` on its answer: a
/// route may refuse a request before reading its body (a bad query, an over-limit body), and
/// such a connection cannot carry the next request. The header tells the client so; without
/// it, a client that reuses the connection finds it closed under its next request
/// ("disconnected without a response"). A body read to its end keeps the connection, whatever
/// the answer (a `search_replace` that found no match is a 422 after the whole body was read).
pub(crate) async fn close_unless_body_read(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    if body.is_end_stream() {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let ended = Arc::new(AtomicBool::new(false));
    let watched = ReadToEnd {
        inner: body,
        ended: ended.clone(),
    };
    let mut response = next
        .run(Request::from_parts(parts, Body::new(watched)))
        .await;
    if !ended.load(Ordering::Acquire) {
        response.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    response
}

/// A request body that records whether it was read to its end.
struct ReadToEnd {
    inner: Body,
    ended: Arc<AtomicBool>,
}

impl http_body::Body for ReadToEnd {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.ended.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

//! `Idempotency-Key` on every mutating route: a repeat of a completed request gets the stored
//! answer (marked `Idempotent-Replayed: true`) and runs nothing; a repeat while the first runs
//! gets 409 naming its call; the same key on another request is 422. Keys live in memory, for
//! `--idempotency-ttl-secs` after their request completed, and die with the server.
//!
//! A request's identity is its method, its path and query, and the SHA-256 of its body, hashed
//! as the body streams to the handler (uploads are never held whole). An answer is kept only if
//! the handler read the whole body (or there was none) and the server was not merely too busy
//! (429): a request refused before its body was read changed nothing and may run again.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tracing::Instrument as _;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use sha2::{Digest, Sha256};

use super::{ApiError, AppState};

pub(crate) const KEY_HEADER: &str = "idempotency-key";
pub(crate) const REPLAYED_HEADER: &str = "idempotent-replayed";
/// The longest key taken, in bytes.
const MAX_KEY_BYTES: usize = 255;
/// Stored entries past this many bytes in all (each counted whole: its key, its target, its
/// answer and the bookkeeping around them) evict the oldest first.
const MAX_STORED_BYTES: usize = 64 << 20;
/// Stored entries past this many evict the oldest first.
const MAX_ENTRIES: usize = 10_000;
/// What an entry costs besides its strings and body: the map's slot, the order queue's, the
/// structs.
const ENTRY_OVERHEAD: usize = 256;

/// The call id a keyed tool call runs under, set by the middleware so that a 409 can name it.
#[derive(Debug, Clone)]
pub(crate) struct CallId(pub String);

/// What a key was first used for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    method: Method,
    target: String,
    body_sha256: Option<[u8; 32]>,
}

#[derive(Debug)]
enum Entry {
    Running {
        method: Method,
        target: String,
        call_id: String,
        started: Instant,
    },
    Done {
        identity: Identity,
        answer: Stored,
        at: Instant,
    },
}

#[derive(Debug, Clone)]
struct Stored {
    status: StatusCode,
    content_type: Option<HeaderValue>,
    body: Bytes,
}

/// The keys of one server.
#[derive(Debug)]
pub struct IdempotencyStore {
    ttl: Duration,
    inner: Mutex<Keys>,
}

#[derive(Debug, Default)]
struct Keys {
    entries: HashMap<String, Entry>,
    /// Completed keys, oldest first, for expiry and eviction.
    order: VecDeque<(Instant, String)>,
    bytes: usize,
}

impl IdempotencyStore {
    pub fn new(ttl: Duration) -> IdempotencyStore {
        IdempotencyStore {
            ttl,
            inner: Mutex::new(Keys::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Claims `key` for a new request, or says what it already belongs to.
    fn claim(&self, key: &str, method: &Method, target: &str, call_id: &str) -> Claim {
        let mut keys = self.lock();
        keys.expire(self.ttl);
        match keys.entries.get(key) {
            None => {
                keys.entries.insert(
                    key.to_owned(),
                    Entry::Running {
                        method: method.clone(),
                        target: target.to_owned(),
                        call_id: call_id.to_owned(),
                        started: Instant::now(),
                    },
                );
                Claim::New
            }
            Some(Entry::Running {
                method: m,
                target: t,
                call_id,
                started,
            }) => {
                if m != method || t != target {
                    Claim::Mismatch(format!("{m} {t}"))
                } else {
                    Claim::Running {
                        call_id: call_id.clone(),
                        elapsed: started.elapsed(),
                    }
                }
            }
            Some(Entry::Done {
                identity, answer, ..
            }) => Claim::Done(identity.clone(), answer.clone()),
        }
    }

    fn release(&self, key: &str) {
        self.lock().entries.remove(key);
    }

    /// Forgets every completed key (a reset: the next lease's requests must not meet the last
    /// one's answers); keys whose request still runs stay, so that their answer is kept.
    pub fn clear(&self) {
        let mut keys = self.lock();
        keys.entries
            .retain(|_, entry| matches!(entry, Entry::Running { .. }));
        keys.order.clear();
        keys.bytes = 0;
        keys.give_back_memory();
    }

    fn complete(&self, key: &str, identity: Identity, answer: Stored) {
        let mut keys = self.lock();
        let now = Instant::now();
        keys.bytes += entry_bytes(key, &identity, &answer);
        keys.entries.insert(
            key.to_owned(),
            Entry::Done {
                identity,
                answer,
                at: now,
            },
        );
        keys.order.push_back((now, key.to_owned()));
        while (keys.bytes > MAX_STORED_BYTES || keys.order.len() > MAX_ENTRIES)
            && keys.evict_oldest()
        {}
        keys.give_back_memory();
    }
}

/// What a completed entry holds in memory, counted whole.
fn entry_bytes(key: &str, identity: &Identity, answer: &Stored) -> usize {
    // The key is held twice: as the map's key and in the order queue.
    2 * key.len() + identity.target.len() + answer.body.len() + ENTRY_OVERHEAD
}

impl Keys {
    fn expire(&mut self, ttl: Duration) {
        while self
            .order
            .front()
            .is_some_and(|(at, _)| at.elapsed() >= ttl)
        {
            self.evict_oldest();
        }
    }

    /// Drops the oldest completed key; false when there is none.
    fn evict_oldest(&mut self) -> bool {
        let Some((at, key)) = self.order.pop_front() else {
            return false;
        };
        // The key may have been completed again since (a newer entry in `order`).
        if let Some(Entry::Done {
            at: done,
            answer,
            identity,
        }) = self.entries.get(&key)
            && *done == at
        {
            self.bytes = self
                .bytes
                .saturating_sub(entry_bytes(&key, identity, answer));
            self.entries.remove(&key);
        }
        true
    }

    /// Gives the map's and the queue's memory back once they are mostly empty.
    fn give_back_memory(&mut self) {
        if self.entries.capacity() > 64 && self.entries.len() < self.entries.capacity() / 4 {
            self.entries.shrink_to_fit();
        }
        if self.order.capacity() > 64 && self.order.len() < self.order.capacity() / 4 {
            self.order.shrink_to_fit();
        }
    }
}

enum Claim {
    New,
    Running { call_id: String, elapsed: Duration },
    Done(Identity, Stored),
    Mismatch(String),
}

fn mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// A key is 1 to 255 visible ASCII characters, as in the IETF draft and every API that takes one.
fn parse_key(value: &HeaderValue) -> Result<String, ApiError> {
    let bytes = value.as_bytes();
    if bytes.is_empty()
        || bytes.len() > MAX_KEY_BYTES
        || !bytes.iter().all(|b| b.is_ascii_graphic())
    {
        return Err(ApiError::InvalidArguments(format!(
            "Idempotency-Key: must be 1 to {MAX_KEY_BYTES} visible ASCII characters (no spaces), got {} bytes",
            bytes.len()
        )));
    }
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// The middleware; see the module's documentation.
pub(crate) async fn idempotency(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    // A minted token's answer is its secret, which no key store may keep.
    if !mutating(request.method()) || request.uri().path().starts_with("/v1/tokens") {
        return next.run(request).await;
    }
    let Some(value) = request.headers().get(KEY_HEADER).cloned() else {
        return next.run(request).await;
    };
    let key = match parse_key(&value) {
        // Each token has keys of its own: no token replays another's answer.
        Ok(key) => match request.extensions().get::<crate::tokens::Caller>() {
            Some(caller) => format!("{}\u{0}{key}", caller.token_id().unwrap_or_default()),
            None => key,
        },
        Err(err) => return err.into_response(),
    };
    let store = state.idempotency.clone();
    let method = request.method().clone();
    let target = request.uri().path_and_query().map_or_else(
        || request.uri().path().to_owned(),
        |pq| pq.as_str().to_owned(),
    );
    // The client's name for the call when it gave a valid one (the handler refuses a bad one).
    let call_id = super::tools::chosen_call_id(request.headers())
        .ok()
        .flatten()
        .unwrap_or_else(|| format!("call_{:016x}", rand::random::<u64>()));
    match store.claim(&key, &method, &target, &call_id) {
        Claim::New => {}
        Claim::Mismatch(first) => return reused(&first),
        Claim::Running { call_id, elapsed } => return in_progress(&call_id, elapsed),
        Claim::Done(identity, answer) => {
            return replay_if_same(request, &method, &target, identity, answer).await;
        }
    }
    request.extensions_mut().insert(CallId(call_id));
    let (hashed, digest) = hashing(std::mem::take(request.body_mut()));
    *request.body_mut() = hashed;
    // In a task of its own: the answer is stored even when the client goes away meanwhile,
    // which is when its retry needs it.
    let task_key = key.clone();
    let task_store = store.clone();
    let task = tokio::spawn(
        async move {
            let response = next.run(request).await;
            let body_sha256 = *digest.lock().unwrap_or_else(|p| p.into_inner());
            match body_sha256 {
                Some(sha) if response.status() != StatusCode::TOO_MANY_REQUESTS => {
                    let identity = Identity {
                        method,
                        target,
                        body_sha256: Some(sha),
                    };
                    store_answer(&task_store, &task_key, identity, response).await
                }
                _ => {
                    task_store.release(&task_key);
                    response
                }
            }
        }
        // The request's span goes with it: the call's spans stay in the caller's trace.
        .instrument(tracing::Span::current()),
    );
    match task.await {
        Ok(response) => response,
        Err(err) => {
            store.release(&key);
            ApiError::Internal(format!("the request's task failed: {err}")).into_response()
        }
    }
}

/// Buffers the answer, keeps it under the key and sends it.
async fn store_answer(
    store: &Arc<IdempotencyStore>,
    key: &str,
    identity: Identity,
    response: Response,
) -> Response {
    let (parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(err) => {
            store.release(key);
            return ApiError::Internal(format!("reading the answer to store it: {err}"))
                .into_response();
        }
    };
    let answer = Stored {
        status: parts.status,
        content_type: parts.headers.get(header::CONTENT_TYPE).cloned(),
        body: bytes.clone(),
    };
    store.complete(key, identity, answer);
    Response::from_parts(parts, Body::from(bytes))
}

/// A completed key: the stored answer if the request is the same one, else 422.
async fn replay_if_same(
    request: Request,
    method: &Method,
    target: &str,
    identity: Identity,
    answer: Stored,
) -> Response {
    if identity.method != *method || identity.target != target {
        return reused(&format!("{} {}", identity.method, identity.target));
    }
    // The body is hashed as it streams past; nothing of it is kept.
    let mut hasher = Sha256::new();
    let mut chunks = request.into_body().into_data_stream();
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(bytes) => hasher.update(&bytes),
            Err(err) => {
                return ApiError::BadRequest(format!("reading the request body: {err}"))
                    .into_response();
            }
        }
    }
    if identity.body_sha256 != Some(hasher.finalize().into()) {
        return reused(&format!(
            "{} {} with another body",
            identity.method, identity.target
        ));
    }
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() = answer.status;
    if let Some(content_type) = answer.content_type {
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type);
    }
    response.headers_mut().insert(
        HeaderName::from_static(REPLAYED_HEADER),
        HeaderValue::from_static("true"),
    );
    response
}

fn reused(first: &str) -> Response {
    ApiError::IdempotencyKeyReused(format!(
        "Idempotency-Key: already used for {first}; a key names one request (same method, path, query and body)"
    ))
    .into_response()
}

fn in_progress(call_id: &str, elapsed: Duration) -> Response {
    ApiError::IdempotencyInProgress(format!(
        "Idempotency-Key: the first request with this key is still running, as {call_id} (for {:.1} s); \
         its processes are listed by GET /v1/processes with call_id {call_id}; repeat the request when it is done to get its answer",
        elapsed.as_secs_f64()
    ))
    .into_response()
}

/// The body, hashed as the handler reads it; the digest is set once it was read to its end.
fn hashing(body: Body) -> (Body, Arc<Mutex<Option<[u8; 32]>>>) {
    let digest = Arc::new(Mutex::new(None));
    if body.size_hint().exact() == Some(0) {
        *digest.lock().unwrap_or_else(|p| p.into_inner()) = Some(Sha256::digest([]).into());
        return (body, digest);
    }
    let stream = Hashing {
        inner: body.into_data_stream(),
        hasher: Some(Sha256::new()),
        digest: digest.clone(),
    };
    (Body::from_stream(stream), digest)
}

struct Hashing {
    inner: axum::body::BodyDataStream,
    hasher: Option<Sha256>,
    digest: Arc<Mutex<Option<[u8; 32]>>>,
}

impl Stream for Hashing {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.poll_next_unpin(cx);
        match &polled {
            Poll::Ready(Some(Ok(bytes))) => {
                if let Some(hasher) = self.hasher.as_mut() {
                    hasher.update(bytes);
                }
            }
            Poll::Ready(None) => {
                if let Some(hasher) = self.hasher.take() {
                    *self.digest.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(hasher.finalize().into());
                }
            }
            Poll::Ready(Some(Err(_))) => self.hasher = None,
            Poll::Pending => {}
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 24: the whole entry counts (a long target and key cost what they hold), and the
    /// store keeps at most `MAX_ENTRIES` whatever their size.
    #[test]
    fn entries_are_counted_whole_and_capped() {
        let store = IdempotencyStore::new(Duration::from_secs(3600));
        let target = format!("/v1/files/x?{}", "q".repeat(8 * 1024));
        for n in 0..(MAX_ENTRIES + 2_000) {
            let key = format!("{n:0>200}");
            let identity = Identity {
                method: Method::PUT,
                target: target.clone(),
                body_sha256: None,
            };
            let answer = Stored {
                status: StatusCode::OK,
                content_type: None,
                body: Bytes::from_static(b"{}"),
            };
            store.complete(&key, identity, answer);
        }
        let keys = store.lock();
        assert!(keys.order.len() <= MAX_ENTRIES, "{}", keys.order.len());
        assert!(keys.entries.len() <= MAX_ENTRIES);
        assert!(keys.bytes <= MAX_STORED_BYTES, "{} bytes", keys.bytes);
        // Each entry holds its 8 KiB target: far fewer than MAX_ENTRIES fit in the budget.
        assert!(
            keys.entries.len() < 64 << 20 >> 13,
            "{}",
            keys.entries.len()
        );
        drop(keys);
        store.clear();
        assert_eq!(store.lock().entries.len(), 0);
        assert_eq!(store.lock().bytes, 0);
    }
}

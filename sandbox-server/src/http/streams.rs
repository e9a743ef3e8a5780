//! A process's output as it comes: Server-Sent Events (resumable with `Last-Event-ID`) and a
//! WebSocket that also takes input, resizes and signals. Both follow the process's buffer from
//! a cursor, so a client that leaves and returns loses nothing the buffer still holds, and is
//! told exactly what it no longer holds.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use sandbox_protocol::{ErrorResponse, PtyClientMessage, PtyServerMessage, SseEvent};

use super::extract::{PathParam, QueryArgs};
use super::{ApiError, AppState};
use crate::sandbox::processes::{Managed, decode_input};
use crate::tokens::Caller;

/// Bytes of output per read of the buffer.
const BATCH: usize = 64 * 1024;

/// Where a stream starts, and how often it sends a heartbeat.
#[derive(Debug, Clone, Copy, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct StreamQuery {
    /// The last chunk already seen (0: from the start); `Last-Event-ID` wins over it.
    #[serde(default)]
    #[param(minimum = 0)]
    after_seq: u64,
    /// Milliseconds between heartbeats while nothing happens (100 to 60000; 15000 by default).
    #[serde(default = "default_heartbeat")]
    #[param(minimum = 100, maximum = 60000)]
    heartbeat_ms: u64,
}

fn default_heartbeat() -> u64 {
    15_000
}

/// What a follower emits next: output, a gap, or the end.
enum Item {
    Message(Box<PtyServerMessage>, u64),
    End,
}

/// Follows a process's buffer from a cursor.
struct Follower {
    managed: Arc<Managed>,
    after: u64,
    changes: tokio::sync::watch::Receiver<u64>,
    queued: VecDeque<Item>,
    ended: bool,
}

impl Follower {
    fn new(managed: Arc<Managed>, after: u64) -> Follower {
        let changes = managed.subscribe();
        Follower {
            managed,
            after,
            changes,
            queued: VecDeque::new(),
            ended: false,
        }
    }

    /// The next item, waiting for the process when there is nothing new; `None` after the end.
    async fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(item) = self.queued.pop_front() {
                return Some(item);
            }
            if self.ended {
                return None;
            }
            self.changes.borrow_and_update();
            let output = self.managed.read(self.after, BATCH);
            if let Some(dropped) = output.dropped {
                let message = Box::new(PtyServerMessage::Dropped(dropped));
                self.queued
                    .push_back(Item::Message(message, dropped.to_seq));
            }
            for chunk in output.chunks {
                let seq = chunk.seq;
                self.queued.push_back(Item::Message(
                    Box::new(PtyServerMessage::Output(chunk)),
                    seq,
                ));
            }
            self.after = output.next_after_seq;
            if output.done {
                let process = output.process;
                let seq = process.last_seq;
                self.queued.push_back(Item::Message(
                    Box::new(PtyServerMessage::Exit { process }),
                    seq,
                ));
                self.queued.push_back(Item::End);
                self.ended = true;
                continue;
            }
            if self.queued.is_empty() && self.changes.changed().await.is_err() {
                self.ended = true;
            }
        }
    }
}

fn cursor(headers: &HeaderMap, query: &StreamQuery) -> Result<u64, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(query.after_seq);
    };
    let digits = value.as_bytes();
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(ApiError::InvalidArguments(
            "Last-Event-ID: must be the number of the last event received (1 to 18 digits)"
                .to_owned(),
        ));
    }
    Ok(std::str::from_utf8(digits)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_default())
}

/// A follower's place among `--max-followers`, held for as long as it follows.
pub(crate) fn follower_permit(
    state: &AppState,
) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    state
        .followers
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::TooManyFollowers(state.limits.max_followers as usize))
}

/// A cursor is a whole number up to `i64::MAX` (the document's `int64`).
pub(crate) fn check_cursor(after_seq: u64) -> Result<(), ApiError> {
    if after_seq > i64::MAX as u64 {
        return Err(ApiError::InvalidArguments(format!(
            "after_seq: {after_seq} is over the largest cursor, {}",
            i64::MAX
        )));
    }
    Ok(())
}

fn stream_query(query: StreamQuery) -> Result<StreamQuery, ApiError> {
    check_cursor(query.after_seq)?;
    if !(100..=60_000).contains(&query.heartbeat_ms) {
        return Err(ApiError::InvalidArguments(
            "heartbeat_ms: must be 100 to 60000".to_owned(),
        ));
    }
    Ok(query)
}

/// The process's output as Server-Sent Events: `output` events (`id` is the chunk's number,
/// `data` an `OutputChunk`), `dropped` (a `DroppedOutput`: chunks the buffer no longer held),
/// heartbeat comments while it is quiet, and a final `exit` (a `ManagedProcess`), after which
/// the stream ends. Reconnect with `Last-Event-ID` (browsers do) to resume where it left off.
#[utoipa::path(
    get, path = "/v1/processes/{id}/events", tag = "processes",
    params(
        ("id" = String, Path, description = "The id it was started with"),
        ("Last-Event-ID" = Option<String>, Header, description = "The last event received (its number, at most 18 digits); the stream resumes after it"),
        StreamQuery,
    ),
    responses(
        (status = 200, description = "An event stream (`curl -N`), one `SseEvent` per event", content_type = "text/event-stream", body = SseEvent),
        (status = 404, description = "No process by that id (`process_not_found`)", body = ErrorResponse),
        (status = 422, description = "A query parameter or `Last-Event-ID` fails its check", body = ErrorResponse),
        (status = 429, description = "As many clients follow process output as the server takes (`--max-followers`; `overloaded`, with Retry-After)", body = ErrorResponse),
    ),
)]
pub(crate) async fn events(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
    headers: HeaderMap,
    QueryArgs(query): QueryArgs<StreamQuery>,
    Extension(caller): Extension<Caller>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let query = stream_query(query)?;
    let after = cursor(&headers, &query)?;
    let managed = state.ctx.processes.get(&id)?;
    let permit = follower_permit(&state)?;
    let follower = Follower::new(managed, after);
    // A stream ends with its token: revoked or expired, it says why in an `error` event.
    let lapsed: Lapsed = Box::pin(state.tokens.lapsed(caller));
    // The permit lives with the stream: it is given back when the client leaves.
    let events = futures::stream::unfold(Some((follower, permit, lapsed)), |open| async move {
        let (mut follower, permit, mut lapsed) = open?;
        tokio::select! {
            item = follower.next() => match item? {
                Item::End => None,
                Item::Message(message, seq) => {
                    Some((Ok(sse_event(&message, seq)), Some((follower, permit, lapsed))))
                }
            },
            // No `id`: a client's cursor stays at the last chunk it was sent.
            why = &mut lapsed => {
                let data = serde_json::to_string(&why).unwrap_or_default();
                Some((Ok(Event::default().event("error").data(data)), None))
            }
        }
    });
    let heartbeat = KeepAlive::new()
        .interval(Duration::from_millis(query.heartbeat_ms))
        .text("heartbeat");
    Ok(Sse::new(events).keep_alive(heartbeat))
}

fn sse_event(message: &PtyServerMessage, seq: u64) -> Event {
    let (name, data) = match message {
        PtyServerMessage::Output(chunk) => ("output", serde_json::to_string(chunk)),
        PtyServerMessage::Dropped(dropped) => ("dropped", serde_json::to_string(dropped)),
        PtyServerMessage::Exit { process } => ("exit", serde_json::to_string(process)),
        PtyServerMessage::Error { message } => ("error", serde_json::to_string(message)),
    };
    Event::default()
        .event(name)
        .id(seq.to_string())
        .data(data.unwrap_or_default())
}

/// A WebSocket to the process (meant for `tty` processes, open to all): the server sends
/// `PtyServerMessage`s as text frames (output from `after_seq`, gaps, then `exit` and a close);
/// the client sends input as binary frames or `PtyClientMessage`s as text frames (input,
/// resize, signal, close_stdin).
#[utoipa::path(
    get, path = "/v1/processes/{id}/pty", tag = "processes",
    params(("id" = String, Path, description = "The id it was started with"), StreamQuery),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol"),
        (status = 400, description = "Not a WebSocket upgrade request", body = ErrorResponse),
        (status = 404, description = "No process by that id (`process_not_found`)", body = ErrorResponse),
        (status = 422, description = "A query parameter fails its check", body = ErrorResponse),
        (status = 429, description = "As many clients follow process output as the server takes (`--max-followers`; `overloaded`, with Retry-After)", body = ErrorResponse),
    ),
)]
pub(crate) async fn pty(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
    QueryArgs(query): QueryArgs<StreamQuery>,
    Extension(caller): Extension<Caller>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let query = stream_query(query)?;
    let managed = state.ctx.processes.get(&id)?;
    let permit = follower_permit(&state)?;
    let upgrade = upgrade.map_err(|rejection| {
        ApiError::BadRequest(format!(
            "this route is a WebSocket (GET with `Upgrade: websocket`): {}",
            rejection.body_text()
        ))
    })?;
    let lapsed: Lapsed = Box::pin(state.tokens.lapsed(caller));
    Ok(upgrade
        .on_upgrade(move |socket| async move {
            serve_socket(socket, managed, query.after_seq, lapsed).await;
            drop(permit);
        })
        .into_response())
}

/// Resolves, with why, when the token that opened a stream lapses.
type Lapsed = std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>;

async fn serve_socket(
    mut socket: WebSocket,
    managed: Arc<Managed>,
    after: u64,
    mut lapsed: Lapsed,
) {
    let mut follower = Follower::new(managed.clone(), after);
    loop {
        tokio::select! {
            why = &mut lapsed => {
                let _ = send(&mut socket, &PtyServerMessage::Error { message: why }).await;
                let _ = socket.send(Message::Close(None)).await;
                return;
            },
            item = follower.next() => match item {
                Some(Item::Message(message, _)) => {
                    if send(&mut socket, &message).await.is_err() {
                        return;
                    }
                }
                Some(Item::End) | None => {
                    let _ = socket.send(Message::Close(None)).await;
                    return;
                }
            },
            frame = socket.recv() => match frame {
                Some(Ok(frame)) => {
                    if let Err(message) = apply(&managed, frame).await
                        && send(&mut socket, &PtyServerMessage::Error { message }).await.is_err()
                    {
                        return;
                    }
                }
                // The client left; the process goes on.
                Some(Err(_)) | None => return,
            },
        }
    }
}

async fn send(socket: &mut WebSocket, message: &PtyServerMessage) -> Result<(), axum::Error> {
    let text = serde_json::to_string(message).unwrap_or_default();
    socket.send(Message::Text(text.into())).await
}

/// Applies one client frame; the error is sent back as an `error` message.
async fn apply(managed: &Managed, frame: Message) -> Result<(), String> {
    let message = match frame {
        Message::Binary(bytes) => {
            return managed
                .write_stdin(&bytes, false)
                .await
                .map(drop)
                .map_err(|err| err.to_string());
        }
        Message::Text(text) => serde_json::from_str::<PtyClientMessage>(&text)
            .map_err(|err| format!("not a client message: {err}"))?,
        Message::Ping(_) | Message::Pong(_) | Message::Close(_) => return Ok(()),
    };
    let result = match message {
        PtyClientMessage::Input { data, encoding } => {
            let bytes = decode_input(&data, encoding).map_err(|err| err.to_string())?;
            managed.write_stdin(&bytes, false).await.map(drop)
        }
        PtyClientMessage::Resize { rows, cols } => {
            managed.resize(sandbox_protocol::TtySize { rows, cols })
        }
        PtyClientMessage::Signal { signal } => managed.signal(signal),
        PtyClientMessage::CloseStdin => managed.write_stdin(&[], true).await.map(drop),
    };
    result.map_err(|err| err.to_string())
}

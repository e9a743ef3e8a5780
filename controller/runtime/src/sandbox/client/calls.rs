//! How one tool call is sent, and how a running `bash` call is followed: the sandbox keeps it
//! as a process under the call's name, whose event stream carries its output as it comes.

use base64::Engine;
use futures::StreamExt;
use sandbox_protocol::{DroppedOutput, Encoding, OutputChunk, OutputStream};

use super::capped::{EVENT_CAP, size};
use super::{SandboxClient, SandboxError, encode_segment, is_not_found};

/// How to send one tool call.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallOptions<'a> {
    /// `Idempotency-Key`: the call is repeated safely after a dropped connection.
    pub key: Option<&'a str>,
    /// Ask for the changes since this snapshot, with small new versions and outputs inline.
    pub since: Option<&'a str>,
    /// Ask for the state fingerprint after the call.
    pub fingerprint: bool,
    /// `Sandbox-Call-Id`: the call's name on the sandbox, under which a `bash` call is followed
    /// while it runs ([`SandboxClient::follow_process`]).
    pub name: Option<&'a str>,
}

impl CallOptions<'_> {
    pub(super) fn query(&self) -> String {
        let mut parts = Vec::new();
        if let Some(since) = self.since {
            parts.push(format!("since={}", encode_segment(since)));
        }
        if self.fingerprint {
            parts.push("fingerprint=true".to_owned());
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("?{}", parts.join("&"))
        }
    }
}

/// A piece of a followed call's output, as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveOutput {
    Output {
        stream: OutputStream,
        text: String,
    },
    /// Bytes the sandbox's buffer dropped before this follower read them (the call's
    /// artifacts still hold them).
    Dropped(u64),
}

impl SandboxClient {
    /// Follows process `id` through `GET /v1/processes/{id}/events`, handing `each` every piece
    /// of output until the process exits. A process not there yet (the call has not started)
    /// is asked for again every 50 ms: the caller bounds the whole, typically by the call.
    pub async fn follow_process(
        &self,
        id: &str,
        each: &mut (dyn FnMut(LiveOutput) + Send),
    ) -> Result<(), SandboxError> {
        let path = format!("/v1/processes/{}/events", encode_segment(id));
        let response = loop {
            // No time bound of its own: the stream lasts as long as the process.
            match self.send(self.unbounded(reqwest::Method::GET, &path)).await {
                Ok(response) => break response,
                Err(err) if is_not_found(&err) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(err) => return Err(err),
            }
        };
        let mut body = response.bytes_stream();
        let mut events = EventBuffer::default();
        while let Some(bytes) = body.next().await {
            events.push(&bytes.map_err(|err| self.unreachable(&err))?);
            while let Some(block) = events.next_event() {
                if self.event(&String::from_utf8_lossy(block), each)? {
                    return Ok(());
                }
            }
            if events.pending() > EVENT_CAP {
                return Err(SandboxError::BadResponse {
                    url: self.url().to_owned(),
                    message: format!(
                        "its event stream {path} sent more than {} without ending an event: a sandbox answer is capped (a hostile or broken server?)",
                        size(EVENT_CAP as u64)
                    ),
                });
            }
        }
        Ok(())
    }

    /// One Server-Sent Event handed on; whether it was the last (`exit`).
    fn event(
        &self,
        block: &str,
        each: &mut (dyn FnMut(LiveOutput) + Send),
    ) -> Result<bool, SandboxError> {
        let (mut event, mut data) = ("", "");
        for line in block.lines() {
            if let Some(value) = line.strip_prefix("event: ") {
                event = value;
            } else if let Some(value) = line.strip_prefix("data: ") {
                data = value;
            }
        }
        match event {
            "output" => {
                let chunk: OutputChunk = self.decode_bytes(data.as_bytes())?;
                let stream = chunk.stream;
                each(LiveOutput::Output {
                    stream,
                    text: chunk_text(chunk),
                });
            }
            "dropped" => {
                let dropped: DroppedOutput = self.decode_bytes(data.as_bytes())?;
                each(LiveOutput::Dropped(dropped.bytes));
            }
            "exit" => return Ok(true),
            _ => {} // a heartbeat, or an event this client does not know
        }
        Ok(false)
    }
}

/// A chunk of a process's output as text (a binary chunk's bytes read lossily).
pub(crate) fn chunk_text(chunk: OutputChunk) -> String {
    match chunk.encoding {
        Encoding::Utf8 => chunk.data,
        Encoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(&chunk.data)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default(),
    }
}

/// A Server-Sent Events stream as it arrives, cut into events (blocks ending in a blank
/// line). Each byte is scanned once, however the stream is split into chunks, and the bytes of
/// events handed out are dropped once per chunk, not once per event.
#[derive(Debug, Default)]
pub(super) struct EventBuffer {
    buffer: Vec<u8>,
    /// Where the events not handed out yet start.
    start: usize,
    /// Where the next scan for an event's end starts: bytes before it hold none.
    scanned: usize,
}

impl EventBuffer {
    /// Adds a chunk of the stream.
    pub(super) fn push(&mut self, bytes: &[u8]) {
        self.buffer.drain(..self.start);
        self.scanned -= self.start;
        self.start = 0;
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole event, its blank line included.
    pub(super) fn next_event(&mut self) -> Option<&[u8]> {
        let from = self.scanned.max(self.start);
        match self.buffer[from..].windows(2).position(|w| w == b"\n\n") {
            Some(at) => {
                let (start, end) = (self.start, from + at + 2);
                (self.start, self.scanned) = (end, end);
                Some(&self.buffer[start..end])
            }
            None => {
                // The last byte may be the first `\n` of the next chunk's end.
                self.scanned = self.buffer.len().saturating_sub(1).max(self.start);
                None
            }
        }
    }

    /// Bytes held of an event not ended yet.
    pub(super) fn pending(&self) -> usize {
        self.buffer.len() - self.start
    }
}

/// What bounds the wait for a call's answer.
#[derive(Debug, Clone, Copy)]
pub(super) enum Timeout {
    /// A command's: its own timeout in seconds, or the server's default.
    Command(Option<u32>),
    /// Any other tool's: the longest the server allows.
    Longest,
}

//! The body of `GET /v1/workspace/archive`: the writer's chunks, sent to the response with a
//! bound on how long and how slowly a client may read, and its `Content-Type`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, header};
use tokio::sync::mpsc::error::SendTimeoutError;

/// The slowest a client may read an archive, on average past its first [`STALL`]: 16 KiB/s.
const MIN_RATE: u64 = 16 << 10;

/// How long the archive writer waits for room for a chunk (a client that reads nothing)
/// before it abandons the stream and gives its thread and its place back.
const STALL: Duration = Duration::from_secs(60);

/// The chunks the writer sends. When the writer stops without having finished (it failed, or
/// its client stalled), the body ends with an error, so the client sees an aborted transfer
/// and never a truncated archive that looks whole.
pub(super) fn archive_body(
    receiver: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
    complete: Arc<AtomicBool>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::unfold(Some(receiver), move |receiver| {
        let complete = complete.clone();
        async move {
            let mut receiver = receiver?;
            match receiver.recv().await {
                Some(item) => Some((item, Some(receiver))),
                None if complete.load(Ordering::Acquire) => None,
                None => {
                    let unfinished = std::io::Error::other(
                        "the workspace archive was not finished (see the server log)",
                    );
                    Some((Err(unfinished), None))
                }
            }
        }
    })
}

/// `application/octet-stream` when the request's `Accept` names it and not `application/x-tar`
/// (nor a wildcard); `application/x-tar` otherwise.
pub(super) fn archive_media_type(headers: &HeaderMap) -> &'static str {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|item| {
            item.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .collect::<Vec<_>>();
    let names = |wanted: &str| accept.iter().any(|item| item == wanted);
    if names("application/octet-stream")
        && !(names("application/x-tar") || names("*/*") || names("application/*"))
    {
        "application/octet-stream"
    } else {
        "application/x-tar"
    }
}

const CHUNK: usize = 256 * 1024;

/// A `Write` that sends what is written to a response body in chunks, each waiting at most
/// `stall` for room: a client that reads nothing cannot hold the writing thread.
pub(super) struct ChannelWriter {
    sender: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    buffer: Vec<u8>,
    /// The runtime serving the response: the blocking thread waits for room through it.
    runtime: tokio::runtime::Handle,
    stall: Duration,
    /// Past its first `stall`, a client that reads less than this (bytes a second, on
    /// average) is abandoned too: a chunk now and then would hold the stream for ever.
    min_rate: u64,
    started: std::time::Instant,
    sent: u64,
}

impl ChannelWriter {
    /// A writer to `sender` with the server's limits: [`STALL`] and [`MIN_RATE`], timed from
    /// now.
    pub(super) fn new(sender: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>) -> Self {
        ChannelWriter {
            sender,
            buffer: Vec::with_capacity(CHUNK),
            runtime: tokio::runtime::Handle::current(),
            stall: STALL,
            min_rate: MIN_RATE,
            started: std::time::Instant::now(),
            sent: 0,
        }
    }
}

impl std::io::Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(data);
        if self.buffer.len() >= CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(CHUNK),
        ));
        let sent = self
            .runtime
            .block_on(self.sender.send_timeout(Ok(chunk), self.stall));
        match sent {
            Ok(()) => {
                self.sent += CHUNK as u64;
                let elapsed = self.started.elapsed();
                if elapsed > self.stall
                    && (self.sent as f64 / elapsed.as_secs_f64()) < self.min_rate as f64
                {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "the client read {} bytes in {:.0} s, under {} bytes a second; the archive was abandoned",
                            self.sent,
                            elapsed.as_secs_f64(),
                            self.min_rate
                        ),
                    ));
                }
                Ok(())
            }
            Err(SendTimeoutError::Timeout(_)) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing for {} s; the archive was abandoned",
                    self.stall.as_secs_f64()
                ),
            )),
            Err(SendTimeoutError::Closed(_)) => Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the client went away",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A client that reads nothing: the writer gives up after `stall`, so its blocking thread
    /// (and its place among the archive streams) is not held for as long as the client stays.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_client_that_reads_nothing_frees_the_writer() {
        let (sender, _receiver) = tokio::sync::mpsc::channel(1);
        let mut writer = ChannelWriter {
            sender,
            buffer: Vec::new(),
            runtime: tokio::runtime::Handle::current(),
            stall: Duration::from_millis(100),
            min_rate: 0,
            started: std::time::Instant::now(),
            sent: 0,
        };
        let started = std::time::Instant::now();
        let written = tokio::task::spawn_blocking(move || {
            let chunk = vec![0u8; CHUNK];
            writer.write_all(&chunk)?; // fills the channel
            writer.write_all(&chunk) // finds no room
        })
        .await
        .unwrap();
        let err = written.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    /// A client that reads a chunk now and then, never stalling for the whole `stall`, is
    /// abandoned once its average rate is under the least.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_reads_a_trickle_is_abandoned() {
        let (sender, mut receiver) = tokio::sync::mpsc::channel(1);
        let mut writer = ChannelWriter {
            sender,
            buffer: Vec::new(),
            runtime: tokio::runtime::Handle::current(),
            stall: Duration::from_millis(100),
            min_rate: (CHUNK as u64) * 100,
            started: std::time::Instant::now(),
            sent: 0,
        };
        let reader = tokio::spawn(async move {
            while receiver.recv().await.is_some() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let written = tokio::task::spawn_blocking(move || {
            let chunk = vec![0u8; CHUNK];
            for _ in 0..100 {
                writer.write_all(&chunk)?;
            }
            Ok::<_, std::io::Error>(())
        })
        .await
        .unwrap();
        let err = written.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("bytes a second"), "{err}");
        reader.abort();
    }
}

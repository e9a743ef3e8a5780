//! A workspace archive moved to or between sandboxes, watched: a transfer that moves no byte
//! for [`STALL`] has stalled (the other side stopped reading or sending), and once the body is
//! sent the answer may take as long as unpacking it can (a minute, and a second per 20 MB);
//! either is a [`SandboxError::Stalled`], never a wait without end. A large workspace that
//! keeps moving is never cut short.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio_util::bytes::Bytes;

use super::SandboxError;

/// How long a transfer may move no byte.
pub(super) const STALL: Duration = Duration::from_secs(60);
/// How fast a sandbox unpacks at the least, for the wait after the body is sent.
const UNPACK_BYTES_PER_SEC: u64 = 20 * 1024 * 1024;

/// What a body has moved so far.
#[derive(Debug, Default, Clone)]
pub(super) struct Progress {
    moved: Arc<AtomicU64>,
    sent: Arc<AtomicBool>,
}

impl Progress {
    /// `stream`, counted as it is read (by the request sending it); its end marks the body
    /// sent.
    pub(super) fn count<S, E>(&self, stream: S) -> impl Stream<Item = Result<Bytes, E>> + use<S, E>
    where
        S: Stream<Item = Result<Bytes, E>>,
    {
        let (moved, sent) = (Arc::clone(&self.moved), Arc::clone(&self.sent));
        let end = futures::stream::poll_fn(move |_| {
            sent.store(true, Ordering::Relaxed);
            std::task::Poll::Ready(None)
        });
        stream
            .map(move |chunk| {
                if let Ok(bytes) = &chunk {
                    moved.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                }
                chunk
            })
            .chain(end)
    }

    /// Runs `request` (which sends a body counted by this), failing it when the body moves no
    /// byte for `stall`, or when the answer after the whole body takes longer than `stall`
    /// and a second per 20 MB sent. `what` and `url` name it in the error.
    pub(super) async fn watch<T>(
        &self,
        url: &str,
        what: &str,
        stall: Duration,
        request: impl Future<Output = Result<T, SandboxError>>,
    ) -> Result<T, SandboxError> {
        let tick = stall / 10;
        let mut request = std::pin::pin!(request);
        let (mut last, mut idle) = (0, Duration::ZERO);
        loop {
            tokio::select! {
                done = &mut request => return done,
                () = tokio::time::sleep(tick) => {}
            }
            let moved = self.moved.load(Ordering::Relaxed);
            if moved == last {
                idle += tick;
            } else {
                (last, idle) = (moved, Duration::ZERO);
            }
            let bound = if self.sent.load(Ordering::Relaxed) {
                stall + Duration::from_secs(moved / UNPACK_BYTES_PER_SEC)
            } else {
                stall
            };
            if idle >= bound {
                return Err(SandboxError::Stalled {
                    url: url.to_owned(),
                    what: what.to_owned(),
                    moved,
                    waited: idle,
                });
            }
        }
    }
}

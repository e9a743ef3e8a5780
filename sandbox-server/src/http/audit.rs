//! The audit trail (`--audit-log FILE`): one JSON line per request, written when its answer has
//! been sent (a stream's when it ends): when, who (the token's id, the client certificate's
//! subject, the peer's address), what (method, route template, tool, call id), how it ended
//! (status, error type), how long it took and how many bytes went each way. Never a path's,
//! an argument's or a body's content, nor a secret. The file rotates by size
//! (`FILE.1` … `FILE.N`), and one thread writes it, so no request waits on the disk.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use sandbox_protocol::ErrorType;
use serde::Serialize;

use super::AppState;
use crate::tokens::Caller;

/// Records waiting for the writer, at most; past it a record is counted as dropped and the
/// count is written once the writer catches up.
const QUEUE: usize = 65_536;

/// Who is at the other end of a connection: its address, and its certificate's subject under
/// mutual TLS. Put on every request of the connection by the connection loop.
#[derive(Debug, Clone)]
pub struct Peer {
    pub address: Option<std::net::SocketAddr>,
    pub subject: Option<Arc<str>>,
}

/// One line of the audit log.
#[derive(Debug, Serialize)]
struct Record {
    time: String,
    token: Option<String>,
    /// The id a refused minted token claimed (a 401 has no `token`).
    #[serde(skip_serializing_if = "Option::is_none")]
    claimed: Option<String>,
    subject: Option<Arc<str>>,
    peer: Option<String>,
    method: String,
    route: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    call_id: Option<String>,
    status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'static str>,
    duration_ms: f64,
    bytes_in: u64,
    bytes_out: u64,
}

/// What the writer thread is sent: a line, or a request to say when all before it are on disk.
#[derive(Debug)]
enum Entry {
    Record(Box<Record>),
    Flush(std::sync::mpsc::Sender<()>),
}

/// Where the lines go: a bounded queue to the writer thread.
#[derive(Debug, Clone)]
pub struct AuditLog {
    queue: SyncSender<Entry>,
    dropped: Arc<AtomicU64>,
}

/// What `--audit-log` asked for.
#[derive(Debug, Clone)]
pub struct AuditFile {
    pub path: PathBuf,
    /// Rotate once the file would pass this size.
    pub max_bytes: u64,
    /// How many rotated files to keep.
    pub keep: u32,
}

impl AuditLog {
    /// Opens (creates, mode 0600) the file and starts its writer.
    pub fn open(file: &AuditFile) -> std::io::Result<AuditLog> {
        let out = open_append(&file.path)?;
        let size = out.metadata()?.len();
        let (queue, records) = std::sync::mpsc::sync_channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            file: file.clone(),
            out: BufWriter::new(out),
            size,
            dropped: dropped.clone(),
        };
        std::thread::Builder::new()
            .name("audit-log".to_owned())
            .spawn(move || writer.run(&records))?;
        Ok(AuditLog { queue, dropped })
    }

    /// Waits (up to `limit`) until every line queued before is written and flushed: what a
    /// server does once its last connection has ended, before it exits.
    pub fn flush(&self, limit: std::time::Duration) -> bool {
        let (done, written) = std::sync::mpsc::channel();
        self.queue.send(Entry::Flush(done)).is_ok() && written.recv_timeout(limit).is_ok()
    }

    fn send(&self, record: Record) {
        match self.queue.try_send(Entry::Record(Box::new(record))) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

struct Writer {
    file: AuditFile,
    out: BufWriter<File>,
    size: u64,
    dropped: Arc<AtomicU64>,
}

impl Writer {
    fn run(mut self, entries: &Receiver<Entry>) {
        while let Ok(entry) = entries.recv() {
            let mut next = Some(entry);
            let mut waiting = Vec::new();
            // Everything queued now, then one flush.
            while let Some(entry) = next {
                match entry {
                    Entry::Record(record) => {
                        self.write(&serde_json::to_value(&record).unwrap_or_default());
                    }
                    Entry::Flush(done) => waiting.push(done),
                }
                next = entries.try_recv().ok();
            }
            let dropped = self.dropped.swap(0, Ordering::Relaxed);
            if dropped > 0 {
                self.write(&serde_json::json!({
                    "time": crate::time::now_rfc3339(),
                    "dropped": dropped,
                    "why": "the writer fell behind: these requests are not recorded",
                }));
            }
            if let Err(err) = self.out.flush() {
                tracing::error!(path = %self.file.path.display(), cause = %err, "writing the audit log");
            }
            for done in waiting {
                let _ = done.send(());
            }
        }
    }

    fn write(&mut self, line: &serde_json::Value) {
        let mut bytes = serde_json::to_vec(line).unwrap_or_default();
        bytes.push(b'\n');
        if self.size > 0
            && self.size + bytes.len() as u64 > self.file.max_bytes
            && let Err(err) = self.rotate()
        {
            tracing::error!(path = %self.file.path.display(), cause = %err, "rotating the audit log");
        }
        match self.out.write_all(&bytes) {
            Ok(()) => self.size += bytes.len() as u64,
            Err(err) => {
                tracing::error!(path = %self.file.path.display(), cause = %err, "writing the audit log");
            }
        }
    }

    /// `FILE` becomes `FILE.1`, `FILE.1` `FILE.2`, …; the oldest past `keep` is removed.
    fn rotate(&mut self) -> std::io::Result<()> {
        self.out.flush()?;
        let numbered = |n: u32| {
            let mut name = self.file.path.clone().into_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        if self.file.keep == 0 {
            std::fs::remove_file(&self.file.path)?;
        } else {
            for n in (1..self.file.keep).rev() {
                match std::fs::rename(numbered(n), numbered(n + 1)) {
                    Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
                    _ => {}
                }
            }
            std::fs::rename(&self.file.path, numbered(1))?;
        }
        self.out = BufWriter::new(open_append(&self.file.path)?);
        self.size = 0;
        Ok(())
    }
}

/// The route template and the error type, as the inner layers left them on the response.
fn route_of(response: &Response) -> String {
    response
        .extensions()
        .get::<super::observe::Route>()
        .map_or_else(
            || "unmatched".to_owned(),
            |route| route.0.as_str().to_owned(),
        )
}

/// The middleware: the request's body is counted on its way in, the response's on its way
/// out; the line is queued when the response's body is done (or dropped by a client gone).
pub(crate) async fn audit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(log) = state.audit.clone() else {
        return next.run(request).await;
    };
    let started = Instant::now();
    let time = crate::time::now_rfc3339();
    let method = request.method().to_string();
    // The name as the handler reads it: `POST /v1/tools/b%61sh` runs `bash` and says so.
    let tool = super::scopes::tool_in_path(request.uri().path())
        .and_then(Result::ok)
        .filter(|name| state.registry.get(name).is_some())
        .map(std::borrow::Cow::into_owned);
    // The caller's name for the call, when it is a valid one (a bad one is refused, and not
    // copied into the log).
    let call_id = super::tools::chosen_call_id(request.headers())
        .ok()
        .flatten();
    let peer = request.extensions().get::<Peer>().cloned();
    let bytes_in = Arc::new(AtomicU64::new(0));
    let request = request.map(|body| {
        Body::new(Counted {
            inner: body,
            bytes: bytes_in.clone(),
            done: None,
        })
    });
    let response = next.run(request).await;
    let caller = response.extensions().get::<Caller>();
    let record = Record {
        time,
        token: caller.and_then(Caller::token_id).map(str::to_owned),
        claimed: response
            .extensions()
            .get::<super::auth::Claimed>()
            .map(|claimed| claimed.0.clone()),
        subject: peer.as_ref().and_then(|p| p.subject.clone()),
        peer: peer.and_then(|p| p.address).map(|a| a.to_string()),
        method,
        route: route_of(&response),
        tool,
        call_id,
        status: response.status().as_u16(),
        error: response
            .extensions()
            .get::<ErrorType>()
            .map(|kind| kind.as_str()),
        duration_ms: 0.0,
        bytes_in: 0,
        bytes_out: 0,
    };
    let done = Done {
        log,
        record: Some(record),
        started,
        bytes_in,
    };
    response.map(|body| {
        Body::new(Counted {
            inner: body,
            bytes: Arc::new(AtomicU64::new(0)),
            done: Some(done),
        })
    })
}

/// What finishes a line once the response's body is done.
struct Done {
    log: AuditLog,
    record: Option<Record>,
    started: Instant,
    bytes_in: Arc<AtomicU64>,
}

/// A body that counts its bytes; a response's also queues its line when it is dropped.
struct Counted {
    inner: Body,
    bytes: Arc<AtomicU64>,
    done: Option<Done>,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let Some(done) = self.done.as_mut() else {
            return;
        };
        if let Some(mut record) = done.record.take() {
            record.duration_ms = (done.started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
            record.bytes_in = done.bytes_in.load(Ordering::Relaxed);
            record.bytes_out = self.bytes.load(Ordering::Relaxed);
            done.log.send(record);
        }
    }
}

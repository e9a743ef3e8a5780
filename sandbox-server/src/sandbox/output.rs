//! Output in bounded memory: capture, artifacts, and the text a model sees.
//!
//! A stream is fed chunk by chunk. Memory holds only a head and a tail window (enough for the
//! model-facing text); every byte up to the artifact cap is hashed as it arrives and kept in
//! the artifact store. A stream that stays within [`IN_MEMORY_MAX`] never touches the disk: its
//! bytes are the head window, kept in a pool of at most [`MEMORY_BUDGET`] bytes whose oldest
//! entries are written out to files when it is full. A longer stream goes to a file as it comes.
//! Whatever a command prints, the server holds a few hundred KB per call and the pool.

use std::collections::{HashMap, VecDeque};

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sandbox_protocol::Artifact;
use sha2::{Digest, Sha256};

/// Characters set aside for the elision marker when a text is cut.
const MARKER_ALLOWANCE: usize = 200;

/// The longest stream kept in memory rather than in a file. Creating a file per command costs
/// more than the command itself on a busy file system (most outputs are a few lines).
pub const IN_MEMORY_MAX: usize = 64 * 1024;

/// The most bytes of artifacts held in memory at once; past it the oldest go to files.
pub const MEMORY_BUDGET: u64 = 16 * 1024 * 1024;

/// Artifacts in memory or on disk, evicted oldest first past the retention budget.
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    dir: PathBuf,
    cap: u64,
    retention: u64,
    inner: Arc<Mutex<StoreInner>>,
}

#[derive(Debug, Default)]
struct StoreInner {
    order: VecDeque<String>,
    sizes: HashMap<String, u64>,
    total: u64,
    /// The artifacts not yet in a file, oldest first in `memory_order`.
    memory: HashMap<String, Arc<[u8]>>,
    memory_order: VecDeque<String>,
    memory_total: u64,
    /// Bytes of output captured since the start (before truncation and caps); kept by `clear`.
    captured: u64,
}

/// What the store holds, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreStats {
    pub kept: u64,
    pub kept_bytes: u64,
    pub captured_bytes: u64,
}

impl ArtifactStore {
    /// Uses `dir` (created if missing) for artifact files.
    pub fn new(dir: &Path, cap: u64, retention: u64) -> io::Result<ArtifactStore> {
        fs::create_dir_all(dir)?;
        Ok(ArtifactStore {
            dir: dir.to_owned(),
            cap,
            retention,
            inner: Arc::new(Mutex::new(StoreInner::default())),
        })
    }

    /// Forgets and deletes every artifact (a reset). Captures still running keep writing their
    /// own files, which are forgotten as well.
    pub fn clear(&self) -> io::Result<()> {
        let mut inner = self.lock();
        let captured = inner.captured;
        *inner = StoreInner {
            captured,
            ..StoreInner::default()
        };
        drop(inner);
        crate::state_dir::empty(&self.dir)
    }

    /// A stored artifact: its file, its bytes when they are still in memory, or `Empty` for a
    /// stream that printed nothing.
    pub fn lookup(&self, id: &str) -> Option<StoredArtifact> {
        let inner = self.lock();
        match inner.sizes.get(id)? {
            0 => Some(StoredArtifact::Empty),
            _ => Some(match inner.memory.get(id) {
                Some(bytes) => StoredArtifact::Memory(bytes.clone()),
                None => StoredArtifact::File(self.dir.join(id)),
            }),
        }
    }

    /// The artifact as a file (written out now if it was in memory), for serving byte ranges.
    pub fn file(&self, id: &str) -> Option<io::Result<StoredArtifact>> {
        let mut inner = self.lock();
        if !inner.sizes.contains_key(id) {
            return None;
        }
        if inner.memory.contains_key(id) {
            inner.memory_order.retain(|other| other != id);
            if let Err(err) = self.spill(&mut inner, id) {
                return Some(Err(err));
            }
        }
        drop(inner);
        self.lookup(id).map(Ok)
    }

    /// The artifacts kept and the bytes captured so far.
    pub fn stats(&self) -> StoreStats {
        let inner = self.lock();
        StoreStats {
            kept: inner.order.len() as u64,
            kept_bytes: inner.total,
            captured_bytes: inner.captured,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StoreInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes a memory artifact to its file (already out of `memory_order`). On failure the
    /// bytes stay in memory, over the budget rather than lost.
    fn spill(&self, inner: &mut StoreInner, id: &str) -> io::Result<()> {
        let Some(bytes) = inner.memory.get(id) else {
            return Ok(());
        };
        if let Err(err) = fs::write(self.dir.join(id), bytes) {
            inner.memory_order.push_front(id.to_owned());
            return Err(err);
        }
        let size = bytes.len() as u64;
        inner.memory.remove(id);
        inner.memory_total -= size;
        Ok(())
    }

    /// Keeps a short stream's bytes in memory, writing the oldest out past the budget.
    fn keep_in_memory(&self, id: &str, bytes: &[u8]) {
        let mut inner = self.lock();
        inner.memory.insert(id.to_owned(), Arc::from(bytes));
        inner.memory_order.push_back(id.to_owned());
        inner.memory_total += bytes.len() as u64;
        while inner.memory_total > MEMORY_BUDGET {
            let Some(oldest) = inner.memory_order.pop_front() else {
                break;
            };
            if let Err(err) = self.spill(&mut inner, &oldest) {
                tracing::warn!(artifact = %oldest, cause = %err, "could not write an artifact out of memory; keeping it there");
                break;
            }
        }
    }

    /// Starts capturing one stream whose text may be cut to `text_limit` characters.
    pub fn capture(&self, text_limit: usize) -> StreamCapture {
        let id = format!("art_{:032x}", rand::random::<u128>());
        // Four bytes per character is the most UTF-8 needs, so the windows always hold
        // at least `text_limit` characters.
        let window = text_limit.saturating_mul(4).max(4096);
        StreamCapture {
            memory_max: IN_MEMORY_MAX.min(window) as u64,
            path: self.dir.join(&id),
            id,
            file: FileState::NotYet,
            hasher: Sha256::new(),
            stored: 0,
            cap: self.cap,
            total: 0,
            window,
            head: Vec::new(),
            tail: Vec::new(),
            utf8: Utf8Check::default(),
        }
    }

    fn register(&self, id: &str, size: u64, captured: u64) {
        let mut inner = self.lock();
        inner.captured += captured;
        inner.order.push_back(id.to_owned());
        inner.sizes.insert(id.to_owned(), size);
        inner.total += size;
        // Keep the newest artifact even when it alone is over the budget.
        while inner.total > self.retention && inner.order.len() > 1 {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            let old_size = inner.sizes.remove(&old).unwrap_or(0);
            inner.total -= old_size;
            if let Some(bytes) = inner.memory.remove(&old) {
                inner.memory_total -= bytes.len() as u64;
                inner.memory_order.retain(|other| *other != old);
            } else {
                let _ = fs::remove_file(self.dir.join(&old));
            }
        }
    }
}

/// Where a stored artifact's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredArtifact {
    File(PathBuf),
    Memory(Arc<[u8]>),
    Empty,
}

#[derive(Debug)]
enum FileState {
    /// No file: the stored bytes are all in the head window (at most `memory_max`).
    NotYet,
    Open(File),
    /// Creating or writing failed (disk full): capture goes on in memory, the artifact stops.
    Failed,
}

/// One stream being captured.
#[derive(Debug)]
pub struct StreamCapture {
    id: String,
    path: PathBuf,
    file: FileState,
    /// Up to this many stored bytes, the stream needs no file.
    memory_max: u64,
    hasher: Sha256,
    stored: u64,
    cap: u64,
    total: u64,
    window: usize,
    head: Vec<u8>,
    /// The last bytes seen, up to `2 * window` between compactions so that trimming it is
    /// an amortised memmove rather than work per byte.
    tail: Vec<u8>,
    utf8: Utf8Check,
}

impl StreamCapture {
    pub fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        self.utf8.feed(chunk);

        let room = (self.cap - self.stored).min(chunk.len() as u64) as usize;
        if room > 0 {
            let kept = &chunk[..room];
            if let FileState::NotYet = self.file {
                if self.stored + room as u64 <= self.memory_max {
                    // The head window holds these bytes; the file is made only if it must be.
                    self.hasher.update(kept);
                    self.stored += room as u64;
                } else {
                    self.file = self.create_file();
                }
            }
            if let FileState::Open(file) = &mut self.file {
                // Page-cache writes of at most one pipe buffer; cheap enough for the runtime.
                match file.write_all(kept) {
                    Ok(()) => {
                        self.hasher.update(kept);
                        self.stored += room as u64;
                    }
                    Err(err) => {
                        tracing::warn!(artifact = %self.id, cause = %err, "artifact write failed; keeping only the text window");
                        self.file = FileState::Failed;
                    }
                }
            }
        }

        let to_head = (self.window - self.head.len()).min(chunk.len());
        self.head.extend_from_slice(&chunk[..to_head]);
        let rest = &chunk[to_head..];
        if rest.len() >= self.window {
            self.tail.clear();
            self.tail
                .extend_from_slice(&rest[rest.len() - self.window..]);
        } else {
            self.tail.extend_from_slice(rest);
            if self.tail.len() > 2 * self.window {
                let excess = self.tail.len() - self.window;
                self.tail.drain(..excess);
            }
        }
    }

    /// Creates the artifact's file with the bytes stored so far, which are all in the head.
    fn create_file(&mut self) -> FileState {
        let stored = &self.head[..self.stored as usize];
        match File::create(&self.path).and_then(|mut file| file.write_all(stored).map(|()| file)) {
            Ok(file) => FileState::Open(file),
            Err(err) => {
                tracing::warn!(artifact = %self.id, cause = %err, "could not create the artifact; keeping only the text window");
                FileState::Failed
            }
        }
    }

    /// Closes the artifact and returns what was captured.
    pub fn finish(mut self, store: &ArtifactStore) -> CapturedStream {
        self.utf8.finish();
        // Closes the file, if one was opened.
        let file = std::mem::replace(&mut self.file, FileState::NotYet);
        let (in_file, failed) = (
            matches!(file, FileState::Open(_)),
            matches!(file, FileState::Failed),
        );
        drop(file);
        if !in_file && self.stored > 0 && self.stored <= self.memory_max {
            // Never in a file, or its file failed: the head window holds every stored byte.
            if failed {
                let _ = fs::remove_file(&self.path);
            }
            store.keep_in_memory(&self.id, &self.head[..self.stored as usize]);
        }
        let sha256 = hex::encode(self.hasher.finalize());
        store.register(&self.id, self.stored, self.total);
        let tail = &self.tail[self.tail.len().saturating_sub(self.window)..];
        let complete = tail.is_empty();
        CapturedStream {
            artifact: Artifact {
                id: self.id,
                size: self.stored,
                total_bytes: self.total,
                sha256,
                capped: self.total > self.stored,
                truncated: false,
                invalid_utf8: self.utf8.invalid,
            },
            window: Window {
                head: decode_head(&self.head, complete),
                tail: decode_tail(tail),
                complete,
                total_bytes: self.total,
            },
        }
    }
}

/// A captured stream: its artifact and the text windows.
#[derive(Debug)]
pub struct CapturedStream {
    pub artifact: Artifact,
    pub window: Window,
}

/// The start and end of a text, with its full length in bytes.
#[derive(Debug, Clone, Default)]
pub struct Window {
    pub head: String,
    /// Empty when `complete`.
    pub tail: String,
    /// Whether `head` is the whole text.
    pub complete: bool,
    pub total_bytes: u64,
}

impl Window {
    pub fn whole(text: String) -> Window {
        let total_bytes = text.len() as u64;
        Window {
            head: text,
            tail: String::new(),
            complete: true,
            total_bytes,
        }
    }

    /// The length in characters, or a byte-count stand-in when only the windows are known.
    pub fn approx_chars(&self) -> usize {
        if self.complete {
            self.head.chars().count()
        } else {
            self.total_bytes as usize
        }
    }

    /// The text cut to `limit` characters keeping head and tail, with a marker naming how
    /// much was left out and `hint` on how to get the rest. Returns whether it was cut.
    pub fn cut(&self, limit: usize, hint: &str) -> (String, bool) {
        if self.complete && self.head.chars().count() <= limit {
            return (self.head.clone(), false);
        }
        let keep = limit.saturating_sub(MARKER_ALLOWANCE) / 2;
        let head: String = self.head.chars().take(keep).collect();
        let source = if self.complete {
            &self.head
        } else {
            &self.tail
        };
        let n_source = source.chars().count();
        let tail: String = source.chars().skip(n_source.saturating_sub(keep)).collect();
        let elided = self
            .total_bytes
            .saturating_sub((head.len() + tail.len()) as u64);
        let text = format!("{head}\n...[{elided} bytes elided; {hint}]...\n{tail}");
        (text, true)
    }
}

/// Decodes a head window, dropping an incomplete character at its end when more followed.
fn decode_head(bytes: &[u8], complete: bool) -> String {
    let mut end = bytes.len();
    if !complete
        && let Err(err) = std::str::from_utf8(bytes)
        && err.error_len().is_none()
    {
        end = err.valid_up_to();
    }
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Decodes a tail window, skipping continuation bytes of a character cut at its start.
fn decode_tail(bytes: &[u8]) -> String {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|&&b| (0x80..0xC0).contains(&b))
        .count();
    String::from_utf8_lossy(&bytes[skip..]).into_owned()
}

/// Incremental UTF-8 validation across chunk boundaries.
#[derive(Debug, Default)]
struct Utf8Check {
    carry: Vec<u8>,
    invalid: bool,
}

impl Utf8Check {
    fn feed(&mut self, chunk: &[u8]) {
        if self.invalid {
            return;
        }
        let mut joined;
        let data = if self.carry.is_empty() {
            chunk
        } else {
            joined = std::mem::take(&mut self.carry);
            joined.extend_from_slice(chunk);
            &joined[..]
        };
        match std::str::from_utf8(data) {
            Ok(_) => self.carry.clear(),
            Err(err) if err.error_len().is_none() => {
                self.carry = data[err.valid_up_to()..].to_vec();
            }
            Err(_) => self.invalid = true,
        }
    }

    fn finish(&mut self) {
        if !self.carry.is_empty() {
            self.invalid = true;
        }
    }
}

/// Indents every non-blank line by two spaces, as Python's `textwrap.indent` does.
pub fn indent(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for line in text.split_inclusive('\n') {
        if !line.trim().is_empty() {
            out.push_str("  ");
        }
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests;

//! Following a log as it is written: the file is the source. Every [`POLL`] the server looks
//! for whole lines past where it stopped and pushes them to the page as one server-sent event
//! (`events`: a JSON array, each line numbered as [`pages`](crate::pages) numbers it). A log's
//! last line (`session_finished`, `batch_finished`) ends the stream with `end`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::Stream;
use serde_json::Value;

use crate::pages::event_of;

/// How often the log is looked at.
pub(crate) const POLL: Duration = Duration::from_millis(100);
/// Bytes read at one look at most (the rest at the next).
const READ_AT_ONCE: u64 = 4 * 1024 * 1024;
/// A follow ends after this long regardless (the page follows again).
const LONGEST: Duration = Duration::from_secs(6 * 3600);

struct Tail {
    path: PathBuf,
    offset: u64,
    line: u64,
    started: Instant,
    ended: bool,
}

/// What a follow sends: new lines (as a JSON array), or why it ends.
#[derive(Debug)]
pub(crate) enum Message {
    Events(String),
    /// The log's last line was sent, or the follow ran its longest.
    End,
    /// The log can no longer be read.
    Gone,
}

/// The lines of the log at `path` from line `line` (at byte `offset`) on.
pub(crate) fn stream(path: PathBuf, line: u64, offset: u64) -> impl Stream<Item = Message> + Send {
    let tail = Tail {
        path,
        offset,
        line,
        started: Instant::now(),
        ended: false,
    };
    futures::stream::unfold(tail, |mut tail| async move {
        if tail.ended {
            return None;
        }
        loop {
            if tail.started.elapsed() > LONGEST {
                tail.ended = true;
                return Some((Message::End, tail));
            }
            let (path, offset) = (tail.path.clone(), tail.offset);
            let read = tokio::task::spawn_blocking(move || new_lines(&path, offset)).await;
            let Ok(Ok((lines, consumed))) = read else {
                tail.ended = true;
                return Some((Message::Gone, tail));
            };
            if lines.is_empty() {
                tokio::time::sleep(POLL).await;
                continue;
            }
            tail.offset += consumed;
            let mut events = Vec::with_capacity(lines.len());
            for line in &lines {
                let event = event_of(line, tail.line);
                tail.line += 1;
                tail.ended |= matches!(
                    event["type"].as_str(),
                    Some("session_finished" | "batch_finished")
                );
                events.push(event);
            }
            return Some((Message::Events(Value::Array(events).to_string()), tail));
        }
    })
}

/// The whole lines after `offset`, and the bytes they take.
fn new_lines(path: &std::path::Path, offset: u64) -> std::io::Result<(Vec<Vec<u8>>, u64)> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    if len <= offset {
        return Ok((Vec::new(), 0));
    }
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::new();
    file.take(READ_AT_ONCE).read_to_end(&mut bytes)?;
    let Some(last) = memchr::memrchr(b'\n', &bytes) else {
        if bytes.len() as u64 >= READ_AT_ONCE {
            // One line longer than a read: skipped whole, noted as oversized.
            return Ok((vec![bytes], READ_AT_ONCE));
        }
        return Ok((Vec::new(), 0));
    };
    let whole = &bytes[..=last];
    let lines = whole
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    Ok((lines, whole.len() as u64))
}

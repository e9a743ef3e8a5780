//! Following a log as it is written: the file is the source. Every [`POLL`] the server looks
//! for whole lines past where it stopped and pushes them to the page as one server-sent event
//! (`events`: a JSON array, each line numbered as [`pages`](crate::pages) numbers it). A log's
//! last line (`session_finished`, `batch_finished`) ends the stream with `end`.

use std::io::{BufReader, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::Stream;
use harness_log::EventKind;
use harness_log::views;
use serde_json::Value;

use crate::pages::{MAX_LINE, event_of, read_line};

/// How often the log is looked at.
pub(crate) const POLL: Duration = Duration::from_millis(100);
/// Bytes read at one look at most (the rest at the next).
const READ_AT_ONCE: u64 = 4 * 1024 * 1024;
/// A follow ends after this long regardless (a reload of the page follows on).
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
            for (line, bytes) in &lines {
                let event = event_of(line, tail.line, *bytes);
                tail.line += 1;
                tail.ended |= matches!(
                    views::Line::of(&event).kind,
                    EventKind::SessionFinished | EventKind::BatchFinished
                );
                events.push(event);
            }
            return Some((Message::Events(Value::Array(events).to_string()), tail));
        }
    })
}

/// A line's bytes (at most [`MAX_LINE`] + 1 kept) and the bytes it takes in the file.
type Line = (Vec<u8>, u64);

/// The whole lines after `offset` (each with the bytes it takes; at most [`MAX_LINE`] of a
/// line kept), and the bytes they take together: about [`READ_AT_ONCE`], and at most
/// [`crate::pages::MAX_PAGE`] lines, at one look.
fn new_lines(path: &std::path::Path, offset: u64) -> std::io::Result<(Vec<Line>, u64)> {
    let (mut file, _) = harness_log::reader::open_regular(path)?;
    if file.metadata()?.len() <= offset {
        return Ok((Vec::new(), 0));
    }
    file.seek(SeekFrom::Start(offset))?;
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let (mut lines, mut consumed, mut line) = (Vec::new(), 0, Vec::new());
    // Bounded in lines too: 4 MiB of bare newlines would be four million events at once.
    while consumed < READ_AT_ONCE && lines.len() < crate::pages::MAX_PAGE {
        let (n, whole) = read_line(&mut reader, &mut line, MAX_LINE)?;
        if !whole {
            break;
        }
        consumed += n;
        lines.push((std::mem::take(&mut line), n));
    }
    Ok((lines, consumed))
}

//! A log read a page at a time: lines `[from, from + limit)`, found through marks (the byte
//! offset of every 512th line) kept per log and extended as it grows, so a 100,000-event
//! session pages without being loaded whole. Lines are sent as the log has them (the writer
//! redacted them already); a line too long for a page is replaced by a note of its size.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;

/// Lines between two marks.
const EVERY: u64 = 512;
/// Logs whose marks are kept; the oldest is dropped past this.
const KEPT: usize = 64;
/// A line longer than this is not sent (its size is).
pub const MAX_LINE: usize = 1024 * 1024;
/// Lines in one page at most.
pub const MAX_PAGE: usize = 2000;
/// Bytes of log lines in one page at most (a page ends after the line that passes it): a
/// hostile log of megabyte lines sends 16 of them a page, not 2,000.
pub const MAX_PAGE_BYTES: u64 = 16 * 1024 * 1024;
/// The longest line a batch log's fold keeps (its first line lists every task).
pub const MAX_BATCH_LINE: usize = harness_log::reader::MAX_LINE;

pub use harness_log::reader::read_line;

/// Where every [`EVERY`]th line of a log starts, as far as it was read.
#[derive(Debug, Default)]
struct Marks {
    /// `starts[i]` is the byte offset of line `i * EVERY`.
    starts: Vec<u64>,
    /// Lines counted, and the offset after the last whole one.
    lines: u64,
    end: u64,
}

/// A log's marks, and when they were last used (for dropping the oldest).
type Kept = (u64, Arc<Mutex<Marks>>);

/// The marks of the logs lately read.
#[derive(Debug, Default)]
pub struct Pager {
    logs: Mutex<HashMap<PathBuf, Kept>>,
    clock: Mutex<u64>,
}

/// One page of a log.
#[derive(Debug, Serialize)]
pub struct Page {
    /// The number of its first line, from 0.
    pub from: u64,
    pub events: Vec<Value>,
    /// Whole lines in the log when it was read.
    pub total: u64,
    /// The byte offset after the page's last line (where a follow starts).
    pub end: u64,
}

impl Pager {
    fn marks(&self, dir: &Path) -> Arc<Mutex<Marks>> {
        let tick = {
            let mut clock = self.clock.lock().unwrap_or_else(|e| e.into_inner());
            *clock += 1;
            *clock
        };
        let mut logs = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        if !logs.contains_key(dir) && logs.len() >= KEPT {
            let oldest = logs
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(path, _)| path.clone());
            if let Some(oldest) = oldest {
                logs.remove(&oldest);
            }
        }
        let entry = logs
            .entry(dir.to_owned())
            .or_insert_with(|| (tick, Arc::default()));
        entry.0 = tick;
        entry.1.clone()
    }

    /// Lines `[from, from + limit)` of the log in `dir` (fewer at its end). Blocking.
    pub fn page(&self, dir: &Path, from: u64, limit: usize) -> std::io::Result<Page> {
        let limit = limit.clamp(1, MAX_PAGE);
        let marks = self.marks(dir);
        let mut marks = marks.lock().unwrap_or_else(|e| e.into_inner());
        let path = dir.join("events.jsonl");
        let (mut file, _) = harness_log::reader::open_regular(&path)?;
        let len = file.metadata()?.len();
        if len < marks.end {
            // Replaced by a shorter file: count again.
            *marks = Marks::default();
        }
        extend(&mut marks, &mut file, len)?;
        let mark = (from / EVERY) as usize;
        let (start, first) = match marks.starts.get(mark) {
            Some(start) => (*start, mark as u64 * EVERY),
            None => (marks.end, marks.lines),
        };
        let total = marks.lines;
        drop(marks);
        file.seek(SeekFrom::Start(start))?;
        let mut reader = BufReader::new(file);
        let (mut line, mut at, mut offset) = (Vec::new(), first, start);
        let mut events = Vec::new();
        let mut bytes = 0u64;
        while events.len() < limit && at < total && bytes < MAX_PAGE_BYTES {
            let (n, whole) = read_line(&mut reader, &mut line, MAX_LINE)?;
            if !whole {
                break;
            }
            offset += n;
            if at >= from {
                events.push(event_of(&line, at, n));
                bytes += n.min(MAX_LINE as u64 + 1);
            }
            at += 1;
        }
        Ok(Page {
            from: from.min(total),
            events,
            total,
            end: offset,
        })
    }

    /// The byte offset at which line `line` starts (the end of the whole lines when past it).
    /// Blocking.
    pub fn offset_of(&self, dir: &Path, line: u64) -> std::io::Result<u64> {
        if line == 0 {
            return Ok(0);
        }
        Ok(self.page(dir, line - 1, 1)?.end)
    }
}

/// Counts the lines from where the marks stop to the last whole line before `len`.
fn extend(marks: &mut Marks, file: &mut File, len: u64) -> std::io::Result<()> {
    if marks.end >= len {
        return Ok(());
    }
    file.seek(SeekFrom::Start(marks.end))?;
    let mut reader = BufReader::with_capacity(256 * 1024, &mut *file);
    let mut offset = marks.end;
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            break;
        }
        let n = buffer.len();
        // A tail without a newline is not counted: it is read again next time.
        for at in memchr::memchr_iter(b'\n', buffer) {
            if marks.lines.is_multiple_of(EVERY) {
                marks.starts.push(marks.end);
            }
            marks.lines += 1;
            marks.end = offset + at as u64 + 1;
        }
        offset += n as u64;
        reader.consume(n);
    }
    Ok(())
}

/// A line (of `bytes` in the file; at most `MAX_LINE + 1` of them read) as the page sends
/// it: the event, or a note of why it is not one.
pub fn event_of(line: &[u8], number: u64, bytes: u64) -> Value {
    if line.len() > MAX_LINE {
        return serde_json::json!({"line": number, "type": "oversized_line", "data": {"bytes": bytes}});
    }
    match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(mut event)) => {
            event.insert("line".into(), number.into());
            Value::Object(event)
        }
        _ => serde_json::json!({"line": number, "type": "invalid_line", "data": {
            "text": String::from_utf8_lossy(&line[..line.len().min(2000)])}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_longer_than_a_page_holds_is_named_by_its_size_and_not_read_into_memory() {
        let dir = tempfile::tempdir().unwrap();
        let huge = format!("{{\"seq\":1,\"pad\":\"{}\"}}\n", "x".repeat(3 * MAX_LINE));
        let text = format!("{{\"seq\":0}}\n{huge}{{\"seq\":2}}\n");
        std::fs::write(dir.path().join("events.jsonl"), &text).unwrap();
        let page = Pager::default().page(dir.path(), 0, 10).unwrap();
        let kinds: Vec<&str> = page
            .events
            .iter()
            .map(|e| e["type"].as_str().unwrap_or("event"))
            .collect();
        assert_eq!(kinds, ["event", "oversized_line", "event"]);
        assert_eq!(page.events[1]["data"]["bytes"], huge.len());
        assert_eq!(page.events[2]["seq"], 2);
        let mut reader = std::io::BufReader::new(huge.as_bytes());
        let mut buffer = Vec::new();
        let (n, whole) = read_line(&mut reader, &mut buffer, 10).unwrap();
        assert_eq!((n as usize, whole, buffer.len()), (huge.len(), true, 11));
    }

    #[test]
    fn a_page_of_megabyte_lines_stops_at_its_byte_bound() {
        let dir = tempfile::tempdir().unwrap();
        let line = format!("{{\"pad\":\"{}\"}}\n", "x".repeat(1024 * 1024 - 20));
        std::fs::write(dir.path().join("events.jsonl"), line.repeat(40)).unwrap();
        let page = Pager::default().page(dir.path(), 0, MAX_PAGE).unwrap();
        let bound = (MAX_PAGE_BYTES / line.len() as u64) as usize + 1;
        assert_eq!(
            page.events.len(),
            bound,
            "a page ends after the line that passes its bound"
        );
        assert_eq!(page.total, 40);
    }

    #[test]
    fn pages_of_a_long_log_and_of_one_still_growing() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        for seq in 0..5000 {
            text.push_str(&format!("{{\"seq\":{seq},\"type\":\"x\",\"data\":{{}}}}\n"));
        }
        text.push_str("not json\n{\"seq\":5001,\"ty");
        std::fs::write(dir.path().join("events.jsonl"), &text).unwrap();
        let pager = Pager::default();
        let page = pager.page(dir.path(), 1530, 3).unwrap();
        assert_eq!(page.total, 5001);
        let seqs: Vec<u64> = page
            .events
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, [1530, 1531, 1532]);
        assert_eq!(page.events[0]["line"], 1530);
        let last = pager.page(dir.path(), 4999, 10).unwrap();
        assert_eq!(last.events.len(), 2);
        assert_eq!(last.events[1]["type"], "invalid_line");
        // The torn line is finished by its writer: it appears.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("events.jsonl"))
            .unwrap();
        std::io::Write::write_all(&mut file, b"pe\":\"y\",\"data\":{}}\n").unwrap();
        let grown = pager.page(dir.path(), 5001, 10).unwrap();
        assert_eq!(grown.events.len(), 1);
        assert_eq!(grown.events[0]["type"], "y");
        assert_eq!(
            grown.end,
            std::fs::metadata(dir.path().join("events.jsonl"))
                .unwrap()
                .len()
        );
        assert_eq!(
            pager.offset_of(dir.path(), 5001).unwrap(),
            text.rfind('{').unwrap() as u64
        );
    }
}

//! A process's output: numbered chunks in a buffer of bounded size, read from a cursor.
//!
//! Chunks are numbered from 1 without gaps across the process's streams, and each knows where
//! it starts in its own stream. When the buffer is over its budget the oldest chunks leave it;
//! a reader whose cursor is behind them is told which numbers it missed and how many bytes.

use std::collections::VecDeque;
use std::sync::Arc;

use sandbox_protocol::{DroppedOutput, OutputStream};

/// How many dropped chunks the ring remembers the position of, so that a reader that fell
/// behind is told the exact bytes it missed: 64 KiB per process at most.
const REMEMBERED_DROPS: usize = 8192;

/// One chunk as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub seq: u64,
    pub stream: OutputStream,
    /// Where the chunk starts in its stream.
    pub offset: u64,
    pub bytes: Arc<[u8]>,
}

/// What a read found after a cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub chunks: Vec<Chunk>,
    pub dropped: Option<DroppedOutput>,
    /// The cursor to read from next.
    pub next_after_seq: u64,
}

#[derive(Debug)]
pub struct Ring {
    chunks: VecDeque<Chunk>,
    /// Bytes of all streams printed before each kept chunk, in step with `chunks`.
    before: VecDeque<u64>,
    held: usize,
    budget: usize,
    last_seq: u64,
    /// Bytes per stream so far: stdout, stderr, pty.
    totals: [u64; 3],
    /// Bytes of all streams before each of the most recently dropped chunks (the last entry
    /// is the newest dropped chunk).
    dropped_before: VecDeque<u64>,
    dropped_bytes: u64,
}

fn index(stream: OutputStream) -> usize {
    match stream {
        OutputStream::Stdout => 0,
        OutputStream::Stderr => 1,
        OutputStream::Pty => 2,
    }
}

impl Ring {
    /// A ring that holds about `budget` bytes (always at least the newest chunk).
    pub fn new(budget: usize) -> Ring {
        Ring {
            chunks: VecDeque::new(),
            before: VecDeque::new(),
            held: 0,
            budget,
            last_seq: 0,
            totals: [0; 3],
            dropped_before: VecDeque::new(),
            dropped_bytes: 0,
        }
    }

    /// Appends a chunk (nothing for an empty one); returns its number.
    pub fn push(&mut self, stream: OutputStream, bytes: &[u8]) -> u64 {
        if bytes.is_empty() {
            return self.last_seq;
        }
        self.last_seq += 1;
        let slot = index(stream);
        let chunk = Chunk {
            seq: self.last_seq,
            stream,
            offset: self.totals[slot],
            bytes: Arc::from(bytes),
        };
        self.before.push_back(self.total());
        self.totals[slot] += bytes.len() as u64;
        self.held += bytes.len();
        self.chunks.push_back(chunk);
        while self.held > self.budget && self.chunks.len() > 1 {
            self.drop_oldest();
        }
        self.last_seq
    }

    fn drop_oldest(&mut self) {
        let (Some(chunk), Some(before)) = (self.chunks.pop_front(), self.before.pop_front()) else {
            return;
        };
        self.held -= chunk.bytes.len();
        self.dropped_bytes += chunk.bytes.len() as u64;
        self.dropped_before.push_back(before);
        if self.dropped_before.len() > REMEMBERED_DROPS {
            self.dropped_before.pop_front();
        }
    }

    fn total(&self) -> u64 {
        self.totals.iter().sum()
    }

    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The oldest chunk held (the next one to come when none is).
    pub fn first_seq(&self) -> u64 {
        self.chunks.front().map_or(self.last_seq + 1, |c| c.seq)
    }

    pub fn totals(&self) -> [u64; 3] {
        self.totals
    }

    pub fn dropped_bytes(&self) -> u64 {
        self.dropped_bytes
    }

    /// Chunks after `after_seq`, at most `max_bytes` of them (always at least one when there is
    /// one), and what was dropped between the cursor and the first of them.
    pub fn read(&self, after_seq: u64, max_bytes: usize) -> Read {
        let first = self.first_seq();
        let dropped = (after_seq + 1 < first).then(|| DroppedOutput {
            from_seq: after_seq + 1,
            to_seq: first - 1,
            bytes: self.bytes_before(first) - self.bytes_before(after_seq + 1),
        });
        let mut chunks = Vec::new();
        let mut size = 0;
        let start = after_seq.saturating_sub(first.saturating_sub(1)) as usize;
        for chunk in self.chunks.iter().skip(start) {
            if !chunks.is_empty() && size + chunk.bytes.len() > max_bytes {
                break;
            }
            size += chunk.bytes.len();
            chunks.push(chunk.clone());
        }
        let next_after_seq = chunks
            .last()
            .map(|c| c.seq)
            .or(dropped.map(|d| d.to_seq))
            .unwrap_or(after_seq.min(self.last_seq));
        Read {
            chunks,
            dropped,
            next_after_seq,
        }
    }

    /// Bytes of all streams printed before chunk `seq` (the total after the last one). For a
    /// dropped chunk older than those remembered, the oldest remembered position: a reader
    /// that far behind is told at least what it missed since then.
    fn bytes_before(&self, seq: u64) -> u64 {
        let first = self.first_seq();
        if seq >= first {
            let at = (seq - first) as usize;
            return self.before.get(at).copied().unwrap_or_else(|| self.total());
        }
        let n_remembered = self.dropped_before.len() as u64;
        let oldest_remembered = first - n_remembered;
        if seq >= oldest_remembered {
            return self.dropped_before[(seq - oldest_remembered) as usize];
        }
        if seq <= 1 {
            return 0;
        }
        self.dropped_before.front().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring_of(budget: usize, chunks: &[(&str, OutputStream)]) -> Ring {
        let mut ring = Ring::new(budget);
        for (text, stream) in chunks {
            ring.push(*stream, text.as_bytes());
        }
        ring
    }

    #[test]
    fn chunks_are_numbered_across_streams_with_offsets_in_their_own() {
        use OutputStream::{Stderr, Stdout};
        let ring = ring_of(1024, &[("ab", Stdout), ("xyz", Stderr), ("cd", Stdout)]);
        let read = ring.read(0, 1024);
        let seen: Vec<(u64, OutputStream, u64)> = read
            .chunks
            .iter()
            .map(|c| (c.seq, c.stream, c.offset))
            .collect();
        assert_eq!(seen, [(1, Stdout, 0), (2, Stderr, 0), (3, Stdout, 2)]);
        assert_eq!(read.next_after_seq, 3);
        assert_eq!(read.dropped, None);
        assert_eq!(ring.read(3, 1024).chunks, []);
        assert_eq!(ring.read(3, 1024).next_after_seq, 3);
        assert_eq!(ring.read(1, 1024).chunks[0].seq, 2);
    }

    #[test]
    fn a_read_is_bounded_but_never_empty_when_there_is_output() {
        let ring = ring_of(
            1024,
            &[
                ("aaaa", OutputStream::Stdout),
                ("bbbb", OutputStream::Stdout),
            ],
        );
        let read = ring.read(0, 5);
        assert_eq!(read.chunks.len(), 1);
        assert_eq!(read.next_after_seq, 1);
        assert_eq!(
            ring.read(0, 1).chunks.len(),
            1,
            "a chunk larger than the bound"
        );
    }

    #[test]
    fn a_wrapped_buffer_tells_each_reader_exactly_what_it_missed() {
        let mut ring = Ring::new(10);
        for text in ["0123", "45", "6789", "ab", "cdef"] {
            ring.push(OutputStream::Stdout, text.as_bytes());
        }
        // Holds 4 + 2 + 4 = 10 from seq 3 ("6789", "ab", "cdef"), after dropping 1 and 2.
        assert_eq!(ring.first_seq(), 3);
        assert_eq!(ring.dropped_bytes(), 6);
        let from_start = ring.read(0, 1024);
        assert_eq!(
            from_start.dropped,
            Some(DroppedOutput {
                from_seq: 1,
                to_seq: 2,
                bytes: 6
            })
        );
        assert_eq!(from_start.chunks[0].seq, 3);
        assert_eq!(from_start.chunks[0].offset, 6);
        let behind_by_one = ring.read(1, 1024);
        assert_eq!(
            behind_by_one.dropped,
            Some(DroppedOutput {
                from_seq: 2,
                to_seq: 2,
                bytes: 2
            })
        );
        assert_eq!(ring.read(2, 1024).dropped, None);
    }

    #[test]
    fn the_newest_chunk_is_kept_even_over_the_budget() {
        let ring = ring_of(
            4,
            &[
                ("small", OutputStream::Pty),
                ("much larger", OutputStream::Pty),
            ],
        );
        let read = ring.read(0, 1024);
        assert_eq!(read.chunks.len(), 1);
        assert_eq!(&*read.chunks[0].bytes, b"much larger");
        assert_eq!(read.dropped.unwrap().bytes, 5);
    }
}

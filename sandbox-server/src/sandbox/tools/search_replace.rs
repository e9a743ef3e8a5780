//! `search_replace`: replace exactly one occurrence of a text, keeping every other byte.
//!
//! The file is streamed twice through one descriptor, never held whole: once to count the
//! occurrences, once through a temporary file with the one replaced (checked again as it
//! passes, so a file changed in between is refused rather than corrupted). Memory stays a
//! chunk and the two texts, whatever the file's size.

use sandbox_protocol::BuiltIn;
use std::fs::File;
use std::io::{self, Read, Seek};

use memchr::memmem::Finder;
use sandbox_protocol::{SearchReplaceArgs, SearchReplaceResult};

use super::{check_path, io_failure};
use crate::sandbox::blocking;
use crate::sandbox::registry::{About, Tool, ToolContext, ToolError, Validate};

const CHUNK: usize = 64 * 1024;

pub struct SearchReplace;

impl Validate for SearchReplaceArgs {
    fn validate(&self) -> Result<(), String> {
        check_path(&self.path)?;
        if self.search.is_empty() {
            return Err("search: must not be empty".to_owned());
        }
        Ok(())
    }
}

impl Tool for SearchReplace {
    type Args = SearchReplaceArgs;
    type Output = SearchReplaceResult;

    const ABOUT: About = About {
        tool: BuiltIn::SearchReplace,
        description: "Replace one exact match in a file in the working directory.",
        scope: sandbox_protocol::Scope::Write,
    };

    async fn execute(
        &self,
        args: SearchReplaceArgs,
        ctx: ToolContext,
    ) -> Result<SearchReplaceResult, ToolError> {
        blocking(move || {
            let path = args.path.as_str();
            let (mut file, _size) = ctx.workspace.open_regular(path)?;
            // Bytes, not text: CRLF, a BOM, a missing final newline and any encoding survive.
            let search = args.search.as_bytes();
            let (count, first) =
                occurrences(&mut file, search).map_err(|err| io_failure(path, err))?;
            let Some(at) = first.filter(|_| count == 1) else {
                return Err(ToolError::MatchCount {
                    message: format!(
                        "{path}: search string occurs {count}x, expected exactly once"
                    ),
                    count,
                });
            };
            file.rewind().map_err(|err| io_failure(path, err))?;
            let spliced = Spliced {
                file,
                at,
                read: 0,
                search,
                replace: args.replace.as_bytes(),
                replaced: 0,
            };
            let (_, bytes_written) = ctx.workspace.write_atomic_from(path, spliced, None)?;
            Ok(SearchReplaceResult {
                output: "OK".to_owned(),
                path: args.path,
                bytes_written,
            })
        })
        .await?
    }
}

/// How many non-overlapping occurrences there are, and where the first starts.
fn occurrences(file: &mut File, search: &[u8]) -> io::Result<(usize, Option<u64>)> {
    let finder = Finder::new(search);
    let mut window: Vec<u8> = Vec::with_capacity(CHUNK + search.len());
    let mut window_start: u64 = 0;
    let (mut count, mut first) = (0, None);
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = file.read(&mut chunk)?;
        window.extend_from_slice(&chunk[..n]);
        let eof = n == 0;
        // A match must start before `limit` to be counted in this window; one starting later
        // could run past the bytes read so far.
        let limit = if eof {
            window.len()
        } else {
            window.len().saturating_sub(search.len() - 1)
        };
        let mut from = 0;
        while let Some(found) = finder.find(&window[from..]) {
            let start = from + found;
            if start >= limit {
                break;
            }
            count += 1;
            first.get_or_insert(window_start + start as u64);
            from = start + search.len();
        }
        if eof {
            return Ok((count, first));
        }
        let keep_from = from.max(limit);
        window.drain(..keep_from);
        window_start += keep_from as u64;
    }
}

/// The file's bytes with the occurrence at `at` replaced; fails if those bytes are no longer
/// the search text.
struct Spliced<'a> {
    file: File,
    at: u64,
    /// File bytes read so far.
    read: u64,
    search: &'a [u8],
    replace: &'a [u8],
    /// Replacement bytes given out so far.
    replaced: usize,
}

impl Read for Spliced<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.read < self.at {
            let wanted = usize::try_from(self.at - self.read)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let n = self.file.read(&mut buf[..wanted])?;
            if n == 0 {
                return Err(changed());
            }
            self.read += n as u64;
            return Ok(n);
        }
        if self.read == self.at {
            let mut seen = vec![0u8; self.search.len()];
            self.file.read_exact(&mut seen).map_err(|_| changed())?;
            if seen != self.search {
                return Err(changed());
            }
            self.read += self.search.len() as u64;
        }
        if self.replaced < self.replace.len() {
            let n = (self.replace.len() - self.replaced).min(buf.len());
            buf[..n].copy_from_slice(&self.replace[self.replaced..self.replaced + n]);
            self.replaced += n;
            return Ok(n);
        }
        self.file.read(buf)
    }
}

fn changed() -> io::Error {
    io::Error::other("the file changed while it was edited; nothing was written")
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn count_in(content: &[u8], search: &[u8]) -> (usize, Option<u64>) {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(content).unwrap();
        file.rewind().unwrap();
        occurrences(&mut file, search).unwrap()
    }

    #[test]
    fn occurrences_are_found_across_chunk_edges() {
        let mut big = vec![b'x'; CHUNK - 2];
        big.extend_from_slice(b"NEEDLE");
        big.extend(vec![b'y'; CHUNK * 2]);
        assert_eq!(count_in(&big, b"NEEDLE"), (1, Some(CHUNK as u64 - 2)));
        big.extend_from_slice(b"NEEDLE");
        assert_eq!(count_in(&big, b"NEEDLE").0, 2);
        assert_eq!(
            count_in(b"aaa", b"aa"),
            (1, Some(0)),
            "non-overlapping, as before"
        );
        assert_eq!(count_in(b"", b"a"), (0, None));
    }

    #[test]
    fn the_splice_keeps_every_other_byte() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"a\r\nfoo\r\nbar").unwrap();
        file.rewind().unwrap();
        let mut spliced = Spliced {
            file,
            at: 3,
            read: 0,
            search: b"foo",
            replace: b"FOOD",
            replaced: 0,
        };
        let mut out = Vec::new();
        spliced.read_to_end(&mut out).unwrap();
        assert_eq!(out, b"a\r\nFOOD\r\nbar");
    }
}

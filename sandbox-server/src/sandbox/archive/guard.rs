//! A bound on what an archive's stream may make the tar reader hold. The tar reader keeps a PAX
//! extended header or a GNU long name or link whole in memory, of whatever size its header
//! says, while it looks for the next entry; and a gzip body unpacks to far more than it sends.
//! Rather than parse the stream a second time (a second parser disagrees with the first on some
//! input, and an attacker picks that input), this reader counts: the bytes the tar reader takes
//! while it finds one entry (its headers, extensions and padding; never an entry's data, which
//! the unpacker reads itself) may not pass [`PER_ENTRY`], and the whole stream may not pass its
//! total.

use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;

/// What the tar reader may read while it finds one entry: a PAX header and a GNU long name and
/// long link of up to 1 MiB each, with their headers and padding.
pub(super) const PER_ENTRY: u64 = 3 << 20;

/// Why the stream was cut, once it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tripped {
    /// One entry's headers and extensions passed [`PER_ENTRY`].
    Headers,
    /// The whole stream passed its total.
    Total(u64),
}

/// What the unpacker and the reader share: the budget of the entry being found (`None` while
/// the unpacker reads an entry's data), and why the stream was cut.
#[derive(Debug, Default)]
pub(super) struct Budget {
    finding: Cell<Option<u64>>,
    tripped: Cell<Option<Tripped>>,
    /// Bytes read so far, and whether any of them was not zero: an archive of no entries is an
    /// empty one (a tar end marker, zeros) only when nothing else was read.
    read: Cell<u64>,
    not_zero: Cell<bool>,
}

impl Budget {
    /// The tar reader is about to find the next entry.
    pub(super) fn finding(&self) {
        self.finding.set(Some(PER_ENTRY));
    }

    /// The entry is found; what is read now is its data.
    pub(super) fn found(&self) {
        self.finding.set(None);
    }

    pub(super) fn tripped(&self) -> Option<Tripped> {
        self.tripped.get()
    }

    /// Whether every byte read so far was zero, and how many there were.
    pub(super) fn zeros(&self) -> Option<u64> {
        (!self.not_zero.get()).then(|| self.read.get())
    }
}

/// The stream `inner`, cut once it passes `total` bytes or an entry's [`PER_ENTRY`].
pub(super) struct Guard<R> {
    inner: R,
    left: u64,
    total: u64,
    budget: Rc<Budget>,
}

impl<R: Read> Guard<R> {
    pub(super) fn new(inner: R, total: u64, budget: Rc<Budget>) -> Guard<R> {
        Guard {
            inner,
            left: total,
            total,
            budget,
        }
    }

    fn cut(&self, why: Tripped) -> io::Error {
        self.budget.tripped.set(Some(why));
        let text = match why {
            Tripped::Headers => format!(
                "an entry's headers (PAX extensions, GNU long names) pass {PER_ENTRY} bytes"
            ),
            Tripped::Total(total) => format!("the archive's stream passed {total} bytes"),
        };
        io::Error::new(io::ErrorKind::InvalidData, text)
    }
}

impl<R: Read> Read for Guard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Never more than what is left of either bound, so no read passes it.
        let mut most = buf.len() as u64;
        most = most.min(self.left.saturating_add(1));
        if let Some(finding) = self.budget.finding.get() {
            most = most.min(finding.saturating_add(1));
        }
        let most = usize::try_from(most).unwrap_or(buf.len()).min(buf.len());
        let n = self.inner.read(&mut buf[..most])?;
        let counted = n as u64;
        self.budget
            .read
            .set(self.budget.read.get().saturating_add(counted));
        if !self.budget.not_zero.get() && buf[..n].iter().any(|b| *b != 0) {
            self.budget.not_zero.set(true);
        }
        if counted > self.left {
            return Err(self.cut(Tripped::Total(self.total)));
        }
        self.left -= counted;
        if let Some(finding) = self.budget.finding.get() {
            if counted > finding {
                return Err(self.cut(Tripped::Headers));
            }
            self.budget.finding.set(Some(finding - counted));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PAX `comment` record of `size` bytes, its length included.
    fn comment(size: usize) -> Vec<u8> {
        let mut record = format!("{size} comment=").into_bytes();
        record.resize(size - 1, b'a');
        record.push(b'\n');
        record
    }

    /// A tar with one PAX header of `size` bytes of records, then a small file.
    fn with_extension(size: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut builder = tar::Builder::new(&mut bytes);
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::XHeader);
        header.set_size(size as u64);
        header.set_cksum();
        let data = comment(size);
        builder.append(&header, data.as_slice()).unwrap();
        let mut file = tar::Header::new_gnu();
        file.set_size(2);
        file.set_mode(0o644);
        builder.append_data(&mut file, "f.txt", &b"hi"[..]).unwrap();
        builder.finish().unwrap();
        drop(builder);
        bytes
    }

    /// The entries' names, the budget set as the unpacker sets it.
    fn read_all(bytes: &[u8]) -> (io::Result<Vec<String>>, Option<Tripped>) {
        let budget = Rc::new(Budget::default());
        let mut archive = tar::Archive::new(Guard::new(bytes, 1 << 30, budget.clone()));
        let names = (|| {
            let mut entries = archive.entries()?;
            let mut names = Vec::new();
            loop {
                budget.finding();
                let Some(entry) = entries.next() else {
                    return Ok(names);
                };
                budget.found();
                let mut entry = entry?;
                names.push(entry.path()?.display().to_string());
                io::copy(&mut entry, &mut io::sink())?;
            }
        })();
        (names, budget.tripped())
    }

    #[test]
    fn a_small_extension_passes_and_a_large_one_is_cut_while_it_is_read() {
        assert_eq!(read_all(&with_extension(4096)).0.unwrap(), ["f.txt"]);
        let (names, tripped) = read_all(&with_extension(8 << 20));
        assert!(names.is_err());
        assert_eq!(tripped, Some(Tripped::Headers));
    }

    /// What a second parser of the stream could be led astray by: a PAX `size=0` over a
    /// header that says 100 GiB, then a large extension where that parser would see data.
    #[test]
    fn an_extension_that_changes_the_next_entrys_size_is_still_bounded() {
        let mut bytes = Vec::new();
        let mut builder = tar::Builder::new(&mut bytes);
        let pax = |size: usize, records: &str| {
            let mut header = tar::Header::new_ustar();
            header.set_entry_type(tar::EntryType::XHeader);
            header.set_size(size as u64);
            header.set_cksum();
            let mut data = records.as_bytes().to_vec();
            data.extend(comment(size - data.len()));
            (header, data)
        };
        let (header, data) = pax(512, "9 size=0\n");
        builder.append(&header, data.as_slice()).unwrap();
        let mut file = tar::Header::new_gnu();
        file.set_path("f.txt").unwrap();
        file.set_size(100 << 30);
        file.set_mode(0o644);
        file.set_cksum();
        builder.append(&file, io::empty()).unwrap();
        let (header, data) = pax(8 << 20, "");
        builder.append(&header, data.as_slice()).unwrap();
        builder.finish().unwrap();
        drop(builder);
        let (names, tripped) = read_all(&bytes);
        assert!(names.is_err(), "{names:?}");
        assert_eq!(tripped, Some(Tripped::Headers));
    }

    #[test]
    fn the_stream_stops_at_its_total() {
        let bytes = with_extension(4096);
        let budget = Rc::new(Budget::default());
        let mut guard = Guard::new(bytes.as_slice(), 1024, budget.clone());
        let err = io::copy(&mut guard, &mut io::sink()).unwrap_err();
        assert!(err.to_string().contains("passed 1024 bytes"), "{err}");
        assert_eq!(budget.tripped(), Some(Tripped::Total(1024)));
    }
}

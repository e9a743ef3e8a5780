//! A bound on what an archive's stream may make the unpacker hold or read. The tar reader keeps
//! a PAX extended header or a GNU long name whole in memory, of whatever size its header says,
//! before any entry's size is checked; and a gzip body unpacks to far more than it sends. This
//! reader sits under the tar reader, follows the stream's headers as they pass, refuses an
//! extended header over [`MAX_EXTENSION`], and stops the stream past its total.

use std::io::{self, Read};

/// The largest PAX extended header or GNU long name or link an archive may carry.
pub(super) const MAX_EXTENSION: u64 = 1 << 20;

const BLOCK: usize = 512;

/// The stream `inner`, refused once it passes `total` bytes or carries an extension over
/// [`MAX_EXTENSION`].
pub(super) struct Guard<R> {
    inner: R,
    total: u64,
    read: u64,
    /// The header being read, and how much of it is in.
    header: [u8; BLOCK],
    filled: usize,
    /// Bytes of the current entry's data (and padding) still to pass, then a header.
    data_left: u64,
    /// Old GNU sparse extension blocks that follow the header before its data.
    sparse_blocks: bool,
}

impl<R: Read> Guard<R> {
    pub(super) fn new(inner: R, total: u64) -> Guard<R> {
        Guard {
            inner,
            total,
            read: 0,
            header: [0; BLOCK],
            filled: 0,
            data_left: 0,
            sparse_blocks: false,
        }
    }

    /// Follows the stream through `bytes`, header by header.
    fn follow(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            if self.data_left > 0 {
                let n = bytes
                    .len()
                    .min(usize::try_from(self.data_left).unwrap_or(usize::MAX));
                self.data_left -= n as u64;
                bytes = &bytes[n..];
                continue;
            }
            let n = bytes.len().min(BLOCK - self.filled);
            self.header[self.filled..self.filled + n].copy_from_slice(&bytes[..n]);
            self.filled += n;
            bytes = &bytes[n..];
            if self.filled == BLOCK {
                self.filled = 0;
                self.header_done()?;
            }
        }
        Ok(())
    }

    /// A whole block where a header was due.
    fn header_done(&mut self) -> io::Result<()> {
        let block = &self.header;
        if self.sparse_blocks {
            // An old GNU sparse extension block: byte 504 says whether another follows.
            self.sparse_blocks = block[504] != 0;
            return Ok(());
        }
        if block.iter().all(|&b| b == 0) {
            return Ok(());
        }
        let size = size_of(&block[124..136])?;
        let kind = block[156];
        if matches!(kind, b'x' | b'g' | b'L' | b'K') && size > MAX_EXTENSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "an extended header (type `{}`) of {size} bytes; at most {MAX_EXTENSION}",
                    kind as char
                ),
            ));
        }
        // Old GNU sparse: the header's own flag at 482 says extension blocks follow.
        self.sparse_blocks = kind == b'S' && block[482] != 0;
        self.data_left = size.div_ceil(BLOCK as u64) * BLOCK as u64;
        Ok(())
    }
}

/// A header's size field: octal text, or base-256 when its first byte's top bit is set.
fn size_of(field: &[u8]) -> io::Result<u64> {
    if field[0] & 0x80 != 0 {
        let mut value: u64 = 0;
        for &byte in &field[field.len() - 8..] {
            value = (value << 8) | u64::from(byte);
        }
        return Ok(value);
    }
    let text: Vec<u8> = field
        .iter()
        .copied()
        .skip_while(|b| *b == b' ')
        .take_while(|b| (b'0'..=b'7').contains(b))
        .collect();
    if text.is_empty() {
        return Ok(0);
    }
    let text = String::from_utf8_lossy(&text);
    u64::from_str_radix(&text, 8).map_err(|err| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a header's size: {err}"),
        )
    })
}

impl<R: Read> Read for Guard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read > self.total {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("the archive's stream passed {} bytes", self.total),
            ));
        }
        self.follow(&buf[..n])?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar with one PAX header of `size` bytes of records, then a small file.
    fn with_extension(size: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut builder = tar::Builder::new(&mut bytes);
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::XHeader);
        header.set_size(size as u64);
        header.set_cksum();
        let record = format!("{size} comment=");
        let mut data = record.into_bytes();
        data.resize(size - 1, b'a');
        data.push(b'\n');
        builder.append(&header, data.as_slice()).unwrap();
        let mut file = tar::Header::new_gnu();
        file.set_size(2);
        file.set_mode(0o644);
        builder.append_data(&mut file, "f.txt", &b"hi"[..]).unwrap();
        builder.finish().unwrap();
        drop(builder);
        bytes
    }

    fn read_all(bytes: &[u8]) -> io::Result<Vec<String>> {
        let mut archive = tar::Archive::new(Guard::new(bytes, 1 << 30));
        let mut names = Vec::new();
        for entry in archive.entries()? {
            names.push(entry?.path()?.display().to_string());
        }
        Ok(names)
    }

    #[test]
    fn a_small_extension_passes_and_a_large_one_is_refused_before_it_is_read() {
        assert_eq!(read_all(&with_extension(4096)).unwrap(), ["f.txt"]);
        let err = read_all(&with_extension(2 << 20)).unwrap_err();
        assert!(err.to_string().contains("extended header"), "{err}");
    }

    #[test]
    fn the_stream_stops_past_its_total() {
        let bytes = with_extension(4096);
        let mut guard = Guard::new(bytes.as_slice(), 1024);
        let err = io::copy(&mut guard, &mut io::sink()).unwrap_err();
        assert!(err.to_string().contains("passed 1024 bytes"), "{err}");
    }

    #[test]
    fn sizes_read_as_octal_or_base_256() {
        assert_eq!(size_of(b"00000001750\0").unwrap(), 1000);
        let mut big = [0u8; 12];
        big[0] = 0x80;
        big[4..].copy_from_slice(&(20u64 << 30).to_be_bytes());
        assert_eq!(size_of(&big).unwrap(), 20 << 30);
    }
}

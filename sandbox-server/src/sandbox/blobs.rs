//! A content-addressed store of file versions: `blobs/<sha256>`, written once, read by hash.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// File contents by sha256.
#[derive(Debug, Clone)]
pub struct BlobStore {
    dir: PathBuf,
    /// Files larger than this are not kept (and, when sparse, not read: [`BlobStore::unread`]).
    max_file_bytes: u64,
    /// Mixed into [`BlobStore::unread`]'s digests, so no content can be made to hash to one.
    salt: Salt,
}

/// A random secret of this store's; its `Debug` does not show it.
#[derive(Clone)]
struct Salt([u8; 32]);

impl std::fmt::Debug for Salt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Salt(..)")
    }
}

/// What `fstat` says of a file that [`BlobStore::unread`] stands in for: its size, its mtime
/// and ctime (seconds and nanoseconds) and its inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatStamp {
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
    pub ino: u64,
}

impl BlobStore {
    pub fn new(dir: &Path, max_file_bytes: u64) -> io::Result<BlobStore> {
        fs::create_dir_all(dir)?;
        Ok(BlobStore {
            dir: dir.to_owned(),
            max_file_bytes,
            salt: Salt(rand::random()),
        })
    }

    /// Deletes every blob (a reset).
    pub fn clear(&self) -> io::Result<()> {
        crate::state_dir::empty(&self.dir)
    }

    /// Whether a file of `size` bytes is read and kept (not over `--blob-max-file-bytes`).
    pub fn keeps(&self, size: u64) -> bool {
        size <= self.max_file_bytes
    }

    /// What a manifest records in place of the hash of a sparse file too large to keep, which
    /// is never read (a sparse file of terabytes costs one `fstat`): a digest of its `stamp`
    /// under this store's random salt. Any write changes the file's ctime, so a change is
    /// still seen; no blob has the digest, so the file reads as not kept, as such files always
    /// have; and as the salt is secret, no content a command writes can hash to it.
    pub fn unread(&self, stamp: StatStamp) -> String {
        let mut hasher = Sha256::new();
        hasher.update(b"sandbox-server: a file too large to read, by its stat\0");
        hasher.update(self.salt.0);
        hasher.update(stamp.size.to_le_bytes());
        for (seconds, nanoseconds) in [stamp.mtime, stamp.ctime] {
            hasher.update(seconds.to_le_bytes());
            hasher.update(nanoseconds.to_le_bytes());
        }
        hasher.update(stamp.ino.to_le_bytes());
        hex::encode(hasher.finalize())
    }

    fn is_hash(sha256: &str) -> bool {
        sha256.len() == 64
            && sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }

    /// The file holding a blob, if it is kept.
    pub fn path(&self, sha256: &str) -> Option<PathBuf> {
        if !Self::is_hash(sha256) {
            return None;
        }
        let path = self.dir.join(sha256);
        path.is_file().then_some(path)
    }

    /// Hashes the file at `path` and keeps a copy unless it is over the size limit. Returns the
    /// hash and whether the blob is kept.
    pub fn put_file(&self, path: &Path, size: u64) -> io::Result<(String, bool)> {
        self.put_reader(File::open(path)?, size)
    }

    /// Hashes exactly `size` bytes of `source` (a file `fstat` said is that long) and keeps a
    /// copy unless it is over the size limit. Returns the hash and whether the blob is kept.
    ///
    /// Reading stops at `size`: a file that grows while it is read adds nothing, so a kept blob
    /// is always as long as the size recorded beside its hash (a restore writes that many bytes
    /// as the file's tar entry; more would become entries of their own). A source that ends
    /// first is an error: the file shrank while it was read.
    pub fn put_reader(&self, source: impl Read, size: u64) -> io::Result<(String, bool)> {
        let keep = self.keeps(size);
        let temp_path = self
            .dir
            .join(format!(".incoming-{:016x}", rand::random::<u64>()));
        let mut temp = if keep {
            Some(File::create(&temp_path)?)
        } else {
            None
        };
        let sha256 = match copy_hashing(source.take(size), temp.as_mut(), size) {
            Ok(sha256) => sha256,
            Err(err) => {
                let _ = fs::remove_file(&temp_path);
                return Err(err);
            }
        };
        if keep {
            let target = self.dir.join(&sha256);
            if target.exists() {
                fs::remove_file(&temp_path)?;
            } else {
                fs::rename(&temp_path, &target)?;
            }
        }
        Ok((sha256, keep))
    }
}

/// Hashes what `source` reads, copying it into `copy` when given; the source must give exactly
/// `size` bytes.
fn copy_hashing(
    mut source: impl Read,
    mut copy: Option<&mut File>,
    size: u64,
) -> io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut n_read = 0u64;
    loop {
        let n = source.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        n_read += n as u64;
        hasher.update(&buffer[..n]);
        if let Some(copy) = copy.as_mut() {
            copy.write_all(&buffer[..n])?;
        }
    }
    if n_read != size {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("ended after {n_read} of its {size} bytes (it shrank while it was read)"),
        ));
    }
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_the_stated_size_is_hashed_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path(), 1 << 20).unwrap();
        // A file that grew after its `fstat`: what came after the size is not read.
        let (sha256, kept) = blobs.put_reader(&b"hello, and more"[..], 5).unwrap();
        assert!(kept);
        assert_eq!(sha256, hex::encode(Sha256::digest(b"hello")));
        assert_eq!(
            std::fs::read(blobs.path(&sha256).unwrap()).unwrap(),
            b"hello"
        );
        // A file that shrank: an error, and no blob.
        let err = blobs.put_reader(&b"hi"[..], 5).unwrap_err();
        assert!(err.to_string().contains("2 of its 5 bytes"), "{err}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "only the first blob: {left:?}");
    }

    #[test]
    fn an_unread_file_stands_for_its_stat() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path(), 4).unwrap();
        let stamp = StatStamp {
            size: 1 << 40,
            mtime: (1, 2),
            ctime: (3, 4),
            ino: 5,
        };
        let digest = blobs.unread(stamp);
        assert!(!blobs.keeps(stamp.size) && BlobStore::is_hash(&digest));
        assert_eq!(
            digest,
            blobs.unread(stamp),
            "the same stat, the same digest"
        );
        let written = StatStamp {
            ctime: (3, 5),
            ..stamp
        };
        assert_ne!(digest, blobs.unread(written), "a write changes it");
        assert!(blobs.path(&digest).is_none(), "no blob has it");
        let other = BlobStore::new(dir.path(), 4).unwrap();
        assert_ne!(digest, other.unread(stamp), "salted per store");
    }
}

//! A content-addressed store of file versions: `blobs/<sha256>`, written once, read by hash.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// File contents by sha256.
#[derive(Debug, Clone)]
pub struct BlobStore {
    dir: PathBuf,
    /// Files larger than this are hashed but not kept.
    max_file_bytes: u64,
}

impl BlobStore {
    pub fn new(dir: &Path, max_file_bytes: u64) -> io::Result<BlobStore> {
        fs::create_dir_all(dir)?;
        Ok(BlobStore {
            dir: dir.to_owned(),
            max_file_bytes,
        })
    }

    /// Deletes every blob (a reset).
    pub fn clear(&self) -> io::Result<()> {
        crate::state_dir::empty(&self.dir)
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

    /// Hashes what `source` reads (a file of `size` bytes) and keeps a copy unless it is over
    /// the size limit. Returns the hash and whether the blob is kept.
    pub fn put_reader(&self, mut source: impl Read, size: u64) -> io::Result<(String, bool)> {
        let keep = size <= self.max_file_bytes;
        let temp_path = self
            .dir
            .join(format!(".incoming-{:016x}", rand::random::<u64>()));
        let mut temp = if keep {
            Some(File::create(&temp_path)?)
        } else {
            None
        };
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; 64 * 1024];
        let result = (|| {
            loop {
                let n = source.read(&mut buffer)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buffer[..n]);
                if let Some(temp) = &mut temp {
                    temp.write_all(&buffer[..n])?;
                }
            }
            Ok::<(), io::Error>(())
        })();
        let sha256 = hex::encode(hasher.finalize());
        if let Err(err) = result {
            let _ = fs::remove_file(&temp_path);
            return Err(err);
        }
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

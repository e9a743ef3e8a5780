//! The workspace's files and the sandbox's stores through the files API: a file's first bytes
//! (never more than asked), a file written, a folder listed, a blob or an artifact fetched.

use sandbox_protocol::DirListing;

use super::{SandboxClient, SandboxError, capped, encode_path, encode_segment};

impl SandboxClient {
    /// At most the first `cap` bytes of a workspace file, and its whole size; `None` when it
    /// does not exist. A workspace is written by someone else: a file's size is known before
    /// any byte of it is taken, and no more than `cap` bytes are ever read (the connection is
    /// dropped past them).
    pub async fn get_file(&self, path: &str, cap: usize) -> Result<Option<FileHead>, SandboxError> {
        let request = self.long_request(
            reqwest::Method::GET,
            &format!("/v1/files/{}", encode_path(path)),
        );
        let mut response = match self.send(request).await {
            Ok(response) => response,
            Err(SandboxError::Api { status: 404, .. }) => return Ok(None),
            Err(err) => return Err(err),
        };
        let size = response.content_length();
        let mut bytes = Vec::with_capacity(cap.min(size.unwrap_or(0) as usize).min(1 << 20));
        while bytes.len() < cap {
            match response
                .chunk()
                .await
                .map_err(|err| self.unreachable(&err))?
            {
                Some(chunk) => {
                    let room = cap - bytes.len();
                    bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                None => break,
            }
        }
        let size = size.unwrap_or(bytes.len() as u64).max(bytes.len() as u64);
        Ok(Some(FileHead { bytes, size }))
    }

    /// Writes a workspace file, creating folders; `mode` sets its permission bits (never a
    /// set-user-id or set-group-id bit: the server leaves them out too).
    pub async fn put_file(
        &self,
        path: &str,
        bytes: Vec<u8>,
        mode: Option<u32>,
    ) -> Result<(), SandboxError> {
        let mut url = format!("/v1/files/{}", encode_path(path));
        if let Some(mode) = mode {
            url.push_str(&format!("?mode={:04o}", mode & 0o1777));
        }
        // No time bound: the file is the caller's, of any size (see `LONG_ANSWER_WAIT`).
        self.send(self.unbounded(reqwest::Method::PUT, &url).body(bytes))
            .await
            .map(drop)
    }

    /// A directory listing; `None` when it does not exist.
    pub async fn list_dir(&self, path: &str) -> Result<Option<DirListing>, SandboxError> {
        let request = self.long_request(
            reqwest::Method::GET,
            &format!("/v1/dirs/{}", encode_path(path)),
        );
        match self.send(request).await {
            Ok(response) => Ok(Some(self.json(response).await?)),
            Err(SandboxError::Api { status: 404, .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// `GET /v1/blobs/{sha256}`; `None` when the sandbox did not keep it. At most
    /// [`MAX_BLOB`](harness_log::reader::MAX_BLOB) bytes are read, the most a log reads back.
    pub async fn blob(&self, sha256: &str) -> Result<Option<Vec<u8>>, SandboxError> {
        let path = format!("/v1/blobs/{}", encode_segment(sha256));
        match self
            .send(self.long_request(reqwest::Method::GET, &path))
            .await
        {
            // Larger than a log keeps: not kept, as one over the server's own limit (a server
            // whose --blob-max-file-bytes passes it is not an error of the session's).
            Ok(response)
                if response
                    .content_length()
                    .is_some_and(|length| length > capped::BLOB_CAP) =>
            {
                Ok(None)
            }
            Ok(response) => self.read_capped(response, capped::BLOB_CAP).await.map(Some),
            Err(SandboxError::Api { status: 404, .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// `GET /v1/artifacts/{id}`; `None` when it was evicted. At most the server's artifact cap
    /// is read.
    pub async fn artifact(&self, id: &str) -> Result<Option<Vec<u8>>, SandboxError> {
        let path = format!("/v1/artifacts/{}", encode_segment(id));
        self.bytes_or_none(&path, self.artifact_cap()).await
    }
}

/// The first bytes of a file, as [`SandboxClient::get_file`] read them, and its whole size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileHead {
    pub bytes: Vec<u8>,
    pub size: u64,
}

impl FileHead {
    /// Whether the file is larger than what was read.
    pub fn truncated(&self) -> bool {
        (self.bytes.len() as u64) < self.size
    }
}

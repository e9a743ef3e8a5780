//! The workspace's state through the sandbox API: snapshots and their manifests, the changes
//! since one, the state's fingerprint, and a whole workspace put back from an archive.

use sandbox_protocol::{ChangesResponse, FingerprintResponse, ManifestResponse, SnapshotResponse};

use super::transfer::{Progress, STALL};
use super::{SandboxClient, SandboxError, encode_segment};

impl SandboxClient {
    /// `POST /v1/workspace/snapshot`.
    pub async fn snapshot(&self) -> Result<SnapshotResponse, SandboxError> {
        let response = self
            .send(self.long_request(reqwest::Method::POST, "/v1/workspace/snapshot"))
            .await?;
        self.json(response).await
    }

    /// `GET /v1/workspace/snapshots/{id}`.
    pub async fn manifest(&self, id: &str) -> Result<ManifestResponse, SandboxError> {
        let path = format!("/v1/workspace/snapshots/{}", encode_segment(id));
        let response = self
            .send(self.long_request(reqwest::Method::GET, &path))
            .await?;
        self.json(response).await
    }

    /// `GET /v1/workspace/changes?since=ID`.
    pub async fn changes(&self, since: &str) -> Result<ChangesResponse, SandboxError> {
        let path = format!("/v1/workspace/changes?since={}", encode_segment(since));
        let response = self
            .send(self.long_request(reqwest::Method::GET, &path))
            .await?;
        self.json(response).await
    }

    /// `GET /v1/state/fingerprint`.
    pub async fn fingerprint(&self) -> Result<FingerprintResponse, SandboxError> {
        let response = self
            .send(self.long_request(reqwest::Method::GET, "/v1/state/fingerprint"))
            .await?;
        self.json(response).await
    }

    /// Copies this sandbox's workspace into `to`'s, replacing it: `GET /v1/workspace/archive`
    /// streamed into `to`'s `PUT`, never held whole; failed when it stalls.
    pub async fn copy_workspace_to(&self, to: &SandboxClient) -> Result<(), SandboxError> {
        let progress = Progress::default();
        let copy = async {
            let response = self.archive_stream().await?;
            let body = reqwest::Body::wrap_stream(progress.count(response.bytes_stream()));
            to.send(
                to.unbounded(reqwest::Method::PUT, "/v1/workspace/archive")
                    .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
                    .body(body),
            )
            .await
            .map(drop)
        };
        let what = format!("copying the workspace from {}", self.url());
        progress.watch(to.url(), &what, STALL, copy).await
    }

    /// `GET /v1/workspace/archive`, its body not read yet; asked again (bounded) while the
    /// server answers 429 (it streams a few archives at once).
    async fn archive_stream(&self) -> Result<reqwest::Response, SandboxError> {
        let mut overloaded = 0;
        loop {
            match self
                .send(self.unbounded(reqwest::Method::GET, "/v1/workspace/archive"))
                .await
            {
                Err(SandboxError::Api { status: 429, .. })
                    if overloaded < super::OVERLOAD_ATTEMPTS =>
                {
                    overloaded += 1;
                    let wait = 250 * u64::from(overloaded.min(8));
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                }
                answer => return answer,
            }
        }
    }

    /// `PUT /v1/workspace/archive`: replaces the workspace with a tar archive.
    pub async fn put_archive(&self, tar: Vec<u8>) -> Result<(), SandboxError> {
        let tar = tokio_util::bytes::Bytes::from(tar);
        let chunks = (0..tar.len())
            .step_by(CHUNK)
            .map(move |at| Ok::<_, std::io::Error>(tar.slice(at..(at + CHUNK).min(tar.len()))))
            .collect::<Vec<_>>();
        let progress = Progress::default();
        let body = reqwest::Body::wrap_stream(progress.count(futures::stream::iter(chunks)));
        let put = self.send(
            self.unbounded(reqwest::Method::PUT, "/v1/workspace/archive")
                .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
                .body(body),
        );
        progress
            .watch(self.url(), "uploading the workspace", STALL, async {
                put.await.map(drop)
            })
            .await
    }

    /// `PUT /v1/workspace/archive` of a tar file, streamed from disk: replaces the workspace
    /// with the archive's tree; failed when it stalls.
    pub async fn put_archive_file(
        &self,
        file: tokio::fs::File,
    ) -> Result<sandbox_protocol::ArchivePutResponse, SandboxError> {
        self.put_archive_file_within(file, STALL).await
    }

    pub(super) async fn put_archive_file_within(
        &self,
        file: tokio::fs::File,
        stall: std::time::Duration,
    ) -> Result<sandbox_protocol::ArchivePutResponse, SandboxError> {
        let progress = Progress::default();
        let stream = progress.count(tokio_util::io::ReaderStream::new(file));
        let put = async {
            let response = self
                .send(
                    self.unbounded(reqwest::Method::PUT, "/v1/workspace/archive")
                        .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
                        .body(reqwest::Body::wrap_stream(stream)),
                )
                .await?;
            self.json(response).await
        };
        progress
            .watch(self.url(), "uploading the workspace", stall, put)
            .await
    }
}

/// The pieces an in-memory archive is sent in (so that its progress shows).
const CHUNK: usize = 256 * 1024;

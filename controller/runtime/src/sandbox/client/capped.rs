//! Reading a sandbox's answers within bounds. The agent runs inside the sandbox, and in a
//! container it can replace the server: every answer may be hostile, so none is read whole
//! without a cap, and none is waited for without a time bound (those of tool calls, event
//! streams and archives are their own: see `post_tool`, `follow_process`, `transfer`).
//!
//! The caps are far above what an honest server sends:
//!
//! - An error body is an `ErrorResponse`: a type and a one-line message.
//! - A JSON answer is at most a manifest or a change list of `--scan-max-entries` paths
//!   (1,000,000 by default). A manifest entry is about 145 bytes of JSON besides its path
//!   (`{"path":"…","kind":"file","size":…,"mode":…,"sha256":"<64 hex>","target":null}`), a
//!   change of a modified file about 290 (its version before and after): a million of them
//!   with paths of 100 bytes make 245 MB and 390 MB. [`ANSWER_CAP`] leaves room for that, and
//!   for longer paths in a manifest.
//! - A tool's answer is its result (the model's text, cut to the server's
//!   `output_limit_chars`, 25,000 by default, and its streams' heads; the full output stays on
//!   the server as artifacts), within [`TOOL_CAP`]; with the step asked for (`since`) it also
//!   brings a change list and up to 8 MiB of file versions inline, so [`STEP_CAP`].
//! - A blob is a file version the server kept (`--blob-max-file-bytes`, 64 MiB by default,
//!   not reported by `/v1/info`): the log reads no blob larger than
//!   [`MAX_BLOB`](harness_log::reader::MAX_BLOB) (1 GiB) whole, so none larger is taken. An
//!   artifact is a stream's output up to the server's `artifact_cap_bytes`.

use std::time::Duration;

use super::{SandboxClient, SandboxError};

/// The most bytes of an error body read.
pub(super) const ERROR_CAP: u64 = 64 * 1024;
/// The most bytes of a JSON answer read (see the module's notes).
pub(super) const ANSWER_CAP: u64 = 512 * 1024 * 1024;
/// The most bytes of a tool call's answer without its step.
pub(super) const TOOL_CAP: u64 = 64 * 1024 * 1024;
/// The most bytes of a tool call's answer that brings its step (changes and inline bytes).
pub(super) const STEP_CAP: u64 = ANSWER_CAP + TOOL_CAP;
/// The most bytes of a blob or an artifact read.
pub(super) const BLOB_CAP: u64 = harness_log::reader::MAX_BLOB;
/// The most bytes of a followed process's event stream held before an event ends: the
/// server's events carry a chunk of at most 64 KiB of output (a few times that as JSON).
pub(super) const EVENT_CAP: usize = 1024 * 1024;

/// How long a small answer may take (info, tools, tokens, processes by id).
pub(super) const ANSWER_WAIT: Duration = Duration::from_secs(60);
/// How long an answer whose work or size grows with the workspace may take: a snapshot hashes
/// every file (the first one of a workspace holding a large dataset, all of it), a change list
/// every changed one, a reset empties the workspace, a blob may be large, and ending processes
/// waits their kill grace, maybe more than once. An upload of a file has no bound of its own:
/// the operator's file, as large as it is, on a link as slow as it is.
pub(super) const LONG_ANSWER_WAIT: Duration = Duration::from_secs(60 * 60);

impl SandboxClient {
    /// A request with no time bound of its own: for a tool call (bounded by the call's own
    /// timeout), an event stream (bounded by its caller) and an archive (failed when it
    /// stalls).
    pub(super) fn unbounded(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut builder = self.http.request(method, format!("{}{path}", self.base));
        if harness_otel::active() {
            // The sandbox's spans join the caller's trace (W3C `traceparent`).
            let mut headers = reqwest::header::HeaderMap::new();
            harness_otel::inject(&tracing::Span::current(), &mut headers);
            builder = builder.headers(headers);
        }
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    /// A request whose answer, body included, comes within [`ANSWER_WAIT`].
    pub(super) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.unbounded(method, path).timeout(ANSWER_WAIT)
    }

    /// A request whose answer, body included, comes within [`LONG_ANSWER_WAIT`].
    pub(super) fn long_request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        self.unbounded(method, path).timeout(LONG_ANSWER_WAIT)
    }

    /// The whole body of `response`, failed once it passes `cap` bytes (its declared length
    /// is checked first, then what arrives: nothing past the cap is held).
    pub(super) async fn read_capped(
        &self,
        mut response: reqwest::Response,
        cap: u64,
    ) -> Result<Vec<u8>, SandboxError> {
        if response.content_length().is_some_and(|length| length > cap) {
            return Err(self.too_large(&response, cap));
        }
        let expected = response.content_length().unwrap_or(0).min(1 << 20);
        let mut bytes = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|err| self.unreachable(&err))?
        {
            if (bytes.len() as u64).saturating_add(chunk.len() as u64) > cap {
                return Err(self.too_large(&response, cap));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    fn too_large(&self, response: &reqwest::Response, cap: u64) -> SandboxError {
        SandboxError::BadResponse {
            url: self.base.clone(),
            message: format!(
                "its answer to {} passed {}: a sandbox answer is capped (a hostile or broken server?)",
                response.url().path(),
                size(cap)
            ),
        }
    }

    /// A JSON answer, read within [`ANSWER_CAP`] and decoded.
    pub(super) async fn json<T: serde::de::DeserializeOwned>(
        &self,
        response: reqwest::Response,
    ) -> Result<T, SandboxError> {
        let body = self.read_capped(response, ANSWER_CAP).await?;
        self.decode_bytes(&body)
    }

    /// The bytes at `path` (a blob or an artifact), read within `cap`; `None` on 404.
    pub(super) async fn bytes_or_none(
        &self,
        path: &str,
        cap: u64,
    ) -> Result<Option<Vec<u8>>, SandboxError> {
        match self
            .send(self.long_request(reqwest::Method::GET, path))
            .await
        {
            Ok(response) => self.read_capped(response, cap).await.map(Some),
            Err(SandboxError::Api { status: 404, .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// How much of an artifact is read: the server's artifact cap when its limits are known
    /// (never more than [`BLOB_CAP`]), else [`BLOB_CAP`].
    pub(super) fn artifact_cap(&self) -> u64 {
        self.limits
            .get()
            .map_or(BLOB_CAP, |limits| limits.artifact_cap_bytes.min(BLOB_CAP))
    }
}

/// A byte count as the caps are written: `64 KiB`, `512 MiB`, `1 GiB`.
pub(super) fn size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{} {name}", bytes / unit);
        }
    }
    format!("{bytes} bytes")
}

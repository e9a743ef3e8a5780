//! A typed HTTP client for one sandbox-server: every route takes and returns the wire types
//! of `sandbox-protocol`.

use std::time::Duration;

use sandbox_protocol::{
    BashArgs, BashResult, BuiltIn, ErrorResponse, ErrorType, InfoResponse, ProcessKillResponse,
    ReadFileResult, SearchReplaceResult, ToolInput, ToolOutput, ToolSpec, ToolStep,
    WriteFileResult,
};
use serde::de::DeserializeOwned;

use super::tls::{ClientTls, TlsFileError};
use calls::Timeout;

/// A tool's result, decoded as its type: the built-in tools' own, any other tool's common part.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolReply {
    Bash(Box<BashResult>),
    ReadFile(ReadFileResult),
    WriteFile(WriteFileResult),
    SearchReplace(SearchReplaceResult),
    /// A tool plugin's result: its `output`, whatever else it carries.
    Other(ToolOutput),
}

impl ToolReply {
    /// The text for the model.
    pub fn output(&self) -> &str {
        match self {
            ToolReply::Bash(result) => &result.output,
            ToolReply::ReadFile(result) => &result.output,
            ToolReply::WriteFile(result) => &result.output,
            ToolReply::SearchReplace(result) => &result.output,
            ToolReply::Other(result) => &result.output,
        }
    }

    /// The command's result, for a `bash` call.
    pub fn bash(&self) -> Option<&BashResult> {
        match self {
            ToolReply::Bash(result) => Some(result),
            ToolReply::ReadFile(_)
            | ToolReply::WriteFile(_)
            | ToolReply::SearchReplace(_)
            | ToolReply::Other(_) => None,
        }
    }
}

/// A cheap-to-clone client for one sandbox.
#[derive(Debug, Clone)]
pub struct SandboxClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    /// The server's limits, from its first `/v1/info`: they bound how long a tool call may take.
    limits: std::sync::Arc<std::sync::OnceLock<sandbox_protocol::Limits>>,
    /// [`STUCK_MARGIN`], shorter in tests.
    stuck_margin: Duration,
}

/// How long a tool call may take when the server does not say its limits (and the call names
/// no timeout), before the kill grace and margin.
const UNKNOWN_LIMITS_SECS: u64 = 3600;

/// How long past a tool call's own bound (its timeout, then the kill grace) the client waits
/// before it calls the sandbox stuck.
const STUCK_MARGIN: Duration = Duration::from_secs(60);

/// Attempts for a call that gets 429 (every slot busy) before giving up.
const OVERLOAD_ATTEMPTS: u32 = 20;
/// Repeats of a keyed call whose connection dropped before giving up.
const DROPPED_ATTEMPTS: u32 = 4;
/// How long a keyed repeat waits for the first attempt, still running, to finish: the longest
/// tool timeout and a margin.
const IN_PROGRESS_WAIT: Duration = Duration::from_secs(3600 + 60);

impl SandboxClient {
    /// A client for a sandbox the controller started (plain HTTP on loopback, or the system's
    /// CA store for HTTPS).
    pub fn new(base: &str, token: Option<String>) -> SandboxClient {
        SandboxClient::with_tls(base, token, &ClientTls::default())
            .expect("no TLS file to read, so nothing to fail")
    }

    /// A client for a sandbox behind TLS, trusting `tls`'s CA and presenting its certificate.
    pub fn with_tls(
        base: &str,
        token: Option<String>,
        tls: &ClientTls,
    ) -> Result<SandboxClient, TlsFileError> {
        let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
        let http = tls
            .apply(builder)?
            .build()
            .expect("a client with a connect timeout and checked TLS files builds");
        Ok(SandboxClient {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token,
            limits: Default::default(),
            stuck_margin: STUCK_MARGIN,
        })
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    /// The bearer token, to keep it out of logs.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    fn unreachable(&self, err: &reqwest::Error) -> SandboxError {
        if let Some(message) = harness_models::refused_certificate(err) {
            return SandboxError::Certificate {
                url: self.base.clone(),
                message,
            };
        }
        let mut message = err.to_string();
        let mut source = std::error::Error::source(err);
        let mut refused = false;
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            refused |= cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
            source = cause.source();
        }
        if refused && err.is_connect() {
            return SandboxError::Refused {
                url: self.base.clone(),
            };
        }
        SandboxError::Unreachable {
            url: self.base.clone(),
            message,
        }
    }

    async fn send(
        &self,
        builder: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, SandboxError> {
        let response = builder.send().await.map_err(|err| self.unreachable(&err))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let bytes = self.read_capped(response, capped::ERROR_CAP).await?;
        let text = String::from_utf8_lossy(&bytes);
        match serde_json::from_str::<ErrorResponse>(&text) {
            Ok(body) => Err(SandboxError::Api {
                status,
                error_type: body.error.error_type,
                message: body.error.message,
            }),
            Err(_) => Err(SandboxError::BadResponse {
                url: self.base.clone(),
                message: format!(
                    "status {status}: {}",
                    text.chars().take(300).collect::<String>()
                ),
            }),
        }
    }

    /// `GET /healthz`.
    pub async fn health(&self) -> Result<(), SandboxError> {
        self.send(self.request(reqwest::Method::GET, "/healthz"))
            .await
            .map(drop)
    }

    pub async fn info(&self) -> Result<InfoResponse, SandboxError> {
        let response = self
            .send(self.request(reqwest::Method::GET, "/v1/info"))
            .await?;
        let info: InfoResponse = self.json(response).await?;
        let _ = self.limits.set(info.limits.clone());
        Ok(info)
    }

    /// How long a call may go unanswered before the sandbox counts as stuck: its timeout (a
    /// command's own, or the server's default; the longest for other tools) and the kill
    /// grace, plus a margin. `None` when the server's limits cannot be read. The limits are the
    /// server's word: added without overflow (`u64::MAX` seconds is a wait without end).
    async fn call_bound(&self, timeout: Timeout) -> Duration {
        if self.limits.get().is_none() {
            let _ = self.info().await;
        }
        let Some(limits) = self.limits.get() else {
            // The server did not say its limits: the call's own timeout, or an hour, bounds
            // it (a server that fails `/v1/info` cannot make a call wait forever).
            let asked = match timeout {
                Timeout::Command(Some(asked)) => u64::from(asked),
                Timeout::Command(None) | Timeout::Longest => UNKNOWN_LIMITS_SECS,
            };
            return Duration::from_secs(asked).saturating_add(self.stuck_margin);
        };
        let timeout = match timeout {
            Timeout::Command(asked) => asked
                .map_or(limits.default_timeout_secs, u64::from)
                .min(limits.max_timeout_secs),
            Timeout::Longest => limits.max_timeout_secs,
        };
        Duration::from_secs(timeout)
            .saturating_add(Duration::from_millis(limits.kill_grace_ms))
            .saturating_add(self.stuck_margin)
    }

    pub async fn tools(&self) -> Result<Vec<ToolSpec>, SandboxError> {
        let response = self
            .send(self.request(reqwest::Method::GET, "/v1/tools"))
            .await?;
        self.json(response).await
    }

    /// Runs a tool call; its result decoded as its tool answers.
    pub async fn call_tool(&self, call: &ToolInput) -> Result<ToolReply, SandboxError> {
        let (reply, _) = self.call_tool_with(call, &CallOptions::default()).await?;
        Ok(reply)
    }

    /// Runs a tool as [`call_tool`](Self::call_tool) does; with a key, a dropped connection is
    /// retried safely (the sandbox answers a repeat from its store), and with `since` or
    /// `fingerprint` the answer brings the step's record along (one round trip).
    pub async fn call_tool_with(
        &self,
        call: &ToolInput,
        options: &CallOptions<'_>,
    ) -> Result<(ToolReply, Option<ToolStep>), SandboxError> {
        let timeout = match call.built_in() {
            Some(tool) if tool.answers_as_bash() => Timeout::Command(call.timeout_secs()),
            _ => Timeout::Longest,
        };
        let body = self.post_tool(call.name(), call, timeout, options).await?;
        // Decoded straight into the types, twice (the step, then the result, each skipping the
        // other's fields): never into a `serde_json::Value`, which holds a hostile answer's
        // `[0,0,…]` in 16 times its size.
        let step = self.decode_bytes::<Stepped>(&body)?.step;
        let reply = match call.built_in() {
            // A `shell` run answers as `bash` does, with the shell's part besides.
            Some(tool) if tool.answers_as_bash() => {
                ToolReply::Bash(Box::new(self.decode_bytes(&body)?))
            }
            Some(BuiltIn::ReadFile) => ToolReply::ReadFile(self.decode_bytes(&body)?),
            Some(BuiltIn::WriteFile) => ToolReply::WriteFile(self.decode_bytes(&body)?),
            Some(BuiltIn::SearchReplace) => ToolReply::SearchReplace(self.decode_bytes(&body)?),
            _ => ToolReply::Other(self.decode_bytes(&body)?),
        };
        Ok((reply, step))
    }

    fn decode_bytes<T: DeserializeOwned>(&self, body: &[u8]) -> Result<T, SandboxError> {
        serde_json::from_slice(body).map_err(|err| SandboxError::BadResponse {
            url: self.base.clone(),
            message: err.to_string(),
        })
    }

    /// `POST /v1/tools/bash`.
    pub async fn bash(&self, args: &BashArgs) -> Result<BashResult, SandboxError> {
        let body = self
            .post_tool(
                BuiltIn::Bash.as_str(),
                args,
                Timeout::Command(args.timeout),
                &CallOptions::default(),
            )
            .await?;
        self.decode_bytes(&body)
    }

    /// Posts a tool call and reads its answer; retries (bounded) while the sandbox answers 429,
    /// and, with a key, after a dropped connection or while the first attempt still runs (409).
    async fn post_tool(
        &self,
        name: &str,
        args: &impl serde::Serialize,
        timeout: Timeout,
        options: &CallOptions<'_>,
    ) -> Result<Vec<u8>, SandboxError> {
        let path = format!("/v1/tools/{}{}", encode_segment(name), options.query());
        let bound = self.call_bound(timeout).await;
        let cap = if options.since.is_some() || options.fingerprint {
            capped::STEP_CAP
        } else {
            capped::TOOL_CAP
        };
        let started = std::time::Instant::now();
        let (mut overloaded, mut dropped) = (0, 0);
        loop {
            let mut request = self.unbounded(reqwest::Method::POST, &path).json(args);
            if let Some(key) = options.key {
                request = request.header("Idempotency-Key", key);
            }
            if let Some(name) = options.name {
                request = request.header("Sandbox-Call-Id", name);
            }
            let keyed = options.key.is_some();
            let attempt = async { self.read_capped(self.send(request).await?, cap).await };
            let answer = tokio::time::timeout(bound, attempt)
                .await
                .unwrap_or_else(|_| {
                    Err(SandboxError::Stuck {
                        url: self.base.clone(),
                        tool: name.to_owned(),
                        waited: bound,
                    })
                });
            match answer {
                Err(SandboxError::Api { status: 429, .. }) if overloaded < OVERLOAD_ATTEMPTS => {
                    overloaded += 1;
                    tokio::time::sleep(Duration::from_millis(250 * u64::from(overloaded.min(8))))
                        .await;
                }
                Err(SandboxError::Unreachable { message, .. })
                    if keyed && dropped < DROPPED_ATTEMPTS =>
                {
                    dropped += 1;
                    tracing::warn!(tool = name, attempt = dropped, %message, "the sandbox connection dropped; repeating the call under its idempotency key");
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(dropped))).await;
                }
                Err(SandboxError::Api {
                    error_type: ErrorType::IdempotencyInProgress,
                    ..
                }) if started.elapsed() < IN_PROGRESS_WAIT => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                other => return other,
            }
        }
    }

    /// `DELETE /v1/processes`: ends every background process a command left.
    pub async fn kill_background(&self) -> Result<(), SandboxError> {
        self.send(self.long_request(reqwest::Method::DELETE, "/v1/processes"))
            .await
            .map(drop)
    }

    /// `DELETE /v1/processes?include_running=true`: ends every process a client started, those
    /// of running calls too, but the image's own entrypoint; says which, with their commands.
    pub async fn end_processes(&self) -> Result<ProcessKillResponse, SandboxError> {
        let response = self
            .send(self.long_request(
                reqwest::Method::DELETE,
                "/v1/processes?include_running=true",
            ))
            .await?;
        self.json(response).await
    }

    /// `POST /v1/reset`: every process killed, the workspace, artifacts, blobs, snapshots and
    /// the commands' temporary folder emptied.
    pub async fn reset(&self) -> Result<sandbox_protocol::ResetResponse, SandboxError> {
        let response = self
            .send(self.long_request(reqwest::Method::POST, "/v1/reset"))
            .await?;
        self.json(response).await
    }

    /// Polls `/healthz` until it answers or `limit` passes.
    pub async fn wait_healthy(&self, limit: Duration) -> Result<(), SandboxError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match self.health().await {
                Ok(()) => return Ok(()),
                // A refused certificate stays refused.
                Err(err @ SandboxError::Certificate { .. }) => return Err(err),
                Err(err) if tokio::time::Instant::now() >= deadline => return Err(err),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Checks a sandbox that should already be running: a refused connection fails at once
    /// (nothing listens there, and waiting will not change that); other failures (a slow
    /// answer, a server still starting) are retried within `limit`.
    pub async fn check_running(&self, limit: Duration) -> Result<(), SandboxError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match self.health().await {
                Ok(()) => return Ok(()),
                Err(err @ (SandboxError::Refused { .. } | SandboxError::Certificate { .. })) => {
                    return Err(err);
                }
                Err(err) if tokio::time::Instant::now() >= deadline => return Err(err),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}

/// The step a tool's answer brings besides its result (the result's fields are skipped).
#[derive(serde::Deserialize)]
struct Stepped {
    #[serde(default)]
    step: Option<ToolStep>,
}

/// Percent-encodes each segment of a relative path, keeping the `/` between them.
fn encode_path(path: &str) -> String {
    path.split('/')
        .map(encode_segment)
        .collect::<Vec<_>>()
        .join("/")
}

fn encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

mod calls;
pub(crate) use calls::chunk_text;
mod capped;
mod error;
mod files;
mod processes;
mod snapshots;
#[cfg(test)]
mod tests;
mod tokens;
mod transfer;
mod workspace;

pub use calls::{CallOptions, LiveOutput};
pub use error::{SandboxError, is_not_found};
pub use files::FileHead;

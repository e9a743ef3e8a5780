//! Processes started by id on the sandbox (`/v1/processes`): what an MCP server running inside
//! the sandbox needs of them.

use sandbox_protocol::{
    Encoding, ManagedProcess, ProcessOutput, StartProcessRequest, StdinRequest,
};

use super::{SandboxClient, SandboxError, encode_segment};

impl SandboxClient {
    /// `POST /v1/processes`: starts `request.cmd` under `request.id`.
    pub async fn start_process(
        &self,
        request: &StartProcessRequest,
    ) -> Result<ManagedProcess, SandboxError> {
        let response = self
            .send(
                self.request(reqwest::Method::POST, "/v1/processes")
                    .json(request),
            )
            .await?;
        self.json(response).await
    }

    /// `POST /v1/processes/{id}/stdin`: writes `text` to the process's standard input.
    pub async fn write_stdin(&self, id: &str, text: &str) -> Result<(), SandboxError> {
        let path = format!("/v1/processes/{}/stdin", encode_segment(id));
        let body = StdinRequest {
            data: text.to_owned(),
            encoding: Encoding::Utf8,
            close: false,
        };
        self.send(self.request(reqwest::Method::POST, &path).json(&body))
            .await
            .map(drop)
    }

    /// `GET /v1/processes/{id}/output`: what the process printed after chunk `after_seq`, at
    /// most about `max_bytes`, without waiting.
    pub async fn process_output(
        &self,
        id: &str,
        after_seq: u64,
        max_bytes: usize,
    ) -> Result<ProcessOutput, SandboxError> {
        let path = format!(
            "/v1/processes/{}/output?after_seq={after_seq}&wait_ms=0&max_bytes={max_bytes}",
            encode_segment(id)
        );
        let response = self.send(self.request(reqwest::Method::GET, &path)).await?;
        self.json(response).await
    }

    /// `DELETE /v1/processes/{id}`: kills the process and everything it started.
    pub async fn delete_process(&self, id: &str) -> Result<(), SandboxError> {
        let path = format!("/v1/processes/{}", encode_segment(id));
        self.send(self.long_request(reqwest::Method::DELETE, &path))
            .await
            .map(drop)
    }
}

//! `--sandbox pool:URL,URL…`: running sandbox-servers (the standalone Kubernetes sandbox, say),
//! leased one task at a time. Before a lease the member must answer `/healthz`, and it is
//! reset through the API (`POST /v1/reset`): its processes ended, its workspace, artifacts,
//! blobs, snapshots and temporary folder emptied, so nothing of one task reaches the next. A
//! member that fails either goes back to the end of the queue and the next
//! is tried; a lease waits at most a minute for a healthy one.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Doing, Failure, SandboxClient};
use crate::input::InputError;

/// How long a lease waits for a healthy member.
const LEASE_PATIENCE: Duration = Duration::from_secs(60);
/// How long ending a member's processes and emptying its workspace may take.
const RESET_PATIENCE: Duration = Duration::from_secs(60);

/// Why no member was leased.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Every member was busy or failed its health check or reset for a minute.
    #[error("no pool member was healthy within {waited_secs} s (last: {last})")]
    NoneHealthy { waited_secs: u64, last: String },
    /// The batch was stopped while the lease waited.
    #[error("interrupted while waiting for a pool sandbox")]
    Interrupted,
}

#[derive(Debug)]
pub struct Pool {
    members: Vec<SandboxClient>,
    free: Mutex<VecDeque<usize>>,
    returned: Notify,
}

/// A member leased to one task; it goes back to the pool when dropped.
#[derive(Debug)]
pub struct Lease {
    pool: Arc<Pool>,
    index: usize,
}

impl Lease {
    pub fn url(&self) -> &str {
        self.pool.members[self.index].url()
    }

    /// A client of the leased member.
    pub fn client(&self) -> SandboxClient {
        self.pool.members[self.index].clone()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(self.index);
        self.pool.returned.notify_one();
    }
}

impl Pool {
    /// Every member shares the token in `token_file`.
    pub fn new(
        urls: &[String],
        token_file: Option<&Path>,
        tls: &super::ClientTls,
    ) -> Result<Pool, InputError> {
        let token = match token_file {
            Some(file) => match std::fs::read_to_string(file) {
                Ok(text) => Some(text.trim().to_owned()),
                Err(err) => {
                    let file = file.display();
                    return Err(InputError(format!(
                        "reading the pool's token {file}: {err}"
                    )));
                }
            },
            None => None,
        };
        let members = urls
            .iter()
            .map(|url| SandboxClient::with_tls(url, token.clone(), tls))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| InputError(err.to_string()))?;
        Ok(Pool {
            members,
            free: Mutex::new((0..urls.len()).collect()),
            returned: Notify::new(),
        })
    }

    fn take(&self) -> Option<usize> {
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    /// A healthy member with an empty workspace.
    pub async fn lease(self: &Arc<Pool>, cancel: &CancellationToken) -> Result<Lease, LeaseError> {
        let deadline = tokio::time::Instant::now() + LEASE_PATIENCE;
        let mut last_problem = String::from("every member was busy");
        loop {
            if let Some(index) = self.take() {
                let lease = Lease {
                    pool: self.clone(),
                    index,
                };
                match self.reset(&self.members[index]).await {
                    Ok(()) => return Ok(lease),
                    Err(err) => {
                        last_problem = format!("{}: {err}", self.members[index].url());
                        tracing::warn!("pool member not leased: {last_problem}");
                        drop(lease);
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(LeaseError::NoneHealthy {
                    waited_secs: LEASE_PATIENCE.as_secs(),
                    last: last_problem,
                });
            }
            tokio::select! {
                () = self.returned.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                () = cancel.cancelled() => return Err(LeaseError::Interrupted),
            }
        }
    }

    /// Health, then a clean slate: no background processes, an empty workspace. A member that
    /// answers its health check but then hangs is given up on after a minute.
    async fn reset(&self, member: &SandboxClient) -> Result<(), Failure> {
        tokio::time::timeout(Duration::from_secs(5), member.health())
            .await
            .map_err(|_| Failure::Server("no answer to /healthz within 5 s".to_owned()))?
            .doing("unhealthy")?;
        let clean = async { member.reset().await.doing("resetting it").map(drop) };
        tokio::time::timeout(RESET_PATIENCE, clean)
            .await
            .map_err(|_| {
                Failure::Server(format!("no reset within {} s", RESET_PATIENCE.as_secs()))
            })?
    }
}

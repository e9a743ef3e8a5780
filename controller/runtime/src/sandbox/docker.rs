//! `--sandbox docker`: a fresh container of the sandbox image per session, through the Docker
//! Engine API (the version is negotiated, so old and new engines both work).
//!
//! The container gets the task's limits (memory without swap, CPUs, pids), drops every
//! capability, and publishes the server's port on the engine host's loopback only. The token
//! is uploaded into the created container before it starts (never an environment variable,
//! which `docker inspect` and `/proc` would show); the workspace is seeded later through the
//! sandbox API, so nothing of the host is mounted and a remote engine works the same way.
//!
//! Every container carries [`LABEL_MANAGED`] and the controller's host, pid and process start
//! time: [`prune`] removes those whose controller is gone (a SIGKILL leaves them behind) or
//! whose lifetime has passed. A session removes its own on every path it controls.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig, PortBinding};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use futures::StreamExt;

use super::failure::IntoFailure;
use super::{Doing, Failure, NetworkMode, SandboxClient, StartError};

pub mod fork_image;
mod prune;
pub mod warm;
pub use prune::{Pruned, prune};

/// On every container the harness creates.
pub const LABEL_MANAGED: &str = "agent-harness.managed";
const LABEL_SESSION: &str = "agent-harness.session";
const LABEL_HOST: &str = "agent-harness.controller.host";
const LABEL_PID: &str = "agent-harness.controller.pid";
const LABEL_PID_START: &str = "agent-harness.controller.pid-start";
const LABEL_EXPIRES: &str = "agent-harness.expires";

/// The image when neither the flag, the task nor `HARNESS_SANDBOX_IMAGE` names one.
pub const DEFAULT_IMAGE: &str = "agent-harness/sandbox";
/// Where the image's server listens and reads its token (docker/sandbox.Dockerfile).
const SERVER_PORT: &str = "8080/tcp";
const TOKEN_PATH: &str = "run/secrets/sandbox-token";
/// The image's non-root user, who must be able to read the token.
const SANDBOX_UID: u64 = 10001;

/// What to start.
#[derive(Debug, Clone, PartialEq)]
pub struct DockerSpec {
    pub image: String,
    /// Bytes; swap is capped at the same figure, so the limit is real.
    pub memory: Option<i64>,
    pub cpus: Option<f64>,
    pub pids: Option<i64>,
    /// After this the container is fair game for `prune` even while its controller lives.
    pub lifetime: Option<Duration>,
    /// The server's `--network`: `none` (commands reach no address) or `host` (the
    /// container's own bridged network).
    pub network: NetworkMode,
    pub tools: Option<Vec<String>>,
    /// The server's `--known-files`, a path in the image: a fork's image lists the files of
    /// the workspace it holds, so the first snapshot reads none of them.
    pub known_files: Option<String>,
}

/// A running container with a healthy sandbox-server in it.
#[derive(Debug)]
pub struct DockerSandbox {
    docker: Docker,
    pub id: String,
    pub client: SandboxClient,
    removed: bool,
}

/// What the engine says about a container.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerState {
    pub running: bool,
    pub oom_killed: bool,
    pub exit_code: Option<i64>,
    pub status: String,
}

/// Connects to the engine the environment names (`DOCKER_HOST`, else the local socket) and
/// agrees on an API version with it.
pub async fn connect() -> Result<Docker, Failure> {
    let docker = Docker::connect_with_defaults()
        .doing("connecting to the Docker engine (DOCKER_HOST, else /var/run/docker.sock)")?;
    docker
        .negotiate_version()
        .await
        .doing("reaching the Docker engine: is it running, and may this user use its socket?")
}

/// The host the engine publishes ports on, as the controller reaches it.
fn engine_host() -> String {
    std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|url| {
            let rest = url.strip_prefix("tcp://")?;
            let host = rest.split([':', '/']).next()?;
            (!host.is_empty()).then(|| host.to_owned())
        })
        .unwrap_or_else(|| "127.0.0.1".to_owned())
}

/// This process's start time in clock ticks since boot, which with the pid names it uniquely.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; the fields after its last `)` do not.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

fn this_host() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_default()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The labels that say whose container this is: `prune` reads them.
fn labels(spec: &DockerSpec, session_id: &str) -> HashMap<String, String> {
    labels_for(session_id, spec.lifetime)
}

/// A container's state as the engine reports it.
pub async fn container_state(
    docker: &Docker,
    id: &str,
) -> Result<ContainerState, bollard::errors::Error> {
    let inspect = docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await?;
    let state = inspect.state.unwrap_or_default();
    Ok(ContainerState {
        running: state.running.unwrap_or(false),
        oom_killed: state.oom_killed.unwrap_or(false),
        exit_code: state.exit_code,
        status: state
            .status
            .map(|s| s.to_string())
            .unwrap_or_else(|| "unknown".to_owned()),
    })
}

/// The labels of every container (and network) a session creates.
pub fn labels_for(session_id: &str, lifetime: Option<Duration>) -> HashMap<String, String> {
    let pid = std::process::id();
    let mut labels = HashMap::from([
        (LABEL_MANAGED.to_owned(), "true".to_owned()),
        (LABEL_SESSION.to_owned(), session_id.to_owned()),
        (LABEL_HOST.to_owned(), this_host()),
        (LABEL_PID.to_owned(), pid.to_string()),
        (
            LABEL_PID_START.to_owned(),
            process_start(pid).unwrap_or(0).to_string(),
        ),
    ]);
    if let Some(lifetime) = lifetime {
        labels.insert(
            LABEL_EXPIRES.to_owned(),
            (now_secs() + lifetime.as_secs()).to_string(),
        );
    }
    labels
}

/// The image's server arguments (its entrypoint is `sandbox-server serve`).
fn server_args(spec: &DockerSpec) -> Vec<String> {
    let mut cmd = vec![
        "--network".to_owned(),
        spec.network.as_str().to_owned(),
        // Removal follows the session; a command still running gets 2 s.
        "--shutdown-grace-secs".to_owned(),
        "2".to_owned(),
    ];
    if let Some(tools) = &spec.tools {
        cmd.extend(["--tools".to_owned(), tools.join(",")]);
    }
    if let Some(known) = &spec.known_files {
        cmd.extend(["--known-files".to_owned(), known.clone()]);
    }
    cmd
}

/// Limits, no capabilities, no new privileges, and the server's port on the engine host.
fn host_config(spec: &DockerSpec) -> HostConfig {
    let remote = engine_host() != "127.0.0.1";
    HostConfig {
        memory: spec.memory,
        memory_swap: spec.memory,
        nano_cpus: spec.cpus.map(|cpus| (cpus * 1e9) as i64),
        pids_limit: spec.pids,
        cap_drop: Some(vec!["ALL".to_owned()]),
        security_opt: Some(vec!["no-new-privileges".to_owned()]),
        port_bindings: Some(HashMap::from([(
            SERVER_PORT.to_owned(),
            Some(vec![PortBinding {
                // The server has a token, but on a local engine nobody else need reach it.
                host_ip: Some(if remote { "0.0.0.0" } else { "127.0.0.1" }.to_owned()),
                host_port: Some(String::new()),
            }]),
        )])),
        ..Default::default()
    }
}

/// A tar holding the token file, readable by the image's user only.
fn token_archive(token: &str) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for dir in ["run/", "run/secrets/"] {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_uid(0);
        header.set_gid(0);
        header.set_size(0);
        header.set_mtime(now_secs());
        builder.append_data(&mut header, dir, std::io::empty())?;
    }
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o400);
    header.set_uid(SANDBOX_UID);
    header.set_gid(SANDBOX_UID);
    header.set_size(token.len() as u64);
    header.set_mtime(now_secs());
    builder.append_data(&mut header, TOKEN_PATH, token.as_bytes())?;
    builder.into_inner()
}

/// Unpacks the tar `archive` into the folder `path` of the container `id`.
pub async fn unpack(
    docker: &Docker,
    id: &str,
    path: &str,
    archive: Vec<u8>,
) -> Result<(), bollard::errors::Error> {
    let options = UploadToContainerOptionsBuilder::new().path(path).build();
    docker
        .upload_to_container(id, Some(options), bollard::body_full(archive.into()))
        .await
}

/// Unpacks the tar `archive` at the root of the created container `id`, then starts it; a
/// failure says `uploading` or `starting`, whichever step it was.
pub async fn unpack_and_start(
    docker: &Docker,
    id: &str,
    archive: Vec<u8>,
    uploading: &str,
    starting: &str,
) -> Result<(), Failure> {
    unpack(docker, id, "/", archive).await.doing(uploading)?;
    docker.start_container(id, None).await.doing(starting)?;
    Ok(())
}

impl DockerSandbox {
    /// Creates, fills and starts a container, and waits until its server is healthy. On any
    /// failure the container is removed before the error returns.
    pub async fn start(
        spec: &DockerSpec,
        session_id: &str,
        token: &str,
    ) -> Result<DockerSandbox, StartError> {
        let docker = connect().await?;
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            cmd: Some(server_args(spec)),
            // The server's spans go to the controller's collector (its commands get a clean
            // environment whatever the container's).
            env: Some(harness_otel::forwarded_environment()).filter(|env| !env.is_empty()),
            labels: Some(labels(spec, session_id)),
            exposed_ports: Some(vec![SERVER_PORT.to_owned()]),
            host_config: Some(host_config(spec)),
            ..Default::default()
        };
        let name = format!("harness-{session_id}");
        let created = docker
            .create_container(
                Some(CreateContainerOptionsBuilder::new().name(&name).build()),
                body,
            )
            .await
            .map_err(|err| match &err {
                bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                } => StartError::BadInput(format!(
                    "the image `{}` is not on the Docker engine: build it (docker/README.md) or \
                     name another with --image",
                    spec.image
                )),
                _ => StartError::Failed(err.doing("creating the sandbox container".to_owned())),
            })?;
        let mut sandbox = DockerSandbox {
            docker,
            id: created.id,
            client: SandboxClient::new("http://127.0.0.1:0", Some(token.to_owned())),
            removed: false,
        };
        match sandbox.boot(token).await {
            Ok(client) => {
                sandbox.client = client;
                Ok(sandbox)
            }
            Err(err) => {
                let logs = sandbox.logs().await;
                sandbox.remove().await;
                Err(StartError::Failed(err.after(&if logs.is_empty() {
                    "the container printed nothing".to_owned()
                } else {
                    format!("the container's last lines:\n{logs}")
                })))
            }
        }
    }

    async fn boot(&self, token: &str) -> Result<SandboxClient, Failure> {
        let archive = token_archive(token).doing("packing the sandbox token")?;
        unpack_and_start(
            &self.docker,
            &self.id,
            archive,
            "uploading the sandbox token into the container",
            "starting the sandbox container",
        )
        .await?;
        let inspect = self
            .docker
            .inspect_container(&self.id, None::<InspectContainerOptions>)
            .await
            .doing("inspecting the sandbox container")?;
        let port = inspect
            .network_settings
            .and_then(|settings| settings.ports)
            .and_then(|ports| ports.get(SERVER_PORT).cloned().flatten())
            .and_then(|bindings| bindings.into_iter().find_map(|b| b.host_port))
            .ok_or_else(|| {
                Failure::Server("the engine published no port for the sandbox server".to_owned())
            })?;
        let client = SandboxClient::new(
            &format!("http://{}:{port}", engine_host()),
            Some(token.to_owned()),
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            match client.health().await {
                Ok(()) => return Ok(client),
                Err(err) => {
                    let state = self.state().await?;
                    if !state.running {
                        return Err(Failure::Server(format!(
                            "the sandbox container stopped while starting ({})",
                            state.describe()
                        )));
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return Err(err.doing(
                            "the sandbox in the container was not healthy within 30 s".to_owned(),
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            }
        }
    }

    /// The container's state as the engine reports it.
    pub async fn state(&self) -> Result<ContainerState, Failure> {
        container_state(&self.docker, &self.id)
            .await
            .doing("inspecting the sandbox container")
    }

    /// The container's last 20 lines of output.
    async fn logs(&self) -> String {
        let options = LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .tail("20")
            .build();
        let mut stream = self.docker.logs(&self.id, Some(options));
        let mut text = String::new();
        while let Some(Ok(chunk)) = stream.next().await {
            text.push_str(&chunk.to_string());
        }
        text.trim_end().to_owned()
    }

    /// Stops and removes the container (its workspace goes with it).
    pub async fn remove(&mut self) {
        if self.removed {
            return;
        }
        let options = RemoveContainerOptionsBuilder::new().force(true).build();
        match self.docker.remove_container(&self.id, Some(options)).await {
            Ok(()) => self.removed = true,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => self.removed = true,
            Err(err) => tracing::warn!(
                container = %self.id,
                "could not remove the sandbox container ({err}); `harness sandboxes prune` will"
            ),
        }
    }
}

impl ContainerState {
    /// In words, for the log: `exited with 137, killed for memory (OOM)`.
    pub fn describe(&self) -> String {
        let mut text = match self.exit_code {
            Some(code) if !self.running => format!("{} with {code}", self.status),
            _ => self.status.clone(),
        };
        if self.oom_killed {
            text.push_str(", killed for memory (OOM)");
        }
        text
    }
}

impl Drop for DockerSandbox {
    /// A path that forgot [`DockerSandbox::remove`] (a panic) still removes the container,
    /// from a thread of its own since no runtime may be left to await on.
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let (docker, id) = (self.docker.clone(), self.id.clone());
        block_on_thread(move || async move {
            let options = RemoveContainerOptionsBuilder::new().force(true).build();
            let _ = docker.remove_container(&id, Some(options)).await;
        });
    }
}

/// Runs the future `work` makes to its end on a thread and a runtime of its own, and waits for
/// it: the cleanup of a `Drop`, which may find no runtime left to await on.
pub fn block_on_thread<F: std::future::Future<Output = ()>>(
    work: impl FnOnce() -> F + Send + 'static,
) {
    let thread = std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(work());
    });
    let _ = thread.join();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_archive_holds_one_private_file_for_the_image_user() {
        let bytes = token_archive("secret").unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let entries: Vec<(String, u32, u64)> = archive
            .entries()
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let header = entry.header();
                (
                    entry.path().unwrap().display().to_string(),
                    header.mode().unwrap(),
                    header.uid().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            entries.last().unwrap(),
            &("run/secrets/sandbox-token".to_owned(), 0o400, SANDBOX_UID)
        );
    }

    #[test]
    fn a_process_start_time_is_read_for_this_process_and_none_for_a_missing_one() {
        assert!(process_start(std::process::id()).is_some());
        assert_eq!(process_start(u32::MAX), None);
    }
}

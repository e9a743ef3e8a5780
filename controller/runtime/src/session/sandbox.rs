//! The session's sandbox, whatever it is: a local sandbox-server child, a container, a running
//! server at a URL, a pool member its batch leased, or what a [`Provider`] started. Started
//! or reached, asked whether it died, and stopped, behind one type.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::check::CheckGrader;
use super::provider::{Grader, Liveness, Provided, Provider, ProviderContext};
use crate::config::{RunConfig, SandboxTarget};
use crate::input::InputError;
use crate::run_loop::Observer;
use crate::sandbox::docker::DockerSandbox;
use crate::sandbox::docker::warm::Served;
use crate::sandbox::local::LocalSandbox;
use crate::sandbox::pool::Lease;
use crate::sandbox::{Doing, Failure, SandboxClient, SandboxError, StartError};
use harness_log::ContainerRecord;

/// A session's sandbox, ready for requests.
#[derive(Debug)]
pub struct Sandbox {
    handle: Handle,
    pub client: SandboxClient,
    /// A temporary workspace folder made for this session, removed when it stops.
    temporary: Option<tempfile::TempDir>,
}

/// What the session started, to stop when it ends and to ask whether it died.
#[derive(Debug)]
enum Handle {
    Local(LocalSandbox),
    Docker(DockerSandbox),
    /// What a provider started (its own containers) or reached.
    Provided(Box<dyn Provided>),
    /// Someone else's server: neither started nor stopped here.
    Remote,
    /// A pool member; it goes back to its pool when the session ends.
    Leased(Lease),
    /// A subagent's: its parent's sandbox, or the copy its spawner started (and stops).
    Given,
}

/// What starting a sandbox needs besides the run's config.
pub struct StartContext<'a> {
    pub session_id: &'a str,
    pub token: &'a str,
    /// A pool member the batch leased, for a `SandboxTarget::Pool`.
    pub lease: Option<Lease>,
    /// Docker containers started ahead of need, for a `SandboxTarget::Docker`.
    pub warm: Option<&'a std::sync::Arc<crate::sandbox::docker::warm::WarmPool>>,
    /// Where a local server's own log lines go (instead of stderr).
    pub server_log: Option<&'a Path>,
    pub observer: &'a dyn Observer,
}

impl Sandbox {
    /// Starts or reaches the sandbox the config names.
    pub async fn start(
        config: &RunConfig,
        context: StartContext<'_>,
    ) -> Result<Sandbox, StartError> {
        let StartContext {
            session_id,
            token,
            lease,
            warm,
            server_log,
            observer,
        } = context;
        let ignored = |what: &str| {
            if let Some(dir) = &config.working_dir {
                observer.note(&format!(
                    "note: the working directory {} is not used by {what}",
                    dir.display()
                ));
            }
        };
        match &config.sandbox {
            SandboxTarget::Local => Sandbox::start_local(config, token, server_log, observer).await,
            SandboxTarget::Docker(spec) => {
                ignored("a docker sandbox (its workspace is in the container)");
                let (docker, how) = match warm {
                    Some(warm) => {
                        let (docker, served) = warm.lease(spec, session_id, token).await?;
                        harness_telemetry::metrics().warm_pool(served == Served::Pool);
                        let how = match served {
                            Served::Pool => " (leased ready from the warm pool)",
                            Served::Started => " (started: none ready in the warm pool)",
                        };
                        (docker, how)
                    }
                    None => (DockerSandbox::start(spec, session_id, token).await?, ""),
                };
                observer.note(&format!(
                    "sandbox: container {} of {}{how}",
                    short(&docker.id),
                    spec.image
                ));
                let client = docker.client.clone();
                Ok(Sandbox::new(Handle::Docker(docker), client))
            }
            SandboxTarget::Provided(provider) => {
                ignored("a provided sandbox (its files are the provider's)");
                Sandbox::start_provided(provider.as_ref(), config, session_id, token, observer)
                    .await
            }
            SandboxTarget::Remote { url, tls, .. } => {
                ignored("a remote sandbox");
                let token = Some(token.to_owned()).filter(|t| !t.is_empty());
                let client = SandboxClient::with_tls(url, token, tls)
                    .map_err(|err| StartError::BadInput(err.to_string()))?;
                client
                    .check_running(Duration::from_secs(10))
                    .await
                    .map_err(|err| match err {
                        // The URL names nothing running, or a certificate is refused: a retry
                        // would not change that.
                        SandboxError::Refused { .. } | SandboxError::Certificate { .. } => {
                            StartError::BadInput(err.to_string())
                        }
                        other => StartError::Failed(Failure::Sandbox {
                            what: String::new(),
                            source: other,
                        }),
                    })?;
                Ok(Sandbox::new(Handle::Remote, client))
            }
            SandboxTarget::Pool => {
                let lease = lease.ok_or_else(|| {
                    StartError::BadInput("a pool sandbox is leased by its batch".to_owned())
                })?;
                let client = lease.client();
                Ok(Sandbox::new(Handle::Leased(lease), client))
            }
        }
    }

    async fn start_provided(
        provider: &dyn Provider,
        config: &RunConfig,
        session_id: &str,
        token: &str,
        observer: &dyn Observer,
    ) -> Result<Sandbox, StartError> {
        let context = ProviderContext {
            session_id,
            token,
            observer,
        };
        let provided = provider.start(config, context).await?;
        let client = provided.client().clone();
        Ok(Sandbox::new(Handle::Provided(provided), client))
    }

    /// A sandbox-server child over the working directory, or over a temporary folder that is
    /// removed when the session stops (unless `--keep-workspace`).
    async fn start_local(
        config: &RunConfig,
        token: &str,
        server_log: Option<&Path>,
        observer: &dyn Observer,
    ) -> Result<Sandbox, StartError> {
        let (dir, temporary) = local_workspace(config)?;
        match &temporary {
            Some(_) => observer.note(&format!(
                "workspace: {} (temporary: removed when the session ends; --keep-workspace keeps it)",
                dir.display()
            )),
            None => observer.note(&format!("workspace: {}", dir.display())),
        }
        if let Some(note) = config.run_as.note() {
            observer.note(&note);
        }
        let tools = crate::subagent::server_tools(config.tools.as_deref());
        let mut options = local_options(config, tools.as_deref(), server_log);
        options.known_files = config.known_files.as_deref();
        let local = LocalSandbox::start(&dir, token, options).await?;
        let client = local.client.clone();
        let mut sandbox = Sandbox::new(Handle::Local(local), client);
        sandbox.temporary = temporary;
        Ok(sandbox)
    }

    /// A subagent's sandbox: reached through `client`, never stopped by its session.
    pub fn given(client: SandboxClient) -> Sandbox {
        Sandbox::new(Handle::Given, client)
    }

    /// A new, empty sandbox of the kind `config` names, for a forked subagent (`token` is
    /// its own): a local server over a temporary folder, or a container of the same image and
    /// limits. Other kinds have no sandbox of their own to give.
    pub async fn start_fork(
        config: &RunConfig,
        session_id: &str,
        token: &str,
        server_log: Option<&Path>,
    ) -> Result<Sandbox, StartError> {
        let tools = crate::subagent::server_tools(config.tools.as_deref());
        match &config.sandbox {
            SandboxTarget::Local => {
                let dir = tempfile::Builder::new()
                    .prefix("harness-subagent-")
                    .tempdir()
                    .doing("creating a workspace folder")?;
                let options = local_options(config, tools.as_deref(), server_log);
                let local = LocalSandbox::start(dir.path(), token, options).await?;
                let client = local.client.clone();
                let mut sandbox = Sandbox::new(Handle::Local(local), client);
                sandbox.temporary = Some(dir);
                Ok(sandbox)
            }
            SandboxTarget::Docker(spec) => {
                let docker = DockerSandbox::start(spec, session_id, token).await?;
                let client = docker.client.clone();
                Ok(Sandbox::new(Handle::Docker(docker), client))
            }
            other => Err(StartError::BadInput(format!(
                "workspace \"fork\" needs a local or docker sandbox, and this one is {} (use \"shared\")",
                other.label()
            ))),
        }
    }

    fn new(handle: Handle, client: SandboxClient) -> Sandbox {
        Sandbox {
            handle,
            client,
            temporary: None,
        }
    }

    /// The container, for the log's header.
    pub fn container(&self, config: &RunConfig) -> Option<ContainerRecord> {
        match (&self.handle, &config.sandbox) {
            (Handle::Docker(docker), SandboxTarget::Docker(spec)) => Some(ContainerRecord {
                id: docker.id.clone(),
                image: spec.image.clone(),
                memory_bytes: spec.memory,
                cpus: spec.cpus,
                pids: spec.pids,
            }),
            (Handle::Provided(provided), _) => provided.container(),
            _ => None,
        }
    }

    /// What a provider started, when one did.
    pub fn provided(&self) -> Option<&dyn Provided> {
        match &self.handle {
            Handle::Provided(provided) => Some(provided.as_ref()),
            _ => None,
        }
    }

    /// Who grades the agent's work: what the provider started, else the task's check.
    pub fn grader(&self) -> &dyn Grader {
        match &self.handle {
            Handle::Provided(provided) => provided.as_ref(),
            _ => &CheckGrader,
        }
    }

    /// Why the sandbox is gone, if it is: its process or container exited, or it stopped
    /// answering. `None` while it is healthy.
    pub async fn dead(&mut self) -> Option<String> {
        let unanswered =
            match tokio::time::timeout(Duration::from_secs(10), self.client.health()).await {
                Ok(Ok(())) => return None,
                Ok(Err(err)) => format!("the sandbox stopped answering: {err}"),
                Err(_) => "the sandbox did not answer /healthz within 10 s".to_owned(),
            };
        // Say what happened to it if we can: a process or container takes a moment to be
        // reported gone after its connections drop.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            match &mut self.handle {
                Handle::Local(local) => {
                    if let Some(status) = local.exited() {
                        return Some(format!("the local sandbox-server exited ({status})"));
                    }
                }
                Handle::Docker(docker) => match docker.state().await {
                    Ok(state) if !state.running => {
                        let id = short(&docker.id);
                        return Some(format!("the sandbox container {id} {}", state.describe()));
                    }
                    Ok(_) => {}
                    Err(err) => return Some(format!("{unanswered}; the Docker engine: {err:#}")),
                },
                Handle::Provided(provided) => match provided.liveness().await {
                    Liveness::Running => {}
                    Liveness::Exited(what) => return Some(what),
                    Liveness::Unknown(None) => return Some(unanswered),
                    Liveness::Unknown(Some(why)) => return Some(format!("{unanswered}; {why}")),
                },
                Handle::Remote | Handle::Leased(_) | Handle::Given => {
                    return Some(unanswered);
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Some(unanswered);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops what this session started (a leased member goes back to its pool).
    pub async fn stop(self) {
        // After the server stopped: nothing writes to the folder any more.
        let _temporary = self.temporary;
        match self.handle {
            Handle::Local(local) => local.stop().await,
            Handle::Docker(mut docker) => docker.remove().await,
            Handle::Provided(provided) => provided.stop().await,
            Handle::Remote | Handle::Given => {}
            // The member goes back to its pool; the next lease checks and resets it.
            Handle::Leased(lease) => drop(lease),
        }
    }
}

/// A local server's options as the run's config gives them (no `--known-files`).
fn local_options<'a>(
    config: &'a RunConfig,
    tools: Option<&'a [String]>,
    server_log: Option<&'a Path>,
) -> crate::sandbox::local::LocalOptions<'a> {
    crate::sandbox::local::LocalOptions {
        tools,
        network: config.network,
        writable: &config.writable,
        run_as: config.run_as.clone(),
        server_log,
        known_files: None,
    }
}

/// The first 12 characters of a container id, as Docker shows it.
pub fn short(id: &str) -> &str {
    &id[..12.min(id.len())]
}

/// The token the session's sandbox will use: a remote server's from its file, else a new one.
pub fn token(config: &RunConfig) -> Result<String, InputError> {
    match &config.sandbox {
        SandboxTarget::Remote {
            token_file: Some(file),
            ..
        } => read_token(file),
        SandboxTarget::Remote { .. } | SandboxTarget::Pool => Ok(String::new()),
        SandboxTarget::Provided(provider) => provider.token(),
        SandboxTarget::Local | SandboxTarget::Docker(_) => {
            Ok(format!("{:032x}", rand::random::<u128>()))
        }
    }
}

/// A token from its file (a remote server's, or a task's pod's), trimmed.
pub fn read_token(file: &Path) -> Result<String, InputError> {
    match std::fs::read_to_string(file) {
        Ok(text) => Ok(text.trim().to_owned()),
        Err(err) => Err(InputError(format!(
            "reading the sandbox token {}: {err}",
            file.display()
        ))),
    }
}

/// The folder a local sandbox serves: the working directory (the default one created when
/// missing; a named one must exist, the binary checks), or, for a
/// task that brings its own workspace, an empty folder to seed.
fn local_workspace(config: &RunConfig) -> Result<(PathBuf, Option<tempfile::TempDir>), StartError> {
    let bad =
        |what: String| move |err: std::io::Error| StartError::BadInput(format!("{what}: {err}"));
    match (&config.workspace, &config.working_dir) {
        (None, Some(dir)) => {
            std::fs::create_dir_all(dir).map_err(bad(format!(
                "creating the working directory {}",
                dir.display()
            )))?;
            Ok((dir.clone(), None))
        }
        (None, None) => Ok((PathBuf::from("."), None)),
        (Some(_), Some(dir)) => {
            std::fs::create_dir_all(dir).map_err(bad(format!("creating {}", dir.display())))?;
            let empty = std::fs::read_dir(dir)
                .map_err(bad(format!("reading {}", dir.display())))?
                .next()
                .is_none();
            if !empty {
                return Err(StartError::BadInput(format!(
                    "{} is not empty: a task with a workspace source is copied into an empty folder",
                    dir.display()
                )));
            }
            Ok((dir.clone(), None))
        }
        (Some(_), None) => {
            let dir = tempfile::Builder::new()
                .prefix("harness-workspace-")
                .tempdir()
                .doing("creating a workspace folder")?;
            if config.keep_workspace {
                Ok((dir.keep(), None))
            } else {
                Ok((dir.path().to_owned(), Some(dir)))
            }
        }
    }
}

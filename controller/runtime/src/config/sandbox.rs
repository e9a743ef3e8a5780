//! Where a run's sandbox is: the `--sandbox` flag, else the task's `sandbox:` section, else a
//! local one; and a container's limits.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::SessionFlags;
use crate::input::{InputError, invalid};
use crate::sandbox::NetworkMode;
use crate::sandbox::docker::{self, DockerSpec};
use crate::session::provider::Provider;
use crate::task::{SandboxSection, TaskFile};
use harness_log::SandboxKind;

/// Where the sandbox is.
#[derive(Debug, Clone)]
pub enum SandboxTarget {
    /// A sandbox-server child over `working_dir`.
    Local,
    /// A running server.
    Remote {
        url: String,
        token_file: Option<PathBuf>,
        tls: crate::sandbox::ClientTls,
    },
    /// A fresh container per session.
    Docker(DockerSpec),
    /// A member of a batch's pool, leased by the batch for the session.
    Pool,
    /// Whatever a provider starts (its own containers, with a sandbox-server injected).
    Provided(Arc<dyn Provider>),
}

impl PartialEq for SandboxTarget {
    fn eq(&self, other: &SandboxTarget) -> bool {
        match (self, other) {
            (SandboxTarget::Local, SandboxTarget::Local)
            | (SandboxTarget::Pool, SandboxTarget::Pool) => true,
            (
                SandboxTarget::Remote {
                    url,
                    token_file,
                    tls,
                },
                SandboxTarget::Remote {
                    url: other_url,
                    token_file: other_file,
                    tls: other_tls,
                },
            ) => url == other_url && token_file == other_file && tls == other_tls,
            (SandboxTarget::Docker(a), SandboxTarget::Docker(b)) => a == b,
            // A provider is the same one, not an equal one.
            (SandboxTarget::Provided(a), SandboxTarget::Provided(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl SandboxTarget {
    /// What starts it, as a metrics label: `local`, `remote`, `docker`, `pool`, or the
    /// provider's (`task`).
    pub fn label(&self) -> &'static str {
        match self {
            SandboxTarget::Local => "local",
            SandboxTarget::Remote { .. } => "remote",
            SandboxTarget::Docker(_) => "docker",
            SandboxTarget::Pool => "pool",
            SandboxTarget::Provided(provider) => provider.label(),
        }
    }

    /// The provider, when one starts the sandbox.
    pub fn provider(&self) -> Option<&dyn Provider> {
        match self {
            SandboxTarget::Provided(provider) => Some(provider.as_ref()),
            _ => None,
        }
    }
}

impl SandboxTarget {
    /// As the log names it.
    pub fn kind(&self) -> SandboxKind {
        match self {
            SandboxTarget::Local => SandboxKind::Local,
            SandboxTarget::Remote { .. } | SandboxTarget::Pool => SandboxKind::Remote,
            SandboxTarget::Docker(_) => SandboxKind::Docker,
            SandboxTarget::Provided(provider) => provider.kind(),
        }
    }
}

/// The longest the session may run: the flag, else the task's `sandbox.lifetime`.
pub(super) fn lifetime(
    task: &TaskFile,
    flags: &SessionFlags,
) -> Result<Option<Duration>, InputError> {
    let section = task.sandbox.as_ref();
    let lifetime = match (flags.lifetime, section.and_then(|s| s.lifetime.as_ref())) {
        (Some(flag), _) => Some(flag),
        (None, Some(text)) => Some(
            humantime::parse_duration(text)
                .map_err(|err| InputError(format!("sandbox.lifetime `{text}`: {err}")))?,
        ),
        (None, None) => None,
    };
    if lifetime.is_some_and(|l| l.is_zero()) {
        invalid!("lifetime: must be longer than zero");
    }
    Ok(lifetime)
}

/// The sandbox the flags or the task name.
pub(super) fn target(
    task: &TaskFile,
    flags: &SessionFlags,
    network: NetworkMode,
    tools: Option<&[String]>,
    lifetime: Option<Duration>,
) -> Result<SandboxTarget, InputError> {
    let section = task.sandbox.clone().unwrap_or_default();
    let kind = match flags.sandbox.as_deref() {
        Some(flag) => flag.to_owned(),
        None => match (&section.provider, &section.url) {
            (Some(provider), _) => provider.clone(),
            (None, Some(_)) => "remote".to_owned(),
            (None, None) => "local".to_owned(),
        },
    };
    refuse_container_limits_outside_docker(&kind, &section, flags)?;
    Ok(match kind.as_str() {
        "local" => SandboxTarget::Local,
        "remote" if flags.sandbox.is_none() => SandboxTarget::Remote {
            url: section
                .url
                .clone()
                .ok_or_else(|| InputError::new("sandbox: `provider: remote` needs a `url`"))?,
            token_file: section.token_file,
            tls: flags.sandbox_tls.clone(),
        },
        "docker" => SandboxTarget::Docker(docker_spec(&section, flags, network, tools, lifetime)?),
        url if url.starts_with("http://") || url.starts_with("https://") => SandboxTarget::Remote {
            url: url.to_owned(),
            token_file: flags.sandbox_token_file.clone(),
            tls: flags.sandbox_tls.clone(),
        },
        other => invalid!("sandbox `{other}`: expected `local`, `docker` or an http(s) URL"),
    })
}

/// A pool member the batch leases: the container limits do not apply.
pub(super) fn pool(task: &TaskFile, flags: &SessionFlags) -> Result<SandboxTarget, InputError> {
    let section = task.sandbox.clone().unwrap_or_default();
    refuse_container_limits_outside_docker("a pool member", &section, flags)?;
    Ok(SandboxTarget::Pool)
}

fn refuse_container_limits_outside_docker(
    kind: &str,
    section: &SandboxSection,
    flags: &SessionFlags,
) -> Result<(), InputError> {
    let docker_only = [
        ("memory", flags.memory.is_some() || section.memory.is_some()),
        ("cpus", flags.cpus.is_some() || section.cpus.is_some()),
        ("pids", flags.pids.is_some() || section.pids.is_some()),
        ("image", flags.image.is_some() || section.image.is_some()),
    ];
    if kind != "docker"
        && let Some((name, _)) = docker_only.iter().find(|(_, given)| *given)
    {
        invalid!(
            "{name}: a container limit, for `--sandbox docker` only (this run's sandbox is {kind}); \
             a local sandbox takes its limits from the machine"
        );
    }
    Ok(())
}

fn docker_spec(
    section: &SandboxSection,
    flags: &SessionFlags,
    network: NetworkMode,
    tools: Option<&[String]>,
    lifetime: Option<Duration>,
) -> Result<DockerSpec, InputError> {
    let memory = match flags.memory.as_ref().or(section.memory.as_ref()) {
        Some(text) => Some(
            harness_log::text::parse_size(text)
                .map_err(|why| InputError(format!("memory: {why}")))?,
        ),
        None => None,
    };
    let cpus = flags.cpus.or(section.cpus);
    if let Some(cpus) = cpus
        && !(cpus.is_finite() && cpus > 0.0)
    {
        invalid!("cpus: expected a positive number, got {cpus}");
    }
    let pids = flags.pids.or(section.pids);
    if let Some(pids) = pids
        && pids < 8
    {
        invalid!("pids: {pids} is too few for a shell and the server (at least 8)");
    }
    Ok(DockerSpec {
        image: flags
            .image
            .clone()
            .or(section.image.clone())
            .or_else(|| std::env::var("HARNESS_SANDBOX_IMAGE").ok())
            .unwrap_or_else(|| docker::DEFAULT_IMAGE.to_owned()),
        memory,
        cpus,
        pids,
        lifetime,
        network,
        tools: crate::subagent::server_tools(tools),
        known_files: None,
    })
}

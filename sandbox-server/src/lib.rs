//! sandbox-server: one workspace behind an HTTP API.
//!
//! # Layout
//! - [`config`]: flags and their validated form.
//! - [`http`]: the router, authentication, errors and the OpenAPI document (the only axum code).
//! - [`sandbox`]: tools, the registry, the workspace boundary and output capture.
//! - [`process`]: spawning, reaping and killing (the only code that touches processes).
//! - [`shutdown`], [`telemetry`], [`time`]: small helpers.

pub mod config;
pub mod http;
pub mod process;
pub mod sandbox;
pub mod shutdown;
pub mod telemetry;
pub mod time;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use sandbox_protocol::Limits;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use config::Config;
pub use http::{AppState, app, openapi};

use process::Supervisor;
use sandbox::output::ArtifactStore;
use sandbox::workspace::Workspace;
use sandbox::{ToolContext, ToolLimits};

/// Builds the state for `config`, with artifacts in `state_dir`.
pub fn state(
    config: &Config,
    supervisor: Supervisor,
    state_dir: &std::path::Path,
) -> anyhow::Result<AppState> {
    let protections = supervisor.protections().to_vec();
    let workspace = Workspace::open(&config.workspace)
        .with_context(|| format!("opening the workspace {}", config.workspace.display()))?;
    let artifacts = ArtifactStore::new(
        &state_dir.join("artifacts"),
        config.artifact_cap,
        config.artifact_retention,
    )
    .with_context(|| format!("creating the artifact store in {}", state_dir.display()))?;
    let tool_limits = ToolLimits {
        output_limit_chars: config.output_limit,
        default_timeout_secs: 120,
        max_timeout_secs: 3600,
        kill_grace_ms: config.kill_grace.as_millis() as u64,
    };
    let limits = Limits {
        output_limit_chars: config.output_limit as u64,
        artifact_cap_bytes: config.artifact_cap,
        artifact_retention_bytes: config.artifact_retention,
        max_body_bytes: config.max_body_bytes,
        max_concurrent_calls: config.max_concurrent_calls as u64,
        default_timeout_secs: u64::from(tool_limits.default_timeout_secs),
        max_timeout_secs: u64::from(tool_limits.max_timeout_secs),
        kill_grace_ms: tool_limits.kill_grace_ms,
    };
    Ok(AppState {
        openapi: Arc::new(
            serde_json::to_value(openapi(&config.registry))
                .context("serializing the OpenAPI document")?,
        ),
        registry: config.registry.clone(),
        ctx: ToolContext {
            workspace: Arc::new(workspace),
            artifacts,
            supervisor,
            limits: Arc::new(tool_limits),
        },
        token: config.token.as_ref().map(|token| Arc::new(token.clone())),
        protections: Arc::new(protections),
        permits: Arc::new(Semaphore::new(config.max_concurrent_calls)),
        limits: Arc::new(limits),
        state: Arc::new(http::WorkspaceState {
            snapshots: Default::default(),
            blobs: sandbox::blobs::BlobStore::new(
                &state_dir.join("blobs"),
                config.blob_max_file_bytes,
            )
            .with_context(|| format!("creating the blob store in {}", state_dir.display()))?,
            ignore: sandbox::snapshot::IgnoreList::new(&config.snapshot_ignore),
            watch: config.watch.clone(),
        }),
    })
}

/// Serves on `listener` until `shutdown` resolves; then stops accepting, gives in-flight
/// calls the shutdown grace period, kills whatever is left and every process it started.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (state_dir, owned_state_dir) = match &config.state_dir {
        Some(dir) => (dir.clone(), false),
        None => (
            std::env::temp_dir().join(format!("sandbox-server-{}", std::process::id())),
            true,
        ),
    };
    // Prepared before the reaper starts: probing for a network namespace forks and waits.
    let confinement = confine(&config, &state_dir)?;
    let supervisor = Supervisor::new(Arc::new(confinement));
    supervisor
        .start_reaper()
        .context("starting the child reaper")?;
    let state = state(&config, supervisor.clone(), &state_dir)?;
    let router = app(state);

    // Past the grace period, in-flight calls are ended by killing their processes.
    let kill_grace = config.kill_grace;
    let killer = supervisor.clone();
    let end_calls = async move {
        killer.kill_all(kill_grace).await;
    };
    let served = http::serve(listener, router, shutdown, config.shutdown_grace, end_calls).await;
    let report = supervisor.kill_all(config.kill_grace).await;
    if !report.killed.is_empty() {
        tracing::info!(killed = ?report.killed, "stopped the processes left running");
    }
    if owned_state_dir {
        remove_dir(&state_dir);
    }
    served.context("serving HTTP")?;
    tracing::info!("stopped");
    Ok(())
}

/// Prepares the containment of commands and reports it; with `--require-protections`, a
/// protection that cannot be applied stops the start.
fn confine(
    config: &Config,
    state_dir: &std::path::Path,
) -> anyhow::Result<process::confine::Confinement> {
    let private_tmp = state_dir.join("tmp");
    std::fs::create_dir_all(&private_tmp)
        .with_context(|| format!("creating {}", private_tmp.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&private_tmp, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("securing {}", private_tmp.display()))?;
    }
    if let Some((uid, gid)) = config.confine.run_as {
        nix::unistd::chown(
            &private_tmp,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )
        .with_context(|| format!("giving {} to uid {uid}", private_tmp.display()))?;
    }
    let confinement =
        process::confine::Confinement::prepare(&config.confine, &config.workspace, &private_tmp);
    for protection in &confinement.protections {
        let name = protection.name.as_str();
        if protection.active {
            tracing::info!(protection = name, detail = %protection.detail, "protection in force");
        } else {
            tracing::warn!(protection = name, detail = %protection.detail, "protection NOT in force");
        }
    }
    let missing: Vec<String> = confinement
        .missing()
        .iter()
        .map(|p| format!("{} ({})", p.name.as_str(), p.detail))
        .collect();
    if config.require_protections && !missing.is_empty() {
        return Err(config::ConfigError::MissingProtections(missing.join("; ")).into());
    }
    Ok(confinement)
}

fn remove_dir(dir: &PathBuf) {
    if let Err(err) = std::fs::remove_dir_all(dir) {
        tracing::warn!(dir = %dir.display(), cause = %err, "could not remove the state folder");
    }
}

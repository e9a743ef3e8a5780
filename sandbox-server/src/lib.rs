//! sandbox-server: one workspace behind an HTTP API.
//!
//! # Layout
//! - [`config`]: flags and their validated form.
//! - [`http`]: the router, authentication, errors and the OpenAPI document (the API's axum
//!   code), and `http::egress`: `egress-proxy`, a benchmark task's one way out in an allow-list
//!   phase.
//! - [`sandbox`]: tools, the registry, the workspace boundary and output capture.
//!   `sandbox/tools/` is six files, seven tools: the default `bash`, `read_file`, `write_file`,
//!   `search_replace`; the opt-in `exec` and `write_stdin` (one file) and `shell`.
//! - [`process`]: spawning, reaping and killing (the only code that touches processes).
//! - [`tokens`]: the root token and the scoped ones minted with it; [`metrics`]: Prometheus.
//! - [`state_dir`]: the server's own folders, out of commands' reach.
//! - [`shutdown`], [`telemetry`], [`time`]: small helpers.
//!
//! # This crate (`sandbox-server`)
//! Its API is HTTP (this library serves its own binary and tests). Of the workspace's crates it
//! depends on `sandbox-protocol` and `harness-otel` only; it knows no model, policy or log, and
//! its domain (`sandbox`, `process`) never sees a request. Blocking work goes through
//! `sandbox::blocking`; the few other `spawn_blocking`s say why beside them.

pub mod config;
pub mod http;
pub mod metrics;
pub mod process;
pub mod sandbox;
pub mod shutdown;
pub mod state_dir;
pub mod telemetry;
pub mod time;
pub mod tokens;

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;
use sandbox_protocol::Limits;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use config::Config;
pub use http::{AppState, app, openapi};

use process::Supervisor;
use sandbox::output::ArtifactStore;
use sandbox::processes::{ProcessLimits, ProcessTable};
use sandbox::workspace::Workspace;
use sandbox::{ToolContext, ToolLimits};

/// The table of processes started by id.
fn process_table(
    config: &Config,
    supervisor: &Supervisor,
    workspace: &Arc<Workspace>,
    artifacts: &ArtifactStore,
) -> ProcessTable {
    let limits = ProcessLimits {
        buffer_bytes: usize::try_from(config.process_buffer).unwrap_or(usize::MAX),
        max_processes: config.max_processes,
        kill_grace: config.kill_grace,
    };
    ProcessTable::new(
        supervisor.clone(),
        workspace.clone(),
        artifacts.clone(),
        limits,
    )
}

/// Builds the state for `config`, with artifacts and blobs in `dirs.state`.
pub fn state(
    config: &Config,
    supervisor: Supervisor,
    dirs: &state_dir::StateDirs,
) -> anyhow::Result<AppState> {
    let state_dir = dirs.state.as_path();
    let protections = supervisor.protections().to_vec();
    let workspace = open_workspace(config)?;
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
    let limits = limits(config, &tool_limits);
    let workspace = Arc::new(workspace);
    let processes = process_table(config, &supervisor, &workspace, &artifacts);
    let protections = Arc::new(protections);
    let metrics = metrics::Metrics::new(metrics::Live {
        processes: processes.clone(),
        artifacts: artifacts.clone(),
        protections: protections.clone(),
        tools: config
            .registry
            .names()
            .into_iter()
            .map(str::to_owned)
            .collect(),
    });
    Ok(AppState {
        openapi: Arc::default(),
        registry: config.registry.clone(),
        ctx: ToolContext {
            workspace,
            artifacts,
            supervisor,
            limits: Arc::new(tool_limits),
            processes,
            call_id: None,
        },
        tokens: config.tokens.clone(),
        protections,
        permits: Arc::new(Semaphore::new(config.max_concurrent_calls)),
        followers: Arc::new(Semaphore::new(config.max_followers)),
        body_budget: Arc::new(Semaphore::new(
            usize::try_from(config.max_inflight_body_bytes.div_ceil(http::BUDGET_UNIT))
                .unwrap_or(usize::MAX),
        )),
        archive_streams: Arc::new(Semaphore::new(http::MAX_ARCHIVE_STREAMS)),
        limits: Arc::new(limits),
        state: Arc::new(workspace_state(config, dirs)?),
        idempotency: Arc::new(http::IdempotencyStore::new(config.idempotency_ttl)),
        metrics,
        transport: transport(config),
        audit: config.audit.clone(),
    })
}

/// The workspace the tools work in: only below its root unless `--files-anywhere`.
fn open_workspace(config: &Config) -> anyhow::Result<Workspace> {
    let open = if config.files_anywhere {
        Workspace::open_anywhere
    } else {
        Workspace::open
    };
    Ok(open(&config.workspace)
        .with_context(|| format!("opening the workspace {}", config.workspace.display()))?
        .with_durable_writes(config.durable_writes))
}

/// The state of the workspace's file calls: snapshots (seeded from `--known-files`), the blob
/// store in `dirs.state`, and what a snapshot ignores and watches.
fn workspace_state(
    config: &Config,
    dirs: &state_dir::StateDirs,
) -> anyhow::Result<http::WorkspaceState> {
    let state_dir = dirs.state.as_path();
    Ok(http::WorkspaceState {
        dirs: dirs.clone(),
        snapshots: {
            let snapshots = sandbox::snapshot::Snapshots::default();
            if !config.known_files.is_empty() {
                tracing::info!(
                    files = config.known_files.len(),
                    "--known-files: their hashes are taken while their stat is unchanged"
                );
                snapshots.seed(sandbox::snapshot::known(&config.known_files));
            }
            snapshots
        },
        blobs: sandbox::blobs::BlobStore::new(&state_dir.join("blobs"), config.blob_max_file_bytes)
            .with_context(|| format!("creating the blob store in {}", state_dir.display()))?,
        ignore: sandbox::snapshot::IgnoreList::new(&config.snapshot_ignore),
        watch: config.watch.clone(),
    })
}

/// Whether the server speaks TLS, and whether it asks clients for certificates.
fn transport(config: &Config) -> http::Transport {
    http::Transport {
        tls: config.tls.is_some(),
        mtls: config
            .tls
            .as_ref()
            .is_some_and(|tls| tls.client_ca.is_some()),
    }
}

/// The limits `/v1/info` reports.
fn limits(config: &Config, tool_limits: &ToolLimits) -> Limits {
    Limits {
        output_limit_chars: config.output_limit as u64,
        artifact_cap_bytes: config.artifact_cap,
        artifact_retention_bytes: config.artifact_retention,
        max_body_bytes: config.max_body_bytes,
        max_inflight_body_bytes: config.max_inflight_body_bytes,
        archive_max_bytes: config.archive_max_bytes,
        archive_max_entries: config.archive_max_entries,
        scan_max_entries: config.scan_max_entries,
        read_file_page_bytes: sandbox::tools::read_file::page_bytes(config.output_limit) as u64,
        max_concurrent_calls: config.max_concurrent_calls as u64,
        max_followers: config.max_followers as u64,
        default_timeout_secs: u64::from(tool_limits.default_timeout_secs),
        max_timeout_secs: u64::from(tool_limits.max_timeout_secs),
        kill_grace_ms: tool_limits.kill_grace_ms,
        durable_writes: config.durable_writes,
    }
}

/// A server ready to serve: its processes' supervisor, its folders and its state.
pub struct Prepared {
    supervisor: Supervisor,
    dirs: state_dir::StateDirs,
    state: AppState,
    /// The TLS in force and the task that reloads it (SIGHUP no longer ends the server).
    tls: Option<(Arc<http::tls::Tls>, tokio::task::JoinHandle<()>)>,
}

/// Everything before serving (the sweep, the folders, the janitor, the containment): a
/// failure here is reported before the server says where it listens. Call inside a runtime.
pub fn prepare(config: &Config) -> anyhow::Result<Prepared> {
    let (supervisor, dirs, state) = start(config)?;
    let tls = match &config.tls {
        Some(files) => {
            let tls = http::tls::Tls::new(files)?;
            let watch = tls.watch().context("installing the SIGHUP handler")?;
            Some((tls, watch))
        }
        None => None,
    };
    Ok(Prepared {
        supervisor,
        dirs,
        state,
        tls,
    })
}

/// Serves on `listener` until `shutdown` resolves; then stops accepting, gives in-flight
/// calls the shutdown grace period, kills whatever is left and every process it started.
pub async fn run(
    config: Config,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let prepared = prepare(&config)?;
    serve_prepared(config, prepared, listener, metrics, shutdown).await
}

/// As [`run`], for a server already [`prepare`]d.
pub async fn serve_prepared(
    config: Config,
    prepared: Prepared,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let Prepared {
        supervisor,
        dirs,
        state,
        tls,
    } = prepared;
    if let Some(words) = &config.entrypoint_process {
        start_entrypoint(&state, words);
    }
    let metrics_server = metrics.map(|listener| http::serve_metrics(listener, state.clone()));
    let audit = state.audit.clone();
    let router = app(state);
    // Everything a start builds and drops is behind us: an idle server keeps only what it uses.
    process::heap::release_free_memory();

    // Past the grace period, in-flight calls are ended by killing their processes.
    let kill_grace = config.kill_grace;
    let killer = supervisor.clone();
    let end_calls = async move {
        killer.shut_down(kill_grace).await;
    };
    let (tls, watch) = tls.unzip();
    let served = http::serve(
        listener,
        router,
        tls,
        shutdown,
        config.shutdown_grace,
        end_calls,
    )
    .await;
    if let Some(watch) = watch {
        watch.abort();
    }
    // Every connection has ended: its lines are queued; they reach the disk before the exit.
    if let Some(audit) = audit {
        let flushed =
            tokio::task::spawn_blocking(move || audit.flush(std::time::Duration::from_secs(5)));
        if !flushed.await.unwrap_or(false) {
            tracing::warn!("the audit log's last lines were not written within 5 s");
        }
    }
    let report = supervisor.shut_down(config.kill_grace).await;
    if !report.killed.is_empty() {
        tracing::info!(killed = ?report.killed, "stopped the processes left running");
    }
    dirs.remove();
    if let Some(task) = metrics_server {
        task.abort();
    }
    served.context("serving HTTP")?;
    tracing::info!("stopped");
    Ok(())
}

/// Starts the image's entrypoint as the process `entrypoint`, with the server's own variables
/// but for the trace exporter's (its collector is the operator's). The token is read and
/// forgotten by now.
fn start_entrypoint(state: &AppState, words: &[String]) {
    let quoted: Vec<String> = words.iter().map(|word| shell_quote(word)).collect();
    let request = sandbox_protocol::StartProcessRequest {
        id: "entrypoint".to_owned(),
        cmd: format!("exec {}", quoted.join(" ")),
        cwd: None,
        // Only names a shell can carry (an image may set others; they are left out, not fatal).
        env: std::env::vars()
            .filter(|(name, _)| !name.starts_with("OTEL_") && !name.starts_with("SANDBOX_"))
            .filter(|(name, _)| {
                !name.starts_with(|c: char| c.is_ascii_digit())
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
            .collect(),
        tty: None,
        timeout: None,
    };
    match state.ctx.processes.start(&request) {
        Ok((managed, _)) => {
            // The task's own: no client's kill of background processes ends it.
            state.ctx.supervisor.protect(managed.pid);
            tracing::info!(entrypoint = ?words, "started the image's entrypoint");
        }
        Err(err) => tracing::warn!(cause = %err, "could not start the image's entrypoint"),
    }
}

/// `word` as one word of `bash`.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// What a server needs before it serves: the sweep after dead servers, its folders, the
/// janitor, the containment, the reaper, and the state.
fn start(config: &Config) -> anyhow::Result<(Supervisor, state_dir::StateDirs, AppState)> {
    let id = process::ServerId::current();
    sweep_dead_servers();
    let dirs =
        state_dir::StateDirs::create(config.state_dir.as_deref(), &id, config.confine.run_as)
            .with_context(|| {
                format!(
                    "creating the state folders under {}",
                    state_dir::shared_parent().display()
                )
            })?;
    let folder = dirs.owned.then_some(dirs.own.as_path());
    let janitor = match process::leftovers::start_janitor(&id, folder) {
        Ok(pid) => Some(pid),
        Err(err) => {
            tracing::warn!(cause = %err, "could not start the janitor: a killed server would leave its commands running");
            None
        }
    };
    let confinement = confine(config, &dirs)?;
    let supervisor = Supervisor::new(Arc::new(confinement), janitor);
    supervisor
        .start_reaper()
        .context("starting the child reaper")?;
    let state = state(config, supervisor.clone(), &dirs)?;
    Ok((supervisor, dirs, state))
}

/// `sandbox-server mcp-stdio`: the MCP server on stdin/stdout until the client closes it (or
/// `shutdown` resolves); then every process it started is killed and its folder removed.
pub async fn run_mcp_stdio(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use rmcp::ServiceExt as _;
    let (supervisor, dirs, state) = start(&config)?;
    let served = async {
        let running = http::McpServer::new(state)
            .serve(rmcp::transport::stdio())
            .await
            .context("starting MCP on stdio")?;
        running.waiting().await.context("serving MCP on stdio")?;
        anyhow::Ok(())
    };
    let result = tokio::select! {
        result = served => result,
        () = shutdown => Ok(()),
    };
    let report = supervisor.shut_down(config.kill_grace).await;
    if !report.killed.is_empty() {
        tracing::info!(killed = ?report.killed, "stopped the processes left running");
    }
    dirs.remove();
    result
}

/// Sweeps after servers on this host that died without stopping: their commands, cgroups and
/// folders (only those whose server process is gone).
fn sweep_dead_servers() {
    let parent = state_dir::shared_parent();
    for dead in state_dir::dead_servers(&parent) {
        let killed = process::leftovers::sweep_processes(&dead);
        if killed > 0 {
            tracing::warn!(server = %dead, killed, "killed the commands a server that is gone left running");
        }
        state_dir::remove_dead(&parent, &dead);
    }
    let killed = process::leftovers::sweep_dead_groups();
    if killed > 0 {
        tracing::warn!(
            killed,
            "killed processes left in the cgroups of servers that are gone"
        );
    }
}

/// Prepares the containment of commands and reports it; with `--require-protections`, a
/// protection that cannot be applied stops the start.
fn confine(
    config: &Config,
    dirs: &state_dir::StateDirs,
) -> anyhow::Result<process::confine::Confinement> {
    let mut request = config.confine.clone();
    request.hidden.extend(dirs.hidden());
    let confinement = process::confine::Confinement::prepare(
        &request,
        &config.workspace,
        process::confine::Private {
            tmp: &dirs.tmp,
            home: &dirs.home,
        },
    )
    .map_err(|why| anyhow::anyhow!("preparing the containment of commands: {why}"))?;
    for protection in &confinement.protections {
        let name = protection.name.as_str();
        if protection.active {
            tracing::info!(protection = name, detail = %protection.detail, "protection in force");
        } else if protection.detail == process::confine::user::DECLINED {
            tracing::info!(protection = name, detail = %protection.detail, "protection declined");
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

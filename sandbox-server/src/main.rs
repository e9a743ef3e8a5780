//! The `sandbox-server` binary: parse flags, set up logging, serve.

use std::io::Write;

use anyhow::Context;
use clap::Parser;
use sandbox_server::config::{Cli, Command};
use sandbox_server::{shutdown, telemetry};

/// A failure is a message, its causes after it (`error: …: …`), never a backtrace: what the
/// operator mistyped is not a crash. A panic still shows its backtrace.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            let _ = writeln!(std::io::stderr().lock(), "error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    sandbox_server::process::ensure_standard_fds()
        .context("opening /dev/null on a closed standard descriptor")?;
    let cli = Cli::parse();
    match cli.command {
        Command::PrintOpenapi => {
            let document = sandbox_server::openapi(&sandbox_server::sandbox::tools::builtin());
            let json = serde_json::to_string_pretty(&document)
                .context("serializing the OpenAPI document")?;
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "{json}").context("writing to stdout")?;
            Ok(())
        }
        Command::Install { folder } => {
            use std::os::unix::fs::PermissionsExt;
            let exe = std::env::current_exe().context("finding this executable")?;
            std::fs::create_dir_all(&folder)
                .with_context(|| format!("creating {}", folder.display()))?;
            let target = folder.join("sandbox-server");
            std::fs::copy(&exe, &target)
                .with_context(|| format!("copying {} to {}", exe.display(), target.display()))?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} executable", target.display()))?;
            writeln!(std::io::stdout().lock(), "installed {}", target.display())
                .context("writing to stdout")?;
            Ok(())
        }
        Command::Janitor(args) => {
            // Its environment is the server's: no command may read it through /proc.
            let _ = sandbox_server::process::confine::not_dumpable();
            let telemetry = telemetry::init(sandbox_server::config::LogFormat::Text);
            let id = args
                .server
                .parse::<sandbox_server::process::ServerId>()
                .map_err(|why| anyhow::anyhow!("--server: {why}"))?;
            sandbox_server::process::leftovers::run_janitor(&id, args.folder.as_ref());
            telemetry.shutdown();
            Ok(())
        }
        Command::PidInit(args) => {
            let spec = args.spec()?;
            std::process::exit(sandbox_server::process::confine::namespaces::init::run(
                &spec,
            ));
        }
        Command::EgressProxy(args) => {
            let telemetry = telemetry::init(sandbox_server::config::LogFormat::Text);
            let runtime = runtime(2)?;
            let served = runtime.block_on(async {
                let shutdown = shutdown::install().context("installing the signal handlers")?;
                sandbox_server::http::egress::run(args, async move {
                    shutdown.await;
                })
                .await
            });
            telemetry.shutdown();
            served
        }
        Command::KnownFiles(args) => {
            let named = args.run()?;
            writeln!(std::io::stdout().lock(), "{named} files known")
                .context("writing to stdout")?;
            Ok(())
        }
        Command::McpStdio(args) => mcp_stdio(*args),
        Command::Serve(args) => serve(*args),
    }
}

/// `sandbox-server serve`: bind, announce the address, serve until a signal.
fn serve(args: sandbox_server::config::ServeArgs) -> anyhow::Result<()> {
    let telemetry = telemetry::init(args.log_format);
    let config = args.validate()?;
    let runtime = runtime(config.worker_threads)?;
    let served = runtime.block_on(async {
        // The containment first: a server that cannot confine its commands as asked says so
        // before anyone is told where it listens.
        let prepared = sandbox_server::prepare(&config)?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding {}", config.listen))?;
        let address = listener.local_addr().context("reading the bound address")?;
        let metrics = match config.metrics_listen {
            Some(at) => Some(tokio::net::TcpListener::bind(at).await.with_context(|| format!("--metrics-listen {at}: binding"))?),
            None => None,
        };
        // Handlers first: a parent may signal as soon as it reads the address line.
        let shutdown = shutdown::install().context("installing the signal handlers")?;
        // The one machine-readable line a parent process waits for.
        let mut line = serde_json::json!({
            sandbox_protocol::LISTENING_KEY: address.to_string(),
            "tls": config.tls.is_some(),
            "mtls": config.tls.as_ref().is_some_and(|tls| tls.client_ca.is_some()),
        });
        if let Some(metrics) = &metrics {
            let at = metrics.local_addr().context("reading the metrics address")?;
            line[sandbox_protocol::METRICS_KEY] = at.to_string().into();
        }
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{line}").and_then(|()| stdout.flush()).context("writing the address line")?;
        drop(stdout);
        tracing::info!(%address, workspace = %config.workspace.display(), tools = ?config.registry, "listening");
        sandbox_server::serve_prepared(config, prepared, listener, metrics, shutdown).await
    });
    // The spans of the last requests leave before the program does.
    telemetry.shutdown();
    served
}

/// `sandbox-server mcp-stdio`: the MCP server on stdin/stdout.
fn mcp_stdio(args: sandbox_server::config::ServeArgs) -> anyhow::Result<()> {
    // stdout is the protocol's: the log goes to stderr, and no address line is printed.
    let telemetry = telemetry::init(args.log_format);
    let config = args.validate_for_stdio()?;
    let runtime = runtime(config.worker_threads)?;
    let served = runtime.block_on(async {
        let shutdown = shutdown::install().context("installing the signal handlers")?;
        sandbox_server::run_mcp_stdio(config, shutdown).await
    });
    telemetry.shutdown();
    served
}

/// The multi-threaded runtime both servers run on.
fn runtime(worker_threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

//! `harness`: parse the command line, run, and turn the outcome into an exit code. This binary
//! is the edge that talks to a person: it prints progress to stderr and the answer to stdout.

// Printing is this binary's job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use controller::cli::{Cli, Command, RunArgs};
use controller::config::{RunConfig, SandboxTarget};
use controller::exit_code;
use controller::llm::{self, RetryPolicy, ToolCall};
use controller::local_sandbox::LocalSandbox;
use controller::policy::AllowAll;
use controller::run_loop::{Agent, Observer, Outcome};
use controller::sandbox_client::SandboxClient;
use controller::{prompt, seed};
use serde_json::json;

fn main() {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: starting the async runtime: {err}");
            std::process::exit(exit_code::ERROR);
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run(args).await,
        }
    });
    std::process::exit(code);
}

/// Prints each tool call as it starts, as the seed.
struct Terminal;

impl Observer for Terminal {
    fn tool_call(&self, call: &ToolCall) {
        eprintln!("  > {}", call.name);
    }

    fn compacted(&self, before: usize, after: usize) {
        eprintln!("  (compacted the history: {before} messages -> {after})");
    }
}

async fn run(args: RunArgs) -> i32 {
    let config = match RunConfig::resolve(&args) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("error: {err:#}");
            return exit_code::ERROR;
        }
    };
    let model = match llm::build(&config.model, RetryPolicy::default()) {
        Ok(model) => model,
        Err(err) => {
            eprintln!("error: {err:#}");
            return exit_code::ERROR;
        }
    };
    eprintln!("model: {}", model.describe());

    // Start or reach the sandbox; from here on every path stops a local one.
    let (local, client) = match connect(&config).await {
        Ok(pair) => pair,
        Err(err) => {
            eprintln!("error: {err:#}");
            return exit_code::ERROR;
        }
    };
    let session = session(&config, model.as_ref(), &client);
    let code = tokio::select! {
        code = session => code,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\ninterrupted: stopping the sandbox");
            exit_code::INTERRUPTED
        }
    };
    if let Some(local) = local {
        local.stop().await;
    }
    code
}

async fn connect(config: &RunConfig) -> anyhow::Result<(Option<LocalSandbox>, SandboxClient)> {
    match &config.sandbox {
        SandboxTarget::Local => {
            let dir = local_workspace(config)?;
            eprintln!("workspace: {}", dir.display());
            let sandbox = LocalSandbox::start(&dir, config.tools.as_deref()).await?;
            let client = sandbox.client.clone();
            Ok((Some(sandbox), client))
        }
        SandboxTarget::Remote { url, token_file } => {
            if let Some(dir) = &config.working_dir {
                eprintln!(
                    "note: the working directory {} is ignored with a remote sandbox",
                    dir.display()
                );
            }
            let token = match token_file {
                Some(file) => Some(
                    std::fs::read_to_string(file)
                        .with_context(|| format!("reading the sandbox token {}", file.display()))?
                        .trim()
                        .to_owned(),
                ),
                None => None,
            };
            let client = SandboxClient::new(url, token);
            client
                .wait_healthy(Duration::from_secs(10))
                .await
                .with_context(|| format!("reaching the sandbox at {url}"))?;
            Ok((None, client))
        }
    }
}

/// The folder a local sandbox serves: the working directory (created when missing), or, for a
/// task that brings its own workspace, an empty folder to seed.
fn local_workspace(config: &RunConfig) -> anyhow::Result<PathBuf> {
    match (&config.workspace, &config.working_dir) {
        (None, Some(dir)) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the working directory {}", dir.display()))?;
            Ok(dir.clone())
        }
        (None, None) => Ok(PathBuf::from(".")),
        (Some(_), Some(dir)) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let empty = std::fs::read_dir(dir)
                .with_context(|| format!("reading {}", dir.display()))?
                .next()
                .is_none();
            if !empty {
                anyhow::bail!(
                    "{} is not empty: a task with a workspace source is copied into an empty folder",
                    dir.display()
                );
            }
            Ok(dir.clone())
        }
        (Some(_), None) => {
            let dir = tempfile::Builder::new()
                .prefix("harness-workspace-")
                .tempdir()
                .context("creating a workspace folder")?;
            Ok(dir.keep())
        }
    }
}

async fn session(config: &RunConfig, model: &dyn llm::Model, client: &SandboxClient) -> i32 {
    match session_inner(config, model, client).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            exit_code::ERROR
        }
    }
}

async fn session_inner(
    config: &RunConfig,
    model: &dyn llm::Model,
    client: &SandboxClient,
) -> anyhow::Result<i32> {
    if let Some(source) = &config.workspace {
        let seeded = seed::seed(client, source)
            .await
            .context("seeding the workspace")?;
        eprintln!(
            "seeded the workspace: {} files, {} bytes",
            seeded.n_files, seeded.n_bytes
        );
        for skipped in &seeded.skipped {
            eprintln!("  skipped {skipped}");
        }
    }
    for command in &config.setup {
        eprintln!("setup: {command}");
        let result = bash(client, command, config.check_timeout)
            .await
            .context("running a setup command")?;
        if result["exit_code"] != 0 {
            eprintln!("{}", result["output"].as_str().unwrap_or(""));
            anyhow::bail!("setup command failed: {command}");
        }
    }

    let info = client
        .info()
        .await
        .context("asking the sandbox for its info")?;
    let offered = client
        .tools()
        .await
        .context("listing the sandbox's tools")?;
    let tools = match &config.tools {
        None => offered,
        Some(wanted) => {
            if let Some(missing) = wanted
                .iter()
                .find(|name| !offered.iter().any(|tool| &tool.name == *name))
            {
                let names: Vec<&str> = offered.iter().map(|tool| tool.name.as_str()).collect();
                anyhow::bail!(
                    "tool `{missing}` is not offered by the sandbox (it has: {})",
                    names.join(", ")
                );
            }
            offered
                .into_iter()
                .filter(|tool| wanted.contains(&tool.name))
                .collect()
        }
    };
    let system = prompt::build(client, &info.workspace_root)
        .await
        .context("reading AGENTS.md and skills")?;
    for warning in &system.warnings {
        eprintln!("warning: {warning}");
    }
    if !model.has_price() {
        eprintln!(
            "warning: no price is known for this model, so its cost is unknown and --max-cost ({:.2}) cannot stop the run; give one with --price INPUT,OUTPUT",
            config.limits.max_cost
        );
    }

    let agent = Agent {
        model,
        sandbox: client,
        policy: &AllowAll,
        tools,
        limits: config.limits,
        observer: &Terminal,
    };
    let report = agent.run(&system.text, &config.prompt).await?;
    println!("{}", report.answer);
    if report.cost_known {
        eprintln!("cost=${:.4}", report.cost);
    } else {
        eprintln!(
            "cost=unknown (at least ${:.4}; the model has no known price)",
            report.cost
        );
    }
    let mut code = match report.outcome {
        Outcome::Completed => exit_code::COMPLETED,
        Outcome::TurnLimit => exit_code::TURN_LIMIT,
        Outcome::CostLimit => exit_code::COST_LIMIT,
    };
    if let Some(check) = &config.check {
        let result = bash(client, check, config.check_timeout)
            .await
            .context("running the check")?;
        let passed = result["exit_code"] == 0;
        eprintln!(
            "check: {} ({check})",
            if passed { "passed" } else { "failed" }
        );
        if !passed {
            eprintln!("{}", result["output"].as_str().unwrap_or(""));
            if code == exit_code::COMPLETED {
                code = exit_code::CHECK_FAILED;
            }
        }
    }
    Ok(code)
}

async fn bash(
    client: &SandboxClient,
    cmd: &str,
    timeout: u32,
) -> anyhow::Result<serde_json::Value> {
    Ok(client
        .call_tool(
            "bash",
            &json!({"cmd": cmd, "timeout": timeout.clamp(1, 3600)}),
        )
        .await?)
}

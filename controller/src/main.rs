//! `harness`: parse the command line, run, and turn the outcome into an exit code. This binary
//! is the edge that talks to a person: it prints progress to stderr and the answer to stdout.

// Printing is this binary's job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod batch_cmd;
mod policy_cmd;
mod replay_cmd;

use clap::Parser;
use controller::cli::{Cli, Command, RunArgs, SandboxesCommand};
use controller::config::RunConfig;
use controller::exit_code;
use controller::llm::{self, RetryPolicy, ToolCall};
use controller::run_loop::{Observer, Totals};
use controller::session::{self, PolicySettings, SessionOptions};
use tokio_util::sync::CancellationToken;

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
            Command::Run(args) => run(*args).await,
            Command::Batch(args) => batch_cmd::run(*args).await,
            Command::Replay(command) => replay_cmd::run(command).await,
            Command::Policy(command) => policy_cmd::run(command).await,
            Command::Sandboxes(command) => sandboxes(command).await,
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

    fn note(&self, text: &str) {
        eprintln!("{text}");
    }
}

async fn sandboxes(command: SandboxesCommand) -> i32 {
    match command {
        SandboxesCommand::Prune { all } => match controller::docker_sandbox::prune(all).await {
            Ok((removed, kept)) => {
                for container in &removed {
                    println!(
                        "removed {} (session {}): {}",
                        container.id, container.session, container.reason
                    );
                }
                for container in &kept {
                    eprintln!(
                        "kept {} (session {}): {}",
                        container.id, container.session, container.reason
                    );
                }
                eprintln!("{} removed, {} kept", removed.len(), kept.len());
                exit_code::COMPLETED
            }
            Err(err) => {
                eprintln!("error: {err:#}");
                exit_code::ERROR
            }
        },
    }
}

async fn run(args: RunArgs) -> i32 {
    // Registered now, not when first awaited: a Ctrl-C while the sandbox starts must still end
    // in the cleanup the session does.
    let mut interrupt =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) {
            Ok(signal) => signal,
            Err(err) => {
                eprintln!("error: installing the Ctrl-C handler: {err}");
                return exit_code::ERROR;
            }
        };
    let (args, task_id) = match controller::task::pick_indexed(args) {
        Ok(picked) => picked,
        Err(err) => {
            eprintln!("error: {err:#}");
            return exit_code::ERROR;
        }
    };
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
    let session_id = controller::event_log::new_session_id();
    let log_name = args
        .log_name
        .clone()
        .or(task_id.clone())
        .unwrap_or_else(|| session_id.clone());
    if args.log_name.is_some() || task_id.is_some() {
        // A retried Job pod runs its task again under the same name; the old log is kept.
        match controller::event_log::set_aside(&args.session.log_dir, &log_name) {
            Ok(Some(moved)) => eprintln!("an earlier attempt's log moved to {}", moved.display()),
            Ok(None) => {}
            Err(err) => {
                eprintln!(
                    "error: moving the earlier log {} aside: {err}",
                    args.session.log_dir.join(&log_name).display()
                );
                return exit_code::ERROR;
            }
        }
    }
    let options = SessionOptions {
        session_id,
        config,
        policy: PolicySettings::from_args(&args.session),
        log_dir: args.session.log_dir.join(log_name),
        durability: args.session.log_durability,
        sandbox_log_in_folder: false,
        gates: None,
    };
    let cancel = CancellationToken::new();
    let on_interrupt = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if interrupt.recv().await.is_some() {
                eprintln!();
                cancel.cancel();
            }
        })
    };
    let totals = std::sync::Mutex::new(Totals::default());
    let summary = session::run_session(&options, model, &Terminal, &totals, cancel).await;
    on_interrupt.abort();
    if !matches!(summary.outcome, "error" | "interrupted") {
        println!("{}", summary.answer);
    }
    let spent = summary.totals;
    if spent.model_calls > 0 {
        if spent.cost_known {
            eprintln!("cost=${:.4}", spent.cost);
        } else {
            eprintln!(
                "cost=unknown (at least ${:.4}; the model has no known price)",
                spent.cost
            );
        }
    }
    summary.code
}

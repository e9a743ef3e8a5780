//! `harness`: parse the command line, run, and turn the outcome into an exit code. This binary
//! is the edge that talks to a person: it prints progress to stderr and the answer to stdout,
//! and asks at the terminal; the library does none of that.

// Printing is this binary's job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod cli;

use clap::Parser;
use controller::exit_code;

fn main() {
    let cli = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(cli::colour_on_stderr())
        .with_writer(std::io::stderr)
        .init();
    let result = tokio::runtime::Runtime::new()
        .map_err(|err| anyhow::anyhow!("starting the async runtime: {err}"))
        .and_then(|runtime| runtime.block_on(cli::run(cli)));
    let code = match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            exit_code::ERROR
        }
    };
    std::process::exit(code);
}

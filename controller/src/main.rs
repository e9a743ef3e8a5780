//! `harness`: parse the command line, run, and turn the outcome into an exit code. This binary
//! is the edge that talks to a person: it prints progress to stderr and the answer to stdout,
//! and asks at the terminal; the library does none of that.

// Printing is this binary's job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod cli;

use clap::Parser;
use controller::exit_code;

fn main() {
    // The harness holds model keys and tokens: no other process of its user (a command of a
    // sandbox that runs as the same user, say) may read its memory or environment through
    // /proc or ptrace it. Its children start dumpable again (execve resets the flag).
    if let Err(err) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("warning: could not make harness undumpable: {err}");
    }
    let cli = cli::Cli::parse();
    // The log on stderr (warnings unless RUST_LOG says otherwise), and spans over OTLP when
    // OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let telemetry = harness_otel::init(harness_otel::Options {
        service: "harness",
        version: env!("CARGO_PKG_VERSION"),
        json: false,
        default_level: "warn",
        ansi: cli::colour_on_stderr(),
    });
    let result = tokio::runtime::Runtime::new()
        .map_err(|err| anyhow::anyhow!("starting the async runtime: {err}"))
        .and_then(|runtime| runtime.block_on(cli::run(cli)));
    // Before exit(), which would lose the spans still queued.
    telemetry.shutdown();
    let code = match result {
        Ok(code) => code,
        Err(err) => {
            // The whole chain of causes, each said once.
            // A sandbox's or a log's words may be in it: control characters shown, not sent.
            let said = harness_runtime::step::describe(&*err);
            eprintln!("error: {}", harness_log::text::terminal_safe(&said));
            exit_code::ERROR
        }
    };
    std::process::exit(code);
}

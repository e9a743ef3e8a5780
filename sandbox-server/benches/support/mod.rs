//! What the benchmarks share: starting the server they measure.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Starts `sandbox-server serve` (or `SANDBOX_BENCH_SERVER`, another build to compare) over
/// `workspace` on a free loopback port with `args`; returns the child and its base URL, read from
/// the `{"listening": …}` line it prints.
pub(crate) fn start_server(workspace: &Path, args: &[&str], log_level: &str) -> (Child, String) {
    let binary = std::env::var_os("SANDBOX_BENCH_SERVER")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_sandbox-server").into());
    let mut child = Command::new(binary)
        .args(["serve", "--listen", "127.0.0.1:0", "--workspace"])
        .arg(workspace)
        .args(args)
        .env("RUST_LOG", log_level)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address: serde_json::Value = serde_json::from_str(&line).unwrap();
    let base = format!("http://{}", address["listening"].as_str().unwrap());
    (child, base)
}

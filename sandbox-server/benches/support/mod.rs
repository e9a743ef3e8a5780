//! What the benchmarks share: starting the server they measure, and reading their samples.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

/// Starts `sandbox-server serve` (or `SANDBOX_BENCH_SERVER`, another build to compare) over
/// `workspace` on a free loopback port with `args`; returns the child and its base URL, read from
/// the `{"listening": …}` line it prints.
pub(crate) fn start_server(workspace: &Path, args: &[&str], log_level: &str) -> (Child, String) {
    let binary = std::env::var_os("SANDBOX_BENCH_SERVER")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_sandbox-server").into());
    let mut command = testkit::serve(binary, workspace);
    command
        .args(args)
        .env("RUST_LOG", log_level)
        .stderr(Stdio::inherit());
    let (child, line) = testkit::spawn_server(&mut command);
    (child, testkit::url_of(&line))
}

/// The value at `p` (0 to 1, nearest rank) of `values`, which it sorts.
pub(crate) fn percentile<T: Copy + PartialOrd>(values: &mut [T], p: f64) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values[((values.len() as f64 - 1.0) * p).round() as usize]
}

/// A duration in milliseconds, to the microsecond.
#[allow(dead_code)] // the streams bench counts in microseconds
pub(crate) fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

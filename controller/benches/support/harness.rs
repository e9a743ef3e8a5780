//! The `harness` binary as the benches run it: its errors alone logged, no model or key of the
//! machine's, no input.

use std::process::{Command, Stdio};

/// A `harness` command, not yet given its arguments.
pub(crate) fn command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_harness"));
    command
        .env("RUST_LOG", "error")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CONTROLLER_MODEL")
        .stdin(Stdio::null());
    command
}

/// `harness ARGS` run to its end, which must succeed: its standard output and error.
pub(crate) fn run(args: &[&str]) -> (String, String) {
    let output = command().args(args).output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    assert!(output.status.success(), "harness {args:?} failed: {stderr}");
    (stdout, stderr)
}

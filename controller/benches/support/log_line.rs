//! The session folder a `harness run` names on its stderr (`log: PATH`).

use std::path::PathBuf;

/// The session folder that `stderr`, a finished run's, names.
pub(crate) fn log_dir(stderr: &str) -> PathBuf {
    let line = stderr
        .lines()
        .find_map(|line| line.strip_prefix("log: "))
        .expect("the run prints its log folder");
    PathBuf::from(line)
}

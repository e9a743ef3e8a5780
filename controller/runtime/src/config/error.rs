//! Why a task's settings did not resolve: a task this harness cannot run, or input that is
//! wrong for every task.

use crate::input::InputError;

/// Why a task cannot be run by this harness (as opposed to a flag that is wrong for every
/// task): a batch reports the task and runs the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRunnable(pub String);

impl std::fmt::Display for NotRunnable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotRunnable {}

/// Why a task's settings did not resolve: a task this harness cannot run (a batch reports it
/// and runs the rest), or input that is wrong for every task (a batch does not start).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    NotRunnable(#[from] NotRunnable),
    #[error(transparent)]
    Input(#[from] InputError),
}

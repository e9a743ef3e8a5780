//! The two kinds of failure a benchmark task meets, typed: the task folder refused
//! ([`InputError`]: a `task.toml`, a compose file, a Dockerfile's context, a flag about the
//! task; said naming the file and the key) and the machine's part failing
//! ([`Failure`]: the engine, a file, the task's sandbox; said with what was being done).
//! [`Context`] and [`bail!`] say the first, as `anyhow` would; [`Doing`] and [`failed!`] the
//! second. A refusal met while starting containers becomes a [`Failure`] through
//! [`harness_runtime::sandbox::failure::IntoFailure`], with what was being done said before it.

use std::fmt::Display;

pub use harness_runtime::input::InputError;
pub use harness_runtime::sandbox::failure::{Doing, Failure, IntoFailure};

/// What loading a task folder gives: its value, or what in it cannot be used.
pub type TaskResult<T> = Result<T, InputError>;

/// What the engine's part gives: its value, or what failed while doing what.
pub type Failed<T> = Result<T, Failure>;

/// Says where a refusal was found (the file, the key), keeping it an [`InputError`].
pub trait Context<T> {
    fn context(self, what: impl Display) -> TaskResult<T>;
    fn with_context<W: Display>(self, what: impl FnOnce() -> W) -> TaskResult<T>;
}

impl<T, E: Display> Context<T> for Result<T, E> {
    fn context(self, what: impl Display) -> TaskResult<T> {
        self.map_err(|err| InputError(format!("{what}: {err}")))
    }

    fn with_context<W: Display>(self, what: impl FnOnce() -> W) -> TaskResult<T> {
        self.map_err(|err| InputError(format!("{}: {err}", what())))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: impl Display) -> TaskResult<T> {
        self.ok_or_else(|| InputError(what.to_string()))
    }

    fn with_context<W: Display>(self, what: impl FnOnce() -> W) -> TaskResult<T> {
        self.ok_or_else(|| InputError(what().to_string()))
    }
}

/// Returns an [`InputError`] made as `format!` makes its message.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::InputError(format!($($arg)*)).into())
    };
}
pub(crate) use bail;

/// An [`InputError`] made as `format!` makes its message.
macro_rules! refusal {
    ($($arg:tt)*) => {
        $crate::error::InputError(format!($($arg)*))
    };
}
pub(crate) use refusal;

/// Returns a [`Failure`] said in full, made as `format!` makes its message.
macro_rules! failed {
    ($($arg:tt)*) => {
        return Err($crate::error::Failure::Server(format!($($arg)*)).into())
    };
}
pub(crate) use failed;

/// A [`Failure`] said in full, made as `format!` makes its message.
macro_rules! failure {
    ($($arg:tt)*) => {
        $crate::error::Failure::Server(format!($($arg)*))
    };
}
pub(crate) use failure;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_reads_outside_in() {
        let number: Result<u32, _> = "x".parse::<u32>();
        let err = number
            .context("environment.cpus")
            .map_err(|err| err.after("task.toml"))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "task.toml: environment.cpus: invalid digit found in string"
        );
        let missing: Option<u8> = None;
        assert_eq!(
            missing.context("no `services`").unwrap_err().to_string(),
            "no `services`"
        );
        let started = Err::<(), _>(err).doing("starting the task's containers");
        assert_eq!(
            started.unwrap_err().to_string(),
            "starting the task's containers: task.toml: environment.cpus: invalid digit found in string"
        );
    }
}

//! Why starting or reaching a sandbox failed on the machine's side (the engine, a file, the
//! server process), with what was being done: the [`StartError::Failed`](super::StartError)
//! of a start, worth a retry on a fresh sandbox, and the failure of a pool's reset or a prune.

use super::SandboxError;
use crate::step::{joined, prefix};

/// The machine, the engine or the server failed while doing `what`.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The Docker engine refused or failed a request.
    #[error("{}{source}", prefix(what))]
    Engine {
        what: String,
        source: bollard::errors::Error,
    },
    /// A local file, folder or process could not be made or read.
    #[error("{}{source}", prefix(what))]
    Io {
        what: String,
        source: std::io::Error,
    },
    /// The sandbox's server answered wrongly or not at all.
    #[error("{}{source}", prefix(what))]
    Sandbox { what: String, source: SandboxError },
    /// Another HTTP service the harness runs (a task's egress proxy) failed to answer.
    #[error("{}{source}", prefix(what))]
    Http {
        what: String,
        source: reqwest::Error,
    },
    /// What did not go as it should, said in full: the server (its process or container)
    /// did not come up, a container or an image build failed, an answer was not what was
    /// asked for, or the input it was started with was refused.
    #[error("{0}")]
    Server(String),
}

impl Failure {
    /// The same failure, said after `outer` (what the caller was doing, or what it saw).
    pub fn after(mut self, outer: &str) -> Failure {
        match &mut self {
            Failure::Engine { what, .. }
            | Failure::Io { what, .. }
            | Failure::Sandbox { what, .. }
            | Failure::Http { what, .. }
            | Failure::Server(what) => *what = joined(outer, what),
        }
        self
    }
}

/// An error a sandbox's start meets, as the [`Failure`] it is once it says what was being done.
pub trait IntoFailure {
    fn doing(self, what: String) -> Failure;
}

impl IntoFailure for bollard::errors::Error {
    fn doing(self, what: String) -> Failure {
        Failure::Engine { what, source: self }
    }
}

impl IntoFailure for std::io::Error {
    fn doing(self, what: String) -> Failure {
        Failure::Io { what, source: self }
    }
}

impl IntoFailure for SandboxError {
    fn doing(self, what: String) -> Failure {
        Failure::Sandbox { what, source: self }
    }
}

impl IntoFailure for reqwest::Error {
    fn doing(self, what: String) -> Failure {
        Failure::Http { what, source: self }
    }
}

impl IntoFailure for crate::input::InputError {
    fn doing(self, what: String) -> Failure {
        Failure::Server(joined(&what, &self.0))
    }
}

impl From<std::io::Error> for Failure {
    fn from(source: std::io::Error) -> Failure {
        source.doing(String::new())
    }
}

impl From<bollard::errors::Error> for Failure {
    fn from(source: bollard::errors::Error) -> Failure {
        source.doing(String::new())
    }
}

impl From<SandboxError> for Failure {
    fn from(source: SandboxError) -> Failure {
        source.doing(String::new())
    }
}

impl From<crate::input::InputError> for Failure {
    fn from(err: crate::input::InputError) -> Failure {
        Failure::Server(err.0)
    }
}

impl IntoFailure for Failure {
    fn doing(self, what: String) -> Failure {
        self.after(&what)
    }
}

/// Says what was being done when it failed, as `anyhow`'s `context` would, keeping the type.
pub trait Doing<T> {
    fn doing(self, what: &str) -> Result<T, Failure>;
    fn doing_with(self, what: impl FnOnce() -> String) -> Result<T, Failure>;
}

impl<T, E: IntoFailure> Doing<T> for Result<T, E> {
    fn doing(self, what: &str) -> Result<T, Failure> {
        self.map_err(|err| err.doing(what.to_owned()))
    }

    fn doing_with(self, what: impl FnOnce() -> String) -> Result<T, Failure> {
        self.map_err(|err| err.doing(what()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_being_done_reads_outside_in() {
        let refused = SandboxError::Refused {
            url: "http://127.0.0.1:9".to_owned(),
        };
        let bare = Failure::Sandbox {
            what: String::new(),
            source: refused,
        };
        let said = bare.after("the container printed nothing").to_string();
        assert!(
            said.starts_with("the container printed nothing: nothing is listening at"),
            "{said}"
        );
        let io: Result<(), _> = Err(std::io::Error::other("disk full"));
        let err = io
            .doing("writing the sandbox token")
            .doing("starting the sandbox")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "starting the sandbox: writing the sandbox token: disk full"
        );
    }
}

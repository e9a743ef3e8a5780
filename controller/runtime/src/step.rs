//! A failure of one of a session's steps outside the loop (seeding the workspace, the setup
//! commands, the prompt, the log's header, the initial snapshot, the check), typed by whose it
//! is: a request to the sandbox, the session's log, or the harness's own input and files. A
//! session's stop is classified from it by a `match` ([`StepError::is_sandboxes`]).

use harness_log::EventLogError;

use crate::recording::RecordError;
use crate::sandbox::SandboxError;

/// Why a step failed; `what` says what the step was doing (empty when the error says it all).
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A request to the sandbox failed.
    #[error("{}{source}", prefix(what))]
    Sandbox { what: String, source: SandboxError },
    /// The session's log could not be written.
    #[error("{}{source}", prefix(what))]
    Log { what: String, source: EventLogError },
    /// The harness's own part: the task's input (a setup command that failed, a tool the
    /// sandbox does not offer, a seed folder that cannot be read), a program it runs (git).
    #[error("{0}")]
    Harness(String),
}

/// `outer: what`, or `outer` alone when nothing was said yet: what a caller was doing, said
/// before what its callee was.
pub(crate) fn joined(outer: &str, what: &str) -> String {
    if what.is_empty() {
        outer.to_owned()
    } else {
        format!("{outer}: {what}")
    }
}

/// `what: ` before a cause, or nothing when `what` is empty.
pub(crate) fn prefix(what: &str) -> String {
    if what.is_empty() {
        String::new()
    } else {
        format!("{what}: ")
    }
}

impl StepError {
    /// The harness's own failure, said as `message`.
    pub fn harness(message: impl Into<String>) -> StepError {
        StepError::Harness(message.into())
    }

    /// Whether the sandbox failed (it is down, stuck or answered what is not its API), as
    /// opposed to the harness or the task.
    pub fn is_sandboxes(&self) -> bool {
        match self {
            StepError::Sandbox { source, .. } => source.is_infrastructure(),
            StepError::Log { .. } | StepError::Harness(_) => false,
        }
    }

    /// The same failure inside a step that was doing `outer`.
    fn within(mut self, outer: &str) -> StepError {
        match &mut self {
            StepError::Sandbox { what, .. }
            | StepError::Log { what, .. }
            | StepError::Harness(what) => *what = joined(outer, what),
        }
        self
    }
}

impl From<SandboxError> for StepError {
    fn from(source: SandboxError) -> StepError {
        StepError::Sandbox {
            what: String::new(),
            source,
        }
    }
}

impl From<EventLogError> for StepError {
    fn from(source: EventLogError) -> StepError {
        StepError::Log {
            what: String::new(),
            source,
        }
    }
}

impl From<RecordError> for StepError {
    fn from(err: RecordError) -> StepError {
        match err {
            RecordError::Log(source) => source.into(),
            RecordError::Sandbox(source) => source.into(),
        }
    }
}

/// Says what a step was doing when it failed, as `anyhow`'s `context` would, keeping the type.
pub trait Step<T> {
    fn step(self, what: &str) -> Result<T, StepError>;
    fn step_with(self, what: impl FnOnce() -> String) -> Result<T, StepError>;
}

impl<T, E: Into<StepError>> Step<T> for Result<T, E> {
    fn step(self, what: &str) -> Result<T, StepError> {
        self.map_err(|err| err.into().within(what))
    }

    fn step_with(self, what: impl FnOnce() -> String) -> Result<T, StepError> {
        self.map_err(|err| err.into().within(&what()))
    }
}

/// An error and its causes as one line, each said once (a message that already ends with its
/// cause's text does not repeat it), as a person reads a failure.
pub fn describe(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn down() -> SandboxError {
        SandboxError::Refused {
            url: "http://127.0.0.1:9".to_owned(),
        }
    }

    #[test]
    fn what_a_step_was_doing_reads_outside_in() {
        let err: Result<(), _> = Err(down());
        let err = err
            .step("copying a into the sandbox")
            .step("seeding the workspace");
        let err = err.unwrap_err();
        assert!(err.is_sandboxes());
        assert!(
            err.to_string()
                .starts_with("seeding the workspace: copying a into the sandbox: nothing is listening at http://127.0.0.1:9"),
            "{err}"
        );
        let own = Err::<(), _>(StepError::harness("setup command failed: false")).step("preparing");
        let own = own.unwrap_err();
        assert!(!own.is_sandboxes());
        assert_eq!(own.to_string(), "preparing: setup command failed: false");
    }

    #[test]
    fn a_cause_is_said_once() {
        let io = std::io::Error::other("disk full");
        let log = EventLogError::Io {
            path: "/tmp/l".into(),
            source: io,
        };
        assert_eq!(describe(&log), "session log /tmp/l: disk full");
        let policy = harness_policy::PolicyError::Read {
            path: "rules.yaml".into(),
            source: std::io::Error::other("no such file"),
        };
        assert_eq!(
            describe(&policy),
            "reading --policy rules.yaml: no such file"
        );
    }

    #[test]
    fn a_tool_refusing_its_input_is_not_the_sandboxes_failure() {
        let refused = SandboxError::Api {
            status: 404,
            error_type: sandbox_protocol::ErrorType::FileNotFound,
            message: "no such file".to_owned(),
        };
        let err = Err::<(), _>(refused).step("reading AGENTS.md").unwrap_err();
        assert!(!err.is_sandboxes());
        assert_eq!(err.to_string(), "reading AGENTS.md: no such file");
    }
}

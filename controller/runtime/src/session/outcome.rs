//! How a session ended, and why it stopped early: the one place where outcomes, failure
//! classes and error classes meet (the binary maps outcomes to its exit codes).

use std::time::Duration;

use crate::run_loop::{LoopEnd, SessionError};
use crate::sandbox::StartError;
use crate::step::StepError;
use harness_log::{ErrorClass, FailureClass, Outcome};

/// Every way a session can end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionOutcome {
    /// The agent finished (and the task's check, if any, passed).
    Completed,
    /// The agent finished but the task's check failed (the grader's verdict fell short).
    CheckFailed,
    /// The grader gave no verdict (it timed out, or left nothing to read): not a verdict on
    /// the agent, and never a pass.
    NoVerdict,
    TurnLimit,
    CostLimit,
    /// The session's lifetime ran out.
    TimeLimit,
    /// Ctrl-C.
    Interrupted,
    /// The model API failed after its retries.
    ModelFailed,
    /// A request to the sandbox failed (it still answers: found dead, it is `Infrastructure`).
    SandboxFailed,
    /// The sandbox died, could not start or stopped answering.
    Infrastructure,
    /// Bad input, a failing setup command, a tool the sandbox lacks, a log that failed.
    Error,
}

impl SessionOutcome {
    /// Why it did not pass, as reports group it; `None` for a pass.
    pub fn failure_class(self) -> Option<FailureClass> {
        match self {
            SessionOutcome::Completed => None,
            SessionOutcome::CheckFailed => Some(FailureClass::Check),
            SessionOutcome::NoVerdict => Some(FailureClass::NoVerdict),
            SessionOutcome::TurnLimit | SessionOutcome::CostLimit | SessionOutcome::TimeLimit => {
                Some(FailureClass::Limit)
            }
            SessionOutcome::Interrupted => Some(FailureClass::Interrupted),
            SessionOutcome::ModelFailed => Some(FailureClass::Model),
            SessionOutcome::SandboxFailed | SessionOutcome::Infrastructure => {
                Some(FailureClass::Infrastructure)
            }
            SessionOutcome::Error => Some(FailureClass::Error),
        }
    }

    /// As `session_finished.outcome` records it.
    pub fn logged(self) -> Outcome {
        match self {
            SessionOutcome::Completed => Outcome::Completed,
            SessionOutcome::CheckFailed => Outcome::CheckFailed,
            SessionOutcome::NoVerdict => Outcome::NoVerdict,
            SessionOutcome::TurnLimit => Outcome::TurnLimit,
            SessionOutcome::CostLimit => Outcome::CostLimit,
            SessionOutcome::TimeLimit => Outcome::TimeLimit,
            SessionOutcome::Interrupted => Outcome::Interrupted,
            SessionOutcome::ModelFailed
            | SessionOutcome::SandboxFailed
            | SessionOutcome::Infrastructure
            | SessionOutcome::Error => Outcome::Error,
        }
    }

    pub fn passed(self) -> bool {
        self == SessionOutcome::Completed
    }

    /// The outcome of a session stopped by an error of `class`.
    pub fn after(class: ErrorClass) -> SessionOutcome {
        match class {
            ErrorClass::Model => SessionOutcome::ModelFailed,
            ErrorClass::Sandbox => SessionOutcome::SandboxFailed,
            ErrorClass::Infrastructure => SessionOutcome::Infrastructure,
            ErrorClass::Limit => SessionOutcome::TimeLimit,
            ErrorClass::Interrupted => SessionOutcome::Interrupted,
            ErrorClass::Tool | ErrorClass::Policy | ErrorClass::Internal => SessionOutcome::Error,
        }
    }

    /// How a loop that ran to its end ended.
    pub fn of_loop(end: LoopEnd) -> SessionOutcome {
        match end {
            LoopEnd::Completed => SessionOutcome::Completed,
            LoopEnd::TurnLimit => SessionOutcome::TurnLimit,
            LoopEnd::CostLimit => SessionOutcome::CostLimit,
        }
    }
}

/// Why a session stopped before its end: the class and message of its `error` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    pub class: ErrorClass,
    pub message: String,
    /// Whether its `error` event is in the log already (the loop records its own).
    pub logged: bool,
}

/// A subagent's stop when its parent stopped.
const PARENT_STOPPED: &str = "stopped with its parent session";

impl Stop {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Stop {
        Stop {
            class,
            message: message.into(),
            logged: false,
        }
    }

    pub fn outcome(&self) -> SessionOutcome {
        SessionOutcome::after(self.class)
    }

    /// Ctrl-C.
    pub fn interrupted(message: &str) -> Stop {
        Stop::new(ErrorClass::Interrupted, message)
    }

    /// The session was cancelled: Ctrl-C, or for a subagent, its parent's own stop (its
    /// lifetime; the parent says why before it stops its children). Ctrl-C reaches every
    /// session of a tree at once.
    pub fn cancelled(child: Option<&crate::subagent::spawn::ChildOf>) -> Stop {
        match child.and_then(|child| child.parent_stop.get()) {
            Some(why) => Stop::interrupted(&format!("{PARENT_STOPPED}: {why}")),
            None => Stop::interrupted("interrupted (Ctrl-C)"),
        }
    }

    /// What cut a running call short, said in its result: Ctrl-C, a parent's stop, or the
    /// session's lifetime.
    pub fn cut_short_by(&self) -> Option<&'static str> {
        match self.class {
            ErrorClass::Interrupted if self.message.starts_with(PARENT_STOPPED) => {
                Some("the parent session's stop")
            }
            ErrorClass::Interrupted => Some("Ctrl-C"),
            ErrorClass::Limit => Some("the session's lifetime ran out"),
            _ => None,
        }
    }

    /// The session's lifetime ran out.
    pub fn lifetime(lifetime: Duration) -> Stop {
        Stop::new(
            ErrorClass::Limit,
            format!(
                "the session hit its lifetime of {}",
                humantime::format_duration(lifetime)
            ),
        )
    }

    /// A sandbox that would not start: the infrastructure's failure, unless the input was
    /// wrong (a folder that is not empty, an image the engine does not have).
    pub fn start(err: &StartError) -> Stop {
        let class = match err {
            StartError::BadInput(_) => ErrorClass::Internal,
            StartError::Failed(_) => ErrorClass::Infrastructure,
        };
        Stop::new(class, format!("starting the sandbox: {}", describe(err)))
    }

    /// A failure while preparing, checking or recording: the sandbox's when a request to it
    /// failed because of the sandbox, else the harness's (its input, its log).
    pub fn preparing(err: &StepError) -> Stop {
        let class = if err.is_sandboxes() {
            ErrorClass::Sandbox
        } else {
            ErrorClass::Internal
        };
        Stop::new(class, err.to_string())
    }

    /// The loop's own failure (already an `error` event, by the loop).
    pub fn of_loop(err: &SessionError) -> Stop {
        Stop {
            logged: true,
            ..Stop::new(err.class(), err.to_string())
        }
    }
}

fn describe(err: &StartError) -> String {
    match err {
        StartError::BadInput(message) => message.clone(),
        StartError::Failed(err) => format!("{err:#}"),
    }
}

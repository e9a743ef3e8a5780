//! How `harness` exits: every command's codes, and a session's by its outcome.

use harness_runtime::session::SessionOutcome;

/// The agent finished (and the task's check, if any, passed).
pub const COMPLETED: i32 = 0;
/// Bad input, a model or sandbox failure.
pub const ERROR: i32 = 1;
/// The command line is wrong (clap's own code).
pub const USAGE: i32 = 2;
/// The turn limit was hit.
pub const TURN_LIMIT: i32 = 3;
/// The cost limit was hit.
pub const COST_LIMIT: i32 = 4;
/// The agent finished but the task's check failed.
pub const CHECK_FAILED: i32 = 5;
/// `replay rerun` found a divergence.
pub const DIVERGED: i32 = 6;
/// The session's lifetime (wall clock) ran out.
pub const TIME_LIMIT: i32 = 7;
/// The sandbox died, could not start or stopped answering.
pub const INFRASTRUCTURE: i32 = 8;
/// `batch`: every task ran, and some did not pass.
pub const SOME_FAILED: i32 = 9;
/// A benchmark task's verifier failed (no reward, a timeout): no verdict.
pub const NO_VERDICT: i32 = 10;
/// `batch`: some tasks of its datasets could not be run (the report says why); the rest ran.
pub const NOT_RUNNABLE: i32 = 11;
/// Ctrl-C.
pub const INTERRUPTED: i32 = 130;

/// `harness run`'s exit code for a session that ended so.
pub fn of_session(outcome: SessionOutcome) -> i32 {
    match outcome {
        SessionOutcome::Completed => COMPLETED,
        SessionOutcome::CheckFailed => CHECK_FAILED,
        SessionOutcome::NoVerdict => NO_VERDICT,
        SessionOutcome::TurnLimit => TURN_LIMIT,
        SessionOutcome::CostLimit => COST_LIMIT,
        SessionOutcome::TimeLimit => TIME_LIMIT,
        SessionOutcome::Interrupted => INTERRUPTED,
        SessionOutcome::Infrastructure => INFRASTRUCTURE,
        SessionOutcome::ModelFailed | SessionOutcome::SandboxFailed | SessionOutcome::Error => {
            ERROR
        }
    }
}

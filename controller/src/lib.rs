//! The controller: everything that is not a tool. It reaches sandboxes only over HTTP.
//!
//! # Layout
//! - [`cli`]: the command line.
//! - [`config`]: the run's settings, resolved from flags and a task file.
//! - [`llm`]: the `Model` trait, the three provider adapters, the scripted model, prices, retries.
//! - [`run_loop`]: the agent loop and compaction.
//! - [`prompt`]: the system prompt (AGENTS.md, skills).
//! - [`policy`]: the seam that decides every tool call.
//! - [`session`]: one session end to end, for `run` and `batch`.
//! - [`batch`]: many sessions at once: scheduling, retries, pools, the batch log and report.
//! - [`sandbox_client`], [`local_sandbox`], [`docker_sandbox`], [`seed`]: reaching, starting
//!   and filling sandboxes.
//! - [`task`]: task files.

pub mod batch;
pub mod cli;
pub mod config;
pub mod docker_sandbox;
pub mod event_log;
pub mod llm;
pub mod local_sandbox;
pub mod policy;
pub mod prompt;
pub mod recording;
pub mod replay;
pub mod run_loop;
pub mod sandbox_client;
pub mod secrets;
pub mod seed;
pub mod session;
pub mod task;

/// How `harness run` exits.
pub mod exit_code {
    /// The agent finished (and the task's check, if any, passed).
    pub const COMPLETED: i32 = 0;
    /// Bad input, a model or sandbox failure.
    pub const ERROR: i32 = 1;
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
    /// Ctrl-C.
    pub const INTERRUPTED: i32 = 130;
}

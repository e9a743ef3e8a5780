//! The agent runtime: a session end to end, without a person and without benchmarks.
//!
//! # This crate (`harness-runtime`)
//! It depends on `harness-log`, `harness-telemetry`, `harness-models` and `harness-policy`,
//! never on the log toolkit, the benchmark adapter or the binary: whatever a session is part
//! of reaches it through [`session::provider`] (who starts the sandbox, who grades). It never
//! talks to a person: it notes through an [`run_loop::Observer`] and asks through a
//! [`harness_policy::Asker`].
//!
//! # Layout
//! - [`config`]: a run's settings, resolved from flags and a task file; [`task`]: task files
//!   and finding the tasks of a dataset.
//! - [`session`]: one session end to end: the sandbox, the agent, the grader, the log's
//!   header and footer, and the outcome; [`session::provider`] is its seam.
//! - [`run_loop`]: the agent loop, each model call and tool call, compaction.
//! - [`prompt`]: the system prompt (AGENTS.md, skills).
//! - [`sandbox`]: reaching, starting, leasing and filling sandboxes; the typed client.
//! - [`recording`]: what the log records about the sandbox (workspace, changes, fingerprint).
//! - [`hooks`]: the user's hooks; [`mcp`]: MCP servers' tools.

pub mod config;
pub mod hooks;
pub mod input;
pub mod mcp;
pub mod prompt;
pub mod recording;
pub mod run_loop;
pub mod sandbox;
pub mod session;
pub mod step;
pub mod subagent;
pub mod task;

/// How `harness` exits.
pub mod exit_code {
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
    pub const VERIFIER_FAILED: i32 = 10;
    /// `batch`: some tasks of its datasets could not be run (the report says why); the rest ran.
    pub const NOT_RUNNABLE: i32 = 11;
    /// Ctrl-C.
    pub const INTERRUPTED: i32 = 130;
}

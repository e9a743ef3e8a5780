//! The controller: everything that is not a tool. It reaches sandboxes only over HTTP, and it
//! never talks to a person: the binary's edge (`main.rs`, `cli/`) parses the command line,
//! prints, and asks.
//!
//! # Layout
//! - [`config`]: a run's settings, resolved from flags and a task file; [`task`]: task files.
//! - [`session`]: one session end to end, for `run` and `batch`: the sandbox, the agent, the
//!   check, the log's header and footer, and the outcome.
//! - [`run_loop`]: the agent loop, each model call and tool call, compaction.
//! - [`llm`]: the `Model` trait, the three provider adapters, the scripted model, prices,
//!   retries and rate gates.
//! - [`policy`]: the seam that decides every tool call, and how asks are settled.
//! - [`prompt`]: the system prompt (AGENTS.md, skills).
//! - [`sandbox`]: reaching, starting, leasing and filling sandboxes; the typed client.
//! - [`recording`]: what the log records about the sandbox (workspace, changes, fingerprint).
//! - [`event_log`]: the session log (one writer), its event types and its reader.
//! - [`replay`]: reading logs back: transcripts, restore, metrics, batch reports, rerun.
//! - [`batch`]: many sessions at once: scheduling, retries, the batch log.
//! - [`bench`]: benchmark tasks in Harbor's and Terminal-Bench's formats: their images and
//!   containers, the oracle, the verifier, and the files Harbor's tools read.
//! - [`secrets`], [`text`]: redaction; escaping and sizes.

pub mod batch;
pub mod bench;
pub mod config;
pub mod event_log;
pub mod hooks;
pub mod launch;
pub mod llm;
pub mod mcp;
pub mod policy;
pub mod prompt;
pub mod recording;
pub mod replay;
pub mod run_loop;
pub mod sandbox;
pub mod secrets;
pub mod session;
pub mod task;
pub mod telemetry;
pub mod text;

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

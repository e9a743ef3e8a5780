//! The agent runtime: a session end to end, without a person and without knowing what it is
//! part of (a run, a batch, a benchmark's trial).
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
//! - [`subagent`]: the opt-in `agent` tool: a child session on its parent's sandbox or a copy,
//!   its tree's depth, count and budget held by the harness.
//! - [`input`], [`step`]: the typed errors (the operator's input; a step outside the loop),
//!   classified by a `match`, never by reading a chain of causes.
//!
//! Only `sandbox/local.rs` (with this crate's one `unsafe` call, `PR_SET_PDEATHSIG`),
//! `sandbox/seed.rs`, `hooks/run.rs` and `mcp/config.rs` start processes.

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

//! The `harness` binary's own crate: what only the binary does with the library crates. The
//! binary's edge (`main.rs`, `cli/`) parses the command line, prints, and asks; this library
//! holds what `run` and `batch` share above the runtime.
//!
//! # The crates
//! From the bottom: `harness-log` (the session log) and `harness-telemetry` (metrics);
//! `harness-models` (model adapters); `harness-policy` (the policy's contract) and
//! `harness-judge` (the rules and the classifier, which only this crate depends on: it hands
//! the runtime `harness_judge::build_policy`); `harness-runtime` (the run loop, a session, sandboxes,
//! hooks, MCP); `harness-replay` (the log toolkit); `harness-benchmark` (the benchmark adapter);
//! `harness-view` (`harness view`); and this one, which may depend on all of them and on which
//! none depends. ARCHITECTURE.md draws the graph and says what each may not depend on.
//!
//! # Layout
//! - [`launch`]: a task's config from its source, and the session's model.
//! - [`batch`]: many sessions at once: scheduling, retries, the batch log.
//! - [`fork`]: child sessions from a recorded session's state after a step: the workspace
//!   verified once and shared by an overlay mount per child as root (else copied), or, in
//!   containers, one image of it; the parent's blobs linked in while the children run; a log
//!   not trusted gives only what `fork/from_log.rs` lets it (`--trust-log` for the rest). The
//!   parent's log is never written: its folder only gains `forks/`.

pub mod batch;
pub mod fork;
pub mod launch;

pub mod exit_code;

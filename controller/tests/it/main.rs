//! Integration tests: the real `harness` binary against a real sandbox-server process and an
//! HTTP double of each model API that validates every request against the vendor's schema.

// These tests start the binaries they test, and share helpers that panic like tests do.
#![allow(
    clippy::disallowed_methods,
    clippy::unwrap_used,
    clippy::print_stderr,
    unreachable_pub
)]

/// The invariants of ARCHITECTURE.md that the source can show.
mod architecture;
/// Running `harness`; finding the binaries.
mod common;
/// The model API double and the vendor-schema validator.
mod double;

/// Each adapter end to end: requests that fit the vendor schema, replies sent back verbatim.
mod adapters;
/// The loop: error paths, limits, compaction, the system prompt.
mod agent_loop;
/// `harness batch` over a pool of running sandboxes, and under a rate limit.
mod batch_pools;
/// `harness batch` stopped by Ctrl-C, once and twice, and resumed.
mod batch_stops;
/// `harness batch`: parallel tasks, retries, the report, bad batches refused.
mod batches;
/// Issue 57 §2: a benchmark batch counts its tasks once and ends saying whether it went as
/// expected (no Docker).
mod bench_expected;
/// Issue 24 §3: a benchmark task folder's links, a task's server's names, big files (no Docker).
mod bench_folders;
/// `replay fork` of a benchmark session: children in the task's image, graded (Docker).
mod bench_forks;
/// Issue 25: scores you can trust: the agent cannot reach the reward, every trial counts,
/// any Harbor dataset runs, network allow lists per phase (Docker).
mod bench_scores;
/// Issue 24 §3: a benchmark task reaches no secret of the harness (Docker).
mod bench_trust;
/// Harbor and Terminal-Bench tasks in their own images (when HARNESS_TEST_DOCKER=1).
mod benchmarks;
/// deploy/: the manifests validate, and the Job's pods' command runs (HARNESS_TEST_DEPLOY=1).
mod deploy;
/// `--sandbox docker` against a real engine (when HARNESS_TEST_DOCKER=1).
mod docker;
/// A tool call's answer lost on the way back: repeated under its key, run once; one round trip.
mod dropped;
/// Issue 27: what a new user met in the first hour (Ctrl-C, refusals, reasons, bad input).
mod first_hour;
/// `replay fork --sandbox docker`: children from one image of the workspace at the step.
mod fork_images;
/// `replay fork` of a shared log: its check, `allow-all`, model and budget not taken unless
/// `--trust-log`.
mod fork_trust;
/// `replay fork`: children from a recorded session's conversation and workspace at a step.
mod forks;
/// Hooks: command and HTTP handlers, every event, every tool denied, fail-closed, rerun.
mod hooks;
/// Crafted logs: restore stays inside its target, rerun judges the calls again.
mod hostile_logs;
/// A running command's output followed live: `harness run`'s display and the client.
mod live_output;
/// The session log under a killed harness, secrets, and a running sandbox.
mod log_safety;
/// Tools from MCP servers: stdio and HTTP, slow and broken ones, through hooks, rules and log.
mod mcp_tools;
/// deploy/'s monitoring: scrape annotations, headless Services, promtool on the config and rules.
mod monitoring;
/// The policy: rules, the classifier through each adapter, asks, provenance.
mod policy;
/// `--sandbox https://…` with a CA and a client certificate; certificate problems named.
mod remote_tls;
/// The session log: recorded, rendered, restored, measured and re-run.
mod replays;
/// Reports with pictures: the batch report's charts, `replay compare`, the transcript's step times.
mod reports;
/// Retries on 429 and 5xx, and errors that surface at once.
mod retries;
/// The local sandbox's lifecycle, task files and the quick-start example.
mod sessions;
/// A shared batch or log folder is hostile: no write through its links, no task outside it, no
/// endless read, no escape sequence from a log sent to the terminal.
mod shared_folders;
/// Subagents: the `agent` tool's children, shared and forked, linked, limited, rerun.
mod subagent_merges;
mod subagents;
/// Telemetry by the real tools: one trace across both programs (OTLP), Prometheus scraping.
mod telemetry;
/// Issue 24: no secret of the harness reaches a command, the log or the model; dataset files
/// and workspace files are untrusted input.
mod trust;
/// `harness view`: its guard, and the app in a real browser.
mod view;

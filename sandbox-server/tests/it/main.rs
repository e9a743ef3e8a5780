//! Integration tests: each runs a real `sandbox-server` process on 127.0.0.1:0 and talks to
//! it over HTTP, as a client would.

// These tests start the server binary and helper commands themselves.
#![allow(clippy::disallowed_methods)]
// Helpers shared by tests panic on failure like the tests themselves.
#![allow(clippy::unwrap_used)]
// A test binary has no public API; `pub` in its modules means "shared with the tests".
#![allow(unreachable_pub)]

/// Starting and stopping a server process; HTTP helpers.
mod common;

/// Health, info, the tool listing, the OpenAPI document and the docs page.
mod api;
/// `bash`: layout, timeouts that kill whole trees, background children, bounded output.
mod bash;
/// The workspace boundary: every escape attempt is refused; a task container's whole file system.
mod boundary;
/// Issue 24 §7: metrics labels, the idempotency store, followers and ids stay bounded.
mod bounded;
/// Containment: the network, the environment, Landlock, resource limits, an unprivileged user.
mod containment;
/// The OpenAPI document as a contract: the server and the schema agree; fuzzer, generated client.
mod contract;
/// Error bodies and statuses: 401, 404, 405, 413, 422, 429.
mod errors;
/// `read_file`, `write_file` and `search_replace`.
mod files;
/// Generated and documented artefacts stay true: `proto-docs/openapi.json`, `proto-docs/curl.md`.
mod generated;
/// Issue 55: no command reads the homes, by any route; toolchains read-only; no set-id file.
mod hidden;
/// Hostile inputs: browsers, racing swappers, bombs, deep trees, odd names, sockets.
mod hostile;
/// Hostile workspace files and clients of the state routes: a file growing while snapshotted,
/// a sparse giant, a watched path swapped for a FIFO, archive clients that read nothing, more
/// paths than a scan may hold.
mod hostile_state;
/// `Idempotency-Key`: replays, the in-flight 409, reuse 422, expiry.
mod idempotency;
/// Issue 24: a command sees and signals no process outside its sandbox, opens only the device
/// nodes programs need, and runs as an unprivileged user with the workspace made its own.
mod isolation;
/// Nothing outlives its server; no command reads a server's state.
mod leftovers;
/// Start-up checks, graceful shutdown and reaping.
mod lifecycle;
/// The sandbox as an MCP server: the official Python SDK over HTTP and through `mcp-stdio`.
mod mcp;
/// Every route's memory is bounded (peak RSS sampled around big requests).
mod memory;
/// `GET /metrics`: calls by tool and outcome, the token, `--metrics-listen`, promtool.
mod metrics;
/// Processes started by id: output from a cursor (long-poll, SSE, WebSocket), stdin, a
/// terminal, signals, persistent shells.
mod processes;
/// The Python SDK: generated models, and a session through it over mutual TLS.
mod python_sdk;
/// Raw files and directory listings.
mod raw_files;
/// A tool call's step (changes, inline bytes, fingerprint) in its own answer.
mod step;
/// HTTPS, mutual TLS, certificate problems as clients see them, rotation without a restart.
mod tls;
/// Scoped, expiring tokens: scopes per route (and over MCP), expiry, revocation, the store.
mod tokens;
/// Snapshots, changes, blobs, archives and the state fingerprint.
mod workspace_state;

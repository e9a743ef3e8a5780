//! What the controller's benches share, each bench including this folder as its module
//! `support` (the integration tests include some of its files by path, as modules of their own).

// Each bench uses its own part of what is here.
#![allow(dead_code)]

pub(crate) mod clock;
pub(crate) mod harness;
pub(crate) mod log_events;
pub(crate) mod log_line;
pub(crate) mod run_args;
pub(crate) mod scripted_task;
pub(crate) mod stats;

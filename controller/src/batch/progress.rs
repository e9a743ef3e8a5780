//! The batch as it goes, for whoever shows it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness_runtime::run_loop::Totals;

/// A task while it runs.
#[derive(Debug, Clone)]
pub struct Running {
    pub attempt: u32,
    pub started: Instant,
    pub totals: Arc<Mutex<Totals>>,
    /// The tool call it is running, in a few words.
    pub current: Arc<Mutex<Option<String>>>,
}

/// The batch as it goes, shared with whoever shows it.
#[derive(Debug, Default)]
pub struct Progress {
    inner: Mutex<ProgressState>,
}

#[derive(Debug, Default, Clone)]
pub struct ProgressState {
    pub total: usize,
    pub skipped: usize,
    pub done: usize,
    pub passed: usize,
    pub failed: usize,
    pub retries: usize,
    pub running: BTreeMap<String, Running>,
    /// How long each finished task took, for the estimate of the time left.
    pub durations: Vec<Duration>,
}

impl Progress {
    pub fn snapshot(&self) -> ProgressState {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Changes the state; the `harness_tasks` gauges follow it.
    pub(super) fn update(&self, f: impl FnOnce(&mut ProgressState)) {
        let mut state = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut state);
        let running = state.running.len();
        harness_telemetry::metrics().tasks(harness_telemetry::TaskCounts {
            pending: state
                .total
                .saturating_sub(state.skipped + state.done + running),
            running,
            done: state.done,
            skipped: state.skipped,
        });
    }
}

//! The batch's own log: its tasks and their names, the attempts and retries, the wall time,
//! why an attempt could not start, the rate limits and the warm pool. The report's rows come
//! from each task's session log; this is what only the batch log says.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

use super::TrialFiles;
use super::bench::NotRunnable;
use crate::{ReplayError, events};
use harness_log::{BatchStarted, Event, GateRecord, WarmPoolRecord};

/// What the batch's own log says.
#[derive(Debug, Default)]
pub(super) struct BatchLog {
    pub(super) batch_id: String,
    /// Each once, in the batch's order.
    pub(super) task_ids: Vec<String>,
    /// The same, to look an error's task up by.
    id_set: HashSet<String>,
    /// The lengths of the ids (an error's prefix of another length is no id).
    id_lengths: BTreeSet<usize>,
    /// The task's name per log folder, where they differ.
    pub(super) names: BTreeMap<String, String>,
    /// Trials per task.
    pub(super) trials: u32,
    /// The log folders of benchmark tasks.
    pub(super) bench_ids: BTreeSet<String>,
    pub(super) attempts: BTreeMap<String, u32>,
    pub(super) retries: u32,
    pub(super) wall_ms: u64,
    pub(super) interrupted: bool,
    pub(super) gates: BTreeMap<String, GateRecord>,
    pub(super) warm_pool: Option<WarmPoolRecord>,
    /// Why an attempt could not start its session (the batch log's `error` after its
    /// `task_started`), by log folder.
    pub(super) unstarted: BTreeMap<String, String>,
    /// Tasks of the datasets that could not be run (of the last run of the batch).
    pub(super) not_runnable: Vec<NotRunnable>,
}

/// Reads the batch's own log, every run of it (a resumed batch has several).
pub(super) fn read_batch_log(dir: &Path, files: &dyn TrialFiles) -> Result<BatchLog, ReplayError> {
    let mut log = BatchLog::default();
    for envelope in events(dir, |_| {})? {
        match envelope?.event {
            Event::BatchStarted(started) => log.started(dir, started, files)?,
            Event::TaskStarted(started) => *log.attempts.entry(started.task).or_default() += 1,
            Event::TaskNotRunnable(task) => log.not_runnable.push(NotRunnable {
                task: task.task,
                reason: task.reason,
                expected: task.expected,
            }),
            // An attempt that could not start its session files its reason as `{task}: …`.
            Event::Error(error) => {
                if let Some(task) = log.task_of(&error.message) {
                    let reason = error.message[task.len() + 2..].to_owned();
                    log.unstarted.insert(task.to_owned(), reason);
                }
            }
            Event::TaskRetried(_) => log.retries += 1,
            Event::BatchFinished(finished) => {
                log.wall_ms += finished.duration_ms;
                log.interrupted = finished.interrupted;
                if let Some(pool) = finished.warm_pool {
                    let total = log.warm_pool.get_or_insert(WarmPoolRecord {
                        size: pool.size,
                        leased_ready: 0,
                        started_on_demand: 0,
                    });
                    total.size = pool.size;
                    total.leased_ready += pool.leased_ready;
                    total.started_on_demand += pool.started_on_demand;
                }
                for gate in finished.rate_limits {
                    let entry =
                        log.gates
                            .entry(gate.endpoint.clone())
                            .or_insert_with(|| GateRecord {
                                endpoint: gate.endpoint.clone(),
                                requests: 0,
                                throttled: 0,
                                waited_ms: 0,
                            });
                    entry.requests += gate.requests;
                    entry.throttled += gate.throttled;
                    entry.waited_ms += gate.waited_ms;
                }
            }
            _ => {}
        }
    }
    Ok(log)
}

impl BatchLog {
    /// A run of the batch begins (a resumed batch has one per run). Each task's id names its
    /// log folder beside the batch's log, so it must be one plain name: a shared batch's log
    /// could name `../x` or `/home/…` and have another session read and rendered into it.
    pub(super) fn started(
        &mut self,
        dir: &Path,
        started: BatchStarted,
        files: &dyn TrialFiles,
    ) -> Result<(), ReplayError> {
        if let Some(bad) = started.tasks.iter().find(|t| !crate::plain_name(&t.id)) {
            return Err(ReplayError::Io(format!(
                "{}: the batch log names a task {:?}, which is not one plain folder name (no `/`, not `.` or `..`): refused",
                dir.display(),
                bad.id
            )));
        }
        self.batch_id = started.batch_id;
        self.trials = started.attempts.unwrap_or(1);
        for task in &started.tasks {
            if files.is_benchmark(Path::new(&task.file)) {
                self.bench_ids.insert(task.id.clone());
            }
            if let Some(name) = &task.task {
                self.names.insert(task.id.clone(), name.clone());
            }
        }
        // A repeated id is one task (one row, measured once).
        let mut seen = HashSet::new();
        self.task_ids = started
            .tasks
            .into_iter()
            .map(|t| t.id)
            .filter(|id| seen.insert(id.clone()))
            .collect();
        self.id_lengths = seen.iter().map(String::len).collect();
        self.id_set = seen;
        self.interrupted = false;
        self.not_runnable.clear();
        Ok(())
    }

    /// The task an error message `{task}: …` is about: the longest id followed by `": "` that
    /// begins it. Each `": "` of the message is a candidate end, looked up by its length first
    /// and then in the set, so a batch of many tasks with many errors is not read tasks × errors
    /// times.
    pub(super) fn task_of<'m>(&self, message: &'m str) -> Option<&'m str> {
        let longest = self.id_lengths.last().copied().unwrap_or(0);
        message
            .match_indices(": ")
            .map(|(at, _)| at)
            .take_while(|at| *at <= longest)
            .filter(|at| self.id_lengths.contains(at))
            .map(|at| &message[..at])
            .filter(|prefix| self.id_set.contains(*prefix))
            .last()
    }
}

//! The blocks of a batch's own log: the batch and each task's start, end, retry and skip.

use std::path::Path;

use crate::ReplayError;
use crate::render::Block;
use harness_log::text::plural;
use harness_log::{
    BatchFinished, BatchStarted, TaskFinished, TaskRetried, TaskSkipped, TaskStarted,
};

pub(super) fn batch_started(
    block: &mut Block,
    _dir: &Path,
    batch: &BatchStarted,
) -> Result<(), ReplayError> {
    block.title = format!(
        "Batch started: {}, {} at once, sandbox {}",
        plural(batch.tasks.len(), "task"),
        batch.parallel,
        batch.sandbox
    );
    block.notes.push(batch.parallel_reason.clone());
    Ok(())
}

pub(super) fn task_started(
    block: &mut Block,
    _dir: &Path,
    task: &TaskStarted,
) -> Result<(), ReplayError> {
    block.title = format!("Task {} started (attempt {})", task.task, task.attempt);
    block.notes.push(format!("log: {}", task.log_dir));
    Ok(())
}

pub(super) fn task_finished(
    block: &mut Block,
    _dir: &Path,
    task: &TaskFinished,
) -> Result<(), ReplayError> {
    block.title = format!(
        "Task {} {} ({}{})",
        task.task,
        if task.passed { "passed" } else { "failed" },
        task.outcome.as_str(),
        task.failure
            .map(|f| format!(", {}", f.as_str()))
            .unwrap_or_default()
    );
    Ok(())
}

pub(super) fn task_retried(
    block: &mut Block,
    _dir: &Path,
    task: &TaskRetried,
) -> Result<(), ReplayError> {
    block.title = format!("Task {} retried: attempt {}", task.task, task.attempt);
    block.notes.push(task.reason.clone());
    Ok(())
}

pub(super) fn task_skipped(
    block: &mut Block,
    _dir: &Path,
    task: &TaskSkipped,
) -> Result<(), ReplayError> {
    block.title = format!("Task {} skipped", task.task);
    block.notes.push(task.reason.clone());
    Ok(())
}

pub(super) fn batch_finished(
    block: &mut Block,
    _dir: &Path,
    batch: &BatchFinished,
) -> Result<(), ReplayError> {
    block.title = format!(
        "Batch finished{}: {} passed, {} failed, {} not run, {} retries",
        if batch.interrupted {
            " (interrupted)"
        } else {
            ""
        },
        batch.n_passed,
        batch.n_failed,
        batch.n_not_run,
        batch.n_retries
    );
    Ok(())
}

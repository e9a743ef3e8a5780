//! The parent's blobs linked into each child's log, by one thread in the background.
//!
//! A child's log needs the blobs of the workspace it starts from only to be read after (restore,
//! rerun, the viewer); its session runs without them (its initial snapshot skips them:
//! `Resume::provided_blobs`). So a child starts without them, its links are queued once it is at
//! work (its first tool call, or its end), and one thread makes each child's in turn — so that
//! the links do not take the cores the children are starting on — and a child is done only
//! once its links are made.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::oneshot;

use harness_replay::restore::State;
use harness_runtime::run_loop::Observer;

type Job = (PathBuf, oneshot::Sender<std::io::Result<()>>);

/// The fork's linking thread; it ends when this is dropped and its jobs are done.
pub(super) struct Linker {
    jobs: std::sync::Mutex<std::sync::mpsc::Sender<Job>>,
}

impl Linker {
    /// Links from the session folder `parent` the blobs of `state`.
    pub(super) fn start(parent: &Path, state: Arc<State>) -> std::io::Result<Linker> {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let parent = parent.to_owned();
        std::thread::Builder::new()
            .name("fork-blob-links".to_owned())
            .spawn(move || {
                for (child_log, done) in queue {
                    let linked = harness_replay::fork::link_blobs(&parent, &state, &child_log);
                    let _ = done.send(linked);
                }
            })?;
        Ok(Linker {
            jobs: std::sync::Mutex::new(jobs),
        })
    }

    /// Queues the links into the log folder `child_log`; the answer says when they are made.
    pub(super) fn link(&self, child_log: &Path) -> oneshot::Receiver<std::io::Result<()>> {
        let (done, linked) = oneshot::channel();
        let job = (child_log.to_owned(), done);
        if let Err(std::sync::mpsc::SendError((_, done))) = self
            .jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .send(job)
        {
            let _ = done.send(Err(std::io::Error::other("the linking thread has ended")));
        }
        linked
    }
}

/// A child's observer: it queues the child's links at its first tool call.
pub(super) struct LinkWhenAtWork<'a> {
    linker: &'a Linker,
    log_dir: PathBuf,
    queued: std::sync::Mutex<Option<oneshot::Receiver<std::io::Result<()>>>>,
}

impl<'a> LinkWhenAtWork<'a> {
    pub(super) fn new(linker: &'a Linker, log_dir: &Path) -> LinkWhenAtWork<'a> {
        LinkWhenAtWork {
            linker,
            log_dir: log_dir.to_owned(),
            queued: std::sync::Mutex::new(None),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Option<oneshot::Receiver<std::io::Result<()>>>> {
        let mut queued = self
            .queued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if queued.is_none() {
            *queued = Some(self.linker.link(&self.log_dir));
        }
        queued
    }

    /// Once the child's session has ended: its links made (queued now if they were not).
    pub(super) async fn done(&self) -> std::io::Result<()> {
        let linked = self.queue().take();
        match linked {
            Some(linked) => linked
                .await
                .unwrap_or_else(|_| Err(std::io::Error::other("the linking thread ended"))),
            None => Err(std::io::Error::other("the links were awaited twice")),
        }
    }
}

impl Observer for LinkWhenAtWork<'_> {
    fn tool_call(&self, _call: &harness_models::ToolCall) {
        drop(self.queue());
    }
    fn compacted(&self, _before: usize, _after: usize) {}
}

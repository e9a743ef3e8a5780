//! `harness batch --pool-size N`: containers started ahead of need, so that a task's sandbox is
//! leased from the pool instead of created, filled and booted on the task's critical path.
//!
//! The pool keeps up to N started containers (with a healthy server), N in all whatever the
//! container specs a batch asks for: a spec that needs room takes it from the idle containers
//! of the others, oldest spec first. A lease takes a ready one, or waits for one already being
//! started; only when none is on its way does it start its own (a miss). Every lease starts a
//! replacement in the background: at once when no container of its spec is left ready, else
//! after [`REFILL_DELAY`], so that the engine's work does not compete with the session that
//! just leased one while it seeds its workspace. A leased container is the session's alone and is removed when the session ends,
//! as any other; [`WarmPool::drain`] removes the ones never leased. Each container has its own
//! token and is labelled like a session's (`harness sandboxes prune` finds it if the harness
//! dies).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::{DockerSandbox, DockerSpec};
use crate::sandbox::{Failure, StartError};

/// The containers of one spec.
#[derive(Debug)]
struct Shelf {
    spec: DockerSpec,
    ready: Vec<DockerSandbox>,
    /// Containers being started for this shelf.
    starting: usize,
    /// Leases waiting for one of those.
    waiting: usize,
}

#[derive(Debug, Default)]
struct State {
    shelves: Vec<Shelf>,
    closed: bool,
}

/// Containers started ahead of need; see the module's documentation.
#[derive(Debug)]
pub struct WarmPool {
    size: usize,
    state: Mutex<State>,
    /// Woken when a container is ready (or failed to start).
    changed: Notify,
    /// Background starts still running (a std mutex: nothing is awaited while it is held, so a
    /// cancelled lease cannot leave the counts half-updated).
    filling: Mutex<tokio::task::JoinSet<()>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// How long a replacement waits when its shelf still has a container ready.
const REFILL_DELAY: std::time::Duration = std::time::Duration::from_millis(250);

/// How a lease was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// A container the pool had started.
    Pool,
    /// None was ready or coming: started for the lease.
    Started,
}

impl WarmPool {
    /// A pool of `size` containers per spec (at least one).
    pub fn new(size: usize) -> Arc<WarmPool> {
        Arc::new(WarmPool {
            size: size.max(1),
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            filling: Mutex::new(tokio::task::JoinSet::new()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Leases served from the pool, and those that started their own container.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// Starts containers of `spec` until `size` are ready or starting, making room by
    /// removing idle containers of other specs.
    pub fn prime(self: &Arc<Self>, spec: &DockerSpec) {
        let mut filling = self.filling.lock().unwrap_or_else(|p| p.into_inner());
        let (wanted, evicted, urgent) = {
            let mut state = self.state();
            if state.closed {
                return;
            }
            let size = self.size;
            let held: usize = state
                .shelves
                .iter()
                .map(|shelf| shelf.ready.len() + shelf.starting)
                .sum();
            let mine = shelf(&mut state, spec);
            let wanted = size.saturating_sub(mine.ready.len() + mine.starting);
            let urgent = mine.ready.is_empty();
            let mut evicted = Vec::new();
            let mut over = (held + wanted).saturating_sub(size);
            for other in state.shelves.iter_mut().filter(|shelf| &shelf.spec != spec) {
                while over > 0 && !other.ready.is_empty() {
                    evicted.push(other.ready.remove(0));
                    over -= 1;
                }
            }
            // What could not be evicted (containers still starting) is not started now.
            let wanted = wanted.saturating_sub(over);
            shelf(&mut state, spec).starting += wanted;
            (wanted, evicted, urgent)
        };
        // With containers still ready, the replacement waits a moment: started at once, the
        // engine's work competes with the session that just leased one while it seeds.
        let delay = if urgent {
            std::time::Duration::ZERO
        } else {
            REFILL_DELAY
        };
        for _ in 0..wanted {
            let (pool, spec) = (self.clone(), spec.clone());
            filling.spawn(async move { pool.fill(spec, delay).await });
        }
        for mut idle in evicted {
            filling.spawn(async move { idle.remove().await });
        }
    }

    /// One background start; its container goes on the shelf (or is removed if the pool closed).
    async fn fill(self: Arc<Self>, spec: DockerSpec, delay: std::time::Duration) {
        tokio::time::sleep(delay).await;
        let id = format!("pool-{:012x}", rand::random::<u64>() >> 16);
        let token = format!("{:032x}", rand::random::<u128>());
        let started = if self.state().closed {
            Err(StartError::Failed(Failure::Server(
                "the pool closed".to_owned(),
            )))
        } else {
            DockerSandbox::start(&spec, &id, &token).await
        };
        let leftover = {
            let mut state = self.state();
            let closed = state.closed;
            let shelf = shelf(&mut state, &spec);
            shelf.starting -= 1;
            match started {
                Ok(sandbox) if !closed => {
                    shelf.ready.push(sandbox);
                    None
                }
                Ok(sandbox) => Some(sandbox),
                Err(_) if closed => None,
                Err(err) => {
                    tracing::warn!(cause = %err, "starting a warm container");
                    None
                }
            }
        };
        self.changed.notify_waiters();
        if let Some(mut sandbox) = leftover {
            sandbox.remove().await;
        }
    }

    /// A started container of `spec` for one session, and how it was served; a replacement is
    /// started in the background.
    pub async fn lease(
        self: &Arc<Self>,
        spec: &DockerSpec,
        session_id: &str,
        token: &str,
    ) -> Result<(DockerSandbox, Served), StartError> {
        self.prime(spec);
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let taken = {
                let mut state = self.state();
                let shelf = shelf(&mut state, spec);
                match shelf.ready.pop() {
                    Some(sandbox) => Some(Some(sandbox)),
                    // More leases waiting than containers coming: this one starts its own.
                    None if shelf.starting <= shelf.waiting => Some(None),
                    None => {
                        shelf.waiting += 1;
                        None
                    }
                }
            };
            match taken {
                Some(Some(mut sandbox)) => {
                    self.prime(spec);
                    // A container that died while it waited is replaced, not handed out.
                    if sandbox.client.health().await.is_ok() {
                        self.hits.fetch_add(1, Ordering::Relaxed);
                        return Ok((sandbox, Served::Pool));
                    }
                    sandbox.remove().await;
                }
                Some(None) => {
                    self.misses.fetch_add(1, Ordering::Relaxed);
                    let sandbox = DockerSandbox::start(spec, session_id, token).await?;
                    return Ok((sandbox, Served::Started));
                }
                None => {
                    // Counted out again however the wait ends (a cancelled session included).
                    let _waiting = Waiting { pool: self, spec };
                    changed.await;
                }
            }
        }
    }

    /// Stops starting containers and removes every one not leased.
    pub async fn drain(&self) {
        self.state().closed = true;
        let mut filling =
            std::mem::take(&mut *self.filling.lock().unwrap_or_else(|p| p.into_inner()));
        while filling.join_next().await.is_some() {}
        let ready: Vec<DockerSandbox> = self
            .state()
            .shelves
            .iter_mut()
            .flat_map(|shelf| shelf.ready.drain(..))
            .collect();
        for mut sandbox in ready {
            sandbox.remove().await;
        }
    }
}

/// A lease waiting for a container being started; uncounted when dropped.
struct Waiting<'a> {
    pool: &'a WarmPool,
    spec: &'a DockerSpec,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        shelf(&mut self.pool.state(), self.spec).waiting -= 1;
    }
}

/// The shelf of `spec`, made if missing.
fn shelf<'a>(state: &'a mut State, spec: &DockerSpec) -> &'a mut Shelf {
    let index = match state.shelves.iter().position(|shelf| &shelf.spec == spec) {
        Some(index) => index,
        None => {
            state.shelves.push(Shelf {
                spec: spec.clone(),
                ready: Vec::new(),
                starting: 0,
                waiting: 0,
            });
            state.shelves.len() - 1
        }
    };
    &mut state.shelves[index]
}

//! `harness view`: a web app over log folders — the runs list and a text search across them,
//! a session's transcript and its workspace at any step, a batch's grid, batches compared with
//! paired statistics, two sessions aligned step by step with their first divergence — that
//! follows logs while they are written. Read-only, offline (every asset is in the binary), and
//! safe to point at hostile logs: the page sets log text only as text, and the server sends a
//! policy that allows no other script.
//!
//! The server keeps an [`index`] of runs (their summaries, from the ends of their logs), not
//! the logs: a session's events are read a [`pages`] at a time, followed from the file
//! ([`follow`]), searched by streaming ([`search`]).
//!
//! Everything kept of a log is bounded: the index is refreshed every 500 ms (a folder listed
//! again only when its mtime moved) and holds at most 200,000 runs, a page at most 16 MiB, a
//! trajectory 5,000 calls. A request names a run by id; its folder comes from the index, never
//! from the request. A blob is shown only when it hashes to its name. Every route is `GET`.
//!
//! # This crate (`harness-view`)
//! It reads logs through `harness-log` and, for the workspace at a step and the static
//! report's charts and statistics, through the log toolkit (`harness-replay`). It may depend
//! on those two and nothing else of the harness: it never runs a session, never writes a log.

pub mod batch;
mod charts;
pub mod compare;
mod follow;
mod http;
pub mod index;
mod latency;
pub mod pages;
pub mod search;
pub mod summary;
pub mod workspace;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use index::Index;
use pages::Pager;

/// How often the folders are walked again and changed logs summarised.
pub const REFRESH: Duration = Duration::from_millis(500);
/// The shortest token a viewer on a non-loopback address accepts.
pub const MIN_TOKEN: usize = 16;

/// What the viewer could not do.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error(transparent)]
    Replay(#[from] harness_replay::ReplayError),
    #[error("{0}")]
    Io(String),
    /// The viewer cannot start as asked.
    #[error("{0}")]
    Start(String),
}

/// How to serve.
#[derive(Debug, Clone)]
pub struct Config {
    pub dirs: Vec<PathBuf>,
    pub listen: SocketAddr,
    /// Required for a non-loopback address.
    pub token: Option<String>,
}

pub(crate) struct App {
    index: Index,
    pager: Pager,
    token: Option<String>,
    /// The last batch grid made, by its batch, its log's length and the index's generation: the
    /// page's grid and its charts are made from one.
    grid: std::sync::Mutex<Option<(GridKey, Arc<batch::Grid>)>>,
    latencies: latency::Latencies,
}

type GridKey = (String, u64, u64);

impl App {
    /// The grid of the batch `id`, made again only when its log or the index moved.
    fn grid(&self, id: &str, dir: &std::path::Path) -> Result<Arc<batch::Grid>, ViewError> {
        let len = std::fs::metadata(dir.join("events.jsonl")).map_or(0, |m| m.len());
        // Held while a grid is made: a page's concurrent requests wait and share it.
        let mut cached = self.grid.lock().unwrap_or_else(|e| e.into_inner());
        let runs = self.index.read();
        let key = (id.to_owned(), len, runs.generation);
        if let Some((made_for, grid)) = cached.as_ref()
            && *made_for == key
        {
            return Ok(grid.clone());
        }
        let grid = Arc::new(batch::grid(&runs, id, dir)?);
        *cached = Some((key, grid.clone()));
        Ok(grid)
    }
}

/// A viewer bound to its address, its index built once.
pub struct Viewer {
    listener: tokio::net::TcpListener,
    app: Arc<App>,
}

impl Viewer {
    /// Checks the folders and the address, binds, and indexes the folders.
    pub async fn bind(config: Config) -> Result<Viewer, ViewError> {
        if config.dirs.is_empty() {
            return Err(ViewError::Start(
                "give at least one log folder to view".into(),
            ));
        }
        for dir in &config.dirs {
            if !dir.is_dir() {
                return Err(ViewError::Start(format!(
                    "{}: no such folder (give a session's log folder, a batch's, or a folder of them)",
                    dir.display()
                )));
            }
        }
        if let Some(token) = &config.token {
            if token.len() < MIN_TOKEN {
                return Err(ViewError::Start(format!(
                    "the token has {} characters; a viewer's token needs at least {MIN_TOKEN}",
                    token.len()
                )));
            }
            // It travels in an address (`?token=`) and a cookie: no character either would change.
            if let Some(bad) = token
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || "-._~+/=".contains(*c)))
            {
                return Err(ViewError::Start(format!(
                    "the token holds `{}`; a viewer's token is letters, digits and - . _ ~ + / = (hex or base64)",
                    bad.escape_debug()
                )));
            }
        }
        if !config.listen.ip().is_loopback() && config.token.is_none() {
            return Err(ViewError::Start(format!(
                "--listen {}: not a loopback address, and no token: anyone who can reach it would read every log (give --token-file, or listen on 127.0.0.1)",
                config.listen
            )));
        }
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|err| ViewError::Start(bind_failed(config.listen, &err)))?;
        let app = Arc::new(App {
            index: Index::new(config.dirs),
            pager: Pager::default(),
            token: config.token,
            grid: std::sync::Mutex::new(None),
            latencies: latency::Latencies::default(),
        });
        let first = app.clone();
        tokio::task::spawn_blocking(move || first.index.refresh())
            .await
            .map_err(|err| ViewError::Io(format!("indexing stopped: {err}")))?;
        Ok(Viewer { listener, app })
    }

    pub fn address(&self) -> Result<SocketAddr, ViewError> {
        self.listener
            .local_addr()
            .map_err(|err| ViewError::Io(err.to_string()))
    }

    /// How many runs the index holds.
    pub fn runs(&self) -> usize {
        self.app.index.read().by_id.len()
    }

    /// Serves, refreshing the index all along, until dropped (a page following a log holds
    /// its connection open, so the caller stops the viewer by dropping this future).
    pub async fn serve(self) -> Result<(), ViewError> {
        let refresher = self.app.clone();
        let refresh = tokio::spawn(async move {
            loop {
                tokio::time::sleep(REFRESH).await;
                let app = refresher.clone();
                if tokio::task::spawn_blocking(move || app.index.refresh())
                    .await
                    .is_err()
                {
                    tracing::warn!("the index refresh stopped");
                }
            }
        });
        let served = http::serve(self.listener, self.app).await;
        refresh.abort();
        served
    }
}

/// Why `--listen at` could not be bound, and for a port in use what to do instead.
fn bind_failed(at: std::net::SocketAddr, err: &std::io::Error) -> String {
    let mut why = format!("--listen {at}: {err}");
    if err.kind() == std::io::ErrorKind::AddrInUse {
        why.push_str(&format!(
            ": another viewer (or another program) serves there; stop it, choose another port, \
             or give --listen {} for a free one (the address is printed)",
            std::net::SocketAddr::new(at.ip(), 0)
        ));
    }
    why
}

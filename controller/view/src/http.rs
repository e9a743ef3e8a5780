//! The viewer's HTTP edge: the page and its assets (inside the binary), the JSON API the page
//! reads, and the guard every request passes (`http/guard.rs`). Read-only: every route is `GET`.
//!
//! The guard: `Host` must name this machine by address or `localhost` unless a token is set
//! (a DNS name rebound to a loopback viewer is refused); a request with an `Origin` must come
//! from the viewer's own pages; with a token, every request must carry it (a cookie set by
//! opening `/?token=…` once, or `Authorization: Bearer`). Every response forbids scripts other
//! than the viewer's own file, framing, sniffing and referrers: log text is hostile, and the
//! page only ever sets it as text.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::json;

mod guard;

use crate::summary::Kind;
use crate::{App, ViewError, charts, compare, follow, search, workspace};

/// Serves `app` on `listener` until the future is dropped.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Arc<App>,
) -> Result<(), ViewError> {
    axum::serve(listener, router(app))
        .await
        .map_err(|err| ViewError::Io(format!("serving: {err}")))
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/app.js", get(script))
        .route("/app.css", get(style))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/api/runs", get(runs))
        .route("/api/run", get(run))
        .route("/api/events", get(events))
        .route("/api/follow", get(follow_run))
        .route("/api/workspace/steps", get(steps))
        .route("/api/workspace/tree", get(tree))
        .route("/api/workspace/file", get(file))
        .route("/api/blob", get(blob))
        .route("/api/batch", get(batch_grid))
        .route("/api/chart", get(chart))
        .route("/api/compare", get(compare_runs))
        .route("/api/trajectories", get(trajectories))
        .route("/api/search", get(search_runs))
        .layer(middleware::from_fn_with_state(app.clone(), guard::guard))
        .with_state(app)
}

impl IntoResponse for ViewError {
    fn into_response(self) -> Response {
        let status = match &self {
            ViewError::NotFound(_) => StatusCode::NOT_FOUND,
            ViewError::BadRequest(_) | ViewError::Replay(_) => StatusCode::BAD_REQUEST,
            ViewError::Forbidden(_) => StatusCode::FORBIDDEN,
            ViewError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ViewError::Io(_) | ViewError::Start(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, axum::Json(json!({"error": self.to_string()}))).into_response()
    }
}

type Reply = Result<Response, ViewError>;

async fn page() -> Response {
    asset(
        "text/html; charset=utf-8",
        include_str!("../assets/index.html"),
    )
}

async fn script() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("../assets/app.js"),
    )
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", include_str!("../assets/app.css"))
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// Runs blocking work (file reads) off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ViewError> + Send + 'static,
) -> Result<T, ViewError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| ViewError::Io(format!("a reader stopped: {err}")))?
}

/// Runs blocking work off the async threads, as [`blocking`], and answers with what it gives,
/// as JSON.
async fn blocking_json<T: Serialize + Send + 'static>(
    work: impl FnOnce() -> Result<T, ViewError> + Send + 'static,
) -> Reply {
    let value = blocking(work).await?;
    Ok(axum::Json(value).into_response())
}

fn dir_of(app: &App, id: &str) -> Result<(std::path::PathBuf, Option<Kind>), ViewError> {
    app.index.dir_of(id).ok_or_else(|| {
        ViewError::NotFound(format!(
            "no run `{}` under the viewed folders",
            id.escape_debug()
        ))
    })
}

#[derive(Deserialize)]
struct RunsQuery {
    #[serde(default)]
    q: String,
    kind: Option<String>,
    status: Option<String>,
    /// A failure class (`check`, `limit`, …): the runs that failed with it.
    failure: Option<String>,
    /// Trials of batches too.
    #[serde(default)]
    all: bool,
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
    /// The generation the page has: unchanged answers `{"unchanged": true}`.
    since: Option<u64>,
}

async fn runs(State(app): State<Arc<App>>, Query(query): Query<RunsQuery>) -> Reply {
    let runs = app.index.read();
    if query.since == Some(runs.generation) {
        return Ok(
            axum::Json(json!({"unchanged": true, "generation": runs.generation})).into_response(),
        );
    }
    let needle = query.q.to_lowercase();
    let limit = query.limit.unwrap_or(500).min(5000);
    let matching = runs
        .order
        .iter()
        .filter_map(|id| runs.by_id.get(id))
        .filter(|run| {
            let s = &run.summary;
            (query.all || (run.batch.is_none() && run.parent.is_none()))
                && query
                    .kind
                    .as_deref()
                    .is_none_or(|k| s.kind.is_some_and(|kind| json!(kind) == k))
                && query
                    .status
                    .as_deref()
                    .is_none_or(|st| s.status.is_some_and(|status| json!(status) == st))
                && query
                    .failure
                    .as_deref()
                    .is_none_or(|f| s.failure.as_deref() == Some(f))
                && (needle.is_empty()
                    || [
                        &run.name,
                        &run.path,
                        &s.task,
                        s.model.as_deref().unwrap_or_default(),
                    ]
                    .iter()
                    .any(|t| t.to_lowercase().contains(&needle)))
        });
    let (mut total, mut page) = (0, Vec::new());
    for run in matching {
        if total >= query.offset && page.len() < limit {
            page.push(&**run);
        }
        total += 1;
    }
    Ok(axum::Json(json!({
        "generation": runs.generation,
        "total": total,
        "cut": runs.cut,
        "roots": app.index.roots(),
        "runs": page,
    }))
    .into_response())
}

#[derive(Deserialize)]
struct IdQuery {
    id: String,
}

async fn run(State(app): State<Arc<App>>, Query(query): Query<IdQuery>) -> Reply {
    let runs = app.index.read();
    let run = runs
        .by_id
        .get(&query.id)
        .ok_or_else(|| ViewError::NotFound(format!("no run `{}`", query.id.escape_debug())))?;
    // Its subagents and its forks' children, oldest first.
    let children: Vec<&crate::index::Run> = runs
        .order
        .iter()
        .rev()
        .filter_map(|id| runs.by_id.get(id))
        .filter(|child| child.parent.as_deref() == Some(query.id.as_str()))
        .map(|child| &**child)
        .collect();
    let mut body = serde_json::to_value(&**run).map_err(|err| ViewError::Io(err.to_string()))?;
    body["children"] = json!(children);
    Ok(axum::Json(body).into_response())
}

#[derive(Deserialize)]
struct EventsQuery {
    id: String,
    #[serde(default)]
    from: u64,
    limit: Option<usize>,
}

async fn events(State(app): State<Arc<App>>, Query(query): Query<EventsQuery>) -> Reply {
    let dir = run_dir(&app, &query.id)?;
    let pager = app.clone();
    blocking_json(move || {
        pager
            .pager
            .page(&dir, query.from, query.limit.unwrap_or(500))
            .map_err(|err| ViewError::Io(format!("{}: {err}", dir.display())))
    })
    .await
}

#[derive(Deserialize)]
struct FollowQuery {
    id: String,
    line: u64,
}

async fn follow_run(State(app): State<Arc<App>>, Query(query): Query<FollowQuery>) -> Reply {
    let dir = run_dir(&app, &query.id)?;
    let (reader, at) = (app.clone(), dir.clone());
    let offset = blocking(move || {
        reader
            .pager
            .offset_of(&at, query.line)
            .map_err(|err| ViewError::Io(format!("{}: {err}", at.display())))
    })
    .await?;
    let stream = follow::stream(dir.join("events.jsonl"), query.line, offset).map(|message| {
        Ok::<_, std::convert::Infallible>(match message {
            follow::Message::Events(data) => Event::default().event("events").data(data),
            follow::Message::End => Event::default().event("end").data("{}"),
            follow::Message::Gone => Event::default().event("gone").data("{}"),
        })
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

async fn steps(State(app): State<Arc<App>>, Query(query): Query<IdQuery>) -> Reply {
    let dir = run_dir(&app, &query.id)?;
    blocking_json(move || workspace::steps(&dir)).await
}

#[derive(Deserialize)]
struct StepQuery {
    id: String,
    step: u64,
    path: Option<String>,
}

#[derive(Deserialize)]
struct TreeQuery {
    id: String,
    step: u64,
    /// The previous page's `next`.
    after: Option<String>,
    /// Entries a page, 1 to 20000 (2000 when absent).
    limit: Option<usize>,
    /// Only what changed against the step before.
    #[serde(default)]
    changed: bool,
}

async fn tree(State(app): State<Arc<App>>, Query(query): Query<TreeQuery>) -> Reply {
    let dir = run_dir(&app, &query.id)?;
    let limit = query.limit.unwrap_or(2000);
    if !(1..=20_000).contains(&limit) {
        return Err(ViewError::BadRequest(format!(
            "limit: {limit} entries a page; it must be 1 to 20000"
        )));
    }
    let page = workspace::TreePage {
        after: query.after,
        limit,
        changed_only: query.changed,
    };
    blocking_json(move || workspace::tree(&dir, query.step, &page)).await
}

async fn file(State(app): State<Arc<App>>, Query(query): Query<StepQuery>) -> Reply {
    let dir = run_dir(&app, &query.id)?;
    let path = query.path.ok_or_else(|| {
        ViewError::BadRequest("`path` is required: the file's path in the workspace".into())
    })?;
    blocking_json(move || workspace::file(&dir, query.step, &path)).await
}

#[derive(Deserialize)]
struct BlobQuery {
    id: String,
    sha256: String,
}

/// How much of a blob `/api/blob` sends.
const BLOB_SHOWN: u64 = 4 * 1024 * 1024;

/// A blob of a session's log (a long message or output), as text; at most 4 MiB of it, and
/// only when all of it hashes to its name.
async fn blob(State(app): State<Arc<App>>, Query(query): Query<BlobQuery>) -> Reply {
    let dir = run_dir(&app, &query.id)?;
    let sha = query.sha256;
    if !(sha.len() == 64
        && sha
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    {
        return Err(ViewError::BadRequest(format!(
            "`{}` is not a sha256 (64 lowercase hex digits)",
            sha.escape_debug()
        )));
    }
    let bytes = blocking(move || {
        let blob = workspace::read_blob(&dir, &sha, BLOB_SHOWN).map_err(ViewError::NotFound)?;
        if !blob.verified {
            return Err(ViewError::BadRequest(format!(
                "blob {sha} does not hash to its name: the log was altered, and it is not shown"
            )));
        }
        Ok(blob.bytes)
    })
    .await?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

/// The folder of the run `id` names, whatever its kind.
fn run_dir(app: &App, id: &str) -> Result<std::path::PathBuf, ViewError> {
    dir_of(app, id).map(|(dir, _)| dir)
}

fn batch_dir(app: &App, id: &str) -> Result<std::path::PathBuf, ViewError> {
    match dir_of(app, id)? {
        (dir, Some(Kind::Batch)) => Ok(dir),
        _ => Err(ViewError::BadRequest(format!(
            "`{}` is not a batch",
            id.escape_debug()
        ))),
    }
}

async fn batch_grid(State(app): State<Arc<App>>, Query(query): Query<IdQuery>) -> Reply {
    let dir = batch_dir(&app, &query.id)?;
    let reader = app.clone();
    let grid = blocking(move || reader.grid(&query.id, &dir)).await?;
    Ok(axum::Json(&*grid).into_response())
}

#[derive(Deserialize)]
struct ChartQuery {
    id: String,
    name: String,
}

async fn chart(State(app): State<Arc<App>>, Query(query): Query<ChartQuery>) -> Reply {
    let dir = batch_dir(&app, &query.id)?;
    let reader = app.clone();
    let svg = blocking(move || {
        let grid = reader.grid(&query.id, &dir)?;
        if query.name != "tool-latency" {
            return charts::svg(&grid, &query.name);
        }
        // The finished trials' logs: their calls are final.
        let dirs: Vec<std::path::PathBuf> = grid
            .rows
            .iter()
            .flat_map(|row| &row.cells)
            .filter(|cell| matches!(cell.state, "passed" | "failed"))
            .filter_map(|cell| cell.run.as_deref())
            .filter_map(|run| reader.index.dir_of(run).map(|(dir, _)| dir))
            .collect();
        Ok(charts::tool_latency(&reader.latencies.spreads(&dirs)))
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response())
}

async fn compare_runs(
    State(app): State<Arc<App>>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Reply {
    let ids: Vec<String> = pairs
        .into_iter()
        .filter(|(k, _)| k == "id")
        .map(|(_, v)| v)
        .collect();
    if ids.len() < 2 {
        return Err(ViewError::BadRequest(
            "compare needs two batches or more: `?id=A&id=B`".into(),
        ));
    }
    let sides: Vec<(String, std::path::PathBuf)> = ids
        .into_iter()
        .map(|id| batch_dir(&app, &id).map(|dir| (id, dir)))
        .collect::<Result<_, _>>()?;
    let reader = app.clone();
    blocking_json(move || compare::grid(&reader.index.read(), &sides)).await
}

#[derive(Deserialize)]
struct PairQuery {
    a: String,
    b: String,
}

async fn trajectories(State(app): State<Arc<App>>, Query(query): Query<PairQuery>) -> Reply {
    let (a_dir, b_dir) = (run_dir(&app, &query.a)?, run_dir(&app, &query.b)?);
    blocking_json(move || {
        let a = compare::trajectory(&query.a, &a_dir)?;
        let b = compare::trajectory(&query.b, &b_dir)?;
        let divergence = compare::first_divergence(&a.steps, &b.steps);
        Ok(compare::Pair { a, b, divergence })
    })
    .await
}

#[derive(Deserialize)]
struct SearchQuery {
    q: String,
    limit: Option<usize>,
}

async fn search_runs(State(app): State<Arc<App>>, Query(query): Query<SearchQuery>) -> Reply {
    let query_text = query.q.trim().to_owned();
    if query_text.is_empty() {
        return Err(ViewError::BadRequest(
            "`q` is empty: give the text to look for".into(),
        ));
    }
    let targets: Vec<search::Target> = {
        let runs = app.index.read();
        runs.order
            .iter()
            .filter_map(|id| runs.by_id.get(id))
            .map(|run| search::Target {
                id: run.id.clone(),
                name: run.name.clone(),
                task: run.summary.task.clone(),
                dir: run.dir.clone(),
                session: run.summary.kind == Some(Kind::Session),
            })
            .collect()
    };
    let limit = query.limit.unwrap_or(200).min(2000);
    blocking_json(move || {
        Ok(search::search(
            &targets,
            &query_text,
            limit,
            Duration::from_secs(10),
        ))
    })
    .await
}

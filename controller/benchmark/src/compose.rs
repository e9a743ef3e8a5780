//! The part of `docker-compose.yaml` that benchmark tasks use: services built or pulled, with
//! environment, command, healthcheck, `depends_on` (started, healthy, completed), bind mounts
//! and CPU/memory limits. Variables (`${VAR}`, `${VAR:-default}`, `$VAR`, `$$`) come from the
//! harness's set, the task's own (`[environment.env]`, the compose folder's `.env`) and the
//! host variables the operator named (`--task-env`); never from the rest of the host. A task
//! is someone else's: bind mounts and build contexts stay inside its folder (links included),
//! binds are read-only and never a socket or a device. Any other key is refused, named.

mod service;
mod text;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Context, InputError, TaskResult, bail, refusal};
use crate::paths::TaskRoot;
use serde_norway::Value;

use service::service;
use text::dot_env;
pub use text::{interpolate, split_words};

/// How a service that another depends on must be before that one starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    Started,
    Healthy,
    CompletedSuccessfully,
}

/// A container healthcheck.
#[derive(Debug, Clone, PartialEq)]
pub struct Healthcheck {
    /// As Docker takes it: `["CMD", …]`, `["CMD-SHELL", "…"]` or `["NONE"]`.
    pub test: Vec<String>,
    pub interval: Option<Duration>,
    pub timeout: Option<Duration>,
    pub retries: Option<i64>,
    pub start_period: Option<Duration>,
}

/// How to build a service's image.
#[derive(Debug, Clone, PartialEq)]
pub struct Build {
    pub context: PathBuf,
    /// The Dockerfile's path (absolute).
    pub dockerfile: PathBuf,
    pub args: BTreeMap<String, String>,
}

/// One service.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Service {
    pub name: String,
    pub image: Option<String>,
    pub build: Option<Build>,
    pub environment: BTreeMap<String, String>,
    pub command: Option<Vec<String>>,
    pub entrypoint: Option<Vec<String>>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    pub healthcheck: Option<Healthcheck>,
    pub depends_on: Vec<(String, Condition)>,
    /// `host:container[:ro]` bind mounts, host paths absolute.
    pub binds: Vec<String>,
    pub cpus: Option<f64>,
    pub memory_bytes: Option<i64>,
}

/// The services of a compose file.
#[derive(Debug, Clone, PartialEq)]
pub struct Compose {
    pub services: BTreeMap<String, Service>,
    /// Keys read but not applied (ports: every service is reachable on the task's network).
    pub warnings: Vec<String>,
}

/// Reads a compose file of the task in `task_dir` with `vars` for interpolation (after the
/// `.env` beside it, which they override).
pub fn load(file: &Path, vars: &BTreeMap<String, String>, task_dir: &Path) -> TaskResult<Compose> {
    // The file and its `.env` are the task's own, never a link out of its folder.
    let task_root = TaskRoot::of(task_dir)?;
    task_root.check(file)?;
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let base = file.parent().unwrap_or(Path::new("."));
    let dot_env_file = base.join(".env");
    task_root.check(&dot_env_file)?;
    let mut all = dot_env(&dot_env_file)?;
    all.extend(vars.iter().map(|(k, v)| (k.clone(), v.clone())));
    let text = interpolate(&text, &all);
    let root: Value =
        serde_norway::from_str(&text).with_context(|| format!("{}: not YAML", file.display()))?;
    let place = Place {
        base,
        root: &task_root,
    };
    let in_file = |err: InputError| err.after(file.display().to_string());
    let mapping = root
        .as_mapping()
        .ok_or_else(|| refusal!("{}: not a mapping", file.display()))?;
    let mut warnings = Vec::new();
    for key in mapping.keys().filter_map(Value::as_str) {
        match key {
            "services" | "version" | "name" | "networks" => {}
            _ if key.starts_with("x-") => {}
            "volumes" => bail!(
                "{}: top-level `volumes` (named volumes) are not supported",
                file.display()
            ),
            other => bail!("{}: top-level `{other}` is not supported", file.display()),
        }
    }
    let services = mapping
        .get("services")
        .and_then(Value::as_mapping)
        .ok_or_else(|| refusal!("{}: no `services`", file.display()))?;
    let mut out = BTreeMap::new();
    for (name, body) in services {
        let name = name.as_str().unwrap_or_default().to_owned();
        let service = service(&name, body, &place, &mut warnings).map_err(in_file)?;
        out.insert(name, service);
    }
    for service in out.values() {
        for (dependency, _) in &service.depends_on {
            if !out.contains_key(dependency) {
                bail!(
                    "{}: services.{}.depends_on names `{dependency}`, which is not a service",
                    file.display(),
                    service.name
                );
            }
        }
    }
    Ok(Compose {
        services: out,
        warnings,
    })
}

/// Where a compose file's paths start, and the task folder they must stay inside.
struct Place<'a> {
    base: &'a Path,
    root: &'a TaskRoot,
}

impl Place<'_> {
    /// `path` (relative to the compose file's folder), resolved through every link, when it
    /// stays inside the task folder.
    fn inside(&self, path: &str, at: &str) -> TaskResult<PathBuf> {
        self.root
            .resolve(&self.base.join(path), &format!("{at}: `{path}`"))
    }
}

#[cfg(test)]
mod tests;

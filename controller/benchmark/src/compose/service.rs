//! One service of a compose file, key by key: what it runs, how it is built, its
//! environment, healthcheck, dependencies, bind mounts and limits.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Build, Condition, Healthcheck, Place, Service, split_words};
use crate::error::{Context, TaskResult, bail, refusal};
use serde_norway::Value;

const SERVICE_KEYS: &[&str] = &[
    "image",
    "build",
    "environment",
    "command",
    "entrypoint",
    "working_dir",
    "user",
    "healthcheck",
    "depends_on",
    "expose",
    "volumes",
    "deploy",
    "container_name",
    "tty",
    "stdin_open",
    "platform",
    "restart",
    "networks",
    "ports",
    "init",
    "hostname",
    "mem_limit",
    "cpus",
    "pull_policy",
];

/// One service of `services`, each key read by its own reader; a key this harness does not
/// know is refused, named.
pub(super) fn service(
    name: &str,
    body: &Value,
    place: &Place<'_>,
    warnings: &mut Vec<String>,
) -> TaskResult<Service> {
    let map = body
        .as_mapping()
        .ok_or_else(|| refusal!("services.{name}: not a mapping"))?;
    let mut service = Service {
        name: name.to_owned(),
        ..Service::default()
    };
    for (key, value) in map {
        let key = key.as_str().unwrap_or_default();
        let at = format!("services.{name}.{key}");
        match key {
            "image" => service.image = Some(string(value, &at)?),
            "build" => service.build = Some(build(value, place, &at)?),
            "environment" => service.environment = environment(value, &at)?,
            "command" => service.command = Some(words(value, &at)?),
            "entrypoint" => service.entrypoint = Some(words(value, &at)?),
            "working_dir" => service.working_dir = Some(string(value, &at)?),
            "user" => service.user = Some(string(value, &at)?),
            "healthcheck" => service.healthcheck = Some(healthcheck(value, &at)?),
            "depends_on" => service.depends_on = depends_on(value, &at)?,
            "volumes" => service.binds = binds(value, place, &at)?,
            "deploy" => limits(value, &mut service, &at)?,
            "mem_limit" => service.memory_bytes = Some(bytes(value, &at)?),
            "cpus" => {
                service.cpus = Some(
                    value
                        .as_f64()
                        .or_else(|| string(value, &at).ok()?.parse().ok())
                        .ok_or_else(|| refusal!("{at}: expected a number"))?,
                )
            }
            "ports" => warnings.push(format!(
                "{at}: not published; services reach each other on the task's network"
            )),
            _ if SERVICE_KEYS.contains(&key) => {}
            other => bail!("services.{name}.{other}: not supported by this harness"),
        }
    }
    if service.image.is_none() && service.build.is_none() && name != "main" {
        bail!("services.{name}: needs `image` or `build`");
    }
    Ok(service)
}

fn string(value: &Value, at: &str) -> TaskResult<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        _ => bail!("{at}: expected a string"),
    }
}

fn build(value: &Value, place: &Place<'_>, at: &str) -> TaskResult<Build> {
    let (context, dockerfile, args) = match value {
        Value::String(context) => (context.clone(), "Dockerfile".to_owned(), BTreeMap::new()),
        Value::Mapping(map) => {
            for key in map.keys().filter_map(Value::as_str) {
                if !matches!(key, "context" | "dockerfile" | "args") {
                    bail!("{at}.{key}: not supported by this harness");
                }
            }
            let get = |k: &str| {
                map.get(k)
                    .map(|v| string(v, &format!("{at}.{k}")))
                    .transpose()
            };
            let args = match map.get("args") {
                Some(args) => environment(args, &format!("{at}.args"))?,
                None => BTreeMap::new(),
            };
            (
                get("context")?.unwrap_or_else(|| ".".to_owned()),
                get("dockerfile")?.unwrap_or_else(|| "Dockerfile".to_owned()),
                args,
            )
        }
        _ => bail!("{at}: expected a path or a mapping"),
    };
    let context = place.inside(&context, &format!("{at}.context"))?;
    let dockerfile_at = context.join(&dockerfile);
    if !dockerfile_at.is_file() {
        bail!("{at}: no Dockerfile at {}", dockerfile_at.display());
    }
    let dockerfile = place.inside(
        &dockerfile_at.to_string_lossy(),
        &format!("{at}.dockerfile"),
    )?;
    Ok(Build {
        context,
        dockerfile,
        args,
    })
}

/// `["K=V", …]` or `{K: V}`.
fn environment(value: &Value, at: &str) -> TaskResult<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    match value {
        Value::Sequence(items) => {
            for item in items {
                let text = string(item, at)?;
                let (key, value) = text.split_once('=').unwrap_or((&text, ""));
                out.insert(key.to_owned(), value.to_owned());
            }
        }
        Value::Mapping(map) => {
            for (key, value) in map {
                let value = if value.is_null() {
                    String::new()
                } else {
                    string(value, at)?
                };
                out.insert(string(key, at)?, value);
            }
        }
        Value::Null => {}
        _ => bail!("{at}: expected a list of K=V or a mapping"),
    }
    Ok(out)
}

/// A command or entrypoint: a list, or a string split as compose splits it (quotes honoured).
fn words(value: &Value, at: &str) -> TaskResult<Vec<String>> {
    match value {
        Value::Sequence(items) => items.iter().map(|i| string(i, at)).collect(),
        Value::String(text) => {
            split_words(text).ok_or_else(|| refusal!("{at}: an unbalanced quote"))
        }
        Value::Null => Ok(Vec::new()),
        _ => bail!("{at}: expected a list or a string"),
    }
}

fn duration(value: &Value, at: &str) -> TaskResult<Duration> {
    let text = string(value, at)?;
    humantime::parse_duration(&text)
        .with_context(|| format!("{at}: `{text}` is not a duration like 5s or 1m30s"))
}

fn healthcheck(value: &Value, at: &str) -> TaskResult<Healthcheck> {
    let map = value
        .as_mapping()
        .ok_or_else(|| refusal!("{at}: not a mapping"))?;
    let mut check = Healthcheck {
        test: Vec::new(),
        interval: None,
        timeout: None,
        retries: None,
        start_period: None,
    };
    for (key, value) in map {
        let key = key.as_str().unwrap_or_default();
        let here = format!("{at}.{key}");
        match key {
            "test" => {
                check.test = match value {
                    Value::String(shell) => vec!["CMD-SHELL".to_owned(), shell.clone()],
                    other => words(other, &here)?,
                }
            }
            "interval" => check.interval = Some(duration(value, &here)?),
            "timeout" => check.timeout = Some(duration(value, &here)?),
            "start_period" | "start_interval" => check.start_period = Some(duration(value, &here)?),
            "retries" => check.retries = value.as_i64(),
            "disable" => check.test = vec!["NONE".to_owned()],
            other => bail!("{at}.{other}: not supported by this harness"),
        }
    }
    Ok(check)
}

fn depends_on(value: &Value, at: &str) -> TaskResult<Vec<(String, Condition)>> {
    match value {
        Value::Sequence(items) => items
            .iter()
            .map(|i| Ok((string(i, at)?, Condition::Started)))
            .collect(),
        Value::Mapping(map) => map
            .iter()
            .map(|(name, spec)| {
                let name = string(name, at)?;
                let condition = match spec.get("condition").and_then(Value::as_str) {
                    None | Some("service_started") => Condition::Started,
                    Some("service_healthy") => Condition::Healthy,
                    Some("service_completed_successfully") => Condition::CompletedSuccessfully,
                    Some(other) => {
                        bail!("{at}.{name}.condition: `{other}` is not a condition compose knows")
                    }
                };
                Ok((name, condition))
            })
            .collect(),
        _ => bail!("{at}: expected a list or a mapping"),
    }
}

/// Bind mounts (`./x:/y`), inside the task's folder only, read-only, never a socket or a
/// device; named volumes are refused. A mount whose host side is empty (an unset variable, as
/// TB1's log folders are without its harness) is skipped.
fn binds(value: &Value, place: &Place<'_>, at: &str) -> TaskResult<Vec<String>> {
    let items = value
        .as_sequence()
        .ok_or_else(|| refusal!("{at}: expected a list"))?;
    let mut out = Vec::new();
    for item in items {
        let text = string(item, at)?;
        let mut parts = text.splitn(3, ':');
        let (host, container, mode) =
            (parts.next().unwrap_or_default(), parts.next(), parts.next());
        let Some(container) = container.filter(|c| !c.is_empty()) else {
            continue;
        };
        if host.is_empty() {
            continue;
        }
        if !host.starts_with('.') && !host.starts_with('/') {
            bail!(
                "{at}: `{text}` is a named volume, which is not supported (bind a folder instead)"
            );
        }
        let host = place.inside(host, &format!("{at}: `{text}`"))?;
        let kind = std::fs::metadata(&host)
            .with_context(|| format!("{at}: `{text}`"))?
            .file_type();
        {
            use std::os::unix::fs::FileTypeExt;
            if kind.is_socket() || kind.is_block_device() || kind.is_char_device() || kind.is_fifo()
            {
                bail!("{at}: `{text}` is a socket, a device or a pipe, which a task may not mount");
            }
        }
        if mode.is_some_and(|m| m.split(',').any(|o| o == "rw")) {
            bail!("{at}: `{text}` asks to be writable: a task's binds are read-only");
        }
        out.push(format!("{}:{container}:ro", host.display()));
    }
    Ok(out)
}

fn bytes(value: &Value, at: &str) -> TaskResult<i64> {
    if let Some(n) = value.as_i64() {
        return Ok(n);
    }
    let text = string(value, at)?.to_ascii_lowercase();
    let trimmed = text.trim_end_matches('b');
    let (digits, unit) = trimmed.split_at(trimmed.trim_end_matches(char::is_alphabetic).len());
    let value: f64 = digits
        .parse()
        .with_context(|| format!("{at}: `{text}` is not a size"))?;
    let factor = match unit {
        "" => 1.0,
        "k" => 1024.0,
        "m" => 1024.0 * 1024.0,
        "g" => 1024.0 * 1024.0 * 1024.0,
        other => bail!("{at}: unknown unit `{other}`"),
    };
    Ok((value * factor) as i64)
}

/// `deploy.resources.limits.{cpus, memory}`; other `deploy` keys are ignored.
fn limits(value: &Value, service: &mut Service, at: &str) -> TaskResult<()> {
    let Some(limits) = value.get("resources").and_then(|r| r.get("limits")) else {
        return Ok(());
    };
    if let Some(cpus) = limits.get("cpus") {
        service.cpus = cpus
            .as_f64()
            .or_else(|| string(cpus, at).ok()?.parse().ok());
    }
    if let Some(memory) = limits.get("memory") {
        service.memory_bytes = Some(bytes(memory, &format!("{at}.resources.limits.memory"))?);
    }
    Ok(())
}

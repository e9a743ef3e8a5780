//! Harbor tasks: `task.toml`, `instruction.md`, `environment/` (a Dockerfile or
//! `docker-compose.yaml`, or `[environment] docker_image`), `tests/test.sh`, and maybe
//! `solution/solve.sh`; or a multi-step task's `[[steps]]` with their `steps/<name>/` folders
//! ([`steps`]). Keys this harness does not use are warned about, not refused: Harbor's schema
//! moves. What it cannot run (a Windows task, a separate verifier environment) is refused with
//! why.

mod steps;

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Context, InputError, TaskResult, bail, refusal};
use crate::paths::{TaskFile, TaskRoot, check_task};
use toml::Value;

use super::{
    BenchTask, DEFAULT_AGENT_TIMEOUT, DEFAULT_BUILD_TIMEOUT, DEFAULT_VERIFIER_TIMEOUT, Environment,
    Format, MainImage, Resources, Solution, Verifier, digest, expand_host_vars, seconds,
};
use steps::TaskDefaults;

const TOP_KEYS: &[&str] = &[
    "schema_version",
    "version",
    "source",
    "artifacts",
    "task",
    "metadata",
    "verifier",
    "agent",
    "environment",
    "solution",
    "steps",
    "multi_step_reward_strategy",
];
/// `[agent]`'s keys, a step's `[steps.agent]` too.
const AGENT_KEYS: &[&str] = &["timeout_sec", "user", "network_mode", "allowed_hosts"];
/// `[verifier]`'s keys, a step's `[steps.verifier]` too.
const VERIFIER_KEYS: &[&str] = &[
    "timeout_sec",
    "env",
    "user",
    "network_mode",
    "allowed_hosts",
    "environment_mode",
    "environment",
    "collect",
];
const SOLUTION_KEYS: &[&str] = &["env"];
const ENVIRONMENT_KEYS: &[&str] = &[
    "build_timeout_sec",
    "docker_image",
    "os",
    "cpus",
    "memory_mb",
    "storage_mb",
    "gpus",
    "env",
    "workdir",
    "network_mode",
    "allowed_hosts",
    "allow_internet",
    "healthcheck",
    "skills_dir",
    "gpu_types",
    "tpu",
    "memory",
    "storage",
    "mcp_servers",
];

/// Loads a Harbor task folder. Every file it reads or uploads must lie inside the folder,
/// links followed ([`crate::paths`]).
pub fn load(dir: &Path, name: &str, host: &super::HostVars) -> TaskResult<BenchTask> {
    let file = TaskFile::open(dir, name, host, "task.toml")?;
    let config = read_config(&file)?;
    let mut warnings = Vec::new();
    let sections = sections(&config, &mut warnings);
    let in_file = |err: InputError| err.after(file.path.display().to_string());
    // Before the files a Linux task needs: a Windows task is refused for what it is.
    check_os(&sections.environment).map_err(in_file)?;
    steps::shared_verifier(&sections.verifier, "verifier").map_err(in_file)?;
    let multi_step = config
        .get("steps")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty());
    let tests = dir.join("tests");
    if !multi_step && !tests.join("test.sh").is_file() {
        bail!("{}: no tests/test.sh (the verifier)", dir.display());
    }
    let (solution, solution_env) = root_solution(dir, &sections.solution, host);
    unapplied_features(&config, &sections.environment, &mut warnings);
    let network = steps::networks(&sections.environment, &sections.agent, &sections.verifier)
        .map_err(in_file)?;
    let defaults = TaskDefaults {
        dir,
        root: &file.root,
        agent: &sections.agent,
        verifier: &sections.verifier,
        networks: &network,
        solution: solution.as_ref(),
        solution_env,
        host,
    };
    let (steps, reward_strategy) =
        steps::steps(&config, &defaults, &mut warnings).map_err(in_file)?;
    let agent_user = user(&sections.agent);
    one_agent_user(&steps, agent_user.as_deref()).map_err(in_file)?;
    // A multi-step task's prompt is its first step's; its root instruction.md is not used.
    let instruction = match steps.first() {
        Some(step) => step.instruction.clone(),
        None => instruction_in(&dir.join("instruction.md"), &file.root)?,
    };
    let solution = oracle(&steps, solution);
    let parts = Parts {
        instruction,
        tests,
        network,
        agent_user,
        solution,
        steps,
        reward_strategy,
        warnings,
    };
    let task = assemble(&file, &config, &sections, parts)?;
    check_task(&task, &file.root)?;
    Ok(task)
}

/// Reads and parses `task.toml`, refused naming the file.
fn read_config(file: &TaskFile<'_>) -> TaskResult<toml::Table> {
    let text = file.text()?;
    toml::from_str(&text).with_context(|| format!("{}: not valid TOML", file.path.display()))
}

/// The task's own `solution/solve.sh`, if it has one, and `[solution.env]`. The env is
/// returned apart too: steps with their own solution take it as well.
fn root_solution(
    dir: &Path,
    solution: &toml::Table,
    host: &super::HostVars,
) -> (Option<Solution>, BTreeMap<String, String>) {
    let solution_dir = dir.join("solution");
    let solution_env = env_table(solution, "env", host);
    let solution = solution_dir.join("solve.sh").is_file().then(|| Solution {
        dir: solution_dir,
        only: None,
        mount: "/solution".to_owned(),
        script: "/solution/solve.sh".to_owned(),
        env: solution_env.clone(),
    });
    (solution, solution_env)
}

/// Refuses steps whose agent runs as another user than the task's: the task's containers
/// start once, for one agent user.
fn one_agent_user(steps: &[super::Step], agent_user: Option<&str>) -> TaskResult<()> {
    if let Some(step) = steps.iter().find(|s| s.agent_user.as_deref() != agent_user) {
        return Err(refusal!(
            "steps.{}.agent.user: every step's agent runs as the task's one user here ({}), not `{}`",
            step.name,
            agent_user.unwrap_or("the image's"),
            step.agent_user.as_deref().unwrap_or("the image's")
        ));
    }
    Ok(())
}

/// The solution the oracle runs: the task's for a task of one step, the first step's when
/// every step has one, else none (the oracle of a multi-step task needs a solution for
/// every step).
fn oracle(steps: &[super::Step], solution: Option<Solution>) -> Option<Solution> {
    match steps.iter().all(|s| s.solution.is_some()) {
        true if !steps.is_empty() => steps[0].solution.clone(),
        _ if steps.is_empty() => solution,
        _ => None,
    }
}

/// What [`load`] has worked out before the task is put together.
struct Parts {
    instruction: String,
    tests: std::path::PathBuf,
    network: super::Networks,
    agent_user: Option<String>,
    solution: Option<Solution>,
    steps: Vec<super::Step>,
    reward_strategy: super::RewardStrategy,
    warnings: Vec<String>,
}

/// Puts the task together from `parts` and the sections' other keys. Its own step because
/// the task has many fields; they are read in this order, which decides the error a task
/// with several faults is refused for.
fn assemble(
    file: &TaskFile<'_>,
    config: &toml::Table,
    sections: &Sections,
    parts: Parts,
) -> TaskResult<BenchTask> {
    let (dir, host) = (file.dir, file.host);
    let in_file = |err: InputError| err.after(file.path.display().to_string());
    let Sections {
        agent,
        verifier,
        environment,
        ..
    } = sections;
    let mut warnings = parts.warnings;
    Ok(BenchTask {
        name: file.name.to_owned(),
        dir: dir.to_owned(),
        format: Format::Harbor,
        instruction: parts.instruction,
        environment: environment_of(dir, environment).map_err(in_file)?,
        agent_timeout: timeout(agent, "agent.timeout_sec", DEFAULT_AGENT_TIMEOUT)
            .map_err(in_file)?,
        verifier_timeout: timeout(verifier, "verifier.timeout_sec", DEFAULT_VERIFIER_TIMEOUT)
            .map_err(in_file)?,
        build_timeout: timeout(
            environment,
            "environment.build_timeout_sec",
            DEFAULT_BUILD_TIMEOUT,
        )
        .map_err(in_file)?,
        resources: resources(environment, &mut warnings).map_err(in_file)?,
        network: parts.network,
        workdir: environment
            .get("workdir")
            .and_then(Value::as_str)
            .map(str::to_owned),
        env: env_table(environment, "env", host),
        verifier_env: env_table(verifier, "env", host),
        agent_user: parts.agent_user,
        verifier_user: user(verifier),
        verifier: Verifier::Harbor { tests: parts.tests },
        solution: parts.solution,
        metadata: config
            .get("metadata")
            .and_then(|m| serde_json::to_value(m).ok())
            .unwrap_or(serde_json::Value::Null),
        digest: digest(dir, Format::Harbor)?,
        host_vars: host.clone(),
        healthcheck: steps::healthcheck(
            environment.get("healthcheck"),
            "environment.healthcheck",
            &mut warnings,
        )
        .map_err(in_file)?,
        collect: steps::collect(verifier, "verifier").map_err(in_file)?,
        warnings,
        steps: parts.steps,
        reward_strategy: parts.reward_strategy,
    })
}

/// Features a task may ask for that this harness does not give it, as warnings.
fn unapplied_features(config: &toml::Table, environment: &toml::Table, warnings: &mut Vec<String>) {
    if environment
        .get("mcp_servers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        warnings.push("environment.mcp_servers: not given to the agent yet".to_owned());
    }
    for (key, why) in [
        (
            "skills_dir",
            "skills are not installed into the agent from a task",
        ),
        ("gpu_types", "GPUs are not given to task containers"),
        ("tpu", "TPUs are not given to task containers"),
    ] {
        if environment.contains_key(key) {
            warnings.push(format!("environment.{key}: {why}"));
        }
    }
    if config
        .get("artifacts")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        warnings.push(
            "artifacts: only /logs/artifacts is collected (into the trial's artifacts/)".to_owned(),
        );
    }
}

/// The sections this harness reads, each checked for keys it does not use.
struct Sections {
    agent: toml::Table,
    verifier: toml::Table,
    solution: toml::Table,
    environment: toml::Table,
}

fn sections(config: &toml::Table, warnings: &mut Vec<String>) -> Sections {
    unknown_keys(config, TOP_KEYS, "", warnings);
    let mut section = |key: &str, known: &[&str]| {
        let table = config
            .get(key)
            .and_then(Value::as_table)
            .cloned()
            .unwrap_or_default();
        unknown_keys(&table, known, &format!("{key}."), warnings);
        table
    };
    Sections {
        agent: section("agent", AGENT_KEYS),
        verifier: section("verifier", VERIFIER_KEYS),
        solution: section("solution", SOLUTION_KEYS),
        environment: section("environment", ENVIRONMENT_KEYS),
    }
}

/// `user`: a name or a uid.
fn user(table: &toml::Table) -> Option<String> {
    match table.get("user")? {
        Value::String(name) => Some(name.clone()),
        Value::Integer(uid) => Some(uid.to_string()),
        _ => None,
    }
}

fn unknown_keys(table: &toml::Table, known: &[&str], prefix: &str, warnings: &mut Vec<String>) {
    for key in table.keys().filter(|k| !known.contains(&k.as_str())) {
        warnings.push(format!("{prefix}{key}: not used by this harness"));
    }
}

/// An instruction file (`instruction.md`) of the task in `root`, with leading canary lines
/// (`<!-- … canary … -->`, `# … canary …`) and the blank lines after them removed, as Harbor
/// does. It becomes the prompt, so it must be the task's own file (not a link out of it).
fn instruction_in(path: &Path, root: &TaskRoot) -> TaskResult<String> {
    root.check(path)?;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = text.lines().peekable();
    let is_canary = |line: &str| {
        let lower = line.trim().to_ascii_lowercase();
        lower.contains("canary")
            && ((lower.starts_with("<!--") && lower.ends_with("-->")) || lower.starts_with('#'))
    };
    let mut skipped = false;
    while lines.peek().is_some_and(|l| is_canary(l)) {
        lines.next();
        skipped = true;
    }
    if skipped {
        while lines.peek().is_some_and(|l| l.trim().is_empty()) {
            lines.next();
        }
    }
    let body: Vec<&str> = lines.collect();
    let instruction = body.join("\n");
    if instruction.trim().is_empty() {
        bail!("{}: empty", path.display());
    }
    Ok(instruction)
}

fn number(table: &toml::Table, key: &str) -> Option<f64> {
    match table.get(key)? {
        Value::Integer(n) => Some(*n as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    }
}

fn timeout(
    table: &toml::Table,
    key: &str,
    default: std::time::Duration,
) -> TaskResult<std::time::Duration> {
    let short = key.rsplit('.').next().unwrap_or(key);
    match (table.get(short), number(table, short)) {
        (None, _) => Ok(default),
        (Some(_), Some(value)) => seconds(value, key),
        (Some(other), None) => bail!("{key}: expected a number of seconds, got {other}"),
    }
}

fn env_table(table: &toml::Table, key: &str, host: &super::HostVars) -> BTreeMap<String, String> {
    table
        .get(key)
        .and_then(Value::as_table)
        .map(|env| {
            env.iter()
                .map(|(k, v)| {
                    let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                    (k.clone(), expand_host_vars(&text, host))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `cpus`, `memory_mb` (or the legacy `memory = "2G"`), `storage_mb`, `gpus`; Harbor 0.1's
/// 1 CPU and 2048 MB when absent.
fn resources(environment: &toml::Table, warnings: &mut Vec<String>) -> TaskResult<Resources> {
    let legacy_mb = |key: &str| -> TaskResult<Option<u64>> {
        let Some(text) = environment.get(key).and_then(Value::as_str) else {
            return Ok(None);
        };
        let trimmed = text.trim();
        let (digits, unit) = trimmed.split_at(trimmed.trim_end_matches(char::is_alphabetic).len());
        let value: f64 = digits
            .trim()
            .parse()
            .with_context(|| format!("environment.{key}: `{text}` is not a size"))?;
        let mb = match unit.to_ascii_uppercase().as_str() {
            "G" | "GB" => value * 1024.0,
            "M" | "MB" | "" => value,
            "K" | "KB" => value / 1024.0,
            other => bail!("environment.{key}: unknown unit `{other}` in `{text}`"),
        };
        Ok(Some(mb as u64))
    };
    let gpus = number(environment, "gpus").map(|g| g as u64);
    if gpus.is_some_and(|g| g > 0) {
        warnings.push("environment.gpus: GPUs are not given to task containers".to_owned());
    }
    Ok(Resources {
        cpus: number(environment, "cpus").or(Some(1.0)),
        memory_mb: number(environment, "memory_mb")
            .map(|m| m as u64)
            .or(legacy_mb("memory")?)
            .or(Some(2048)),
        storage_mb: number(environment, "storage_mb")
            .map(|s| s as u64)
            .or(legacy_mb("storage")?),
        gpus,
    })
}

fn check_os(environment: &toml::Table) -> TaskResult<()> {
    if let Some(os) = environment.get("os").and_then(Value::as_str)
        && !os.eq_ignore_ascii_case("linux")
    {
        bail!(
            "environment.os = {os}: only Linux tasks run here (this harness runs Linux containers)"
        );
    }
    Ok(())
}

fn environment_of(dir: &Path, environment: &toml::Table) -> TaskResult<Environment> {
    let env_dir = dir.join("environment");
    let dockerfile = env_dir.join("Dockerfile");
    let built = dockerfile
        .is_file()
        .then(|| (env_dir.clone(), dockerfile.clone()));
    let main_image = match (
        environment.get("docker_image").and_then(Value::as_str),
        &built,
    ) {
        (Some(name), _) => Some(MainImage::Prebuilt {
            name: name.to_owned(),
            fallback: built.clone(),
        }),
        (None, Some((context, dockerfile))) => Some(MainImage::Build {
            context: context.clone(),
            dockerfile: dockerfile.clone(),
        }),
        (None, None) => None,
    };
    let compose = env_dir.join("docker-compose.yaml");
    if compose.is_file() {
        return Ok(Environment::Compose {
            file: compose,
            main: "main".to_owned(),
            main_image,
        });
    }
    main_image.map(Environment::Single).ok_or_else(|| {
        refusal!(
            "no environment/Dockerfile, environment/docker-compose.yaml or [environment] docker_image"
        )
    })
}

#[cfg(test)]
mod tests;

//! Harbor's multi-step tasks (`[[steps]]`), their network policies per phase, and the
//! readiness checks and collect hooks a task may declare.
//!
//! A step is `steps/<name>/`: its `instruction.md` (required), `tests/` (over the task's shared
//! `tests/`; one of them has `test.sh`), `solution/` (else the task's), `workdir/` (copied into
//! the working folder before the step, its `setup.sh` run). `[steps.agent]` and
//! `[steps.verifier]` override the task's `[agent]` and `[verifier]`; `min_reward` stops the
//! task after a step that falls short.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::error::{Context, TaskResult, bail, refusal};
use sandbox_protocol::egress::AllowedHost;
use toml::Value;

use super::{AGENT_KEYS, VERIFIER_KEYS, env_table, instruction_in, timeout, unknown_keys, user};
use crate::{
    CollectHook, DEFAULT_VERIFIER_TIMEOUT, Healthcheck, HostVars, NetworkPolicy, Networks,
    RewardStrategy, Solution, Step,
};

const STEP_KEYS: &[&str] = &[
    "name",
    "agent",
    "verifier",
    "min_reward",
    "healthcheck",
    "artifacts",
];
const HEALTHCHECK_KEYS: &[&str] = &[
    "command",
    "interval_sec",
    "timeout_sec",
    "start_period_sec",
    "start_interval_sec",
    "retries",
];

/// A section's own `network_mode` (with `allowed_hosts`), when it sets one.
pub(super) fn policy(table: &toml::Table, section: &str) -> TaskResult<Option<NetworkPolicy>> {
    let hosts = match table.get("allowed_hosts") {
        None => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|item| {
                    let text = item.as_str().with_context(|| {
                        format!("{section}.allowed_hosts: `{item}` is not a string")
                    })?;
                    AllowedHost::parse(text)
                        .map(|host| host.text())
                        .map_err(|why| refusal!("{section}.{why}"))
                })
                .collect::<TaskResult<Vec<String>>>()?,
        ),
        Some(other) => bail!("{section}.allowed_hosts: expected a list of hosts, got {other}"),
    };
    let mode = match table.get("network_mode") {
        None => None,
        Some(Value::String(mode)) => Some(mode.as_str()),
        Some(other) => bail!("{section}.network_mode: expected a string, got {other}"),
    };
    match (mode, hosts) {
        (None, None) => Ok(None),
        (Some("allowlist"), hosts) => Ok(Some(NetworkPolicy::Allowlist(hosts.unwrap_or_default()))),
        (None | Some("public" | "no-network"), Some(_)) => {
            bail!("{section}.allowed_hosts: only with network_mode = \"allowlist\"")
        }
        (Some("public"), None) => Ok(Some(NetworkPolicy::Public)),
        (Some("no-network"), None) => Ok(Some(NetworkPolicy::NoNetwork)),
        (Some(other), _) => {
            bail!("{section}.network_mode: expected public, no-network or allowlist, got `{other}`")
        }
    }
}

/// The task's networks: `[environment]`'s (or the older `allow_internet`; public when
/// neither is set), and the `[agent]` and `[verifier]` phase overrides. A verifier without
/// its own falls back to the environment's, not the agent's, as Harbor resolves it.
pub(super) fn networks(
    environment: &toml::Table,
    agent: &toml::Table,
    verifier: &toml::Table,
) -> TaskResult<Networks> {
    let baseline = match policy(environment, "environment")? {
        Some(policy) => policy,
        None => match environment.get("allow_internet") {
            None | Some(Value::Boolean(true)) => NetworkPolicy::Public,
            Some(Value::Boolean(false)) => NetworkPolicy::NoNetwork,
            Some(other) => {
                bail!("environment.allow_internet: expected true or false, got {other}")
            }
        },
    };
    Ok(Networks {
        agent: policy(agent, "agent")?.unwrap_or_else(|| baseline.clone()),
        verifier: policy(verifier, "verifier")?.unwrap_or_else(|| baseline.clone()),
        baseline,
    })
}

/// A `healthcheck` table.
pub(super) fn healthcheck(
    value: Option<&Value>,
    section: &str,
    warnings: &mut Vec<String>,
) -> TaskResult<Option<Healthcheck>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let table = value
        .as_table()
        .with_context(|| format!("{section}: expected a table"))?;
    unknown_keys(table, HEALTHCHECK_KEYS, &format!("{section}."), warnings);
    let command = table
        .get("command")
        .and_then(Value::as_str)
        .filter(|c| !c.trim().is_empty())
        .with_context(|| format!("{section}.command: required (a shell command)"))?;
    let secs = |key: &str, default: f64| -> TaskResult<Duration> {
        timeout(
            table,
            &format!("{section}.{key}"),
            Duration::from_secs_f64(default),
        )
    };
    let retries = match table.get("retries") {
        None => 3,
        Some(Value::Integer(n)) if *n >= 1 => *n as u32,
        Some(other) => bail!("{section}.retries: expected a whole number ≥ 1, got {other}"),
    };
    Ok(Some(Healthcheck {
        command: command.to_owned(),
        interval: secs("interval_sec", 5.0)?,
        timeout: secs("timeout_sec", 30.0)?,
        start_period: secs("start_period_sec", 0.0)?,
        start_interval: secs("start_interval_sec", 5.0)?,
        retries,
    }))
}

/// `[[verifier.collect]]`.
pub(super) fn collect(verifier: &toml::Table, section: &str) -> TaskResult<Vec<CollectHook>> {
    let Some(value) = verifier.get("collect") else {
        return Ok(Vec::new());
    };
    let items = value
        .as_array()
        .with_context(|| format!("{section}.collect: expected [[{section}.collect]] tables"))?;
    items
        .iter()
        .map(|item| {
            let table = item
                .as_table()
                .with_context(|| format!("{section}.collect: expected a table"))?;
            let command = table
                .get("command")
                .and_then(Value::as_str)
                .with_context(|| format!("{section}.collect.command: required"))?;
            Ok(CollectHook {
                command: command.to_owned(),
                service: table
                    .get("service")
                    .and_then(Value::as_str)
                    .unwrap_or("main")
                    .to_owned(),
                timeout: timeout(
                    table,
                    &format!("{section}.collect.timeout_sec"),
                    Duration::from_secs(60),
                )?,
                user: user(table),
            })
        })
        .collect()
}

/// Refuses a separate verifier environment, which this harness does not start.
pub(super) fn shared_verifier(verifier: &toml::Table, section: &str) -> TaskResult<()> {
    let mode = verifier.get("environment_mode").and_then(Value::as_str);
    if mode == Some("separate") || (mode.is_none() && verifier.contains_key("environment")) {
        bail!(
            "{section}: a separate verifier environment (environment_mode = \"separate\") is not supported: the verifier runs in the agent's containers"
        );
    }
    match mode {
        None | Some("shared") => Ok(()),
        Some(other) => {
            bail!("{section}.environment_mode: expected shared or separate, got `{other}`")
        }
    }
}

/// A step's name as Harbor allows it: one portable folder name.
fn check_step_name(name: &str) -> TaskResult<()> {
    let bad_char = name
        .chars()
        .find(|c| c.is_control() || r#"/\:*?"<>|"#.contains(*c));
    let device = {
        let stem = name.split('.').next().unwrap_or("").to_ascii_uppercase();
        matches!(stem.as_str(), "CON" | "PRN" | "AUX" | "NUL")
            || (stem.len() == 4
                && (stem.starts_with("COM") || stem.starts_with("LPT"))
                && stem.as_bytes()[3].is_ascii_digit())
    };
    if name.is_empty() || name == "." || name == ".." {
        bail!("steps: a step's name must be a folder name, not `{name}`");
    }
    if let Some(c) = bad_char {
        bail!(
            "steps: the step name `{}` holds `{}`, which a folder name may not",
            name.escape_debug(),
            c.escape_debug()
        );
    }
    if name.ends_with(['.', ' ']) || name.len() > 255 || device {
        bail!("steps: the step name `{name}` is not a portable folder name");
    }
    Ok(())
}

/// `min_reward`: a number (the `reward` key's threshold) or a table of them.
fn min_reward(value: Option<&Value>, name: &str) -> TaskResult<Option<BTreeMap<String, f64>>> {
    let as_number = |value: &Value| match value {
        Value::Integer(n) => Some(*n as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    };
    match value {
        None => Ok(None),
        Some(Value::Table(table)) => table
            .iter()
            .map(|(key, value)| {
                as_number(value)
                    .map(|n| (key.clone(), n))
                    .with_context(|| format!("steps.{name}.min_reward.{key}: expected a number"))
            })
            .collect::<TaskResult<_>>()
            .map(Some),
        Some(value) => as_number(value)
            .map(|n| Some(BTreeMap::from([("reward".to_owned(), n)])))
            .with_context(|| {
                format!("steps.{name}.min_reward: expected a number or a table of numbers")
            }),
    }
}

/// What the steps inherit from the task.
pub(super) struct TaskDefaults<'a> {
    pub dir: &'a Path,
    /// The task's folder resolved: what the steps' files must stay inside.
    pub root: &'a crate::paths::TaskRoot,
    pub agent: &'a toml::Table,
    pub verifier: &'a toml::Table,
    pub networks: &'a Networks,
    pub solution: Option<&'a Solution>,
    pub solution_env: BTreeMap<String, String>,
    pub host: &'a HostVars,
}

/// `[[steps]]`, each checked against its folder. Returns the steps and the strategy.
pub(super) fn steps(
    config: &toml::Table,
    defaults: &TaskDefaults<'_>,
    warnings: &mut Vec<String>,
) -> TaskResult<(Vec<Step>, RewardStrategy)> {
    let strategy = match config.get("multi_step_reward_strategy") {
        None => RewardStrategy::Mean,
        Some(Value::String(s)) if s == "mean" => RewardStrategy::Mean,
        Some(Value::String(s)) if s == "final" => RewardStrategy::Final,
        Some(other) => {
            bail!("multi_step_reward_strategy: expected \"mean\" or \"final\", got {other}")
        }
    };
    let Some(value) = config.get("steps") else {
        return Ok((Vec::new(), strategy));
    };
    let items = value
        .as_array()
        .context("steps: expected [[steps]] tables")?;
    let mut seen = std::collections::BTreeSet::new();
    let mut steps = Vec::new();
    for item in items {
        let table = item
            .as_table()
            .context("steps: expected [[steps]] tables")?;
        let name = table
            .get("name")
            .and_then(Value::as_str)
            .context("steps: every step needs a `name`")?;
        check_step_name(name)?;
        if !seen.insert(name.to_lowercase()) {
            bail!("steps: two steps are named `{name}`");
        }
        steps.push(step(table, name, defaults, warnings)?);
    }
    Ok((steps, strategy))
}

fn step(
    table: &toml::Table,
    name: &str,
    defaults: &TaskDefaults<'_>,
    warnings: &mut Vec<String>,
) -> TaskResult<Step> {
    let prefix = format!("steps.{name}");
    let (agent, verifier) = step_sections(table, &prefix, warnings)?;
    let files = step_files(name, defaults)?;
    let (agent_timeout, verifier_timeout) = step_timeouts(&prefix, &agent, &verifier, defaults)?;
    let mut verifier_env = env_table(defaults.verifier, "env", defaults.host);
    verifier_env.extend(env_table(&verifier, "env", defaults.host));
    let own_network = |sub: &toml::Table, key: &str| policy(sub, &format!("{prefix}.{key}"));
    Ok(Step {
        name: name.to_owned(),
        instruction: files.instruction,
        tests: files.tests,
        workdir: files.workdir,
        agent_timeout,
        verifier_timeout,
        agent_user: user(&agent).or_else(|| user(defaults.agent)),
        verifier_user: user(&verifier).or_else(|| user(defaults.verifier)),
        verifier_env,
        min_reward: min_reward(table.get("min_reward"), name)?,
        solution: files.solution,
        healthcheck: healthcheck(
            table.get("healthcheck"),
            &format!("{prefix}.healthcheck"),
            warnings,
        )?,
        agent_network: own_network(&agent, "agent")?
            .unwrap_or_else(|| defaults.networks.agent.clone()),
        verifier_network: own_network(&verifier, "verifier")?
            .unwrap_or_else(|| defaults.networks.verifier.clone()),
    })
}

/// A step's `[steps.agent]` and `[steps.verifier]`, with warnings for keys and features it
/// does not get. Its own step: it reads only the step's table, before any file is looked at.
fn step_sections(
    table: &toml::Table,
    prefix: &str,
    warnings: &mut Vec<String>,
) -> TaskResult<(toml::Table, toml::Table)> {
    unknown_keys(table, STEP_KEYS, &format!("{prefix}."), warnings);
    let section = |key: &str, known: &[&str], warnings: &mut Vec<String>| {
        let sub = table
            .get(key)
            .and_then(Value::as_table)
            .cloned()
            .unwrap_or_default();
        unknown_keys(&sub, known, &format!("{prefix}.{key}."), warnings);
        sub
    };
    let agent = section("agent", AGENT_KEYS, warnings);
    let verifier = section("verifier", VERIFIER_KEYS, warnings);
    shared_verifier(&verifier, &format!("{prefix}.verifier"))?;
    if table
        .get("artifacts")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        warnings.push(format!(
            "{prefix}.artifacts: only /logs/artifacts is collected (into the step's artifacts/)"
        ));
    }
    if verifier.contains_key("collect") {
        warnings.push(format!(
            "{prefix}.verifier.collect: a step's collect hooks do not run (the task's do)"
        ));
    }
    Ok((agent, verifier))
}

/// What a step's folder `steps/<name>/` gives it.
struct StepFiles {
    instruction: String,
    tests: Vec<std::path::PathBuf>,
    solution: Option<Solution>,
    workdir: Option<std::path::PathBuf>,
}

/// Reads the step's folder: its instruction, its tests over the task's shared ones, its
/// solution (else the task's) and its workdir. Its own step: the checks on the disk, apart
/// from the checks on the table.
fn step_files(name: &str, defaults: &TaskDefaults<'_>) -> TaskResult<StepFiles> {
    let dir = defaults.dir.join("steps").join(name);
    if !dir.is_dir() {
        bail!("steps: no folder steps/{name}/ for the step `{name}`");
    }
    let instruction = instruction_in(&dir.join("instruction.md"), defaults.root)?;
    let shared = defaults.dir.join("tests");
    let own = dir.join("tests");
    if !own.join("test.sh").is_file() && !shared.join("test.sh").is_file() {
        bail!("steps/{name}: no tests/test.sh, and the task has no shared tests/test.sh");
    }
    let tests = [shared, own].into_iter().filter(|t| t.is_dir()).collect();
    let solution = match dir.join("solution") {
        own if own.join("solve.sh").is_file() => Some(Solution {
            dir: own,
            only: None,
            mount: "/solution".to_owned(),
            script: "/solution/solve.sh".to_owned(),
            env: defaults.solution_env.clone(),
        }),
        _ => defaults.solution.cloned(),
    };
    let workdir = Some(dir.join("workdir")).filter(|w| w.is_dir());
    Ok(StepFiles {
        instruction,
        tests,
        solution,
        workdir,
    })
}

/// The step's agent and verifier timeouts. Its own step because each falls back to the
/// task's in its own way.
fn step_timeouts(
    prefix: &str,
    agent: &toml::Table,
    verifier: &toml::Table,
    defaults: &TaskDefaults<'_>,
) -> TaskResult<(Duration, Duration)> {
    let fallback = |key: &str, own: &toml::Table, task: &toml::Table| {
        own.get(key).or_else(|| task.get(key)).cloned()
    };
    let mut agent_merged = defaults.agent.clone();
    if let Some(value) = fallback("timeout_sec", agent, defaults.agent) {
        agent_merged.insert("timeout_sec".to_owned(), value);
    }
    let agent_timeout = timeout(
        &agent_merged,
        &format!("{prefix}.agent.timeout_sec"),
        crate::DEFAULT_AGENT_TIMEOUT,
    )?;
    // The step's verifier timeout, else the task's (Harbor 0.26 takes 600 s when the step sets
    // none, whatever the task says; the task's own limit is what its author meant).
    let verifier_timeout = match verifier.get("timeout_sec") {
        Some(_) => timeout(
            verifier,
            &format!("{prefix}.verifier.timeout_sec"),
            DEFAULT_VERIFIER_TIMEOUT,
        )?,
        None => timeout(
            defaults.verifier,
            "verifier.timeout_sec",
            DEFAULT_VERIFIER_TIMEOUT,
        )?,
    };
    Ok((agent_timeout, verifier_timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_names_are_single_portable_folder_names() {
        for good in ["01-scaffold", "step two", "é"] {
            assert!(check_step_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "..\\x",
            "c:",
            "trailing.",
            "NUL",
            "com1.txt",
            "tab\t",
        ] {
            assert!(check_step_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn min_rewards_are_a_number_or_named_numbers() {
        assert_eq!(
            min_reward(Some(&Value::Float(0.5)), "s").unwrap(),
            Some(BTreeMap::from([("reward".to_owned(), 0.5)]))
        );
        let table: toml::Table = toml::from_str("reward = 1\nstyle = 0.2").unwrap();
        assert_eq!(
            min_reward(Some(&Value::Table(table)), "s")
                .unwrap()
                .unwrap()["style"],
            0.2
        );
        assert!(min_reward(Some(&Value::String("high".into())), "s").is_err());
    }
}

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
use crate::paths::{TaskRoot, check_task};
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
    let root = TaskRoot::of(dir)?;
    let path = dir.join("task.toml");
    root.check(&path)?;
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let config: toml::Table =
        toml::from_str(&text).with_context(|| format!("{}: not valid TOML", path.display()))?;
    let mut warnings = Vec::new();
    let Sections {
        agent,
        verifier,
        solution,
        environment,
    } = sections(&config, &mut warnings);
    let in_file = |err: InputError| err.after(path.display().to_string());
    // Before the files a Linux task needs: a Windows task is refused for what it is.
    check_os(&environment).map_err(in_file)?;
    steps::shared_verifier(&verifier, "verifier").map_err(in_file)?;
    let multi_step = config
        .get("steps")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty());
    let tests = dir.join("tests");
    if !multi_step && !tests.join("test.sh").is_file() {
        bail!("{}: no tests/test.sh (the verifier)", dir.display());
    }
    let solution_dir = dir.join("solution");
    let solution_env = env_table(&solution, "env", host);
    let solution = solution_dir.join("solve.sh").is_file().then(|| Solution {
        dir: solution_dir,
        only: None,
        mount: "/solution".to_owned(),
        script: "/solution/solve.sh".to_owned(),
        env: solution_env.clone(),
    });
    unapplied_features(&config, &environment, &mut warnings);
    let network = steps::networks(&environment, &agent, &verifier).map_err(in_file)?;
    let defaults = TaskDefaults {
        dir,
        root: &root,
        agent: &agent,
        verifier: &verifier,
        networks: &network,
        solution: solution.as_ref(),
        solution_env,
        host,
    };
    let (steps, reward_strategy) =
        steps::steps(&config, &defaults, &mut warnings).map_err(in_file)?;
    let agent_user = user(&agent);
    if let Some(step) = steps.iter().find(|s| s.agent_user != agent_user) {
        return Err(in_file(refusal!(
            "steps.{}.agent.user: every step's agent runs as the task's one user here ({}), not `{}`",
            step.name,
            agent_user.as_deref().unwrap_or("the image's"),
            step.agent_user.as_deref().unwrap_or("the image's")
        )));
    }
    // A multi-step task's prompt is its first step's; its root instruction.md is not used.
    let instruction = match steps.first() {
        Some(step) => step.instruction.clone(),
        None => instruction_in(&dir.join("instruction.md"), &root)?,
    };
    // The oracle of a multi-step task needs a solution for every step.
    let solution = match steps.iter().all(|s| s.solution.is_some()) {
        true if !steps.is_empty() => steps[0].solution.clone(),
        _ if steps.is_empty() => solution,
        _ => None,
    };
    let task = BenchTask {
        name: name.to_owned(),
        dir: dir.to_owned(),
        format: Format::Harbor,
        instruction,
        environment: environment_of(dir, &environment).map_err(in_file)?,
        agent_timeout: timeout(&agent, "agent.timeout_sec", DEFAULT_AGENT_TIMEOUT)
            .map_err(in_file)?,
        verifier_timeout: timeout(&verifier, "verifier.timeout_sec", DEFAULT_VERIFIER_TIMEOUT)
            .map_err(in_file)?,
        build_timeout: timeout(
            &environment,
            "environment.build_timeout_sec",
            DEFAULT_BUILD_TIMEOUT,
        )
        .map_err(in_file)?,
        resources: resources(&environment, &mut warnings).map_err(in_file)?,
        network,
        workdir: environment
            .get("workdir")
            .and_then(Value::as_str)
            .map(str::to_owned),
        env: env_table(&environment, "env", host),
        verifier_env: env_table(&verifier, "env", host),
        agent_user,
        verifier_user: user(&verifier),
        verifier: Verifier::Harbor { tests },
        solution,
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
        collect: steps::collect(&verifier, "verifier").map_err(in_file)?,
        warnings,
        steps,
        reward_strategy,
    };
    check_task(&task, &root)?;
    Ok(task)
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
mod tests {
    use super::*;

    fn task(toml: &str, instruction: &str) -> TaskResult<BenchTask> {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let files = [
            ("environment/Dockerfile", "FROM x\n"),
            ("tests/test.sh", "true\n"),
            ("task.toml", toml),
            ("instruction.md", instruction),
        ];
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        load(root, "t", &crate::HostVars::none())
    }

    #[test]
    fn task_files_are_read_leniently_with_harbor_0_1_defaults() {
        let t = task(
            "version = \"1.0\"\nfuture_key = 1\n[agent]\ntimeout_sec = 90\n[environment]\nmemory = \"4G\"\nallow_internet = false\nshiny = true\n[verifier.env]\nA = \"${HARNESS_SURELY_UNSET:-fallback}\"\n",
            "<!-- harbor-canary GUID x -->\n\n# Task\nDo it.\n",
        )
        .unwrap();
        assert_eq!(t.instruction, "# Task\nDo it.");
        assert_eq!(t.agent_timeout, std::time::Duration::from_secs(90));
        assert_eq!(t.verifier_timeout, DEFAULT_VERIFIER_TIMEOUT);
        assert_eq!(
            (t.resources.cpus, t.resources.memory_mb),
            (Some(1.0), Some(4096))
        );
        assert_eq!(t.network.agent, crate::NetworkPolicy::NoNetwork);
        assert_eq!(t.verifier_env["A"], "fallback");
        assert!(t.solution.is_none());
        let warned = t.warnings.join("\n");
        assert!(
            warned.contains("future_key") && warned.contains("environment.shiny"),
            "{warned}"
        );
        assert!(t.digest.starts_with("sha256:") && t.digest.len() == 71);
    }

    #[test]
    fn what_cannot_run_is_refused_by_name() {
        let err = task("[environment]\nos = \"windows\"\n", "x").unwrap_err();
        assert!(format!("{err}").contains("only Linux"), "{err}");
        let err = task("[agent]\ntimeout_sec = \"soon\"\n", "x").unwrap_err();
        assert!(format!("{err}").contains("agent.timeout_sec"), "{err}");
        let err = task("[[steps]]\nname = \"a\"\n", "x").unwrap_err();
        assert!(format!("{err}").contains("no folder steps/a/"), "{err}");
        let err = task("x = [", "x").unwrap_err();
        assert!(format!("{err}").contains("not valid TOML"), "{err}");
    }
}

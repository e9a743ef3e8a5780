//! Terminal-Bench 1 tasks: `task.yaml` (`instruction`, timeouts, `parser_name`), a
//! `docker-compose.yaml` whose `client` service is the agent's container, `run-tests.sh` with
//! `tests/`, and `solution.sh`. A task passes when the test output, judged by its parser
//! (pytest's short summary by default), says every test passed.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Context, TaskResult, bail, refusal};
use crate::paths::{TaskFile, check_task};
use serde_norway::Value;

use super::{BenchTask, Environment, Format, Resources, Solution, Verifier, digest, seconds};

/// How a TB1 task's test output is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parser {
    /// pytest's `short test summary info`: every test PASSED (or SKIPPED, XFAIL).
    Pytest,
    /// The block between `SWEBench results starts here` and `… ends here` is `PASSED`.
    SweBench,
    /// The block between `SWE-Perf results starts here` and `… ends here` is `PASSED`.
    SwePerf,
    /// The block between `MLEBench results starts here` and `… ends here` says `ALL TESTS PASSED`.
    MleBench,
}

const KEYS: &[&str] = &[
    "instruction",
    "author_name",
    "author_email",
    "difficulty",
    "category",
    "tags",
    "parser_name",
    "max_agent_timeout_sec",
    "max_test_timeout_sec",
    "run_tests_in_same_shell",
    "disable_asciinema",
    "estimated_duration_sec",
    "expert_time_estimate_min",
    "junior_time_estimate_min",
];

/// The keys Harbor's TB1 mapper keeps as metadata.
fn metadata(config: &BTreeMap<String, Value>) -> serde_json::Value {
    ["author_name", "difficulty", "category", "tags"]
        .iter()
        .filter_map(|k| Some(((*k).to_owned(), serde_json::to_value(config.get(*k)?).ok()?)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// `parser_name`, pytest when absent.
fn parser(config: &BTreeMap<String, Value>) -> Result<Parser, String> {
    match config
        .get("parser_name")
        .and_then(Value::as_str)
        .unwrap_or("pytest")
    {
        "pytest" => Ok(Parser::Pytest),
        "swebench" => Ok(Parser::SweBench),
        "sweperf" => Ok(Parser::SwePerf),
        "mlebench" => Ok(Parser::MleBench),
        other => Err(format!(
            "parser_name: `{other}` is not one this harness knows (pytest, swebench, sweperf, mlebench)"
        )),
    }
}

/// `solution.sh`, uploaded alone to `/oracle` as TB1 does; a `solution.yaml` (keystrokes) is
/// not replayed.
fn solution(dir: &Path, warnings: &mut Vec<String>) -> Option<Solution> {
    if dir.join("solution.sh").is_file() {
        return Some(Solution {
            dir: dir.to_owned(),
            only: Some("solution.sh".to_owned()),
            mount: "/oracle".to_owned(),
            script: "/oracle/solution.sh".to_owned(),
            env: BTreeMap::new(),
        });
    }
    if dir.join("solution.yaml").is_file() {
        warnings
            .push("solution.yaml: keystroke solutions cannot be replayed; no oracle".to_owned());
    }
    None
}

/// Loads a TB1 task folder. Every file it reads or uploads must lie inside the folder, links
/// followed ([`crate::paths`]).
pub fn load(dir: &Path, name: &str, host: &super::HostVars) -> TaskResult<BenchTask> {
    let file = TaskFile::open(dir, name, host, "task.yaml")?;
    let config = read_config(&file)?;
    let mut warnings: Vec<String> = config
        .keys()
        .filter(|k| !KEYS.contains(&k.as_str()))
        .map(|k| format!("{k}: not used by this harness"))
        .collect();
    let in_file = |what: String| refusal!("{}: {what}", file.path.display());
    let instruction = config
        .get("instruction")
        .and_then(Value::as_str)
        .filter(|i| !i.trim().is_empty())
        .ok_or_else(|| in_file("`instruction` is required (the prompt)".to_owned()))?
        .to_owned();
    let parser = parser(&config).map_err(in_file)?;
    if config
        .get("run_tests_in_same_shell")
        .and_then(Value::as_bool)
        == Some(true)
    {
        warnings.push("run_tests_in_same_shell: the tests run in a shell of their own".to_owned());
    }
    let run_tests = dir.join("run-tests.sh");
    if !run_tests.is_file() {
        bail!("{}: no run-tests.sh", dir.display());
    }
    let tests = dir.join("tests");
    let solution = solution(dir, &mut warnings);
    let parts = Parts {
        instruction,
        parser,
        run_tests,
        tests,
        solution,
        warnings,
    };
    let task = assemble(&file, &config, parts)?;
    check_task(&task, &file.root)?;
    Ok(task)
}

/// Reads and parses `task.yaml`, refused naming the file.
fn read_config(file: &TaskFile<'_>) -> TaskResult<BTreeMap<String, Value>> {
    let text = file.text()?;
    serde_norway::from_str(&text)
        .with_context(|| format!("{}: not a YAML mapping", file.path.display()))
}

/// What [`load`] has worked out before the task is put together.
struct Parts {
    instruction: String,
    parser: Parser,
    run_tests: std::path::PathBuf,
    tests: std::path::PathBuf,
    solution: Option<Solution>,
    warnings: Vec<String>,
}

/// Puts the task together: TB1's fixed settings, the timeouts from `config` and `parts`. Its
/// own step because the task has many fields; the timeouts are read before the digest, which
/// decides the error a task with both faults is refused for.
fn assemble(
    file: &TaskFile<'_>,
    config: &BTreeMap<String, Value>,
    parts: Parts,
) -> TaskResult<BenchTask> {
    let dir = file.dir;
    let in_file = |what: String| refusal!("{}: {what}", file.path.display());
    let number = |key: &str, default: f64| -> TaskResult<f64> {
        match config.get(key) {
            None => Ok(default),
            Some(value) => value
                .as_f64()
                .ok_or_else(|| in_file(format!("{key}: expected a number"))),
        }
    };
    let tests = parts.tests;
    Ok(BenchTask {
        name: file.name.to_owned(),
        dir: dir.to_owned(),
        format: Format::TerminalBench1,
        instruction: parts.instruction,
        environment: Environment::Compose {
            file: dir.join("docker-compose.yaml"),
            main: "client".to_owned(),
            main_image: None,
        },
        agent_timeout: seconds(
            number("max_agent_timeout_sec", 360.0)?,
            "max_agent_timeout_sec",
        )?,
        verifier_timeout: seconds(
            number("max_test_timeout_sec", 60.0)?,
            "max_test_timeout_sec",
        )?,
        build_timeout: super::DEFAULT_BUILD_TIMEOUT,
        resources: Resources::default(),
        network: super::Networks::all(super::NetworkPolicy::Public),
        workdir: None,
        env: BTreeMap::new(),
        verifier_env: BTreeMap::from([("TEST_DIR".to_owned(), "/tests".to_owned())]),
        agent_user: None,
        // TB1 runs its tests as root.
        verifier_user: Some("root".to_owned()),
        verifier: Verifier::TerminalBench1 {
            run_tests: parts.run_tests,
            tests: tests.is_dir().then_some(tests),
            parser: parts.parser,
        },
        solution: parts.solution,
        metadata: metadata(config),
        warnings: parts.warnings,
        digest: digest(dir, Format::TerminalBench1)?,
        host_vars: file.host.clone(),
        steps: Vec::new(),
        reward_strategy: super::RewardStrategy::Mean,
        healthcheck: None,
        collect: Vec::new(),
    })
}

impl Parser {
    /// Whether the test output says the task is resolved, and the tests it names.
    pub fn judge(self, output: &str) -> Judged {
        match self {
            Parser::Pytest => pytest(output),
            Parser::SweBench => between(
                output,
                "SWEBench results starts here",
                "SWEBench results ends here",
                |b| b.trim() == "PASSED",
            ),
            Parser::SwePerf => between(
                output,
                "SWE-Perf results starts here",
                "SWE-Perf results ends here",
                |b| b.trim() == "PASSED",
            ),
            Parser::MleBench => between(
                output,
                "MLEBench results starts here",
                "MLEBench results ends here",
                |b| b.contains("ALL TESTS PASSED"),
            ),
        }
    }
}

/// A parser's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub resolved: bool,
    /// `(test, passed)` as the output names them.
    pub tests: Vec<(String, bool)>,
    /// Why nothing could be judged (no summary, no markers).
    pub parse_error: Option<String>,
}

/// pytest's `short test summary info` lines (`pytest -rA`): PASSED, SKIPPED and XFAIL pass;
/// FAILED, XPASS and ERROR fail. No summary at all is a parse error, not a pass.
fn pytest(output: &str) -> Judged {
    let header =
        regex::Regex::new(r"(?i)=+\s*short test summary info\s*=+").expect("a valid pattern");
    let Some(found) = header.find(output) else {
        return Judged {
            resolved: false,
            tests: Vec::new(),
            parse_error: Some(
                "no `short test summary info` in the test output (run pytest with -rA)".to_owned(),
            ),
        };
    };
    let mut tests = Vec::new();
    for line in output[found.end()..].lines() {
        let mut words = line.split_whitespace();
        let Some(status) = words.next().map(|s| s.trim_end_matches(':')) else {
            continue;
        };
        let passed = match status {
            "PASSED" | "SKIPPED" | "XFAIL" => true,
            "FAILED" | "XPASS" | "ERROR" => false,
            _ => continue,
        };
        let node = words.next().unwrap_or_default();
        let name = node.split_once("::").map_or(node, |(_, test)| test);
        tests.push((name.to_owned(), passed));
    }
    Judged {
        resolved: tests.iter().all(|(_, passed)| *passed),
        tests,
        parse_error: None,
    }
}

fn between(output: &str, start: &str, end: &str, passes: impl Fn(&str) -> bool) -> Judged {
    let block = output
        .find(start)
        .map(|at| &output[at + start.len()..])
        .and_then(|rest| rest.find(end).map(|to| &rest[..to]));
    match block {
        Some(block) => Judged {
            resolved: passes(block),
            tests: Vec::new(),
            parse_error: None,
        },
        None => Judged {
            resolved: false,
            tests: Vec::new(),
            parse_error: Some(format!("no `{start}` … `{end}` block in the test output")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytest_summaries_are_judged() {
        let passing = "collected 2 items\n\n==== short test summary info ====\nPASSED tests/test_outputs.py::test_a\nSKIPPED [1] tests/x.py:3: why\nPASSED tests/test_outputs.py::test_b\n==== 2 passed ====";
        let judged = Parser::Pytest.judge(passing);
        assert!(judged.resolved, "{judged:?}");
        assert_eq!(judged.tests[0], ("test_a".to_owned(), true));
        let failing =
            "=== short test summary info ===\nPASSED t.py::a\nFAILED t.py::b - assert 1 == 2\n";
        assert!(!Parser::Pytest.judge(failing).resolved);
        assert!(Parser::Pytest.judge("no summary").parse_error.is_some());
        let swe = "noise\nSWEBench results starts here\nPASSED\nSWEBench results ends here\n";
        assert!(Parser::SweBench.judge(swe).resolved);
    }
}

//! The gates of the tests (`testkit::gates`): a test that needs what a plain machine lacks is
//! ignored with its reason when its variable is not set, never passed as if it ran; each
//! variable is in the one list, which `.ci/run` sets and README.md shows.

use std::path::Path;

use testkit::gates::{GATES, Gate, MACHINE};

use super::sources;

/// The `HARNESS_TEST_…` variables that are not gates: knobs a test reads when they are set.
const KNOBS: &[&str] = &[
    // Another sandbox image for the Docker tests.
    "HARNESS_TEST_IMAGE",
    // Another Chromium for the viewer's browser test.
    "HARNESS_TEST_CHROMIUM",
    // A value the benchmark folders' test hands a task.
    "HARNESS_TEST_CANARY",
    // A variable the hooks' test expects unset.
    "HARNESS_TEST_UNSET_VAR",
];

/// The tests that are ignored without a gate or the machine's cfgs (`harness_root`,
/// `harness_landlock`): one `ignore = "needs …"` each. A new one is counted here and in
/// README.md.
const GATED_TESTS: usize = 55;

/// This file, which names what it looks for.
const THIS: &str = "controller/tests/it/architecture/gates.rs";

/// Every `.rs` file of both programs (their crates, tests and benches), as (path from the
/// repository's root, text); this file left out.
fn files() -> Vec<(String, String)> {
    let root = crate::common::repo_root();
    let mut files = Vec::new();
    for program in ["controller", "sandbox-server"] {
        let dir = root.join(program);
        for file in sources(&dir) {
            let path = Path::new(program).join(&file).display().to_string();
            if path != THIS {
                let text = std::fs::read_to_string(dir.join(&file)).unwrap();
                files.push((path, text));
            }
        }
    }
    files
}

/// The words of `text` made of `A-Z`, `0-9` and `_` that start with `HARNESS_TEST_`.
fn variables(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .filter(|word| word.len() > "HARNESS_TEST_".len() && word.starts_with("HARNESS_TEST_"))
        .collect()
}

/// The package whose build script sets the cfgs a file's tests see: the binary's folders
/// (`controller/src`, `…/tests`, `…/benches`) or the server's; `None` for the library crates,
/// which have no build script.
fn package_of(path: &str) -> Option<&'static str> {
    ["controller", "sandbox-server"]
        .into_iter()
        .find(|package| {
            ["src", "tests", "benches"]
                .iter()
                .any(|folder| path.starts_with(&format!("{package}/{folder}/")))
        })
}

/// One `#[cfg_attr(not(…), ignore = "needs …")]`: the cfgs of its condition, its reason, and
/// whether it stands right below a test's attribute.
struct Ignored {
    cfgs: Vec<String>,
    reason: String,
    on_a_test: bool,
}

/// The `ignore = "needs …"` attributes of a file's text.
fn ignored(text: &str) -> Vec<Ignored> {
    let needle = "ignore = \"needs";
    let opening = "#[cfg_attr(";
    let mut found = Vec::new();
    for (at, _) in text.match_indices(needle) {
        let start = text[..at]
            .rfind(opening)
            .expect("an `ignore = \"needs` is in a `#[cfg_attr(`");
        let condition = &text[start + opening.len()..at];
        let mut cfgs: Vec<String> = condition
            .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .filter(|word| word.starts_with("harness_"))
            .map(str::to_owned)
            .collect();
        if !condition.trim_start().starts_with("not(") {
            cfgs.push(format!("(not a `not(…)`: {condition})"));
        }
        let reason = text[at + "ignore = \"".len()..]
            .split('"')
            .next()
            .unwrap_or_default()
            .to_owned();
        let above = text[..start]
            .trim_end()
            .lines()
            .next_back()
            .unwrap_or_default();
        let above = above.trim_start();
        let on_a_test = above.starts_with("#[test]") || above.starts_with("#[tokio::test");
        found.push(Ignored {
            cfgs,
            reason,
            on_a_test,
        });
    }
    found
}

/// The gate of a variable.
fn gate_of(var: &str) -> Option<&'static Gate> {
    GATES.iter().find(|gate| gate.var == var)
}

/// What is wrong with one attribute of a file of `package`: each variable its reason names is
/// a gate of the package, named with its value (`=1` or `=PATH`), and its cfgs are exactly
/// those of the variables and the machine's words (`root`, `Landlock`) it names.
fn faults(ignore: &Ignored, package: Option<&str>) -> Vec<String> {
    let mut faults = Vec::new();
    if !ignore.on_a_test {
        faults.push("is not right below `#[test]` or `#[tokio::test…]`".to_owned());
    }
    let mut expected: Vec<String> = Vec::new();
    for var in variables(&ignore.reason) {
        let Some(gate) = gate_of(var) else {
            faults.push(format!("names {var}, which is no gate"));
            continue;
        };
        let form = format!("{var}={}", if gate.path { "PATH" } else { "1" });
        if !ignore.reason.contains(&form) {
            faults.push(format!("names {var} but not as `{form}`"));
        }
        if !package.is_some_and(|package| gate.packages.contains(&package)) {
            faults.push(format!("{var}'s cfg is not set for {package:?}"));
        }
        expected.push(gate.cfg.to_owned());
    }
    for (cfg, word) in MACHINE {
        if ignore.reason.contains(word) {
            expected.push((*cfg).to_owned());
        }
    }
    if expected.is_empty() {
        faults.push("names no gate's variable and no machine's need".to_owned());
    }
    let mut cfgs = ignore.cfgs.clone();
    cfgs.sort();
    expected.sort();
    if cfgs != expected {
        faults.push(format!("is ignored without {expected:?} but says {cfgs:?}"));
    }
    faults
}

/// What a test must not do instead of being ignored: say it skipped and pass, or ask for a
/// gate's variable itself (`testkit::gates::value` fails when it is unset).
fn skips(text: &str) -> Vec<String> {
    let mut found: Vec<String> = [
        "SKIPPED:",
        "skip_unless_root(",
        "testkit::needs",
        "common::needs(",
    ]
    .into_iter()
    .filter(|needle| text.contains(needle))
    .map(str::to_owned)
    .collect();
    for gate in GATES {
        let read = format!("env::var(\"{}\")", gate.var);
        if text.contains(&read) {
            found.push(read);
        }
    }
    found
}

/// A test that needs what a plain machine lacks is `#[cfg_attr(not(<cfg>), ignore = "needs
/// <VAR>=…")]`, so that without it the test is counted as ignored, saying what it needs, and
/// never as a pass: each reason names exactly the cfgs its condition holds, each gate serves a
/// test in every package it lists, and no test skips by returning early.
#[test]
fn every_gated_test_is_ignored_with_its_reason() {
    let mut wrong = Vec::new();
    let mut count = 0;
    let mut used: Vec<(&'static str, &'static str)> = Vec::new();
    for (path, text) in files() {
        let package = package_of(&path);
        for ignore in ignored(&text) {
            count += 1;
            for fault in faults(&ignore, package) {
                wrong.push(format!("{path}: `{}` {fault}", ignore.reason));
            }
            for gate in variables(&ignore.reason).into_iter().filter_map(gate_of) {
                used.push((gate.var, package.unwrap_or_default()));
            }
        }
        for skip in skips(&text) {
            wrong.push(format!(
                "{path}: `{skip}`: a test that skips is ignored instead"
            ));
        }
    }
    for gate in GATES {
        for package in gate.packages {
            if !used.contains(&(gate.var, *package)) {
                wrong.push(format!("{} gates no test of {package}", gate.var));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert_eq!(
        count, GATED_TESTS,
        "the gated tests: count them in GATED_TESTS (README.md's list is regenerated)"
    );
}

/// Every `HARNESS_TEST_…` variable a program's code or tests name is a gate or a knob.
#[test]
fn every_test_variable_is_a_gate_or_a_knob() {
    let mut unknown = Vec::new();
    for (path, text) in files() {
        for var in variables(&text) {
            if gate_of(var).is_none() && !KNOBS.contains(&var) {
                unknown.push(format!("{path}: {var}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "add each to testkit::gates::GATES (a test that needs it) or to KNOBS: {unknown:#?}"
    );
}

/// How many of the `ignored` tests name `word` in their reason.
fn tests_needing(ignored: &[Ignored], word: &str) -> usize {
    ignored
        .iter()
        .filter(|ignore| {
            ignore
                .reason
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .any(|w| w == word)
        })
        .count()
}

fn plural(count: usize) -> String {
    if count == 1 {
        "1 test".to_owned()
    } else {
        format!("{count} tests")
    }
}

/// README.md's list of the variables, between its markers, from `GATES` and the tests.
fn readme_list() -> String {
    let ignored: Vec<Ignored> = files().iter().flat_map(|(_, text)| ignored(text)).collect();
    let mut list = String::new();
    for gate in GATES {
        let value = if gate.path { "PATH" } else { "1" };
        let count = plural(tests_needing(&ignored, gate.var));
        list.push_str(&format!(
            "- `{}={value}` ({count}): {}\n",
            gate.var, gate.needs
        ));
    }
    let machine: Vec<String> = MACHINE
        .iter()
        .map(|(_, word)| format!("{word} ({})", plural(tests_needing(&ignored, word))))
        .collect();
    list.push_str(&format!(
        "- {}, which the build looks for itself\n\n{} tests in all are ignored without what they need.\n",
        machine.join(" and "),
        ignored.len()
    ));
    list
}

/// README.md lists every gate, with what it needs and how many tests it gates (regenerated on
/// a difference), and `.ci/run` exports each: a flag as `=1`, a path as a quoted value.
#[test]
fn the_readme_lists_every_gate_and_ci_sets_each() {
    let root = crate::common::repo_root();
    let readme_path = root.join("README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let (open, close) = ("<!-- test-variables -->\n", "<!-- /test-variables -->");
    let start = readme
        .find(open)
        .expect("README.md has <!-- test-variables -->")
        + open.len();
    let end = readme[start..]
        .find(close)
        .expect("README.md has <!-- /test-variables -->")
        + start;
    let current = format!("{}{}{}", &readme[..start], readme_list(), &readme[end..]);
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    for gate in GATES {
        let export = if gate.path {
            format!("export {}=\"", gate.var)
        } else {
            format!("export {}=1\n", gate.var)
        };
        assert!(
            ci.contains(&export),
            ".ci/run lacks `{}`",
            export.trim_end()
        );
    }
    testkit::ensure_file_contents(&readme_path, &current);
}

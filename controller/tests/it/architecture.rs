//! The invariants of ARCHITECTURE.md that a reading of the source can check, in both programs:
//! which modules may name a crate or an API. (Comments are skipped: a module may talk about what it must not do.)

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, as paths relative to `dir`.
pub fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = crate::common::files_under(dir);
    found.retain(|path| path.extension().is_some_and(|e| e == "rs"));
    found
}

/// The files under `dir` whose code (not comments) contains `needle`.
pub fn files_naming(dir: &Path, needle: &str) -> Vec<String> {
    sources(dir)
        .into_iter()
        .filter(|file| {
            std::fs::read_to_string(dir.join(file))
                .unwrap()
                .lines()
                .map(str::trim_start)
                .filter(|line| !line.starts_with("//"))
                .any(|line| line.contains(needle))
        })
        .map(|file| file.display().to_string())
        .collect()
}

/// Asserts that only files `allowed` names (exactly, or as a folder prefix ending in `/`)
/// contain `needle`.
pub fn only_in(dir: &Path, needle: &str, allowed: &[&str]) {
    let offenders: Vec<String> = files_naming(dir, needle)
        .into_iter()
        .filter(|file| {
            !allowed.iter().any(|allowed| {
                file == allowed || (allowed.ends_with('/') && file.starts_with(allowed))
            })
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "`{needle}` is only for {allowed:?}, but these name it: {offenders:?}"
    );
}

/// The controller's folder: each of its crates' sources is under `<crate>/src` (the binary's
/// crate is `src` itself).
fn controller() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_owned()
}

/// The controller's crates, bottom up, as folders of `controller/`, with their package names.
const CRATES: &[(&str, &str)] = &[
    ("log", "harness-log"),
    ("telemetry", "harness-telemetry"),
    ("models", "harness-models"),
    ("policy", "harness-policy"),
    ("judge", "harness-judge"),
    ("runtime", "harness-runtime"),
    ("replay", "harness-replay"),
    ("benchmark", "harness-benchmark"),
    ("view", "harness-view"),
    (".", "controller"),
];

/// Asserts that in all of the controller's crates only the files `allowed` names (paths from
/// `controller/`, e.g. `runtime/src/sandbox/local.rs`, or folders ending in `/`) contain
/// `needle`.
fn controller_only_in(needle: &str, allowed: &[&str]) {
    let mut offenders = Vec::new();
    for (folder, _) in CRATES {
        let src = controller().join(folder).join("src");
        let prefix = Path::new(folder).join("src");
        for file in files_naming(&src, needle) {
            let path = prefix.join(&file);
            let path = path
                .strip_prefix(".")
                .unwrap_or(&path)
                .display()
                .to_string();
            let ok = allowed.iter().any(|allowed| {
                path == *allowed || (allowed.ends_with('/') && path.starts_with(allowed))
            });
            if !ok {
                offenders.push(path);
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "`{needle}` is only for {allowed:?}, but these name it: {offenders:?}"
    );
}

fn server_src() -> PathBuf {
    crate::common::repo_root().join("sandbox-server/src")
}

/// The `[dependencies]` table of a manifest: each line's key (what the code names the crate)
/// and the package it is.
fn dependencies(manifest: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let table = text
        .split("\n[dependencies]\n")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap();
    table
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let key = line.split(['=', '.']).next().unwrap().trim().to_owned();
            let package = line
                .split("package = \"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or(&key)
                .to_owned();
            (key, package)
        })
        .collect()
}

/// The crate graph is the layering: each crate depends on exactly the crates of the harness
/// listed here (below it), so a new edge is a decision made here and in ARCHITECTURE.md, and
/// no circle can form. Above all: the log depends on nothing of the harness; the models on
/// nothing but the metrics; the policy never on the runtime; only the binary on the rules
/// (`harness-judge`: the runtime and the log toolkit are handed a built policy, so a change to
/// the rules rebuilds the rules and the binary alone); the runtime never on the log toolkit or
/// the benchmark adapter; the log toolkit never on the benchmark adapter.
#[test]
fn the_crate_graph_is_the_layering() {
    let allowed: &[(&str, &[&str])] = &[
        ("harness-log", &[]),
        ("harness-telemetry", &[]),
        ("harness-models", &["harness-telemetry"]),
        ("harness-policy", &["harness-log", "harness-models"]),
        (
            "harness-judge",
            &["harness-log", "harness-models", "harness-policy"],
        ),
        (
            "harness-runtime",
            &[
                "harness-log",
                "harness-telemetry",
                "harness-models",
                "harness-policy",
            ],
        ),
        (
            "harness-replay",
            &[
                "harness-log",
                "harness-models",
                "harness-policy",
                "harness-runtime",
            ],
        ),
        (
            "harness-benchmark",
            &[
                "harness-log",
                "harness-models",
                "harness-policy",
                "harness-runtime",
                "harness-replay",
            ],
        ),
        ("harness-view", &["harness-log", "harness-replay"]),
        (
            "controller",
            &[
                "harness-log",
                "harness-telemetry",
                "harness-models",
                "harness-policy",
                "harness-judge",
                "harness-runtime",
                "harness-replay",
                "harness-benchmark",
                "harness-view",
            ],
        ),
    ];
    let ours: Vec<&str> = CRATES.iter().map(|(_, package)| *package).collect();
    for (folder, package) in CRATES {
        let manifest = controller().join(folder).join("Cargo.toml");
        let deps = dependencies(&manifest);
        let mut internal: Vec<&str> = deps
            .iter()
            .map(|(_, p)| p.as_str())
            .filter(|p| ours.contains(p))
            .collect();
        internal.sort_unstable();
        let (_, expected) = allowed.iter().find(|(p, _)| p == package).unwrap();
        let mut expected = expected.to_vec();
        expected.sort_unstable();
        assert_eq!(
            internal, expected,
            "{package}'s dependencies on the harness's crates"
        );
        // The controller reaches sandboxes over HTTP: the protocol, never the server.
        assert!(
            !deps.iter().any(|(_, p)| p == "sandbox-server"),
            "{package} depends on the server"
        );
        // Each crate says what it is for and what it may depend on.
        let lib = controller().join(folder).join("src/lib.rs");
        let opening = std::fs::read_to_string(&lib).unwrap();
        assert!(
            opening.starts_with("//!") && opening.contains("depend"),
            "{}: its `//!` opening says what it may depend on",
            lib.display()
        );
    }
}

/// `anyhow` is the binary's alone: every library crate says its failures as its own types.
#[test]
fn only_the_binary_uses_anyhow() {
    let mut libraries = 0;
    for entry in std::fs::read_dir(controller()).unwrap() {
        let manifest = entry.unwrap().path().join("Cargo.toml");
        if !manifest.is_file() {
            continue;
        }
        libraries += 1;
        assert!(
            !dependencies(&manifest)
                .iter()
                .any(|(key, _)| key == "anyhow"),
            "{} depends on anyhow",
            manifest.display()
        );
    }
    assert!(libraries >= 8, "only {libraries} library crates found");
}

#[test]
fn only_the_binary_edge_knows_clap_and_talks_to_a_person() {
    let edge = ["src/main.rs", "src/cli.rs", "src/cli/"];
    controller_only_in("clap", &edge);
    for printing in ["println!", "eprintln!", "print!(", "eprint!("] {
        controller_only_in(printing, &edge);
    }
    for asking in ["stdin()", "is_terminal"] {
        controller_only_in(asking, &["src/cli/"]);
    }
}

#[test]
fn only_the_sandbox_starters_hooks_and_mcp_servers_spawn_and_only_the_local_one_is_unsafe() {
    controller_only_in(
        "Command::new",
        &[
            "runtime/src/sandbox/local.rs",
            "runtime/src/sandbox/seed.rs",
            "runtime/src/hooks/run.rs",
            "runtime/src/mcp/config.rs",
            // The binary's edge builds the static server for task containers (in a checkout).
            "src/cli/static_server.rs",
        ],
    );
    controller_only_in("unsafe", &["runtime/src/sandbox/local.rs"]);
    // The controller's one web server is the viewer's, and only its edge knows the framework.
    controller_only_in("axum", &["view/src/http.rs", "view/src/http/"]);
}

#[test]
fn in_the_server_only_http_knows_axum_and_only_config_knows_clap() {
    only_in(&server_src(), "axum", &["http.rs", "http/"]);
    only_in(&server_src(), "clap", &["config.rs", "config/", "main.rs"]);
}

#[test]
fn in_the_server_only_process_spawns_signals_or_waits_and_holds_the_unsafe_code() {
    let src = server_src();
    only_in(&src, "Command::new", &["process/"]);
    only_in(&src, "unsafe", &["process/"]);
    only_in(&src, "signal::kill", &["process/"]);
    // The reaper; the unit tests of the spawner, which reap the children they start without
    // a reaper; and the commands' namespaces: their init, PID 1 of its own namespace, which
    // reaps the orphans that come to it, and its start, which reaps an init that failed
    // before the reaper runs.
    only_in(
        &src,
        "waitpid",
        &[
            "process/supervisor.rs",
            "process/spawn.rs",
            "process/confine/namespaces.rs",
            "process/confine/namespaces/",
        ],
    );
}

/// The size bars: files and functions.
mod sizes;

/// The manifests: one name per crate, no dependency unused.
mod manifests;

/// The tests' gates: a test that needs what a plain machine lacks is ignored with its reason.
mod gates;

/// The runtime knows no benchmark, word for word: it runs a session against a sandbox a
/// provider gives and asks a grader for the outcome; Harbor, Terminal-Bench, their oracles and
/// verifiers are the benchmark adapter's and the binary's words (comments included).
#[test]
fn the_runtime_knows_no_benchmark() {
    let src = controller().join("runtime/src");
    let mut found = Vec::new();
    for file in sources(&src) {
        let text = std::fs::read_to_string(src.join(&file))
            .unwrap()
            .to_lowercase();
        for word in [
            "harbor",
            "terminal-bench",
            "terminal_bench",
            "terminal bench",
            "oracle",
            "verifier",
        ] {
            if text.contains(word) {
                found.push(format!("{}: {word}", file.display()));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

//! The invariants of ARCHITECTURE.md that a reading of the source can check, in both crates:
//! which modules may name a crate or an API. (Comments are skipped: a module may talk about what it must not do.)

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, as paths relative to `dir`.
pub fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path.strip_prefix(dir).unwrap().to_owned());
            }
        }
    }
    found.sort();
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

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn server_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sandbox-server/src")
}

#[test]
fn only_the_binary_edge_knows_clap_and_talks_to_a_person() {
    let edge = ["main.rs", "cli.rs", "cli/"];
    only_in(&src(), "clap", &edge);
    for printing in ["println!", "eprintln!", "print!(", "eprint!("] {
        only_in(&src(), printing, &edge);
    }
    for asking in ["stdin()", "is_terminal"] {
        only_in(&src(), asking, &["cli/"]);
    }
}

#[test]
fn only_the_sandbox_starters_hooks_and_mcp_servers_spawn_and_only_the_local_one_is_unsafe() {
    only_in(
        &src(),
        "Command::new",
        &[
            "sandbox/local.rs",
            "sandbox/seed.rs",
            "hooks/run.rs",
            "mcp/config.rs",
        ],
    );
    only_in(&src(), "unsafe", &["sandbox/local.rs"]);
    only_in(&src(), "axum", &[]);
}

#[test]
fn the_controller_depends_on_the_protocol_never_on_the_server() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let dependencies = manifest
        .split("[dependencies]")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap();
    assert!(dependencies.contains("sandbox-protocol"));
    assert!(
        !dependencies
            .lines()
            .any(|line| line.trim_start().starts_with("sandbox-server")),
        "{dependencies}"
    );
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

/// No source file of either program is over 600 lines: past that a module holds more than
/// one idea, and the split is due.
#[test]
fn no_source_file_is_over_600_lines() {
    let root = src().parent().unwrap().parent().unwrap().to_owned();
    let mut long = Vec::new();
    for dir in [
        "controller/src",
        "sandbox-server/src",
        "sandbox-server/protocol/src",
    ] {
        let dir = root.join(dir);
        for file in sources(&dir) {
            let lines = std::fs::read_to_string(dir.join(&file))
                .unwrap()
                .lines()
                .count();
            if lines > 600 {
                long.push(format!("{} ({lines})", dir.join(&file).display()));
            }
        }
    }
    assert!(long.is_empty(), "split these: {long:?}");
}

//! A clean environment: commands see only an allow-list of the server's variables, and a
//! private `TMPDIR`.

use std::path::Path;

use sandbox_protocol::{Protection, ProtectionName};

use super::protection;

/// Variables a command may see from the server's environment.
pub const BASE_ENV: &[&str] = &[
    "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME", "SHELL",
];

/// The environment every command gets, and its protection. Commands that run as another user
/// (`run_as`) get the private temporary folder as their `HOME` too: the server's is not theirs.
pub fn prepare(
    allow: &[String],
    private_tmp: &Path,
    run_as: Option<(u32, u32)>,
) -> (Vec<(String, String)>, Protection) {
    let own_home = run_as.is_some_and(|(uid, _)| uid != nix::unistd::geteuid().as_raw());
    if allow.iter().any(|name| name == "*") {
        return inherited(private_tmp, own_home);
    }
    let mut env: Vec<(String, String)> = BASE_ENV
        .iter()
        .map(|name| (*name).to_owned())
        .chain(allow.iter().cloned())
        .filter(|name| !(own_home && name == "HOME"))
        .filter_map(|name| std::env::var(&name).ok().map(|value| (name, value)))
        .collect();
    env.push(("TMPDIR".to_owned(), private_tmp.display().to_string()));
    if own_home {
        env.push(("HOME".to_owned(), private_tmp.display().to_string()));
    }
    let names: Vec<&str> = BASE_ENV
        .iter()
        .copied()
        .chain(allow.iter().map(String::as_str))
        .collect();
    let detail = format!("commands see only {} and TMPDIR", names.join(", "));
    (
        env,
        protection(ProtectionName::CleanEnvironment, true, detail),
    )
}

/// `--env-allow '*'` (a task's container, where the container is the boundary and its
/// variables are the image's and the task's): every variable of the server's but its own
/// settings (`SANDBOX_*`, `OTEL_*`, `RUST_LOG`).
fn inherited(private_tmp: &Path, own_home: bool) -> (Vec<(String, String)>, Protection) {
    let own = |name: &str| {
        name.starts_with("SANDBOX_") || name.starts_with("OTEL_") || name == "RUST_LOG"
    };
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(name, _)| !own(name) && name != "TMPDIR" && !(own_home && name == "HOME"))
        .collect();
    env.push(("TMPDIR".to_owned(), private_tmp.display().to_string()));
    if own_home {
        env.push(("HOME".to_owned(), private_tmp.display().to_string()));
    }
    (
        env,
        protection(
            ProtectionName::CleanEnvironment,
            false,
            "--env-allow '*': commands see every variable of the server's (the container's) but its own SANDBOX_*, OTEL_* and RUST_LOG settings",
        ),
    )
}

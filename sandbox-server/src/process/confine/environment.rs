//! A clean environment: commands see only an allow-list of the server's variables, and a
//! private `TMPDIR`.

use std::path::Path;

use sandbox_protocol::{Protection, ProtectionName};

use super::protection;

/// Variables a command may see from the server's environment.
pub const BASE_ENV: &[&str] = &[
    "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME", "SHELL",
];

/// The environment every command gets, and its protection. Commands get a private `HOME`
/// (`own_home`) when the server's is hidden from them or is not theirs (they run as another
/// user); the toolchains of the hidden homes are then named by their variables (`toolchains`,
/// `CARGO_HOME`, `RUSTUP_HOME`, …) unless the operator's environment names them already.
pub fn prepare(
    allow: &[String],
    private_tmp: &Path,
    own_home: Option<&Path>,
    toolchains: &[(String, String)],
) -> (Vec<(String, String)>, Protection) {
    if allow.iter().any(|name| name == "*") {
        return inherited(private_tmp, own_home);
    }
    let mut env: Vec<(String, String)> = BASE_ENV
        .iter()
        .map(|name| (*name).to_owned())
        .chain(allow.iter().cloned())
        .filter(|name| !(own_home.is_some() && name == "HOME"))
        .filter_map(|name| std::env::var(&name).ok().map(|value| (name, value)))
        .collect();
    env.push(("TMPDIR".to_owned(), private_tmp.display().to_string()));
    if let Some(home) = own_home {
        env.push(("HOME".to_owned(), home.display().to_string()));
        for (name, value) in toolchains {
            if !env.iter().any(|(set, _)| set == name) {
                env.push((name.clone(), value.clone()));
            }
        }
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
fn inherited(private_tmp: &Path, own_home: Option<&Path>) -> (Vec<(String, String)>, Protection) {
    let own = |name: &str| {
        name.starts_with("SANDBOX_") || name.starts_with("OTEL_") || name == "RUST_LOG"
    };
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(name, _)| {
            !own(name) && name != "TMPDIR" && !(own_home.is_some() && name == "HOME")
        })
        .collect();
    env.push(("TMPDIR".to_owned(), private_tmp.display().to_string()));
    if let Some(home) = own_home {
        env.push(("HOME".to_owned(), home.display().to_string()));
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

//! A clean environment: commands see only an allow-list of the server's variables, and a
//! private `TMPDIR`.

use std::path::Path;

use sandbox_protocol::{Protection, ProtectionName};

use super::protection;

/// Variables a command may see from the server's environment.
pub const BASE_ENV: &[&str] = &[
    "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME", "SHELL",
];

/// The environment every command gets, and its protection.
pub fn prepare(allow: &[String], private_tmp: &Path) -> (Vec<(String, String)>, Protection) {
    let mut env: Vec<(String, String)> = BASE_ENV
        .iter()
        .map(|name| (*name).to_owned())
        .chain(allow.iter().cloned())
        .filter_map(|name| std::env::var(&name).ok().map(|value| (name, value)))
        .collect();
    env.push(("TMPDIR".to_owned(), private_tmp.display().to_string()));
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

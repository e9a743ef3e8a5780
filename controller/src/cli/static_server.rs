//! The statically linked sandbox-server that a benchmark task's container runs. One
//! `cargo build --release` does not make it (it is a second build, for another target); when
//! none is built and this `harness` was built in a checkout, it is built there before the
//! first benchmark task, once, with cargo's own progress shown. An installed `harness` (no
//! checkout), `HARNESS_NO_BUILD=1`, a server named in `HARNESS_SANDBOX_SERVER_STATIC` or
//! another architecture leave it to the lookup's error, which says what to build.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

/// The target of the task containers' server.
const TARGET: &str = "x86_64-unknown-linux-gnu";

/// Cargo's words for the build (with `RUSTFLAGS="-C target-feature=+crt-static"`).
const BUILD: [&str; 8] = [
    "build",
    "--locked",
    "--profile",
    "server",
    "-p",
    "sandbox-server",
    "--target",
    TARGET,
];

/// Before benchmark tasks run (`any_benchmark`): a static server found, or built now.
pub(crate) fn ensure(any_benchmark: bool) -> anyhow::Result<()> {
    if !any_benchmark
        || !cfg!(target_arch = "x86_64")
        || harness_benchmark::container::static_server().is_ok()
        || std::env::var_os("HARNESS_NO_BUILD").is_some_and(|value| value == "1")
        // A server the operator names is theirs to fix: the lookup says what is wrong with it.
        || std::env::var_os("HARNESS_SANDBOX_SERVER_STATIC").is_some_and(|value| !value.is_empty())
    {
        return Ok(());
    }
    let exe = std::env::current_exe().context("finding this executable")?;
    let Some(root) = checkout(&exe, Path::new(env!("CARGO_MANIFEST_DIR"))) else {
        return Ok(());
    };
    build(&root, Path::new("cargo"), &mut |line| eprintln!("{line}"))?;
    harness_benchmark::container::static_server()
        .map(|_| ())
        .map_err(|err| anyhow::anyhow!("after building it: {err}"))
}

/// The checkout `harness` was built in: the folder above its package (`manifest_dir`), when
/// that is a workspace holding the server and `exe` lies under its `target/`.
fn checkout(exe: &Path, manifest_dir: &Path) -> Option<PathBuf> {
    let root = manifest_dir.parent()?;
    let workspace = std::fs::read_to_string(root.join("Cargo.toml"))
        .is_ok_and(|manifest| manifest.contains("[workspace]"));
    (workspace
        && root.join("sandbox-server/Cargo.toml").is_file()
        && exe.starts_with(root.join("target")))
    .then(|| root.to_owned())
}

/// Runs `cargo` (the program) in `root` to build the static server, saying first what it runs
/// through `note`; cargo's progress goes to the terminal as it comes.
fn build(root: &Path, cargo: &Path, note: &mut dyn FnMut(&str)) -> anyhow::Result<()> {
    let words = BUILD.join(" ");
    note(&format!(
        "building the static sandbox-server that benchmark task containers run (once; a few \
         minutes): RUSTFLAGS=\"-C target-feature=+crt-static\" cargo {words} (in {})",
        root.display()
    ));
    #[allow(clippy::disallowed_methods)] // cargo, in the operator's own checkout
    let status = Command::new(cargo)
        .current_dir(root)
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .args(BUILD)
        .status()
        .with_context(|| format!("starting {} {words}", cargo.display()))?;
    if !status.success() {
        anyhow::bail!(
            "building the static sandbox-server failed ({status}): cargo's output is above; \
             build it yourself with RUSTFLAGS=\"-C target-feature=+crt-static\" cargo {words}, \
             or name one in HARNESS_SANDBOX_SERVER_STATIC"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder shaped like a checkout: a workspace manifest and the server's package.
    fn fake_checkout() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("Cargo.toml"), "[workspace]\n").unwrap();
        std::fs::create_dir_all(root.path().join("sandbox-server")).unwrap();
        std::fs::write(root.path().join("sandbox-server/Cargo.toml"), "").unwrap();
        root
    }

    #[test]
    fn a_checkout_is_the_workspace_whose_target_holds_harness() {
        let root = fake_checkout();
        let manifest_dir = root.path().join("controller");
        let exe = root.path().join("target/release/harness");
        assert_eq!(checkout(&exe, &manifest_dir).as_deref(), Some(root.path()));
        let installed = Path::new("/usr/local/bin/harness");
        assert_eq!(checkout(installed, &manifest_dir), None);
        std::fs::write(root.path().join("Cargo.toml"), "[package]\n").unwrap();
        assert_eq!(checkout(&exe, &manifest_dir), None);
    }

    /// The build runs cargo in the checkout with the static flags, says so first, and a failed
    /// build is an error naming its status and what to do instead.
    #[test]
    fn the_build_runs_cargo_in_the_checkout_and_a_failure_says_what_to_do() {
        use std::os::unix::fs::PermissionsExt;
        let root = fake_checkout();
        let tools = tempfile::tempdir().unwrap();
        let record = tools.path().join("record");
        let cargo = tools.path().join("cargo");
        std::fs::write(
            &cargo,
            format!(
                "#!/bin/sh\nprintf '%s|%s|%s' \"$*\" \"$(/bin/pwd)\" \"$RUSTFLAGS\" > {}\nexit 3\n",
                record.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut notes = Vec::new();
        let err = build(root.path(), &cargo, &mut |line| notes.push(line.to_owned()))
            .unwrap_err()
            .to_string();
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].contains("cargo build --locked --profile server -p sandbox-server"),
            "{notes:?}"
        );
        let recorded = std::fs::read_to_string(&record).unwrap();
        assert_eq!(
            recorded,
            format!(
                "{}|{}|-C target-feature=+crt-static",
                BUILD.join(" "),
                root.path().display()
            )
        );
        assert!(
            err.contains("exit status: 3") && err.contains("HARNESS_SANDBOX_SERVER_STATIC"),
            "{err}"
        );
    }
}

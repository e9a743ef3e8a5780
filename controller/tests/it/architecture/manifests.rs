//! The workspace's manifests: one name per crate, and no dependency a crate does not use.

use std::path::{Path, PathBuf};

use super::sources;

/// The workspace's root folder.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The members of the workspace, as folders from the root.
fn members() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let list = text
        .split("members = [")
        .nth(1)
        .unwrap()
        .split(']')
        .next()
        .unwrap();
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect()
}

/// A table's lines (`[dependencies]`, `[dev-dependencies]`, …) of a manifest's text.
fn table<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let header = format!("[{name}]\n");
    let start = if text.starts_with(&header) {
        Some(0)
    } else {
        text.find(&format!("\n{header}")).map(|at| at + 1)
    };
    let Some(start) = start else {
        return Vec::new();
    };
    text[start + header.len()..]
        .split("\n[")
        .next()
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

/// A dependency line's key: what the manifest names the package.
fn key(line: &str) -> String {
    line.split(['=', '.']).next().unwrap().trim().to_owned()
}

fn package_name(text: &str) -> String {
    table(text, "package")
        .into_iter()
        .find_map(|line| line.strip_prefix("name = \""))
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned()
}

/// Each crate has one name (STYLE.md, section 1): its package is its folder's name, with the
/// program's prefix (`harness-models` in `controller/models`, `sandbox-protocol` in
/// `sandbox-server/protocol`), its import is the package's, and every internal crate is
/// declared once in `[workspace.dependencies]`: no member renames one (`package = …`).
#[test]
fn every_crate_has_one_name() {
    let workspace = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let declared = table(&workspace, "workspace.dependencies");
    let mut wrong = Vec::new();
    for member in members() {
        let manifest = std::fs::read_to_string(root().join(&member).join("Cargo.toml")).unwrap();
        let package = package_name(&manifest);
        let folder = Path::new(&member)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let agrees = [
            folder.clone(),
            format!("harness-{folder}"),
            format!("sandbox-{folder}"),
        ]
        .contains(&package);
        if !agrees {
            wrong.push(format!(
                "{member}: package `{package}` is not its folder's name"
            ));
        }
        if manifest.contains("\n[lib]")
            && table(&manifest, "lib")
                .iter()
                .any(|l| l.starts_with("name"))
        {
            wrong.push(format!("{member}: a [lib] name unlike its package"));
        }
        for line in table(&manifest, "dependencies")
            .into_iter()
            .chain(table(&manifest, "dev-dependencies"))
            .chain(table(&manifest, "build-dependencies"))
        {
            if line.contains("package =") || line.contains("path =") {
                wrong.push(format!(
                    "{member}: `{line}`: internal crates are declared once, in the root"
                ));
            }
        }
        let is_library = package != "controller" && package != "sandbox-server";
        if is_library && !declared.iter().any(|line| key(line) == package) {
            wrong.push(format!(
                "{member}: `{package}` is not in [workspace.dependencies]"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The crate a dependency is imported as: its package name with `-` as `_`.
fn import(package: &str) -> String {
    package.replace('-', "_")
}

/// Whether any of the files names crate `import` in code.
fn names(files: &[PathBuf], import: &str) -> bool {
    let needles = [
        format!("{import}::"),
        format!("use {import}"),
        format!("{import}!"),
        format!("extern crate {import}"),
    ];
    files.iter().any(|file| {
        std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .map(str::trim_start)
            .filter(|line| !line.starts_with("//"))
            .any(|line| needles.iter().any(|n| line.contains(n.as_str())))
    })
}

/// The `.rs` files of a member's folders (`src`, `tests`, `benches` and `build.rs`), not those
/// of the members inside it.
fn files_of(member: &str, folders: &[&str]) -> Vec<PathBuf> {
    let base = root().join(member);
    let nested: Vec<PathBuf> = members()
        .into_iter()
        .filter(|m| m != member && Path::new(m).starts_with(member))
        .map(|m| root().join(m))
        .collect();
    let mut files = Vec::new();
    for folder in folders {
        let dir = base.join(folder);
        if *folder == "build.rs" {
            if dir.is_file() {
                files.push(dir);
            }
            continue;
        }
        if !dir.is_dir() {
            continue;
        }
        files.extend(
            sources(&dir)
                .into_iter()
                .map(|f| dir.join(f))
                .filter(|f| !nested.iter().any(|n| f.starts_with(n))),
        );
    }
    files
}

/// Dependencies a crate lists for their features only, which no code names: (package,
/// dependency, why). None today.
const FEATURES_ONLY: &[(&str, &str, &str)] = &[];

/// No crate lists a dependency its code does not use (codex runs `cargo-shear` for this): a
/// normal one is named by its `src` or `build.rs`, a dev one by its tests, benches or `src`,
/// a build one by its `build.rs`.
#[test]
fn no_crate_lists_a_dependency_it_does_not_use() {
    let mut unused = Vec::new();
    for member in members() {
        let manifest = std::fs::read_to_string(root().join(&member).join("Cargo.toml")).unwrap();
        let package = package_name(&manifest);
        let normal = files_of(&member, &["src", "build.rs"]);
        let every = files_of(&member, &["src", "build.rs", "tests", "benches"]);
        let build = files_of(&member, &["build.rs"]);
        for (section, files) in [
            ("dependencies", &normal),
            ("dev-dependencies", &every),
            ("build-dependencies", &build),
        ] {
            for line in table(&manifest, section) {
                let dependency = key(line);
                let excused = FEATURES_ONLY
                    .iter()
                    .any(|(p, d, _)| *p == package && *d == dependency);
                if !excused && !names(files, &import(&dependency)) {
                    unused.push(format!("{member}: [{section}] {dependency}"));
                }
            }
        }
    }
    assert!(unused.is_empty(), "listed and never named: {unused:#?}");
}

//! What is put into a task's container before it starts: a static `sandbox-server`, its
//! token and Harbor's log folders; the server's command line; where the static server is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Doing, Failed, failed};

use super::{HARNESS_DIR, SERVER_PORT, StartSpec};
use crate::BenchTask;

/// `sandbox-server serve` as the container's command.
pub(super) fn server_command(spec: &StartSpec<'_>, workdir: &str) -> Vec<String> {
    let server = format!("/{HARNESS_DIR}/sandbox-server");
    let phases = &spec.task.network;
    let detail = format!(
        "the task's own network, set per phase by the harness (agent: {}; verifier: {}): an internal network, joined to the internet only in a public phase, out through the task's egress proxy only in an allow-list phase",
        phases.agent.describe(),
        phases.verifier.describe()
    );
    let mut args = vec![
        server,
        "serve".to_owned(),
        "--listen".to_owned(),
        format!("0.0.0.0:{SERVER_PORT}"),
        "--workspace".to_owned(),
        workdir.to_owned(),
        "--files-anywhere".to_owned(),
        "--no-landlock".to_owned(),
        "--token-file".to_owned(),
        format!("/{HARNESS_DIR}/token"),
        "--forget-token-file".to_owned(),
        "--network".to_owned(),
        "container".to_owned(),
        "--network-detail".to_owned(),
        detail,
        // The container is the boundary: commands see its variables (the image's and the
        // task's), not a clean environment, as the task's author expects.
        "--env-allow".to_owned(),
        "*".to_owned(),
        "--shutdown-grace-secs".to_owned(),
        "2".to_owned(),
    ];
    let mut ignore = vec![
        ".git/objects".to_owned(),
        ".git/lfs".to_owned(),
        format!("/{HARNESS_DIR}"),
    ];
    if workdir == "/" {
        // A task with no working folder: its system folders are not its work.
        ignore.extend(
            [
                "/proc", "/sys", "/dev", "/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin",
                "/boot", "/etc", "/var", "/run", "/opt", "/snap", "/tmp", "/logs",
            ]
            .map(str::to_owned),
        );
    }
    args.extend(["--snapshot-ignore".to_owned(), ignore.join(",")]);
    if let Some(tools) = spec.tools {
        args.extend(["--tools".to_owned(), tools.join(",")]);
    }
    args
}

/// The files uploaded before the container starts: the server, its token (read once and
/// deleted by the server), and Harbor's `/logs/{agent,verifier,artifacts}`.
pub(super) fn injection(server: &Path, token: &str) -> Failed<Vec<u8>> {
    let binary = std::fs::read(server)
        .doing_with(|| format!("reading the static sandbox-server {}", server.display()))?;
    let mut builder = tar::Builder::new(Vec::new());
    let mut add = |path: &str, mode: u32, bytes: &[u8], dir: bool| -> std::io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(if dir {
            tar::EntryType::Directory
        } else {
            tar::EntryType::Regular
        });
        header.set_mode(mode);
        header.set_size(bytes.len() as u64);
        header.set_mtime(0);
        builder.append_data(&mut header, path, bytes)
    };
    add(&format!("{HARNESS_DIR}/"), 0o777, &[], true)?;
    add(
        &format!("{HARNESS_DIR}/sandbox-server"),
        0o755,
        &binary,
        false,
    )?;
    add(
        &format!("{HARNESS_DIR}/token"),
        0o444,
        token.as_bytes(),
        false,
    )?;
    for dir in ["logs/", "logs/agent/", "logs/verifier/", "logs/artifacts/"] {
        add(dir, 0o777, &[], true)?;
    }
    Ok(builder.into_inner()?)
}

/// Where the static server for task containers is: `HARNESS_SANDBOX_SERVER_STATIC`, else a
/// statically linked `sandbox-server` beside `harness`, else the static build of this
/// workspace (`target/x86_64-unknown-linux-gnu/server/`, the size-optimised profile, or
/// `…/release/`, next to `harness`'s `target/`).
pub fn static_server() -> Failed<PathBuf> {
    if let Some(path) = std::env::var_os("HARNESS_SANDBOX_SERVER_STATIC").filter(|p| !p.is_empty())
    {
        let path = PathBuf::from(path);
        if !is_static(&path) {
            failed!(
                "HARNESS_SANDBOX_SERVER_STATIC={}: not a statically linked executable",
                path.display()
            );
        }
        return Ok(path);
    }
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_owned));
    let candidates: Vec<PathBuf> = exe_dir
        .iter()
        .flat_map(|dir| {
            [
                dir.join("sandbox-server"),
                dir.join("../x86_64-unknown-linux-gnu/server/sandbox-server"),
                dir.join("../../x86_64-unknown-linux-gnu/server/sandbox-server"),
                dir.join("../x86_64-unknown-linux-gnu/release/sandbox-server"),
                dir.join("../../x86_64-unknown-linux-gnu/release/sandbox-server"),
            ]
        })
        .collect();
    if let Some(found) = candidates.iter().find(|p| is_static(p)) {
        return Ok(found.clone());
    }
    failed!(
        "no statically linked sandbox-server to inject into the task's image: build one with \
         RUSTFLAGS=\"-C target-feature=+crt-static\" cargo build --profile server -p sandbox-server --target x86_64-unknown-linux-gnu \
         (harness finds it there) or name one in HARNESS_SANDBOX_SERVER_STATIC"
    )
}

/// Whether a 64-bit ELF file has no program interpreter (`PT_INTERP`), so it needs no dynamic
/// loader: only its header and program headers are read.
fn is_static(path: &Path) -> bool {
    use std::io::Read;
    let mut head = vec![0u8; 64 << 10];
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let Ok(n) = file.read(&mut head) else {
        return false;
    };
    head.truncate(n);
    // ELF, 64-bit, little-endian.
    if head.len() < 64 || !head.starts_with(b"\x7fELF\x02\x01") {
        return false;
    }
    let u16_at = |at: usize| u16::from_le_bytes([head[at], head[at + 1]]) as usize;
    let phoff = u64::from_le_bytes(head[0x20..0x28].try_into().unwrap_or_default()) as usize;
    let (size, count) = (u16_at(0x36), u16_at(0x38));
    const PT_INTERP: u32 = 3;
    (0..count).all(|i| {
        let at = phoff + i * size;
        head.get(at..at + 4).is_some_and(|kind| {
            u32::from_le_bytes(kind.try_into().unwrap_or_default()) != PT_INTERP
        })
    })
}

/// Variables a compose file of the task may use (Harbor's and TB1's).
pub fn compose_vars(task: &BenchTask, session_id: &str) -> BTreeMap<String, String> {
    // The host variables the operator named, then the task's own env, then the harness's.
    let mut vars: BTreeMap<String, String> = task.host_vars.values().clone();
    vars.extend(task.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let context = task.dir.join("environment");
    let prefix = format!("tb__{}", task.name.replace(['.', '/'], "-"));
    for (key, value) in [
        ("CONTEXT_DIR", context.display().to_string()),
        (
            "MAIN_IMAGE_NAME",
            format!("hb__{}", task.name.replace('/', "-")),
        ),
        ("CPUS", task.resources.cpus.unwrap_or(1.0).to_string()),
        (
            "MEMORY",
            format!("{}M", task.resources.memory_mb.unwrap_or(2048)),
        ),
        ("TEST_DIR", "/tests".to_owned()),
        ("T_BENCH_TEST_DIR", "/tests".to_owned()),
        (
            "T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME",
            format!("{prefix}__client"),
        ),
        (
            "T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME",
            format!("harness-{session_id}-main"),
        ),
        ("T_BENCH_TASK_DOCKER_NAME_PREFIX", prefix),
        ("T_BENCH_CONTAINER_LOGS_PATH", "/logs".to_owned()),
        (
            "T_BENCH_CONTAINER_AGENT_LOGS_PATH",
            "/agent-logs".to_owned(),
        ),
        ("COMPOSE_PROJECT_NAME", format!("harness-{session_id}")),
    ] {
        vars.entry(key.to_owned()).or_insert(value);
    }
    vars
}

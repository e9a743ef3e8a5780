//! Process facts for the integration tests of both programs, read from `/proc`: whether a
//! process runs, its memory, and — for a test that ran out of time — where a process, its
//! descendants and every one of their threads wait; the output of a command that must succeed;
//! and the one list of what tests may need that a plain machine lacks (`gates`, which the
//! build scripts read too). Besides: a sandbox-server started on a free port, the repository's
//! root, a committed file kept current, and a bounded wait.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub mod gates;
mod server;

pub use server::{bound_line, serve, spawn_server, url_of};

/// The repository's root folder (this crate is `common/testkit` below it).
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("common/testkit is two folders below the repository's root")
}

/// Regenerates a committed file: on a difference, rewrites it and fails, so the change is seen.
pub fn ensure_file_contents(path: &Path, contents: &str) {
    let current = std::fs::read_to_string(path).unwrap_or_default();
    if current == contents {
        return;
    }
    std::fs::write(path, contents)
        .unwrap_or_else(|err| panic!("cannot write {}: {err}", path.display()));
    panic!(
        "{} was stale and has been regenerated; review and commit it",
        path.display()
    );
}

/// Waits (polling, bounded by `limit`) until `ready` gives a value, and returns it; a test
/// fails, naming `what`, when none comes in time.
pub fn wait_for<T>(what: &str, limit: Duration, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = ready() {
            return value;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What `command` printed on its standard output, run to its end; a test fails, naming the
/// command and quoting its standard error, when it cannot start or does not succeed.
pub fn stdout_of(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("{command:?} did not start: {err}"));
    assert!(
        output.status.success(),
        "{command:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A size in KiB that `/proc/PID/status` gives under `field` (`VmRSS`, `VmHWM`, …); `None`
/// when the process or the field is not there.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    read(&format!("/proc/{pid}/status"))
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The resident memory of a live process in KiB (`VmRSS`); a test fails when it is not there.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS").expect("VmRSS in /proc/PID/status")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The fields of `/proc/PID/stat` after the command name (state first, then the parent).
fn stat_fields(path: &str) -> Vec<String> {
    let stat = read(path);
    stat.rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Whether `pid` names a live process (not a zombie).
pub fn alive(pid: u32) -> bool {
    let fields = stat_fields(&format!("/proc/{pid}/stat"));
    fields
        .first()
        .is_some_and(|state| state != "Z" && state != "X")
}

/// The pid a process has in its innermost PID namespace and that namespace's depth (1: the
/// host's), from `NSpid`.
fn innermost(pid: u32) -> Option<(u32, usize)> {
    let status = read(&format!("/proc/{pid}/status"));
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))?;
    let pids: Vec<u32> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    Some((*pids.last()?, pids.len()))
}

/// The host pid of the live process below `server` that the server's commands see as `inner`
/// (the number in their PID namespace, which is what `$$`, `$!` and the server's API show);
/// `inner` itself when the commands have no namespace of their own.
pub fn host_pid(server: u32, inner: u32) -> Option<u32> {
    let below = tree(server);
    let namespaced = below
        .iter()
        .any(|&p| innermost(p).is_some_and(|(_, depth)| depth > 1));
    if !namespaced {
        return alive(inner).then_some(inner);
    }
    below
        .into_iter()
        .find(|&p| alive(p) && innermost(p).is_some_and(|(pid, depth)| depth > 1 && pid == inner))
}

/// Whether a process that `server`'s commands see as `inner` is alive: in a PID namespace of
/// the server's, no process can leave the server's tree, so a survivor is found there.
pub fn alive_in(server: u32, inner: u32) -> bool {
    host_pid(server, inner).is_some()
}

/// `pid` and every process below it, parents before children.
pub fn tree(pid: u32) -> Vec<u32> {
    let parent_of =
        |p: u32| -> Option<u32> { stat_fields(&format!("/proc/{p}/stat")).get(1)?.parse().ok() };
    let all: Vec<(u32, Option<u32>)> = std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .map(|p| (p, parent_of(p)))
                .collect()
        })
        .unwrap_or_default();
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            all.iter()
                .filter(|(_, of)| *of == Some(parent))
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    tree
}

/// Where `pid`, its descendants and each of their threads are waiting (state, `wchan`, and
/// the kernel stack where readable): what a test that ran out of time prints.
pub fn stacks(pid: u32) -> String {
    let mut out = String::new();
    for p in tree(pid) {
        let cmdline = read(&format!("/proc/{p}/cmdline")).replace('\0', " ");
        let _ = writeln!(out, "process {p}: {}", cmdline.trim_end());
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let dir = task.path().display().to_string();
            let fields = stat_fields(&format!("{dir}/stat"));
            let _ = writeln!(
                out,
                "  thread {} {} {} wchan={}",
                task.file_name().to_string_lossy(),
                read(&format!("{dir}/comm")).trim(),
                fields.first().map_or("?", String::as_str),
                read(&format!("{dir}/wchan")),
            );
            for frame in read(&format!("{dir}/stack")).lines().take(12) {
                let _ = writeln!(out, "    {frame}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::disallowed_methods)] // a test of its own, not the server's process module
    fn this_process_is_alive_and_its_child_in_its_tree() {
        let me = std::process::id();
        assert!(alive(me));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(tree(me).contains(&child.id()));
        let report = stacks(me);
        assert!(
            report.contains(&format!("process {}: sleep 30", child.id())),
            "{report}"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!alive(child.id()));
    }
}

//! Reading the process table from `/proc`: parents, groups, start times and the call marker.

use std::collections::HashMap;
use std::fs;

/// One process as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcEntry {
    pub pid: u32,
    pub ppid: u32,
    pub pgid: u32,
    pub sid: u32,
    /// The one-letter state; `Z` is a zombie waiting to be reaped.
    pub state: char,
    /// Start time in clock ticks after boot.
    pub start_ticks: u64,
}

impl ProcEntry {
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z' || self.state == 'X'
    }
}

/// Every process visible in `/proc`, by pid.
pub(super) fn snapshot() -> HashMap<u32, ProcEntry> {
    let mut entries = HashMap::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return entries;
    };
    for dirent in dir.flatten() {
        let Some(pid) = dirent
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(entry) = read_stat(pid) {
            entries.insert(pid, entry);
        }
    }
    entries
}

/// Every process below `root`, by pid, found by walking `/proc/<pid>/task/<tid>/children`,
/// so the cost grows with the tree and not with the machine's process count. Falls back to a
/// full scan on kernels built without `CONFIG_PROC_CHILDREN`.
pub(super) fn tree(root: u32) -> HashMap<u32, ProcEntry> {
    let mut found = HashMap::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        let Some(children) = children_of(pid) else {
            if pid == root {
                let table = snapshot();
                return descendants(&table, root)
                    .into_iter()
                    .filter_map(|pid| table.get(&pid).map(|entry| (pid, entry.clone())))
                    .collect();
            }
            continue;
        };
        for child in children {
            if child != root
                && !found.contains_key(&child)
                && let Some(entry) = read_stat(child)
            {
                found.insert(child, entry);
                queue.push(child);
            }
        }
    }
    found
}

/// The children of every thread of `pid`; `None` when the kernel does not list them.
fn children_of(pid: u32) -> Option<Vec<u32>> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut children = Vec::new();
    let mut listed = false;
    for task in tasks.flatten() {
        if let Ok(text) = fs::read_to_string(task.path().join("children")) {
            listed = true;
            children.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    listed.then_some(children)
}

/// Parses `/proc/<pid>/stat`; `None` when the process is gone.
pub(super) fn read_stat(pid: u32) -> Option<ProcEntry> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

fn parse_stat(pid: u32, text: &str) -> Option<ProcEntry> {
    // The command name is in parentheses and may itself contain spaces and parentheses,
    // so the fields start after the last `)`.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state) of proc(5); field 22 (starttime) is fields[19].
    Some(ProcEntry {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgid: fields.get(2)?.parse().ok()?,
        sid: fields.get(3)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// The pids below `root` in the parent tree (not `root` itself).
pub(super) fn descendants(table: &HashMap<u32, ProcEntry>, root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in table.values() {
        children.entry(entry.ppid).or_default().push(entry.pid);
    }
    let mut found = Vec::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        for &child in children.get(&pid).into_iter().flatten() {
            if child != root && !found.contains(&child) {
                found.push(child);
                stack.push(child);
            }
        }
    }
    found
}

/// The pid a process has in the innermost PID namespace it belongs to, and how many
/// namespaces deep that is (1: the host's own), from `NSpid` of `/proc/<pid>/status`.
pub(super) fn innermost_pid(pid: u32) -> Option<(u32, usize)> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))?;
    let pids: Vec<u32> = line
        .split_whitespace()
        .filter_map(|field| field.parse().ok())
        .collect();
    Some((*pids.last()?, pids.len()))
}

/// The value of the call marker in a process's environment, if it has one and we may read it.
pub(super) fn call_marker(pid: u32, key: &str) -> Option<String> {
    let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{key}=");
    environ
        .split(|&b| b == 0)
        .find_map(|var| var.strip_prefix(prefix.as_bytes()))
        .map(|value| String::from_utf8_lossy(value).into_owned())
}

/// The command line of a process, arguments joined by spaces; the name in brackets for kernel
/// threads and zombies, which have none.
pub fn command_line(pid: u32) -> String {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect();
    if args.is_empty() {
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        return format!("[{}]", comm.trim_end());
    }
    args.join(" ")
}

/// Seconds since the Unix epoch at which a process started, from its start ticks.
pub fn start_time_unix(start_ticks: u64) -> Option<f64> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    let boot_time: f64 = stat
        .lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let ticks_per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&t| t > 0)
        .unwrap_or(100) as f64;
    Some(boot_time + start_ticks as f64 / ticks_per_second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_parentheses_in_the_name() {
        let text = "42 (a) b) (c) S 7 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0";
        let entry = parse_stat(42, text).unwrap();
        assert_eq!(
            entry,
            ProcEntry {
                pid: 42,
                ppid: 7,
                pgid: 42,
                sid: 42,
                state: 'S',
                start_ticks: 12345
            }
        );
    }

    #[test]
    fn descendants_follow_the_tree() {
        let table: HashMap<u32, ProcEntry> = [(1, 0), (10, 1), (11, 10), (12, 11), (20, 1)]
            .into_iter()
            .map(|(pid, ppid)| {
                let entry = ProcEntry {
                    pid,
                    ppid,
                    pgid: pid,
                    sid: pid,
                    state: 'S',
                    start_ticks: 0,
                };
                (pid, entry)
            })
            .collect();
        let mut found = descendants(&table, 10);
        found.sort_unstable();
        assert_eq!(found, vec![11, 12]);
    }
}

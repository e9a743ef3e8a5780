//! A batch's tasks: found in files and folders, named, and how many run at once.

use std::path::{Path, PathBuf};

/// One task of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// Its file name without the extension; the name of its log folder.
    pub id: String,
    pub file: PathBuf,
}

/// The tasks of files and folders (a folder's `*.yaml`/`*.yml`), in order; names must differ.
pub fn collect_tasks(paths: &[PathBuf]) -> anyhow::Result<Vec<TaskSpec>> {
    let mut tasks: Vec<TaskSpec> = Vec::new();
    for path in paths {
        for file in task_files_of(path)? {
            let id = crate::task::task_id(&file);
            if let Some(other) = tasks.iter().find(|t| t.id == id) {
                anyhow::bail!(
                    "two tasks are named `{id}` ({} and {}): task names are their file names and \
                     name their log folders, so they must differ",
                    other.file.display(),
                    file.display()
                );
            }
            tasks.push(TaskSpec { id, file });
        }
    }
    if tasks.is_empty() {
        anyhow::bail!("no tasks given");
    }
    Ok(tasks)
}

fn task_files_of(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if path.is_dir() {
        let files = crate::task::task_files(path)?;
        if files.is_empty() {
            anyhow::bail!("{} holds no task files (*.yaml, *.yml)", path.display());
        }
        Ok(files)
    } else if path.is_file() {
        Ok(vec![path.to_owned()])
    } else {
        anyhow::bail!("{}: no such task file or folder", path.display());
    }
}

/// The default parallelism: what the machine's cores and available memory allow, and how it
/// was chosen. A session mostly waits on its model, so two per core; each needs `per_task`
/// bytes of memory (its sandbox's limit in a container, else 512 MiB for a local sandbox's
/// commands); a pool allows one per member.
pub fn default_parallel(per_task: u64, pool: Option<usize>) -> (usize, String) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let available = available_memory();
    let by_cores = 2 * cores;
    let by_memory = available.map(|bytes| (bytes / per_task.max(1)) as usize);
    let mut parallel = by_cores.min(by_memory.unwrap_or(usize::MAX)).max(1);
    let mut reason = format!(
        "{parallel} from {cores} cores (2 per core) and {} available at {} MiB per task",
        available.map_or_else(
            || "unknown memory".to_owned(),
            |b| format!("{} MiB", b / (1 << 20))
        ),
        per_task / (1 << 20)
    );
    if let Some(members) = pool
        && members < parallel
    {
        parallel = members;
        reason = format!("{parallel}: one per pool member");
    }
    (parallel, reason)
}

/// `MemAvailable` from /proc/meminfo.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_parallelism_follows_cores_memory_and_the_pool() {
        let (n, reason) = default_parallel(512 << 20, None);
        assert!(n >= 1, "{reason}");
        assert!(reason.contains("cores"), "{reason}");
        let (n, reason) = default_parallel(512 << 20, Some(1));
        assert_eq!(n, 1, "{reason}");
        // A task that needs more memory than the machine has still runs, one at a time.
        let (n, _) = default_parallel(u64::MAX, None);
        assert_eq!(n, 1);
    }
}

//! A batch's tasks: found in files and folders (recursively, YAML tasks and benchmark task
//! folders mixed), each run `attempts` times as independent trials, and how many run at once.

use std::path::{Path, PathBuf};

use harness_runtime::task::{TaskSource, discover};

/// One trial of one task of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// The name of its log folder: the task's name (`/` as `-`), with `__N` for trial N ≥ 2.
    pub id: String,
    /// The task's name.
    pub task: String,
    /// From 1.
    pub trial: u32,
    pub source: TaskSource,
    /// The dataset folder it was found in, when found in one (its name is Harbor's `source`).
    pub dataset: Option<PathBuf>,
}

impl TaskSpec {
    /// The dataset's name.
    pub fn dataset_name(&self) -> Option<String> {
        let dataset = self.dataset.as_ref()?;
        dataset
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
    }
}

/// What a batch keeps in its folder beside its tasks' log folders (its log, Harbor's job files,
/// the report, earlier attempts): a task's log folder may not take one of these names.
const BATCH_FILES: &[&str] = &[
    "events.jsonl",
    "blobs",
    "attempts",
    "transcripts",
    "report.json",
    "report.html",
    "config.json",
    "lock.json",
    "result.json",
    "job.log",
];

/// Refuses a log folder name that is the batch's own (a task named `events.jsonl` would
/// overwrite the batch's log, one named `attempts` be moved into itself), or that is no
/// plain folder name.
fn refuse_reserved(id: &str, task: &Path) -> anyhow::Result<()> {
    if BATCH_FILES.contains(&id) || matches!(id, "" | "." | "..") {
        anyhow::bail!(
            "{}: the task's name `{id}` would name its log folder, but that name is the batch's own ({}); rename the task",
            task.display(),
            BATCH_FILES.join(", ")
        );
    }
    Ok(())
}

/// The log folder of a task's trial.
pub fn trial_id(task: &str, trial: u32) -> String {
    let folder = task.replace('/', "-");
    if trial <= 1 {
        folder
    } else {
        format!("{folder}__{trial}")
    }
}

/// Refuses the task files found in dataset folders that name things of this machine (a task
/// file given directly is the operator's own): each refusal names the file and the key.
pub fn refuse_host_side_keys(tasks: &[TaskSpec]) -> anyhow::Result<()> {
    let mut refused = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for task in tasks {
        let (Some(dataset), TaskSource::File(file)) = (&task.dataset, &task.source) else {
            continue;
        };
        if !seen.insert(file.clone()) {
            continue;
        }
        let parsed = harness_runtime::task::TaskFile::load(file)?;
        for key in parsed.host_side_keys(file, dataset) {
            refused.push(format!("  {}: {key}", file.display()));
        }
    }
    if refused.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "task files of a dataset name things of this machine, which a dataset (someone else's data) may not:\n{}\nremove those keys, or pass --trust-tasks if you wrote the dataset or trust its author",
        refused.join("\n")
    )
}

/// The tasks of files and folders, each `attempts` times; log folder names must differ.
pub fn collect_tasks(paths: &[PathBuf], attempts: u32) -> anyhow::Result<Vec<TaskSpec>> {
    if attempts == 0 {
        anyhow::bail!("--attempts must be at least 1");
    }
    let mut tasks: Vec<TaskSpec> = Vec::new();
    for path in paths {
        let dataset = dataset_of(path);
        for found in discover(std::slice::from_ref(path), harness_benchmark::TASK_FOLDERS)? {
            for trial in 1..=attempts {
                let id = trial_id(&found.name, trial);
                refuse_reserved(&id, found.source.path())?;
                if let Some(other) = tasks.iter().find(|t| t.id == id) {
                    let clash = if other.task == found.name {
                        format!("two tasks are named `{}`", found.name)
                    } else {
                        format!("two tasks would share the log folder `{id}`")
                    };
                    anyhow::bail!(
                        "{clash} ({} and {}): task names name their log folders, so they must differ",
                        other.source.path().display(),
                        found.source.path().display()
                    );
                }
                tasks.push(TaskSpec {
                    id,
                    task: found.name.clone(),
                    trial,
                    source: found.source.clone(),
                    dataset: dataset.clone(),
                });
            }
        }
    }
    if tasks.is_empty() {
        anyhow::bail!("no tasks given");
    }
    Ok(tasks)
}

/// A folder given that is not itself a task is a dataset.
fn dataset_of(path: &Path) -> Option<PathBuf> {
    let is_dataset = path.is_dir() && harness_benchmark::detect(path).is_none();
    is_dataset.then(|| std::path::absolute(path).ok()).flatten()
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

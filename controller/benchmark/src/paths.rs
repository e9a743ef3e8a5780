//! A task folder's own files. A task folder is someone else's (every input not from the
//! operator is hostile), and a link in it may point anywhere: a file the harness reads through
//! one (`instruction.md -> /proc/self/environ`, into the prompt) or uploads (`tests -> ~/.ssh`,
//! `run-tests.sh -> /proc/self/environ`, into the task's container) would hand this machine's
//! files to the task. So every path the harness reads or uploads from a task must, resolved
//! through every link, lie inside the task's folder, resolved the same way ([`TaskRoot`],
//! checked as the task loads: [`check_task`]); and a folder or file it uploads is never itself
//! a link ([`not_a_link`], checked again by each upload, [`upload_source`]). Links *inside* an
//! uploaded folder are sent as links, never followed.

use std::path::{Path, PathBuf};

use crate::error::{Context, TaskResult, bail};
use crate::{BenchTask, Environment, Format, HostVars, MainImage, Solution, Verifier};

/// A task's folder, resolved through every link: what its files must stay inside.
#[derive(Debug, Clone)]
pub struct TaskRoot {
    resolved: PathBuf,
}

impl TaskRoot {
    /// The task folder `dir`, resolved.
    pub fn of(dir: &Path) -> TaskResult<TaskRoot> {
        let resolved = dir
            .canonicalize()
            .with_context(|| format!("the task folder {}", dir.display()))?;
        Ok(TaskRoot { resolved })
    }

    /// `path` resolved through every link; refused when nothing is there or when it leads
    /// outside the task's folder. `at` names it in the refusal (a file, or a key and its value).
    pub fn resolve(&self, path: &Path, at: &str) -> TaskResult<PathBuf> {
        let resolved = path
            .canonicalize()
            .with_context(|| format!("{at}: {} does not exist", path.display()))?;
        if !resolved.starts_with(&self.resolved) {
            bail!(
                "{at} leads to {}, outside the task's folder {} (a task may use only its own files: a link in it must point inside it)",
                resolved.display(),
                self.resolved.display()
            );
        }
        Ok(resolved)
    }

    /// Refuses `path` when what is there leads outside the task's folder (a dangling link
    /// too); a path with nothing there passes, its absence said where it matters.
    pub fn check(&self, path: &Path) -> TaskResult<()> {
        if std::fs::symlink_metadata(path).is_err() {
            return Ok(());
        }
        self.resolve(path, &path.display().to_string()).map(drop)
    }

    /// [`TaskRoot::check`] for a folder or file the harness uploads, which must not itself
    /// be a link either (an upload refuses one: [`upload_source`]).
    pub fn check_upload(&self, path: &Path) -> TaskResult<()> {
        self.check(path)?;
        not_a_link(path)
    }
}

/// A task folder as its format's loader reads it: the folder, its name, the host variables it
/// may read, the folder resolved, and its config file (`task.toml`, `task.yaml`).
pub struct TaskFile<'a> {
    pub dir: &'a Path,
    pub name: &'a str,
    pub host: &'a HostVars,
    pub root: TaskRoot,
    /// The config file.
    pub path: PathBuf,
}

impl<'a> TaskFile<'a> {
    /// The task folder `dir` and its config file `file`, which must be the task's own.
    pub fn open(
        dir: &'a Path,
        name: &'a str,
        host: &'a HostVars,
        file: &str,
    ) -> TaskResult<TaskFile<'a>> {
        let root = TaskRoot::of(dir)?;
        let path = dir.join(file);
        root.check(&path)?;
        Ok(TaskFile {
            dir,
            name,
            host,
            root,
            path,
        })
    }

    /// The config file's text, refused naming the file when it cannot be read.
    pub fn text(&self) -> TaskResult<String> {
        std::fs::read_to_string(&self.path)
            .with_context(|| format!("reading {}", self.path.display()))
    }
}

/// Refuses `path` when it is itself a link (a missing path passes).
pub fn not_a_link(path: &Path) -> TaskResult<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = std::fs::read_link(path).unwrap_or_default();
            bail!(
                "{} is a link (to {}): a folder or file the harness uploads from a task must be the task's own, not a link",
                path.display(),
                target.display()
            )
        }
        _ => Ok(()),
    }
}

/// What an upload of the folder `from` (or only its file `only`) reads: that folder or file,
/// refused when it is itself a link. A link swapped in after the task loaded would otherwise
/// be followed: a tar of a folder reads the folder it is given through a link, and a file is
/// read through one.
pub fn upload_source(from: &Path, only: Option<&str>) -> TaskResult<PathBuf> {
    let source = match only {
        Some(name) => from.join(name),
        None => from.to_owned(),
    };
    not_a_link(&source)?;
    Ok(source)
}

/// Every path of a loaded `task` the harness reads or uploads, checked against its folder:
/// the environment's Dockerfile, build context, compose file and `.env`, the verifier's tests,
/// the solution, each step's tests, workdir and solution. (The task file and the instructions
/// are checked before they are read.)
pub fn check_task(task: &BenchTask, root: &TaskRoot) -> TaskResult<()> {
    check_environment(task, root)?;
    match &task.verifier {
        Verifier::Harbor { tests } => root.check_upload(tests)?,
        Verifier::TerminalBench1 {
            run_tests, tests, ..
        } => {
            root.check_upload(run_tests)?;
            if let Some(tests) = tests {
                root.check_upload(tests)?;
            }
        }
    }
    if let Some(solution) = &task.solution {
        check_solution(solution, root)?;
    }
    for step in &task.steps {
        for tests in &step.tests {
            root.check_upload(tests)?;
        }
        if let Some(workdir) = &step.workdir {
            root.check_upload(workdir)?;
        }
        if let Some(solution) = &step.solution {
            check_solution(solution, root)?;
        }
    }
    Ok(())
}

/// A solution's folder, or the one file of it that is uploaded.
fn check_solution(solution: &Solution, root: &TaskRoot) -> TaskResult<()> {
    match &solution.only {
        Some(name) => {
            root.check(&solution.dir)?;
            root.check_upload(&solution.dir.join(name))
        }
        None => root.check_upload(&solution.dir),
    }
}

/// The files an environment is built from, and Harbor's `environment/` when it is copied into
/// a prebuilt image's working folder.
fn check_environment(task: &BenchTask, root: &TaskRoot) -> TaskResult<()> {
    let image = match &task.environment {
        Environment::Single(image) => Some(image),
        Environment::Compose {
            file, main_image, ..
        } => {
            root.check(file)?;
            if let Some(folder) = file.parent() {
                root.check(&folder.join(".env"))?;
            }
            main_image.as_ref()
        }
    };
    match image {
        Some(
            MainImage::Build {
                context,
                dockerfile,
            }
            | MainImage::Prebuilt {
                fallback: Some((context, dockerfile)),
                ..
            },
        ) => {
            root.check(context)?;
            root.check(dockerfile)?;
            root.check(&context.join(".dockerignore"))
        }
        Some(MainImage::Prebuilt { fallback: None, .. })
            if task.format == Format::Harbor
                && matches!(task.environment, Environment::Single(_)) =>
        {
            root.check_upload(&task.dir.join("environment"))
        }
        Some(MainImage::Prebuilt { fallback: None, .. }) | None => Ok(()),
    }
}

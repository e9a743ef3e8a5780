//! The command line: clap's types live here, in the binary's edge, and nowhere in the
//! library. Each subcommand's module turns its flags into the library's validated config.

mod agents;
mod batch;
#[cfg(test)]
mod flag_docs;
mod fork;
mod images;
mod metrics;
mod policy;
mod replay;
mod rerun_fork;
mod run;
mod sandboxes;
mod session_args;
mod static_server;
mod terminal;
mod view;

pub(crate) use session_args::{BuildArgs, SandboxTlsArgs, SessionArgs};
pub(crate) use terminal::colour_on_stderr;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use metrics::MetricsArgs;

/// The agent harness: runs a model in a loop against a sandbox's tools.
#[derive(Debug, Parser)]
#[command(
    name = "harness",
    version,
    about = "Run a language-model agent on a task in a contained sandbox, record every step, \
             and read, re-run, fork or compare the sessions",
    after_help = "Start here:\n  \
                  harness run --task examples/hello/task.yaml   one session (a scripted model \
                  when no API key is set)\n  \
                  harness batch TASKS_DIR                       many tasks at once, then a report\n  \
                  harness view                                  browse every run in a browser"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run one agent session: `harness run [--web-search] [WORKING_DIR] "TASK"`.
    Run(Box<RunArgs>),
    /// Run many tasks at once, each in its own sandbox with its own log, and report.
    Batch(Box<BatchArgs>),
    /// Check the safety policy against labelled tool calls.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Read recorded sessions back: as a transcript, a workspace, metrics, or a re-run.
    #[command(subcommand)]
    Replay(replay::ReplayCommand),
    /// Manage the containers of `--sandbox docker`.
    #[command(subcommand)]
    Sandboxes(SandboxesCommand),
    /// Build benchmark tasks' images ahead of a run (and push them, for a cluster).
    #[command(subcommand)]
    Images(ImagesCommand),
    /// Serve a live, read-only browser view of session and batch logs.
    View(view::ViewArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum ImagesCommand {
    /// Build every image of the benchmark tasks found in DATASET (as `harness batch` finds
    /// them; cached by content), optionally push each task's main image to a registry and
    /// write a Kubernetes overlay per task (deploy/benchmark).
    Build {
        #[arg(required = true, value_name = "DATASET")]
        datasets: Vec<PathBuf>,
        /// Push each task's main image as `REGISTRY/harness-task/<task>:<content hash>`.
        #[arg(long, value_name = "REGISTRY")]
        push: Option<String>,
        /// Write `<DIR>/<task>/kustomization.yaml`, an Indexed Job of the task's trials in its
        /// own image (an overlay of --kustomize-base).
        #[arg(long, value_name = "DIR")]
        kustomize: Option<PathBuf>,
        /// The base the overlays point at.
        #[arg(long, value_name = "DIR", default_value = "deploy/benchmark")]
        kustomize_base: PathBuf,
        /// For the overlays: the agent (model, oracle or nop).
        #[arg(long, default_value = "model")]
        agent: String,
        /// For the overlays: the trials per task (the Job's completions).
        #[arg(long, default_value_t = 1, value_name = "K")]
        attempts: u32,
        /// As `harness batch`: image rewrites and a CA bundle for the builds.
        #[command(flatten)]
        build: BuildArgs,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum SandboxesCommand {
    /// Remove the sandbox containers a crashed or killed harness left: those whose controller
    /// process is gone from this host, or whose lifetime has passed.
    Prune {
        /// Remove every container the harness made, running sessions' and other hosts' too.
        #[arg(long)]
        all: bool,
    },
    /// Mint, list and revoke a remote sandbox's scoped tokens (with its root token, or any
    /// token holding `admin`).
    #[command(subcommand)]
    Token(Box<sandboxes::TokenCommand>),
}

#[derive(Debug, Subcommand)]
pub(crate) enum PolicyCommand {
    /// Run the policy over labelled examples (JSON Lines of `{request, tool, args, expected,
    /// category}`) and print each decision and the agreement rate by category.
    Eval {
        file: PathBuf,
        /// The classifier's model; without one, the rules decide and the rest is `ask`.
        #[arg(long, value_name = "PROVIDER/NAME")]
        model: Option<String>,
        /// The model API's base URL.
        #[arg(long)]
        base_url: Option<String>,
        /// Extra rules, as `harness run --policy`.
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        /// How long one classification may take, in seconds.
        #[arg(long, default_value_t = 60)]
        classifier_timeout: u64,
    },
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BatchArgs {
    /// Task files, benchmark task folders (Harbor's task.toml, Terminal-Bench's task.yaml), or
    /// dataset folders holding any of them, found recursively. A task's name is its folder's
    /// name (or its file's without the extension; a dataset-relative path when names clash),
    /// and names its log folder.
    #[arg(required = true, value_name = "TASKS")]
    pub(crate) tasks: Vec<PathBuf>,
    /// Run task files found in dataset folders even when they name things of this machine
    /// (`model.base_url`, `hooks`, `mcp`, `sandbox.url`/`token_file`, a workspace outside the
    /// dataset, a git workspace that is not a public https:// URL, `network: host`): by default
    /// a dataset is someone else's data, and such a task is refused with the key named (and a
    /// dataset's git workspace is cloned with none of this machine's git settings or
    /// credentials). Files named directly are trusted as your own.
    #[arg(long)]
    pub(crate) trust_tasks: bool,
    /// Tasks at once [default: from the machine: 2 per core, capped by available memory at
    /// 512 MiB per local task or the container's --memory (1 GiB when unset); one per pool
    /// member].
    #[arg(long, value_name = "N")]
    pub(crate) parallel: Option<usize>,
    /// The batch folder [default: <log-dir>/batch-<id>]; each task's log is `<out>/<task>/`.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
    /// Run only the tasks of --out without a finished log (after a Ctrl-C or a crash).
    #[arg(long, requires = "out")]
    pub(crate) resume: bool,
    /// Retries of a task whose sandbox died, could not start or stopped answering, each on a
    /// fresh sandbox. Other failures are not retried.
    #[arg(long, default_value_t = 1)]
    pub(crate) retries: u32,
    /// Independent trials of each task, each on a fresh sandbox (logs `<task>`, `<task>__2`,
    /// …); the report gives pass@1, pass@k and the mean reward.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub(crate) attempts: u32,
    /// With --sandbox docker: keep N containers started ahead of need, leased to tasks as they
    /// start (a task waits for one already starting rather than start another) and removed
    /// after use; the batch ends with how many were leased ready. 0: each task starts its own.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub(crate) pool_size: usize,
    /// Model request limits per endpoint, shared by every task: `ENDPOINT=CONCURRENCY[,PER_MINUTE]`
    /// where ENDPOINT is a provider (`openai`, `openai-compat`, `anthropic`), a base URL, or `*`;
    /// repeatable. Without one, an endpoint is unbounded until it answers 429, which then
    /// holds every task using it for the wait it asks.
    #[arg(long = "rate-limit", value_name = "ENDPOINT=N[,RPM]")]
    pub(crate) rate_limits: Vec<String>,
    /// Fork instead of run: TASKS are recorded sessions (or folders of them, a batch's
    /// included), and each is forked after its event SEQ into --count children, as `replay
    /// fork` does (pass@K from a prefix, for every session in one command). `--parallel` is
    /// then the children at once.
    #[arg(long, value_name = "SEQ")]
    pub(crate) fork_at: Option<u64>,
    /// With --fork-at: children per session.
    #[arg(long, requires = "fork_at", default_value_t = 1, value_name = "K",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) count: u32,
    /// With --fork-at: take each log's check, model, `allow-all`, web search and limits as they
    /// are, as `replay fork --trust-log` does. By default a log is untrusted input.
    #[arg(long, requires = "fork_at")]
    pub(crate) trust_log: bool,
    /// `bar` (a live bar and a line per running task), `lines` (a line per event), or `auto`:
    /// the bar when stdout is a terminal.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) progress: ProgressMode,
    #[command(flatten)]
    pub(crate) metrics: MetricsArgs,
    #[command(flatten)]
    pub(crate) session: SessionArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ProgressMode {
    Auto,
    Bar,
    Lines,
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RunArgs {
    /// `[WORKING_DIR] TASK…`: with two or more words the first is the working directory
    /// (default `agent-harness-working`), the rest the task. With --task, at most a working
    /// directory.
    #[arg(value_name = "[WORKING_DIR] TASK", required_unless_present = "task")]
    pub(crate) words: Vec<String>,
    /// A task file (YAML): prompt, workspace source, setup, check, model, limits, sandbox, tools.
    /// A folder of task files with --task-index picks one (a Kubernetes Indexed Job's pod).
    #[arg(long, value_name = "FILE|DIR")]
    pub(crate) task: Option<PathBuf>,
    /// With `--task DIR`: run the task at this position (from 0) among the folder's tasks, as
    /// `harness batch DIR` finds and names them (YAML task files and benchmark folders,
    /// recursively); its log folder is `<log-dir>/<task name>/`.
    #[arg(long, env = "JOB_COMPLETION_INDEX", value_name = "N")]
    pub(crate) task_index: Option<usize>,
    /// With `--task DIR --task-index N`: run the picked task file even when it names things of
    /// this machine, as `harness batch --trust-tasks` does (a dataset is someone else's data:
    /// by default such a task is refused with the key named, and its git workspace is cloned
    /// with none of this machine's git settings or credentials).
    #[arg(long)]
    pub(crate) trust_tasks: bool,
    /// The session folder's name under --log-dir [default: the session id, or the task's name
    /// with --task-index].
    #[arg(long, value_name = "NAME")]
    pub(crate) log_name: Option<String>,
    /// Print a running `bash` command's output as it comes, dimmed under its `> bash` line:
    /// `always`, `never`, or `auto` (when stderr is a terminal). The log has it either way.
    #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
    pub(crate) live_output: LiveOutputMode,
    #[command(flatten)]
    pub(crate) metrics: MetricsArgs,
    #[command(flatten)]
    pub(crate) session: SessionArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LiveOutputMode {
    Auto,
    Always,
    Never,
}

/// `--format` of `replay show`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FormatArg {
    Md,
    Html,
}

/// `--format` of `replay export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportFormatArg {
    /// Harbor's trajectory format (ATIF v1.8).
    Atif,
}

impl From<FormatArg> for harness_replay::render::Format {
    fn from(arg: FormatArg) -> Self {
        match arg {
            FormatArg::Md => harness_replay::render::Format::Md,
            FormatArg::Html => harness_replay::render::Format::Html,
        }
    }
}

/// Runs a parsed command line; its exit code.
pub(crate) async fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Run(args) => run::run(*args).await,
        Command::Batch(args) => batch::run(*args).await,
        Command::Replay(command) => replay::run(command).await,
        Command::Policy(command) => policy::run(command).await,
        Command::Sandboxes(command) => sandboxes::run(command).await,
        Command::Images(command) => images::run(command).await,
        Command::View(args) => view::run(args).await,
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Issue 57 §9: `harness --help` opens with what the program does for its user.
    #[test]
    fn the_help_opens_with_what_the_program_does() {
        let help = Cli::command().render_help().to_string();
        let first = help.lines().next().unwrap_or_default();
        assert!(first.starts_with("Run a language-model agent"), "{help}");
        assert!(!help.contains("crates"), "{help}");
        assert!(
            help.contains("harness run --task examples/hello/task.yaml"),
            "{help}"
        );
    }
}

//! `harness run`: one session, shown on the terminal; the answer on stdout, the cost on stderr.

use std::io::IsTerminal;
use std::sync::Mutex;

use anyhow::Context;
use harness_benchmark::flags::TrialFlags;
use harness_log::{self, Outcome};
use harness_runtime::config::{RunConfig, SessionFlags};
use harness_runtime::run_loop::Totals;
use harness_runtime::session::{Audience, SessionOptions, SessionSummary};
use harness_runtime::task::{FoundTask, TaskSource, WorkspaceSource};
use tokio_util::sync::CancellationToken;

use super::terminal::Terminal;
use super::{LiveOutputMode, RunArgs};

mod words;

/// The run's config: a task file, a benchmark task folder, the N-th task of a dataset folder
/// (`--task-index`), or the words; and the task's name when it names the log folder.
fn config_of(
    args: &RunArgs,
    flags: &SessionFlags,
    trial: &TrialFlags,
) -> anyhow::Result<(RunConfig, Option<String>)> {
    let Some(path) = &args.task else {
        controller::launch::model_acts(trial)?;
        return Ok((words::config(&args.words, None, flags)?, None));
    };
    let found = match path {
        dir if dir.is_dir() && harness_benchmark::detect(dir).is_none() => {
            harness_runtime::task::pick_indexed(
                dir,
                args.task_index,
                harness_benchmark::TASK_FOLDERS,
            )?
        }
        _ => {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            FoundTask {
                name,
                source: match harness_benchmark::detect(path) {
                    Some(_) => TaskSource::Folder(path.clone()),
                    None => TaskSource::File(path.clone()),
                },
            }
        }
    };
    let indexed =
        args.task_index.is_some() && path.is_dir() && harness_benchmark::detect(path).is_none();
    if matches!(found.source, TaskSource::File(_)) {
        controller::launch::model_acts(trial)?;
    }
    let config = match &found.source {
        TaskSource::File(file) if indexed && !args.trust_tasks => {
            distrusted(&args.words, file, path, &found, flags)?
        }
        TaskSource::File(file) => words::config(&args.words, Some(file), flags)?,
        TaskSource::Folder(dir) => {
            if !args.words.is_empty() {
                anyhow::bail!(
                    "{} is a benchmark task: it brings its instruction, so give no task words",
                    dir.display()
                );
            }
            super::static_server::ensure(true)?;
            harness_benchmark::run::run_config(dir, &found.name, flags, trial)?
        }
    };
    Ok((config, indexed.then(|| found.name.replace('/', "-"))))
}

/// The config of a task file picked out of the dataset folder `dataset`, someone else's as in
/// `harness batch`: refused when it names things of this machine, its git workspace cloned
/// with none of this machine's git settings.
fn distrusted(
    words: &[String],
    file: &std::path::Path,
    dataset: &std::path::Path,
    found: &FoundTask,
    flags: &SessionFlags,
) -> anyhow::Result<RunConfig> {
    let spec = controller::batch::TaskSpec {
        id: found.name.replace('/', "-"),
        task: found.name.clone(),
        trial: 1,
        source: found.source.clone(),
        dataset: Some(dataset.to_owned()),
    };
    controller::batch::refuse_host_side_keys(std::slice::from_ref(&spec))?;
    let mut config = words::config(words, Some(file), flags)?;
    config.workspace = config.workspace.map(WorkspaceSource::untrusted);
    Ok(config)
}

/// Whether a running command's output is shown as it comes.
fn live(mode: LiveOutputMode) -> bool {
    match mode {
        LiveOutputMode::Always => true,
        LiveOutputMode::Never => false,
        LiveOutputMode::Auto => std::io::stderr().is_terminal(),
    }
}

/// `harness run`: the task's config and model, the session shown on the terminal, then what
/// it leaves (the answer, the cost).
pub(crate) async fn run(args: RunArgs) -> anyhow::Result<i32> {
    // Registered now, not when first awaited: a Ctrl-C while the sandbox starts must still end
    // in the cleanup the session does.
    let interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("installing the Ctrl-C handler")?;
    let flags = args.session.flags();
    let (config, task_id) = config_of(&args, &flags, &args.session.trial())?;
    let is_trial = config.sandbox.provider().is_some();
    let model = controller::launch::build_model(&config, None)?;
    eprintln!("model: {}", model.describe());
    let session_id = harness_log::new_session_id();
    let log_name = log_name(&args, task_id, &session_id)?;
    let options = SessionOptions {
        config,
        session_id,
        log_dir: args.session.log_dir.join(log_name),
        durability: args.session.log_durability.into(),
        sandbox_log_in_folder: false,
        gates: None,
        lease: None,
        warm: None,
        build_policy: harness_judge::build_policy,
        resume: None,
        subagent: None,
    };
    let cancel = CancellationToken::new();
    let on_interrupt = cancel_on(interrupt, cancel.clone());
    let metrics = args.metrics.start().await?;
    let totals = Mutex::new(Totals::default());
    let terminal = Terminal::new(live(args.live_output));
    let audience = Audience {
        observer: &terminal,
        asker: &terminal,
    };
    // A benchmark task is a trial: Harbor's files are written beside its log.
    let trial = is_trial.then(harness_benchmark::results::TrialLink::default);
    let summary =
        harness_benchmark::run_session(options, trial.as_ref(), model, audience, &totals, cancel)
            .await;
    on_interrupt.abort();
    print_end(&summary, &terminal);
    args.metrics.linger(metrics).await;
    Ok(crate::exit_code::of_session(summary.outcome))
}

/// The log folder's name: `--log-name`, the task's, else the session id. A named folder that
/// is there already is set aside first, so that a retried Job pod keeps its old log.
fn log_name(args: &RunArgs, task_id: Option<String>, session_id: &str) -> anyhow::Result<String> {
    let named = args.log_name.is_some() || task_id.is_some();
    let log_name = args
        .log_name
        .clone()
        .or(task_id)
        .unwrap_or_else(|| session_id.to_owned());
    if named {
        // A retried Job pod runs its task again under the same name; the old log is kept.
        let aside =
            harness_log::set_aside(&args.session.log_dir, &log_name).with_context(|| {
                format!(
                    "moving the earlier log {} aside",
                    args.session.log_dir.join(&log_name).display()
                )
            })?;
        if let Some(moved) = aside {
            eprintln!("an earlier attempt's log moved to {}", moved.display());
        }
    }
    Ok(log_name)
}

/// Cancels the session at the first Ctrl-C, from a task of its own (the session awaits other
/// things); the caller aborts it once the session has ended.
fn cancel_on(
    mut interrupt: tokio::signal::unix::Signal,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if interrupt.recv().await.is_some() {
            eprintln!();
            cancel.cancel();
        }
    })
}

/// What is printed once the session has ended: the answer on stdout (not for a session that
/// failed or was interrupted), and on stderr the cost and the calls the policy refused.
fn print_end(summary: &SessionSummary, terminal: &Terminal) {
    if !matches!(
        summary.outcome.logged(),
        Outcome::Error | Outcome::Interrupted
    ) {
        // On a terminal, the answer's control characters are shown, not sent; piped, it is
        // the model's text as it is.
        if std::io::stdout().is_terminal() {
            println!("{}", harness_log::text::terminal_safe(&summary.answer));
        } else {
            println!("{}", summary.answer);
        }
    }
    print_cost(&summary.totals);
    match terminal.refused() {
        0 => {}
        1 => eprintln!("1 call was refused by the policy (replay show says why)"),
        n => eprintln!("{n} calls were refused by the policy (replay show says why)"),
    }
}

/// The session's cost, said as far as it is known, and its subagents'.
fn print_cost(spent: &Totals) {
    if spent.model_calls > 0 {
        if spent.cost_known {
            eprintln!("cost=${:.4}", spent.cost);
        } else if spent.cost > 0.0 {
            eprintln!(
                "cost=unknown (at least ${:.4}; some usage has no known price)",
                spent.cost
            );
        } else {
            eprintln!("cost=unknown (the model has no known price)");
        }
    }
    if spent.subagents.count > 0 {
        eprintln!(
            "subagents: {} sessions, ${:.4} (with this session's: ${:.4})",
            spent.subagents.count,
            spent.subagents.cost,
            spent.cost_with_subagents()
        );
    }
}

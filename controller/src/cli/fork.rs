//! `harness replay fork` and `harness batch --fork-at`: the edge of `controller::fork`, a line
//! per child as it ends, then a table (or `forks.json`).

use std::path::{Path, PathBuf};

use crate::exit_code;
use anyhow::Context;
use harness_log::text::terminal_safe;

/// `harness replay fork`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct ForkArgs {
    /// The session folder to fork (or its events.jsonl).
    run: PathBuf,
    /// The event after which the children begin: between turns (`replay show` lists the
    /// steps; a step inside a turn is refused with the nearest ones a fork can start at).
    #[arg(long)]
    step: u64,
    /// How many children.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    count: u32,
    /// Children at once [default: as `harness batch`].
    #[arg(long)]
    parallel: Option<usize>,
    /// The fork's folder, instead of `<RUN>/forks/<fork-id>/` (which `replay show RUN` lists).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print `forks.json` (per child outcome and reward, with the shared prefix) instead of
    /// a table.
    #[arg(long)]
    json: bool,
    /// Keep the verified workspace at the step in `<RUN>/forks/.state-SEQ/` and start the next
    /// fork of this step from it (reused only while every entry is as it was verified: its
    /// size, times, inode, mode and owner; rebuilt otherwise). Costs the workspace's size on
    /// disk; saves rebuilding and deleting it.
    #[arg(long)]
    keep_state: bool,
    /// Take the log's check, model, `allow-all`, web search and limits as they are. By default
    /// a log is untrusted input: its check is not run, a scripted or replayed model is refused
    /// (name one with --model), `allow-all` and web search are not taken, and what was left of
    /// its turn, cost and subagent limits is capped at a run's defaults; each is said when it
    /// applies.
    #[arg(long)]
    trust_log: bool,
    /// The run flags; what they leave unset is the parent's (its model, tools and check, and
    /// what was left of its turn and cost limits, as --trust-log says). A scripted parent's
    /// children play its script on from where the parent was (with --trust-log, or --model
    /// naming the same script).
    #[command(flatten)]
    session: super::SessionArgs,
}

/// `replay fork`: the children, a line each as they end, then the table (or `forks.json`).
pub(crate) async fn fork_cmd(args: &ForkArgs) -> anyhow::Result<i32> {
    let count = args.count;
    let config = controller::fork::ForkConfig {
        run: args.run.clone(),
        seq: args.step,
        count,
        parallel: args.parallel.unwrap_or_else(|| {
            controller::batch::default_parallel(512 << 20, None)
                .0
                .min(count as usize)
        }),
        out: args.out.clone(),
        flags: args.session.flags(),
        trial: args.session.trial(),
        durability: args.session.log_durability.into(),
        keep_state: args.keep_state,
        trust_log: args.trust_log,
    };
    let json = args.json;
    let (cancel, on_interrupt) = cancel_on_interrupt()?;
    let display = ForkLines {
        done: std::sync::atomic::AtomicU32::new(0),
    };
    let summary = controller::fork::run_fork(config, cancel, &display).await;
    on_interrupt.abort();
    let summary = summary?;
    // What the logs say, on a terminal: control characters shown, not sent (the JSON keeps
    // its value).
    if json {
        let text = serde_json::to_string_pretty(&summary)?;
        println!("{}", terminal_safe(&text));
    } else {
        print!("{}", terminal_safe(&harness_replay::fork::table(&summary)));
    }
    let outcomes = || summary.children.iter().map(|child| child.outcome);
    Ok(
        if outcomes().any(|o| o == harness_log::Outcome::Interrupted) {
            exit_code::INTERRUPTED
        } else if outcomes().any(|o| o == harness_log::Outcome::Error) {
            exit_code::ERROR
        } else {
            exit_code::COMPLETED
        },
    )
}

/// A fork on the terminal: a line per child as it ends.
struct ForkLines {
    done: std::sync::atomic::AtomicU32,
}

impl controller::fork::ForkDisplay for ForkLines {
    fn note(&self, text: &str) {
        eprintln!("{}", harness_log::text::terminal_safe(text));
    }

    fn child(&self, child: &harness_replay::fork::ForkChild, count: u32) {
        let n = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        eprintln!(
            "[{n}/{count}] child {}: {} in {} turns, ${:.4} -> {}",
            child.child,
            child.outcome.as_str(),
            child.turns,
            child.cost,
            child.log_dir
        );
    }
}

/// `harness batch --fork-at SEQ --count K`: every recorded session among the folders forked at
/// the same step, one after another; a table of each fork's value, and `forks.json` over them.
pub(crate) async fn fork_batch(args: &super::BatchArgs, seq: u64) -> anyhow::Result<i32> {
    if args.attempts > 1 || args.resume || args.pool_size > 0 {
        anyhow::bail!(
            "--fork-at takes --count for the children, not --attempts, --resume or --pool-size"
        );
    }
    let sessions = harness_replay::session_dirs(&args.tasks)?;
    let out = args.out.clone().unwrap_or_else(|| {
        args.session
            .log_dir
            .join(format!("forks-{}", harness_log::new_session_id()))
    });
    if out.exists() {
        anyhow::bail!("{}: already exists; give --out a new folder", out.display());
    }
    eprintln!(
        "batch --fork-at {seq}: {} recorded sessions × {} children, into {}",
        sessions.len(),
        args.count,
        out.display()
    );
    // Ctrl-C interrupts the running fork's children (their logs end as interrupted) and
    // starts no other fork.
    let (cancel, on_interrupt) = cancel_on_interrupt()?;
    let rows = fork_each(args, seq, &sessions, &out, &cancel).await;
    on_interrupt.abort();
    let interrupted = cancel.is_cancelled();
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let file = ForksFile {
        step: seq,
        sessions: &rows,
    };
    let json = serde_json::to_string_pretty(&file)?;
    // In place of what is there: never through a link planted in a shared `--out`.
    harness_replay::folder::write_replacing(&out.join("forks.json"), (json + "\n").as_bytes())
        .with_context(|| format!("writing {}", out.join("forks.json").display()))?;
    let forked = print_forks(&rows, seq, &out);
    Ok(if interrupted {
        exit_code::INTERRUPTED
    } else if forked < rows.len() {
        exit_code::ERROR
    } else {
        exit_code::COMPLETED
    })
}

/// `forks.json` of `batch --fork-at`: the step, and what became of each session.
#[derive(serde::Serialize)]
struct ForksFile<'a> {
    step: u64,
    sessions: &'a [ForkRow],
}

/// One session of `batch --fork-at`: its fork, or why it was not forked.
#[derive(serde::Serialize)]
struct ForkRow {
    session: PathBuf,
    #[serde(flatten)]
    result: ForkResult,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum ForkResult {
    Fork(Box<harness_replay::fork::ForkSummary>),
    Error(String),
}

/// Forks each session in turn at `seq`, into its own folder of `out`, until Ctrl-C.
async fn fork_each(
    args: &super::BatchArgs,
    seq: u64,
    sessions: &[PathBuf],
    out: &Path,
    cancel: &tokio_util::sync::CancellationToken,
) -> Vec<ForkRow> {
    let parallel = args.parallel.unwrap_or_else(|| {
        controller::batch::default_parallel(512 << 20, None)
            .0
            .min(args.count as usize)
    });
    let display = ForkLines {
        done: std::sync::atomic::AtomicU32::new(0),
    };
    let mut rows = Vec::new();
    for (n, session) in sessions.iter().enumerate() {
        if cancel.is_cancelled() {
            break;
        }
        let name = session
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| format!("session-{n}"));
        let config = controller::fork::ForkConfig {
            run: session.clone(),
            seq,
            count: args.count,
            parallel,
            out: Some(out.join(&name)),
            flags: args.session.flags(),
            trial: args.session.trial(),
            durability: args.session.log_durability.into(),
            // Each session is forked once here: nothing would reuse a kept workspace.
            keep_state: false,
            trust_log: args.trust_log,
        };
        display.done.store(0, std::sync::atomic::Ordering::Relaxed);
        let result = match controller::fork::run_fork(config, cancel.clone(), &display).await {
            Ok(summary) => ForkResult::Fork(Box::new(summary)),
            Err(err) => {
                let why = format!("{}: not forked: {err:#}", session.display());
                eprintln!("{}", terminal_safe(&why));
                ForkResult::Error(format!("{err:#}"))
            }
        };
        rows.push(ForkRow {
            session: session.clone(),
            result,
        });
    }
    rows
}

/// The table of `batch --fork-at` and its last line; how many sessions were forked.
fn print_forks(rows: &[ForkRow], seq: u64, out: &Path) -> usize {
    println!(
        "{:<40} {:>8} {:>7} {:>8} {:>10}",
        "session", "children", "passed", "value", "cost"
    );
    let mut values = Vec::new();
    for row in rows {
        // A shared folder's names and a log's errors may hold escape sequences.
        let name = row
            .session
            .file_name()
            .map(|n| terminal_safe(&n.to_string_lossy()).into_owned())
            .unwrap_or_default();
        match &row.result {
            ForkResult::Fork(fork) => {
                values.extend(fork.value);
                println!(
                    "{name:<40} {:>8} {:>7} {:>8} {:>10}",
                    fork.children.len(),
                    fork.n_passed,
                    fork.value
                        .map_or_else(|| "-".to_owned(), |v| format!("{v:.3}")),
                    format!("${:.4}", fork.cost)
                );
            }
            ForkResult::Error(err) => {
                println!("{name:<40} not forked: {}", terminal_safe(err));
            }
        }
    }
    let forked = rows
        .iter()
        .filter(|row| matches!(row.result, ForkResult::Fork(_)))
        .count();
    let mean = (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64);
    println!(
        "{forked} of {} sessions forked at step {seq}; mean value {}; {}",
        rows.len(),
        mean.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}")),
        out.join("forks.json").display()
    );
    forked
}

/// A token Ctrl-C cancels (a fork's children then end as interrupted, their logs finished),
/// and the task that waits for it (abort it when done).
fn cancel_on_interrupt() -> anyhow::Result<(
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
)> {
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("installing the Ctrl-C handler")?;
    let on_interrupt = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if interrupt.recv().await.is_some() {
                cancel.cancel();
            }
        })
    };
    Ok((cancel, on_interrupt))
}

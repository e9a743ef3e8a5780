//! `harness batch`: the edge that shows a batch to a person (a live bar, or a line per event)
//! and handles Ctrl-C in two steps.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::exit_code;
use anyhow::Context;
use controller::batch::{
    self, BatchConfig, BatchObserver, Plan, Progress, ProgressState, SandboxSource, Stopping,
};
use harness_models::gate::Gates;
use harness_policy::Approve;
use harness_replay::report;
use harness_runtime::session::SessionSummary;

use super::{BatchArgs, ProgressMode};

pub(crate) async fn run(args: BatchArgs) -> anyhow::Result<i32> {
    // Registered first: a Ctrl-C at any point takes the two-step path.
    let interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("installing the Ctrl-C handler")?;
    if let Some(seq) = args.fork_at {
        return super::fork::fork_batch(&args, seq).await;
    }
    let rules = args
        .rate_limits
        .iter()
        .map(|rule| Gates::parse_rule(rule))
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    let config = batch_config(&args)?;
    super::static_server::ensure(
        config
            .tasks
            .iter()
            .any(|t| matches!(t.source, harness_runtime::task::TaskSource::Folder(_))),
    )?;
    let bar = match args.progress {
        ProgressMode::Bar => true,
        ProgressMode::Lines => false,
        ProgressMode::Auto => std::io::stdout().is_terminal(),
    };
    let metrics = args.metrics.start().await?;
    let stopping = Stopping::default();
    let on_interrupt = stop_on_interrupt(interrupt, stopping.clone());
    let progress = Arc::new(Progress::default());
    let display = Arc::new(Display {
        bar,
        pending: Mutex::new(Vec::new()),
        drawn: Mutex::new(0),
        start: start_line(&args, &config),
        expected: Mutex::new(BTreeMap::new()),
    });
    let painter = bar.then(|| paint_every_quarter_second(&display, &progress, config.parallel));
    let gates = Arc::new(Gates::new(rules));
    let result =
        batch::run_batch(&config, progress.clone(), display.clone(), gates, stopping).await;
    on_interrupt.abort();
    if let Some(painter) = painter {
        painter.abort();
        display.clear();
    }
    display.flush();
    let outcome = result?;
    let report = write_report(&config.out)?;
    args.metrics.linger(metrics).await;
    if outcome.interrupted {
        eprintln!(
            "to run the rest of this batch: {}",
            resume_command(std::env::args().collect(), &config.out)
        );
    }
    // The batch's whole state (a resumed one's earlier runs too), as its report says it.
    Ok(if outcome.interrupted {
        exit_code::INTERRUPTED
    } else if outcome.not_runnable > 0 {
        exit_code::NOT_RUNNABLE
    } else if outcome.failed > 0 || report.totals.failed > 0 {
        exit_code::SOME_FAILED
    } else {
        exit_code::COMPLETED
    })
}

/// The command line that runs the rest of an interrupted batch: this one's `words`, shell-quoted,
/// with `--resume` and `--out OUT` added where they are not given.
fn resume_command(words: Vec<String>, out: &std::path::Path) -> String {
    let given = |flag: &str| {
        words
            .iter()
            .any(|w| w == flag || w.starts_with(&format!("{flag}=")))
    };
    let (resume, has_out) = (given("--resume"), given("--out"));
    let mut words = words;
    if !resume {
        words.push("--resume".to_owned());
    }
    if !has_out {
        words.extend(["--out".to_owned(), out.display().to_string()]);
    }
    words
        .iter()
        .map(|word| shell_word(word))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `word` as a POSIX shell reads it back: as it is when plain, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The batch's config from its flags: its tasks, sandboxes, parallelism and folder.
fn batch_config(args: &BatchArgs) -> anyhow::Result<BatchConfig> {
    let tasks = batch::collect_tasks(&args.tasks, args.attempts)?;
    if !args.trust_tasks {
        batch::refuse_host_side_keys(&tasks)?;
    }
    let sandbox = SandboxSource::parse(args.session.sandbox.as_deref().unwrap_or("local"))
        .map_err(anyhow::Error::msg)?;
    let mut flags = args.session.flags();
    if flags.approve == Approve::Ask {
        eprintln!(
            "note: a batch has nobody to ask, so a call the policy asks about is refused \
             (--approve never); --approve auto approves them instead"
        );
        flags.approve = Approve::Never;
    }
    let benchmark = tasks
        .iter()
        .any(|t| matches!(t.source, harness_runtime::task::TaskSource::Folder(_)));
    let per_task = match (&sandbox, &flags.memory) {
        (_, None) if benchmark => 2 << 30,
        (SandboxSource::Docker, Some(text)) => harness_log::text::parse_size(text)
            .map_err(|why| anyhow::anyhow!("--memory {why}"))?
            as u64,
        (SandboxSource::Docker, None) => 1 << 30,
        (SandboxSource::Local | SandboxSource::Pool(_), _) => 512 << 20,
    };
    let pool_size = match &sandbox {
        SandboxSource::Pool(urls) => Some(urls.len()),
        SandboxSource::Local | SandboxSource::Docker => None,
    };
    let (parallel, parallel_reason) = match args.parallel {
        Some(0) => anyhow::bail!("--parallel must be at least 1"),
        Some(n) => (n, format!("{n} (--parallel)")),
        None => batch::default_parallel(per_task, pool_size),
    };
    // A resumed batch keeps the id its log began with (its Harbor job id with it).
    let batch_id = match (&args.out, args.resume) {
        (Some(out), true) => harness_replay::report::batch_id(out).unwrap_or_else(|| {
            out.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "batch".to_owned())
        }),
        _ => format!("batch-{}", harness_log::new_session_id()),
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.session.log_dir.join(&batch_id));
    Ok(BatchConfig {
        batch_id,
        tasks,
        flags,
        trial: args.session.trial(),
        sandbox,
        parallel,
        parallel_reason,
        retries: args.retries,
        attempts: args.attempts,
        pool_size: args.pool_size,
        out,
        resume: args.resume,
        durability: args.session.log_durability.into(),
        trust_tasks: args.trust_tasks,
    })
}

/// The batch's first line but its tasks, which are said once they are checked
/// (`Display::planned`).
struct StartLine {
    /// ` × 3 trials`, or nothing for one.
    trials: String,
    /// The parallelism, the sandboxes and the batch folder.
    settings: String,
}

fn start_line(args: &BatchArgs, config: &BatchConfig) -> StartLine {
    let benchmark = config
        .tasks
        .iter()
        .filter(|t| matches!(t.source, harness_runtime::task::TaskSource::Folder(_)))
        .count();
    let sandboxes = match (benchmark, config.tasks.len()) {
        (0, _) => format!(
            "sandbox {}",
            args.session.sandbox.as_deref().unwrap_or("local")
        ),
        (b, n) if b == n => "each in its own task image".to_owned(),
        _ => format!(
            "benchmark tasks in their own images, the others in sandbox {}",
            args.session.sandbox.as_deref().unwrap_or("local")
        ),
    };
    let trials = if args.attempts > 1 {
        format!(" × {} trials", args.attempts)
    } else {
        String::new()
    };
    StartLine {
        trials,
        settings: format!(
            "{}, {sandboxes}, log {}",
            config.parallel_reason,
            config.out.display()
        ),
    }
}

/// Ctrl-C once: no new tasks; twice: the running ones stop too.
fn stop_on_interrupt(
    mut interrupt: tokio::signal::unix::Signal,
    stopping: Stopping,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if interrupt.recv().await.is_some() {
            eprintln!(
                "\ninterrupted: no new tasks start; the running ones finish (Ctrl-C again to stop them)"
            );
            stopping.new_tasks.cancel();
        }
        if interrupt.recv().await.is_some() {
            eprintln!("\nstopping the running tasks and removing their sandboxes");
            stopping.running.cancel();
        }
    })
}

fn paint_every_quarter_second(
    display: &Arc<Display>,
    progress: &Arc<Progress>,
    parallel: usize,
) -> tokio::task::JoinHandle<()> {
    let (display, progress) = (display.clone(), progress.clone());
    tokio::spawn(async move {
        let started = Instant::now();
        loop {
            display.paint(&progress.snapshot(), started, parallel);
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

/// `report.json`, `report.html` and the table on stdout, all read back from the logs.
fn write_report(out: &std::path::Path) -> anyhow::Result<report::BatchReport> {
    let report = report::load(out, &harness_benchmark::results::HarborFiles)
        .context("reading the batch back for its report")?;
    let json = serde_json::to_vec_pretty(&report).context("writing the report")?;
    // In place of what is there, as `report.html`: never through a link planted in the folder.
    harness_replay::folder::write_replacing(&out.join("report.json"), &json)
        .with_context(|| format!("writing {}", out.join("report.json").display()))?;
    let html = report::write_html(out, &report)?;
    let mut lock = super::terminal::safe_stdout();
    report::write_text(&report, &mut lock).context("writing the report")?;
    writeln!(
        lock,
        "report: {} and report.json; logs: {}/<task>/",
        html.display(),
        out.display()
    )
    .and_then(|()| lock.flush())
    .context("writing the report")?;
    Ok(report)
}

/// The one writer of stdout while the batch runs: event lines, and in bar mode the bar.
struct Display {
    bar: bool,
    /// Lines waiting to be printed above the bar.
    pending: Mutex<Vec<String>>,
    /// Lines the bar took last time it was drawn.
    drawn: Mutex<usize>,
    start: StartLine,
    /// Trials the oracle plays whose task is broken on purpose: why, by log folder.
    expected: Mutex<BTreeMap<String, String>>,
}

impl Display {
    fn line(&self, text: String) {
        // Task names and errors are a dataset's words: their control characters are shown.
        let text = match harness_log::text::terminal_safe(&text) {
            std::borrow::Cow::Borrowed(_) => text,
            std::borrow::Cow::Owned(safe) => safe,
        };
        if self.bar {
            self.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(text);
        } else {
            println!("{text}");
        }
    }

    /// Erases the bar.
    fn clear(&self) {
        let mut drawn = self.drawn.lock().unwrap_or_else(|p| p.into_inner());
        if *drawn > 0 {
            print!("\x1b[{}F\x1b[J", *drawn);
            *drawn = 0;
        }
        let _ = std::io::stdout().flush();
    }

    /// Prints what is pending.
    fn flush(&self) {
        let lines: Vec<String> =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        for line in lines {
            println!("{line}");
        }
    }

    fn paint(&self, state: &ProgressState, started: Instant, parallel: usize) {
        self.clear();
        self.flush();
        if state.total == 0 && state.skipped == 0 {
            // Not started yet.
            return;
        }
        let width = 30;
        let filled = (width * state.done)
            .checked_div(state.total)
            .unwrap_or(width);
        let eta = if state.durations.is_empty() || state.done >= state.total {
            "--".to_owned()
        } else {
            let mean = state.durations.iter().sum::<Duration>() / state.durations.len() as u32;
            let remaining = (state.total - state.done) as u32;
            let at_once = parallel.max(1).min(state.total - state.done) as u32;
            clock(mean * remaining.div_ceil(at_once))
        };
        let mut lines = vec![format!(
            "[{}{}] {}/{} done  {} passed  {} failed  {} running{}  elapsed {}  left ~{eta}",
            "#".repeat(filled),
            ".".repeat(width - filled),
            state.done,
            state.total,
            state.passed,
            state.failed,
            state.running.len(),
            if state.retries > 0 {
                format!("  {} retried", state.retries)
            } else {
                String::new()
            },
            clock(started.elapsed()),
        )];
        for (task, running) in &state.running {
            let totals = *running.totals.lock().unwrap_or_else(|p| p.into_inner());
            let current = running
                .current
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map(|call| format!("  > {call}"))
                .unwrap_or_default();
            lines.push(format!(
                "  {task:<28} try {}  step {:>3}  tools {:>3}  ${:.4}  {}{current}",
                running.attempt,
                totals.turns,
                totals.tool_calls,
                totals.cost_with_subagents(),
                clock(running.started.elapsed())
            ));
        }
        // A line wider than the terminal would wrap and throw off the redraw.
        let columns = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<usize>().ok())
            .unwrap_or(100)
            .max(20);
        for line in &lines {
            let line = harness_log::text::terminal_safe(line);
            println!("{}", line.chars().take(columns - 1).collect::<String>());
        }
        *self.drawn.lock().unwrap_or_else(|p| p.into_inner()) = lines.len();
        let _ = std::io::stdout().flush();
    }
}

fn clock(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs >= 3600 {
        format!("{}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
    } else {
        format!("{}:{:02}", secs / 60, secs % 60)
    }
}

impl BatchObserver for Display {
    /// The batch's first line, its tasks counted once checked: `batch: 12 tasks (1 not
    /// runnable here: windows-only), …`.
    fn planned(&self, plan: &Plan) {
        let not_runnable = match plan.not_runnable.len() {
            0 => String::new(),
            n => format!(" ({n} not runnable here: {})", plan.not_runnable.join(", ")),
        };
        let line = format!(
            "batch: {}{}{not_runnable}, {}",
            harness_log::text::plural(plan.tasks, "task"),
            self.start.trials,
            self.start.settings
        );
        // Task names are a dataset's words: their control characters are shown.
        eprintln!("{}", harness_log::text::terminal_safe(&line));
        *self.expected.lock().unwrap_or_else(|p| p.into_inner()) = plan.expected_broken.clone();
    }

    fn task_started(&self, task: &str, attempt: u32) {
        if !self.bar {
            self.line(format!("started  {task} (attempt {attempt})"));
        }
    }

    fn task_finished(&self, task: &str, summary: &SessionSummary) {
        let expected = self
            .expected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(task)
            .cloned();
        // A failure its task's author expects is said so, not shouted.
        let (verdict, expected) = if summary.outcome.passed() {
            ("passed", String::new())
        } else if let Some(why) = expected {
            ("failed", format!(" (expected: {why})"))
        } else {
            ("FAILED", String::new())
        };
        let why = summary
            .outcome
            .failure_class()
            .map(|f| format!(" [{}]", f.as_str()))
            .unwrap_or_default();
        self.line(format!(
            "{verdict:<8} {task}{expected}: {}{why}, {}, {}, ${:.4}, {:.1} s",
            summary.outcome.logged().as_str(),
            harness_log::text::plural(summary.totals.turns, "turn"),
            harness_log::text::plural(summary.totals.tool_calls, "tool call"),
            summary.totals.cost_with_subagents(),
            summary.duration.as_secs_f64()
        ));
        if let Some(reason) = summary
            .reason
            .as_ref()
            .filter(|_| !summary.outcome.passed())
        {
            self.line(format!("         {task}: {reason}"));
        }
    }

    fn task_retried(&self, task: &str, attempt: u32, reason: &str) {
        self.line(format!("retry    {task} (attempt {attempt}): {reason}"));
    }

    fn note(&self, text: &str) {
        self.line(format!("note     {text}"));
    }
}

#[cfg(test)]
mod tests {
    use super::resume_command;

    /// Issue 57 §6: the command that finishes an interrupted batch is this one, quoted as a shell
    /// reads it, with `--resume` and the batch's folder added when they are not there.
    #[test]
    fn the_resume_command_is_this_one_with_resume_and_its_folder() {
        let words = |line: &[&str]| line.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        let out = std::path::Path::new("runs/batch-1");
        assert_eq!(
            resume_command(
                words(&["harness", "batch", "tasks dir", "--parallel", "2"]),
                out
            ),
            "harness batch 'tasks dir' --parallel 2 --resume --out runs/batch-1"
        );
        assert_eq!(
            resume_command(words(&["harness", "batch", "--out=x", "it's"]), out),
            "harness batch --out=x 'it'\\''s' --resume"
        );
    }
}

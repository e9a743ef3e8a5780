//! `harness replay …`: the command-line edge of `replay`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::exit_code;
use anyhow::Context;
use clap::Subcommand;
use harness_log::reader;
use harness_log::text::terminal_safe;
use harness_replay::{self, compare, metrics, render, report, restore};
use harness_runtime::sandbox::SandboxClient;

use super::{BuildArgs, ExportFormatArg, FormatArg};

mod rerunning;

use rerunning::{SandboxFlags, rerun_check, rerun_cmd};

#[derive(Debug, Subcommand)]
pub(crate) enum ReplayCommand {
    /// The session as a readable transcript (Markdown, or one self-contained HTML page).
    Show {
        /// A session folder (`runs/<session-id>`) or its events.jsonl.
        run: PathBuf,
        /// `md` (Markdown) or `html` (one self-contained page, with the step-time bars).
        #[arg(long, value_enum, default_value = "md")]
        format: FormatArg,
        /// Write here instead of stdout.
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
    /// The session in another tool's format: `atif` (Harbor's Agent Trajectory Interchange
    /// Format, v1.8), as JSON.
    Export {
        /// A session folder or its events.jsonl.
        run: PathBuf,
        /// The format to export to.
        #[arg(long, value_enum)]
        format: ExportFormatArg,
        /// Write here instead of stdout.
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
    /// Rebuild the workspace as it was after event SEQ, verifying every file's hash.
    Restore {
        run: PathBuf,
        /// The event after which to restore (0 or the initial snapshot's seq: as the agent found it).
        #[arg(long)]
        step: u64,
        /// An empty folder to write into.
        #[arg(long, required_unless_present = "sandbox")]
        to: Option<PathBuf>,
        /// Restore into a running sandbox (its workspace is replaced) instead.
        #[arg(long, value_name = "URL")]
        sandbox: Option<String>,
        /// The bearer token of the --sandbox URL, in a file.
        #[arg(long, value_name = "FILE")]
        sandbox_token_file: Option<PathBuf>,
        #[command(flatten)]
        tls: super::SandboxTlsArgs,
    },
    /// Events, turns, model calls, tokens, cost, tool calls and latency, errors, time split; one
    /// row per run.
    Metrics {
        /// Session folders, or folders of sessions.
        #[arg(required = true)]
        runs: Vec<PathBuf>,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// For a batch folder: also write `report.html` there, with each task's transcript in
        /// `transcripts/`.
        #[arg(long)]
        html: bool,
    },
    /// Two batches side by side: per task pass/fail flips, reward, cost, time and turn
    /// differences, calls per tool, and the tasks in only one of them.
    Compare {
        /// The batch folder to compare from (or a file in it, such as its report.json).
        a: PathBuf,
        /// The batch folder to compare with.
        b: PathBuf,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also write the comparison as one self-contained HTML page here.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
    /// Start K child sessions from the state after event SEQ: the workspace restored there
    /// (every hash verified) and the conversation as the model had it, each continuing live.
    /// The children's logs, and `forks.json` (each child's outcome, reward, cost and turns; the
    /// mean reward as the value of the state), go to `<RUN>/forks/<fork-id>/`.
    Fork(Box<super::fork::ForkArgs>),
    /// Re-execute the recorded tool calls on a fresh sandbox at the recorded initial state, and
    /// report the first divergence (exit code 6).
    Rerun {
        run: PathBuf,
        /// `local` (default), the URL of a running sandbox whose workspace is replaced, or
        /// `task`: the task's own containers (the default for a benchmark session).
        #[arg(long, value_name = "local|task|URL")]
        sandbox: Option<String>,
        /// `--sandbox task`: how to build the task's images again, as at its run.
        #[command(flatten)]
        build: BuildArgs,
        /// The bearer token of the --sandbox URL, in a file.
        #[arg(long, value_name = "FILE")]
        sandbox_token_file: Option<PathBuf>,
        #[command(flatten)]
        tls: super::SandboxTlsArgs,
        /// Also replace matches of this regex before comparing outputs (repeatable).
        #[arg(long, value_name = "REGEX")]
        normalize: Vec<String>,
        /// Run every call the log says was allowed without judging it again. By default a log
        /// is untrusted input: each call passes the current policy's rules first, and what
        /// they deny is not run.
        #[arg(long)]
        trust_log: bool,
        /// Rules to judge the calls by, added to the built-in ones (see SAFETY.md).
        #[arg(long, value_name = "FILE", conflicts_with = "trust_log")]
        policy: Option<PathBuf>,
        /// Also refuse the calls the rules would ask a person about (by default they run: the
        /// log says someone allowed them, and the rerun's sandbox is confined).
        #[arg(long, conflicts_with = "trust_log")]
        refuse_asks: bool,
        /// Call the MCP servers of this file again for the session's MCP calls, and compare
        /// their answers, instead of taking them from the log.
        #[arg(long, value_name = "FILE")]
        mcp: Option<PathBuf>,
    },
}

pub(crate) async fn run(command: ReplayCommand) -> anyhow::Result<i32> {
    match command {
        ReplayCommand::Show {
            run,
            format,
            output,
        } => show(&run, format.into(), output.as_deref()),
        ReplayCommand::Export {
            run,
            format: super::ExportFormatArg::Atif,
            output,
        } => export_atif(&run, output.as_deref()),
        ReplayCommand::Restore {
            run,
            step,
            to,
            sandbox,
            sandbox_token_file,
            tls,
        } => {
            restore_cmd(
                &run,
                step,
                to.as_deref(),
                sandbox.as_deref(),
                sandbox_token_file.as_deref(),
                &tls.client_tls(),
            )
            .await
        }
        ReplayCommand::Metrics { runs, json, html } => metrics_cmd(&runs, json, html),
        ReplayCommand::Fork(args) => super::fork::fork_cmd(&args).await,
        ReplayCommand::Compare { a, b, json, html } => compare_cmd(&a, &b, json, html.as_deref()),
        ReplayCommand::Rerun {
            run,
            sandbox,
            sandbox_token_file,
            tls,
            normalize,
            trust_log,
            policy,
            refuse_asks,
            build,
            mcp,
        } => {
            let build = build.flags();
            let check = rerun_check(trust_log, policy.as_deref(), refuse_asks)?;
            rerun_cmd(
                &run,
                SandboxFlags {
                    sandbox: sandbox.as_deref(),
                    token_file: sandbox_token_file.as_deref(),
                    tls: tls.client_tls(),
                },
                &normalize,
                check.as_ref(),
                &build,
                mcp.as_deref(),
            )
            .await
        }
    }
}

fn show(run: &Path, format: render::Format, output: Option<&Path>) -> anyhow::Result<i32> {
    let dir = reader::session_dir(run);
    let n_events = match output {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("creating {}", path.display()))?;
            let mut out = std::io::BufWriter::new(file);
            let n = render::render(&dir, format, &mut out)?;
            out.flush().context("writing the transcript")?;
            eprintln!("wrote {} ({n} events)", path.display());
            n
        }
        None => {
            // On a terminal, whatever the format: the log's escape sequences are shown.
            let mut out = std::io::BufWriter::new(super::terminal::safe_stdout());
            let n = render::render(&dir, format, &mut out)?;
            out.flush().context("writing the transcript")?;
            n
        }
    };
    if n_events == 0 {
        eprintln!("warning: the log has no events");
    }
    Ok(exit_code::COMPLETED)
}

fn token(file: Option<&Path>) -> anyhow::Result<Option<String>> {
    file.map(|file| {
        std::fs::read_to_string(file)
            .map(|t| t.trim().to_owned())
            .with_context(|| format!("reading {}", file.display()))
    })
    .transpose()
}

async fn restore_cmd(
    run: &Path,
    step: u64,
    to: Option<&Path>,
    sandbox: Option<&str>,
    token_file: Option<&Path>,
    tls: &harness_runtime::sandbox::ClientTls,
) -> anyhow::Result<i32> {
    let dir = reader::session_dir(run);
    let (state, base_seq) = restore::state_at(&dir, step)?;
    if step < base_seq {
        eprintln!(
            "note: step {step} precedes the initial snapshot (seq {base_seq}); restoring the workspace as the agent found it"
        );
    }
    let (target, _scratch) = match (to, sandbox) {
        (Some(to), _) => (to.to_owned(), None),
        (None, _) => {
            let scratch = tempfile::tempdir().context("creating a scratch folder")?;
            (scratch.path().join("workspace"), Some(scratch))
        }
    };
    let restored = restore::write_state(&dir, &state, &target)?;
    for problem in &restored.problems {
        eprintln!("mismatch: {}", terminal_safe(problem));
    }
    for note in &restored.notes {
        eprintln!("note: {}", terminal_safe(note));
    }
    eprintln!(
        "restored seq {step}: {} files, {} folders, {} symlinks; {} verified against the recorded hashes",
        restored.n_files,
        restored.n_dirs,
        restored.n_symlinks,
        restored.n_files as usize - restored.problems.len().min(restored.n_files as usize)
    );
    if let Some(url) = sandbox {
        let client = SandboxClient::with_tls(url, token(token_file)?, tls)?;
        client
            .wait_healthy(Duration::from_secs(10))
            .await
            .with_context(|| format!("reaching {url}"))?;
        let archive = restore::tar_folder(&target).context("packing the restored workspace")?;
        client
            .put_archive(archive)
            .await
            .with_context(|| format!("replacing the workspace of {url}"))?;
        eprintln!("the workspace of {url} now holds seq {step}");
    } else {
        eprintln!("in {}", target.display());
    }
    Ok(if restored.problems.is_empty() {
        exit_code::COMPLETED
    } else {
        exit_code::ERROR
    })
}

fn metrics_cmd(runs: &[PathBuf], json: bool, html: bool) -> anyhow::Result<i32> {
    // A batch folder is reported as a batch: its tasks, attempts and totals.
    if let [dir] = runs
        && report::is_batch(dir)
    {
        let report = report::load(dir, &harness_benchmark::results::HarborFiles)
            .with_context(|| format!("reading the batch {}", dir.display()))?;
        let mut out = super::terminal::safe_stdout();
        if json {
            serde_json::to_writer_pretty(&mut out, &report).context("writing JSON")?;
            writeln!(out).context("writing JSON")?;
        } else {
            report::write_text(&report, &mut out).context("writing the report")?;
        }
        out.flush().context("writing the report")?;
        if html {
            let path = report::write_html(dir, &report)?;
            eprintln!("wrote {}", path.display());
        }
        return Ok(exit_code::COMPLETED);
    }
    if html {
        anyhow::bail!("--html is for a batch folder (one with a batch log)");
    }
    let dirs = harness_replay::session_dirs(runs)?;
    let mut all = Vec::new();
    for dir in &dirs {
        all.push(metrics::measure(dir).with_context(|| format!("reading {}", dir.display()))?);
    }
    let mut out = super::terminal::safe_stdout();
    if json {
        serde_json::to_writer_pretty(&mut out, &all).context("writing JSON")?;
        writeln!(out).context("writing JSON")?;
    } else {
        metrics::write_table(&all, &mut out).context("writing the table")?;
    }
    out.flush().context("writing the table")?;
    Ok(exit_code::COMPLETED)
}

/// `replay compare A B`: the table or JSON to stdout, and the page to `html`.
fn compare_cmd(a: &Path, b: &Path, json: bool, html: Option<&Path>) -> anyhow::Result<i32> {
    let comparison = compare::load(a, b, &harness_benchmark::results::HarborFiles)?;
    let mut out = super::terminal::safe_stdout();
    if json {
        serde_json::to_writer_pretty(&mut out, &comparison).context("writing JSON")?;
        writeln!(out).context("writing JSON")?;
    } else {
        compare::write_text(&comparison, &mut out).context("writing the comparison")?;
    }
    out.flush().context("writing the comparison")?;
    if let Some(path) = html {
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut page = std::io::BufWriter::new(file);
        compare::write_html(&comparison, &mut page)
            .and_then(|()| page.flush())
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(exit_code::COMPLETED)
}

/// `replay export --format atif`: the trajectory as JSON, to stdout or a file.
fn export_atif(run: &Path, output: Option<&Path>) -> anyhow::Result<i32> {
    let dir = harness_log::reader::session_dir(run);
    let trajectory = harness_benchmark::atif::from_log(&dir)?;
    let text = serde_json::to_string_pretty(&trajectory)? + "\n";
    match output {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?
        }
        // The JSON's value is kept: only DEL and C1 are left raw by JSON, and their escapes are
        // JSON's own.
        None => print!("{}", terminal_safe(&text)),
    }
    Ok(crate::exit_code::COMPLETED)
}

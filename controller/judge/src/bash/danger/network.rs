//! Code from elsewhere: downloaded code run (piped to a shell, fed through `<(…)` or `$(…)`,
//! saved then run, or planted in text for later), and hidden code decoded then run
//! (`base64 -d | sh`, `eval "$(… | rev)"`).

use std::collections::{BTreeMap, HashSet};

use super::super::carried::{self, runs_stdin};
use super::super::options::{self, has_short, values};
use super::super::peel::{Program, program_of};
use super::super::{Command, Line, Origin, is_fetcher, is_interpreter, is_shell};
use super::Findings;
use crate::paths::normalize;
use crate::shell::{Dynamism, Word};

/// Whether a command runs code (a shell, an interpreter, `source`, `eval`).
fn runs_code(command: &Command) -> bool {
    command
        .program()
        .is_some_and(|p| is_shell(p) || is_interpreter(p) || matches!(p, "source" | "." | "eval"))
}

/// Whether text mentions a fetcher as a word.
fn mentions_fetcher(text: &str) -> bool {
    tokens(text).iter().any(|t| is_fetcher(basename(t)))
}

/// Programs that turn hidden text into code: decoders, decompressors, reversers.
fn is_decoder(program: &str) -> bool {
    matches!(
        program,
        "base64"
            | "base32"
            | "basenc"
            | "xxd"
            | "rev"
            | "openssl"
            | "gunzip"
            | "zcat"
            | "gzip"
            | "bzip2"
            | "bunzip2"
            | "bzcat"
            | "xz"
            | "unxz"
            | "xzcat"
            | "zstd"
            | "uudecode"
            | "tr"
            | "od"
    )
}

/// Whether text mentions a decoder as a word.
fn mentions_decoder(text: &str) -> bool {
    tokens(text).iter().any(|t| is_decoder(basename(t)))
}

fn basename(token: &str) -> &str {
    token.rsplit('/').next().unwrap_or(token)
}

/// Words and pipes of text that may be code in any language (quotes and brackets split it).
fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    for (at, c) in text.char_indices() {
        let separator = c.is_whitespace() || "'\"(){};&`|,<>".contains(c);
        if separator {
            if let Some(s) = start.take() {
                out.push(&text[s..at]);
            }
            if matches!(c, '|' | ';' | '&' | '\n') {
                out.push(&text[at..at + c.len_utf8()]);
            }
        } else if start.is_none() {
            start = Some(at);
        }
    }
    if let Some(s) = start {
        out.push(&text[s..]);
    }
    out
}

/// Whether text holds `FETCHER … | [sudo] SHELL` in any spelling: a download piped to code,
/// written somewhere to run later (an rc file, a git hook, an awk `system`).
pub fn plants_download_and_run(text: &str) -> bool {
    let tokens = tokens(text);
    let mut fetched = false;
    let mut piped = false;
    for token in tokens {
        match token {
            ";" | "&" | "\n" => (fetched, piped) = (false, false),
            "|" => piped = fetched,
            t if piped => {
                let name = basename(t);
                if matches!(name, "sudo" | "doas" | "env" | "nohup") || t.starts_with('-') {
                    continue;
                }
                if is_shell(name) || is_interpreter(name) || name == "source" {
                    return true;
                }
                piped = false;
            }
            t if is_fetcher(basename(t)) => fetched = true,
            _ => {}
        }
    }
    false
}

/// Every way the line runs what it downloads.
pub(super) fn download_and_run(line: &Line, out: &mut Findings) {
    let mut pipelines: BTreeMap<usize, Vec<(usize, &Command)>> = BTreeMap::new();
    for command in &line.commands {
        out.running = command.runs(line);
        if let Some((id, stage)) = command.pipeline {
            pipelines.entry(id).or_default().push((stage, command));
        }
        let program = command.program().unwrap_or_default();
        if runs_code(command) && dynamic_code_mentions(command, mentions_fetcher) {
            out.deny(format!(
                "runs what it downloads ({program} with a download in its arguments)"
            ));
        } else if runs_code(command) && dynamic_code_mentions(command, mentions_decoder) {
            out.deny(format!(
                "runs code it decodes ({program} with a decoder in its arguments)"
            ));
        }
    }
    for stages in pipelines.values() {
        out.running = stages.iter().all(|(_, c)| c.runs(line));
        piped_code(stages, out);
    }
    out.running = true;
    saved_then_run(line, out);
    for unit in &line.units {
        let planted = match &unit.origin {
            Origin::Data => plants_download_and_run(&unit.source),
            _ => false,
        };
        if planted {
            out.deny("plants a download piped to a shell");
        }
    }
    for command in line.commands.iter() {
        if let Some(program) = command.program()
            && is_interpreter(program)
            && let Program::Inline(code) = program_of(program, &command.argv)
            && plants_download_and_run(code.text())
        {
            out.deny(format!(
                "runs a download piped to a shell from {program} code"
            ));
        }
    }
}

/// `bash <(curl …)`, `sh -c "$(curl …)"`, `eval "$(base64 -d …)"`, `bash <<< "$(curl …)"`:
/// code made by a command whose text `mentions` says what it is.
fn dynamic_code_mentions(command: &Command, mentions: fn(&str) -> bool) -> bool {
    let substituted = |word: &Word| {
        matches!(
            word,
            Word::Dynamic {
                why: Dynamism::CommandSubstitution | Dynamism::ProcessSubstitution,
                ..
            }
        ) && mentions(word.text())
    };
    command.args().iter().any(substituted)
        || command
            .redirects
            .iter()
            .any(|r| r.reads() && substituted(&r.target))
}

/// A pipeline whose later stage runs code from standard input.
fn piped_code(stages: &[(usize, &Command)], out: &mut Findings) {
    let mut stages = stages.to_vec();
    stages.sort_by_key(|(stage, _)| *stage);
    let first = |test: fn(&str) -> bool| {
        stages
            .iter()
            .position(|(_, c)| c.program().is_some_and(test))
    };
    let (fetch, decode) = (first(is_fetcher), first(is_decoder));
    for (index, (_, command)) in stages.iter().enumerate() {
        if index == 0 || !runs_stdin(command) {
            continue;
        }
        let program = command.program().unwrap_or_default();
        if fetch.is_some_and(|at| at < index) {
            out.deny(format!("pipes a download into {program}"));
        } else if decode.is_some_and(|at| at < index) {
            out.deny(format!("pipes code it decodes into {program}"));
        } else {
            out.ask(format!("runs code from a pipe ({program})"));
        }
    }
}

/// `curl -o x.sh URL && sh x.sh`: a file a fetcher wrote, run later in the line.
fn saved_then_run(line: &Line, out: &mut Findings) {
    let mut saved: HashSet<String> = HashSet::new();
    for command in &line.commands {
        out.running = command.runs(line);
        let Some(program) = command.program() else {
            continue;
        };
        if is_fetcher(program) {
            saved.extend(fetched_files(command));
            continue;
        }
        let run = carried::script_run(command);
        if let Some(file) = run
            && saved.contains(&normalize(&file))
        {
            out.deny(format!("runs what it downloads ({file})"));
        }
    }
    out.running = true;
}

/// Files a fetcher writes: `-o F`, `-O` (the URL's name), `wget`'s default, `> F`.
fn fetched_files(command: &Command) -> Vec<String> {
    let args = command.args();
    let mut files: Vec<String> = Vec::new();
    let program = command.program().unwrap_or_default();
    let (short, long, valued) = if program == "wget" {
        ('O', "--output-document", "OoaPeUtTwQ")
    } else {
        ('o', "--output", "oOdFHuXAeEKrTmwy")
    };
    files.extend(
        values(args, Some(short), Some(long), valued)
            .iter()
            .map(|w| w.text().to_owned()),
    );
    let remote_name = program == "wget"
        || has_short(args, 'O', valued)
        || args.iter().any(|w| w.text() == "--remote-name");
    if remote_name && files.is_empty() {
        for (_, url) in options::operands(args, &[]) {
            let name = url
                .text()
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or_default();
            files.push(name.to_owned());
        }
    }
    for redirect in command.redirects.iter().filter(|r| !r.reads()) {
        files.push(redirect.target.text().to_owned());
    }
    files
        .iter()
        .filter(|f| *f != "-")
        .map(|f| normalize(f))
        .collect()
}

//! A `bash` command line as the policy judges it: every simple command it would run, with
//! wrappers peeled (`nohup`, `timeout`, `env`, `sudo`, `xargs` …), variables set earlier in the
//! line substituted, and the code it hands to a shell (`sh -c`, `eval`, `alias`, here-docs fed
//! to a shell, `git -c core.fsmonitor=…`) parsed and judged as commands too.
//!
//! Strings that are only data (an `echo`'s words, a commit message, a comment) are parsed as
//! well, but only to find what must be denied there: a planted `curl … | sh`, a credential path.

mod carried;
mod danger;
mod expand;
mod git;
mod options;
mod peel;
pub mod readonly;

use std::collections::HashMap;

pub use danger::{Finding, findings, plants_download_and_run, repository_metadata};
pub use git::{repo_config_runs_programs, repo_config_runs_programs_at, start_folder};
pub(crate) use options::{operands, pattern_positions};
pub use readonly::{ReadOnly, default_read_only};

use super::paths::normalize;
use super::shell::{self, Dynamism, Redirect, SimpleCommand, Word};

/// How deep code inside code is followed (`sh -c "eval 'bash -c …'"`).
const MAX_CODE_DEPTH: usize = 4;
/// How many alternatives a command takes when its variables have several possible values.
const MAX_ALTERNATIVES: usize = 16;
/// Strings longer than this are not parsed as data (they are still checked as words).
const MAX_DATA_SCAN: usize = 64 * 1024;

/// Where the code of a unit came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The command line itself.
    Line,
    /// Handed to a program that runs it as shell code (`sh -c`, `eval`, `watch` …); the name
    /// says which.
    Code(String),
    /// Only data (an argument, a comment); parsed to find planted dangers.
    Data,
}

/// A piece of shell source the line runs (or carries).
#[derive(Debug, Clone)]
pub struct Unit {
    pub source: String,
    pub origin: Origin,
    pub depth: usize,
}

/// Where a command runs, relative to the workspace root, as far as `cd`s in the line tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cwd {
    /// A folder inside the workspace (`"."` for the root).
    Inside(String),
    /// A known folder outside it (`cd /proc/1`, `cd ~/.azure`; a persistent shell's folder, as
    /// the server reports it): relative paths are judged as joined to it.
    At(String),
    /// Somewhere unknown that a `cd` of the line moved to (`cd ..`, `cd "$dir"`).
    Elsewhere,
    /// Somewhere unknown from the start: a persistent shell whose folder the sandbox did not
    /// say. Relative paths are judged as from anywhere; a relative delete is for a person.
    Unknown,
}

/// One simple command as it will run.
#[derive(Debug, Clone)]
pub struct Command {
    /// The words after peeling wrappers; `argv[0]` is the program as written.
    pub argv: Vec<Word>,
    pub assignments: Vec<(String, Word)>,
    pub redirects: Vec<Redirect>,
    /// Enclosing constructs, outermost first (`|`, `$()`, `<()`, `subshell` …).
    pub context: Vec<&'static str>,
    /// `(pipeline, stage)`; pipeline numbers are unique across units.
    pub pipeline: Option<(usize, usize)>,
    /// Wrappers peeled off, outermost first.
    pub wrappers: Vec<String>,
    /// The unit it belongs to.
    pub unit: usize,
    pub cwd: Cwd,
    /// A variable was replaced by a value set elsewhere in the line: judged, never allowed.
    pub substituted: bool,
    /// `xargs` appends words read from standard input.
    pub stdin_args: bool,
    /// The command as written, wrappers and all (for pattern rules such as `sudo *`).
    pub as_written: String,
}

impl Command {
    /// The program's base name (`/bin/rm` → `rm`), when it is static.
    pub fn program(&self) -> Option<&str> {
        let first = self.argv.first()?.as_static()?;
        Some(first.rsplit('/').next().unwrap_or(first))
    }

    /// The words after the program.
    pub fn args(&self) -> &[Word] {
        self.argv.get(1..).unwrap_or_default()
    }

    /// The command as text for pattern rules: words (values when static) and redirects.
    pub fn canonical(&self) -> String {
        let mut parts: Vec<String> = self.argv.iter().map(|w| w.text().to_owned()).collect();
        for redirect in &self.redirects {
            parts.push(format!(
                "{}{} {}",
                redirect.fd.as_deref().unwrap_or_default(),
                redirect.op,
                redirect.target.text()
            ));
        }
        parts.join(" ")
    }

    /// Whether the command is in the command line's own code (not only in data).
    pub fn runs(&self, line: &Line) -> bool {
        line.units[self.unit].origin != Origin::Data
    }
}

/// What a command line runs.
#[derive(Debug, Clone, Default)]
pub struct Line {
    pub units: Vec<Unit>,
    pub commands: Vec<Command>,
    /// Why the line (or code it runs) cannot be fully classified.
    pub unknown: Vec<String>,
    /// Redirects on compound commands (`{ …; } > f`).
    pub compound_redirects: Vec<Redirect>,
    /// Comments of the line (data: scanned, never run).
    pub comments: Vec<String>,
    next_pipeline: usize,
    /// Files the line fills with known text (`echo … > f`), by path from the root.
    written: HashMap<String, String>,
}

impl Line {
    /// Parses and resolves a command line that runs from the workspace root.
    pub fn parse(source: &str) -> Line {
        Line::parse_from(source, Cwd::Inside(".".to_owned()))
    }

    /// Parses and resolves a command line that runs from `cwd` (a persistent shell's folder).
    pub fn parse_from(source: &str, cwd: Cwd) -> Line {
        let mut line = Line::default();
        line.add_unit(source.to_owned(), &Origin::Line, 0, cwd);
        line
    }

    /// The commands that run (not those found in data).
    pub fn running(&self) -> impl Iterator<Item = &Command> {
        self.commands.iter().filter(|c| c.runs(self))
    }

    /// Adds a unit of source and everything in it. Code runs from `cwd`.
    fn add_unit(&mut self, source: String, origin: &Origin, depth: usize, cwd: Cwd) {
        if depth > MAX_CODE_DEPTH {
            self.unknown
                .push("code nested too deep to follow".to_owned());
            return;
        }
        if *origin == Origin::Data
            && (source.len() > MAX_DATA_SCAN || !carried::looks_like_code(&source))
        {
            return;
        }
        let mut analysis = shell::analyse(&source);
        // `{rm,-rf,~}` at the start of a command is no syntax to the parser (a `{` opens a
        // group), but bash expands it into the command `rm -rf ~`: judge that.
        if !analysis.unknown.is_empty()
            && let Some(expanded) = expand::leading_brace_command(&source)
        {
            let retried = shell::analyse(&expanded);
            if retried.unknown.is_empty() {
                analysis = retried;
            }
        }
        let unit = self.units.len();
        self.units.push(Unit {
            source,
            origin: origin.clone(),
            depth,
        });
        if *origin != Origin::Data {
            self.unknown.extend(analysis.unknown.iter().cloned());
            self.compound_redirects
                .extend(analysis.compound_redirects.iter().cloned());
        }
        let base = self.next_pipeline;
        let mut highest = base;
        let vars = variables(&analysis);
        let mut cwd = cwd;
        let first = self.commands.len();
        for simple in &analysis.commands {
            let pipeline = simple.pipeline.map(|(id, stage)| (base + id, stage));
            highest = highest.max(pipeline.map_or(0, |(id, _)| id + 1));
            for command in alternatives(simple, &vars) {
                let command = Command {
                    pipeline,
                    unit,
                    cwd: cwd.clone(),
                    ..command
                };
                cwd = after_cd(&command, cwd);
                self.add_command(command, depth);
            }
        }
        self.next_pipeline = highest.max(self.next_pipeline);
        self.piped_code(first, unit, depth);
        for comment in analysis.comments {
            let text = comment.trim_start_matches('#').to_owned();
            self.comments.push(comment);
            self.add_unit(text, &Origin::Data, depth + 1, Cwd::Inside(".".to_owned()));
        }
    }

    /// Peels wrappers, records the command, and follows the code and data it carries.
    fn add_command(&mut self, command: Command, depth: usize) {
        let peeled = peel::peel(command);
        let command = peeled.command;
        // `echo . | xargs rm -rf`: the command as it runs with the words fed to it, judged too.
        let fed = command
            .stdin_args
            .then(|| expand::fed_words(&self.commands, &command))
            .flatten()
            .map(|words| {
                let mut fed = command.clone();
                fed.argv.extend(words);
                fed.stdin_args = false;
                fed
            });
        let mut code = peeled.code;
        code.extend(carried::stdin_code(&command));
        if let Some(file) = carried::script_run(&command)
            && let Some(text) = self.written.get(&carried::resolve(&file, &command.cwd))
        {
            code.push((format!("{file}, written earlier in the line"), text.clone()));
        }
        self.unknown.extend(peeled.unknown);
        for (name, text) in &code {
            self.add_unit(
                text.clone(),
                &Origin::Code(name.clone()),
                depth + 1,
                command.cwd.clone(),
            );
        }
        self.written.extend(carried::written(&command));
        let data = carried::data_strings(&command, &code);
        let cwd = command.cwd.clone();
        self.commands.push(command);
        self.commands.extend(fed);
        for text in data {
            self.add_unit(text, &Origin::Data, depth + 1, cwd.clone());
        }
    }

    /// `echo 'rm -rf x' | bash`: what earlier stages print is code for a later one that runs
    /// its standard input.
    fn piped_code(&mut self, first: usize, unit: usize, depth: usize) {
        let mut found = Vec::new();
        let commands = &self.commands[first..];
        for taker in commands.iter().filter(|c| c.unit == unit) {
            let origin = if carried::runs_stdin(taker) {
                Origin::Code(format!(
                    "piped into {}",
                    taker.program().unwrap_or_default()
                ))
            } else if carried::plants_stdin(taker) {
                Origin::Data
            } else {
                continue;
            };
            let Some((id, stage)) = taker.pipeline else {
                continue;
            };
            for feeder in commands.iter().filter(|c| c.unit == unit) {
                if let Some((feeder_id, feeder_stage)) = feeder.pipeline
                    && feeder_id == id
                    && feeder_stage < stage
                    && let Some(text) = carried::printed(feeder)
                {
                    found.push((origin.clone(), text, taker.cwd.clone()));
                }
            }
        }
        for (origin, text, cwd) in found {
            self.add_unit(text, &origin, depth + 1, cwd);
        }
    }
}

/// What the source sets: each variable's values (`x=…`, `for x in …`), the positional
/// parameters (`set -- a b`), and `IFS`.
#[derive(Default)]
struct Variables {
    values: HashMap<String, Vec<Word>>,
    positional: Vec<Vec<Word>>,
    ifs: Option<String>,
}

/// The values each variable is given anywhere in the source.
fn variables(analysis: &shell::Analysis) -> Variables {
    let mut vars = Variables::default();
    for command in &analysis.commands {
        if command.argv.is_empty() {
            for (name, value) in &command.assignments {
                if name == "IFS" {
                    vars.ifs = value.as_static().map(str::to_owned);
                }
                vars.values
                    .entry(name.clone())
                    .or_default()
                    .push(value.clone());
            }
        }
        let words: Vec<&str> = command.argv.iter().map(Word::text).collect();
        if words.first() == Some(&"set")
            && words
                .get(1)
                .is_some_and(|w| *w == "--" || !w.starts_with(['-', '+']))
        {
            let skip = if words[1] == "--" { 2 } else { 1 };
            vars.positional.push(command.argv[skip..].to_vec());
        }
    }
    for (name, values) in &analysis.loops {
        vars.values
            .entry(name.clone())
            .or_default()
            .extend(values.iter().cloned());
    }
    vars
}

/// The name a word expands, when it is exactly one variable: `$x`, `${x}`, `"$x"`, `"$@"`.
fn lone_variable(raw: &str) -> Option<(&str, bool)> {
    let (inner, quoted) = match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(inner) => (inner, true),
        None => (raw, false),
    };
    let name = inner.strip_prefix('$')?;
    let name = name
        .strip_prefix('{')
        .and_then(|n| n.strip_suffix('}'))
        .unwrap_or(name);
    let valid = matches!(name, "@" | "*")
        || (!name.is_empty()
            && name.chars().enumerate().all(|(i, c)| {
                c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())
            }));
    valid.then_some((name, quoted))
}

/// The words a variable's value becomes: split on `IFS` (or blanks) unless quoted.
fn expand(value: &Word, quoted: bool, ifs: Option<&str>) -> Vec<Word> {
    match (value, quoted) {
        (Word::Static(text), false) => {
            let split = |c: char| match ifs {
                Some(ifs) => ifs.contains(c),
                None => c.is_whitespace(),
            };
            text.split(split)
                .filter(|part| !part.is_empty())
                .map(|part| Word::Static(part.to_owned()))
                .collect()
        }
        _ => vec![value.clone()],
    }
}

/// The command once, plus once per combination of known values of its variables.
fn alternatives(simple: &SimpleCommand, vars: &Variables) -> Vec<Command> {
    let base = Command {
        argv: expand::braces_spliced(&simple.argv),
        assignments: simple.assignments.clone(),
        redirects: simple.redirects.clone(),
        context: simple.context.clone(),
        pipeline: None,
        wrappers: Vec::new(),
        unit: 0,
        cwd: Cwd::Elsewhere,
        substituted: false,
        stdin_args: false,
        as_written: String::new(),
    };
    let mut out = vec![base];
    // From the last word back, so earlier positions stay put as words are spliced in.
    for (index, word) in simple.argv.iter().enumerate().rev() {
        let Word::Dynamic {
            raw,
            why: Dynamism::Parameter,
        } = word
        else {
            continue;
        };
        let Some((name, quoted)) = lone_variable(raw) else {
            continue;
        };
        let choices: Vec<Vec<Word>> = if matches!(name, "@" | "*") {
            vars.positional.clone()
        } else {
            let values = vars.values.get(name).map(Vec::as_slice).unwrap_or_default();
            values
                .iter()
                .map(|v| expand(v, quoted, vars.ifs.as_deref()))
                .collect()
        };
        let mut next = Vec::new();
        for command in &out {
            for words in &choices {
                let mut replaced = command.clone();
                replaced.argv.splice(index..=index, words.iter().cloned());
                replaced.substituted = true;
                next.push(replaced);
            }
        }
        next.truncate(MAX_ALTERNATIVES);
        out.extend(next);
        out.truncate(MAX_ALTERNATIVES);
    }
    out
}

/// The working folder after a command: `cd`/`pushd` move it, anything else leaves it.
fn after_cd(command: &Command, cwd: Cwd) -> Cwd {
    if !matches!(command.program(), Some("cd" | "pushd" | "popd")) {
        return cwd;
    }
    let operands: Vec<&Word> = command
        .args()
        .iter()
        .filter(|w| !w.text().starts_with('-') || w.text() == "-")
        .collect();
    let [target] = operands.as_slice() else {
        return Cwd::Elsewhere;
    };
    // `cd ~`, `cd ~/x`, `cd $HOME/x`: a home, which the credential checks know.
    let text = target.text().trim_matches('"');
    for prefix in ["~", "$HOME", "${HOME}"] {
        if let Some(rest) = text.strip_prefix(prefix)
            && (rest.is_empty() || rest.starts_with('/'))
            && !rest.contains(['$', '`', '*', '?'])
        {
            return Cwd::At(normalize(&format!("~{rest}")));
        }
    }
    let Some(path) = target.as_static() else {
        return Cwd::Elsewhere;
    };
    if path == "-" {
        return Cwd::Elsewhere;
    }
    if path.starts_with('/') {
        return Cwd::At(normalize(path));
    }
    match cwd {
        Cwd::Inside(from) => {
            let joined = normalize(&format!("{from}/{path}"));
            if joined == ".." || joined.starts_with("../") {
                Cwd::Elsewhere
            } else {
                Cwd::Inside(joined)
            }
        }
        Cwd::At(from) => Cwd::At(normalize(&format!("{from}/{path}"))),
        Cwd::Elsewhere | Cwd::Unknown => Cwd::Elsewhere,
    }
}

/// Program names that run code given to them (shells and language interpreters).
pub fn is_shell(program: &str) -> bool {
    matches!(
        program,
        "sh" | "bash" | "zsh" | "dash" | "ksh" | "mksh" | "ash" | "fish" | "csh" | "tcsh" | "rbash"
    )
}

/// Language interpreters (not shells) that read a program from a file, `-`, or stdin.
pub fn is_interpreter(program: &str) -> bool {
    let stem = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    matches!(
        stem,
        "python"
            | "pypy"
            | "perl"
            | "ruby"
            | "node"
            | "nodejs"
            | "php"
            | "lua"
            | "tclsh"
            | "Rscript"
            | "deno"
            | "bun"
            | "osascript"
            | "jshell"
            | "irb"
    )
}

/// Programs that fetch from the network.
pub fn is_fetcher(program: &str) -> bool {
    matches!(
        program,
        "curl" | "wget" | "fetch" | "aria2c" | "http" | "https" | "xh" | "lwp-request" | "GET"
    )
}

/// The text of a word without its double quotes (for dynamic words, as far as the shape of a
/// path goes: `"${HOME:?}"/` is `${HOME:?}/`).
pub fn unquoted(word: &Word) -> String {
    match word {
        Word::Static(text) => text.clone(),
        Word::Dynamic { raw, .. } => raw.replace('"', ""),
    }
}

#[cfg(test)]
mod tests;

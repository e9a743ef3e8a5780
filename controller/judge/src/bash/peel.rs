//! Wrappers peeled off a command (`nohup rm …` is judged as `rm …`), and the shell code a
//! command hands on to be run (`sh -c CODE`, `eval`, `watch`, `su -c`, `alias`, `trap`,
//! `find -exec`, variables such as `PAGER` …).

use super::{Command, git, is_interpreter, is_shell, options};
use crate::shell::Word;

/// A command with its wrappers peeled, and the code it runs.
pub(crate) struct Peeled {
    pub(crate) command: Command,
    /// (who runs it, source) for each piece of static code.
    pub(crate) code: Vec<(String, String)>,
    pub(crate) unknown: Vec<String>,
}

/// Environment variables whose value some program runs as a command.
const CODE_VARIABLES: &[&str] = &[
    "PAGER",
    "MANPAGER",
    "GIT_PAGER",
    "SYSTEMD_PAGER",
    "EDITOR",
    "VISUAL",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "BROWSER",
    "PROMPT_COMMAND",
    "BASH_ENV",
    "ENV",
    "LESSOPEN",
    "LESSCLOSE",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "PYTHONSTARTUP",
    "PERL5OPT",
    "NODE_OPTIONS",
    "RUBYOPT",
];

/// Whether an environment variable names a program that something will run.
pub(crate) fn runs_code(variable: &str) -> bool {
    CODE_VARIABLES.contains(&variable) || variable.starts_with("GIT_CONFIG_")
}

/// How a shell or interpreter gets its program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Program {
    /// `-c CODE` (shells) or `-e`/`-c`/`-r` (interpreters).
    Inline(Word),
    /// A script file, and its position in argv.
    Script(Word),
    /// Standard input (`sh`, `sh -s`, `bash -`, `python3`).
    Stdin,
    /// Something else: a module (`python3 -m pytest`), `--version` …
    Other,
}

/// Which options of a shell or interpreter take a value, and which take the program inline.
fn option_shape(program: &str) -> (&'static [&'static str], &'static [&'static str]) {
    if is_shell(program) {
        (
            &["-o", "+o", "-O", "+O", "--rcfile", "--init-file"],
            &["-c"],
        )
    } else if program.starts_with("python") || program.starts_with("pypy") {
        (&["-W", "-X", "--check-hash-based-pycs"], &["-c"])
    } else if program.starts_with("perl") {
        (&["-I", "-M", "-m", "-x"], &["-e", "-E"])
    } else if program.starts_with("ruby") {
        (&["-I", "-r", "-C", "-E"], &["-e"])
    } else if program.starts_with("node") || program == "deno" || program == "bun" {
        (
            &["-r", "--require", "--import", "--loader"],
            &["-e", "--eval", "-p", "--print"],
        )
    } else if program == "php" {
        (&["-c", "-d", "-z"], &["-r"])
    } else {
        (&[], &["-e", "-c"])
    }
}

/// How `argv` (program first) gets the code it runs, for shells and interpreters.
pub(crate) fn program_of(program: &str, argv: &[Word]) -> Program {
    let (valued, inline) = option_shape(program);
    let mut words = argv.iter().skip(1);
    while let Some(word) = words.next() {
        let text = word.text();
        if text == "-" || text == "-s" {
            return Program::Stdin;
        }
        if text == "--" {
            return words
                .next()
                .map_or(Program::Stdin, |w| Program::Script(w.clone()));
        }
        if inline.contains(&text) {
            return words
                .next()
                .map_or(Program::Other, |w| Program::Inline(w.clone()));
        }
        // `-lc CODE`, `-ec CODE`: clustered short flags ending in the inline one.
        if is_shell(program)
            && text.starts_with('-')
            && !text.starts_with("--")
            && text.contains('c')
        {
            return words
                .next()
                .map_or(Program::Other, |w| Program::Inline(w.clone()));
        }
        if text == "-m" && is_interpreter(program) {
            return Program::Other;
        }
        if valued.contains(&text) {
            words.next();
            continue;
        }
        if text.starts_with('-') || text.starts_with('+') {
            if text.starts_with("--version") || text == "-V" || text == "--help" {
                return Program::Other;
            }
            continue;
        }
        return Program::Script(word.clone());
    }
    Program::Stdin
}

/// The index of the first word after options, where options taking a value are `valued`;
/// `None` when the words run out.
fn after_options(argv: &[Word], start: usize, valued: &[&str]) -> Option<usize> {
    let mut at = start;
    while let Some(word) = argv.get(at) {
        let text = word.text();
        if text == "--" {
            return (at + 1 < argv.len()).then_some(at + 1);
        }
        if !text.starts_with('-') || text == "-" {
            return Some(at);
        }
        let takes_value = valued.contains(&text);
        at += if takes_value { 2 } else { 1 };
    }
    None
}

/// Shell-quotes words for re-parsing (`find -exec` and `watch` turn argv into code).
fn join_words(words: &[Word]) -> String {
    words
        .iter()
        .map(|word| match word {
            Word::Static(text) => format!("'{}'", text.replace('\'', r"'\''")),
            Word::Dynamic { raw, .. } => raw.clone(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The index where the wrapped command starts, when `command` is a wrapper.
fn wrapped_start(command: &mut Command, program: &str) -> Option<usize> {
    if program == "xargs" {
        return xargs_start(command);
    }
    if program == "env" {
        return env_start(command);
    }
    let argv = &command.argv;
    match program {
        "nohup" | "builtin" | "busybox" | "unbuffer" | "catchsegv" | "setsid" | "proxychains"
        | "proxychains4" | "fakeroot" | "eatmydata" => after_options(argv, 1, &[]),
        "time" => after_options(argv, 1, &["-f", "--format", "-o", "--output"]),
        "nice" => after_options(argv, 1, &["-n", "--adjustment"]),
        "ionice" => after_options(argv, 1, &["-c", "-n", "-t"]),
        "stdbuf" => after_options(argv, 1, &["-i", "-o", "-e"]),
        "exec" => after_options(argv, 1, &["-a"]),
        "command" if !argv.iter().any(|w| matches!(w.text(), "-v" | "-V")) => {
            after_options(argv, 1, &[])
        }
        "sudo" | "doas" => after_options(
            argv,
            1,
            &[
                "-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T", "--user", "--group",
            ],
        ),
        "timeout" => after_options(argv, 1, &["-s", "-k", "--signal", "--kill-after"])
            .map(|duration| duration + 1),
        "chroot" => after_options(argv, 1, &["--userspec", "--groups"]).map(|dir| dir + 1),
        "taskset" | "chrt" => after_options(argv, 1, &[]).map(|first| first + 1),
        "strace" | "ltrace" => after_options(
            argv,
            1,
            &[
                "-o", "-e", "-p", "-s", "-u", "-E", "-a", "-b", "-I", "-O", "-P", "-S", "-X",
            ],
        ),
        "flock" => after_options(argv, 1, &["-w", "-E", "--timeout", "--conflict-exit-code"])
            .map(|file| file + 1),
        _ => None,
    }
}

/// `xargs [options] [COMMAND]`: the command gets words from standard input.
fn xargs_start(command: &mut Command) -> Option<usize> {
    command.stdin_args = true;
    let start = after_options(
        &command.argv,
        1,
        &[
            "-I",
            "-n",
            "-L",
            "-P",
            "-s",
            "-d",
            "-E",
            "-a",
            "--arg-file",
            "--delimiter",
        ],
    );
    if start.is_none() {
        // `xargs` alone runs `echo`.
        command.argv.truncate(1);
        command.argv[0] = Word::Static("echo".to_owned());
    }
    start
}

/// `env [-i] [-u NAME] [NAME=VALUE]… [COMMAND]`: assignments move to the command's.
fn env_start(command: &mut Command) -> Option<usize> {
    let mut at = 1;
    while let Some(word) = command.argv.get(at) {
        let text = word.text().to_owned();
        if matches!(
            text.as_str(),
            "-u" | "--unset" | "-C" | "--chdir" | "-S" | "--split-string"
        ) {
            at += 2;
        } else if text.starts_with('-') {
            at += 1;
        } else if let Some((name, value)) = text.split_once('=') {
            let value = match word {
                Word::Static(_) => Word::Static(value.to_owned()),
                Word::Dynamic { why, .. } => Word::Dynamic {
                    raw: value.to_owned(),
                    why: *why,
                },
            };
            command.assignments.push((name.to_owned(), value));
            at += 1;
        } else {
            return Some(at);
        }
    }
    None
}

/// Peels wrappers and collects the code the command runs.
pub(crate) fn peel(mut command: Command) -> Peeled {
    let mut code = Vec::new();
    let mut unknown = Vec::new();
    command.as_written = command.canonical();
    for _ in 0..16 {
        let Some(program) = command.program().map(str::to_owned) else {
            break;
        };
        if let Some(split) = env_split_string(&command) {
            code.push(("env -S".to_owned(), split));
        }
        match wrapped_start(&mut command, &program) {
            Some(start) if start < command.argv.len() => {
                command.argv.drain(..start);
                command.wrappers.push(program);
            }
            _ => break,
        }
    }
    carried_code(&command, &mut code, &mut unknown);
    for (name, value) in &command.assignments {
        if runs_code(name) {
            push_code(&mut code, &mut unknown, name, value);
        }
    }
    Peeled {
        command,
        code,
        unknown,
    }
}

fn env_split_string(command: &Command) -> Option<String> {
    if command.program() != Some("env") {
        return None;
    }
    let at = command
        .argv
        .iter()
        .position(|w| matches!(w.text(), "-S" | "--split-string"))?;
    command.argv.get(at + 1).map(|w| w.text().to_owned())
}

fn push_code(code: &mut Vec<(String, String)>, unknown: &mut Vec<String>, who: &str, word: &Word) {
    match word {
        Word::Static(text) => code.push((who.to_owned(), text.clone())),
        Word::Dynamic { raw, .. } => {
            unknown.push(format!("{who} runs code known only when it runs: {raw}"));
            code.push((who.to_owned(), raw.clone()));
        }
    }
}

/// The shell code a (peeled) command runs.
fn carried_code(command: &Command, code: &mut Vec<(String, String)>, unknown: &mut Vec<String>) {
    let Some(program) = command.program() else {
        return;
    };
    let args = command.args();
    match program {
        p if is_shell(p) => {
            if let Program::Inline(word) = program_of(p, &command.argv) {
                push_code(code, unknown, &format!("{p} -c"), &word);
            }
        }
        "eval" => code.push(("eval".to_owned(), join_plain(args))),
        "trap" => {
            if let Some(word) = args.first() {
                push_code(code, unknown, "trap", word);
            }
        }
        "alias" => {
            for word in args {
                if let Some((_, value)) = word.text().split_once('=') {
                    code.push(("alias".to_owned(), unquote_text(value)));
                }
            }
        }
        "su" | "runuser" | "script" | "flock" | "sg" => {
            if let Some(at) = args
                .iter()
                .position(|w| matches!(w.text(), "-c" | "--command"))
                && let Some(word) = args.get(at + 1)
            {
                push_code(code, unknown, &format!("{program} -c"), word);
            }
        }
        "watch" if !args.iter().any(|w| matches!(w.text(), "-x" | "--exec")) => {
            if let Some(start) = after_options(&command.argv, 1, &["-n", "--interval", "-d"]) {
                code.push(("watch".to_owned(), join_plain(&command.argv[start..])));
            }
        }
        "find" => find_exec(args, code),
        "git" => code.extend(git::code(command)),
        _ => {}
    }
}

/// `find … -exec CMD ARGS ;` (and `-execdir`, `-ok`, `-okdir`): the commands it runs, once for
/// each starting point: `{}` stands for what find finds there (its folder joined to the name it
/// looks for, or the folder itself, at worst), so `find build ~ -exec rm -rf {} +` is judged as
/// removing the home too.
fn find_exec(args: &[Word], code: &mut Vec<(String, String)>) {
    let mut found = super::expand::found_paths(args);
    if found.is_empty() {
        found = options::find_roots(args).into_iter().cloned().collect();
    }
    if found.is_empty() {
        found.push(Word::Static(".".to_owned()));
    }
    // Bounded: a command line names few starting points; past these, the rest are alike.
    for root in found.iter().take(16) {
        let args: Vec<Word> = args
            .iter()
            .map(|w| {
                if w.text() == "{}" {
                    root.clone()
                } else {
                    w.clone()
                }
            })
            .collect();
        let mut at = 0;
        while at < args.len() {
            let text = args[at].text();
            if matches!(text, "-exec" | "-execdir" | "-ok" | "-okdir") {
                let end = args[at + 1..]
                    .iter()
                    .position(|w| matches!(w.text(), ";" | "+"))
                    .map_or(args.len(), |p| at + 1 + p);
                code.push((format!("find {text}"), join_words(&args[at + 1..end])));
                at = end;
            }
            at += 1;
        }
    }
}

/// Words joined with spaces as the shell joins `eval`'s arguments (values, not quoted).
fn join_plain(words: &[Word]) -> String {
    words
        .iter()
        .map(|w| w.text().to_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn unquote_text(text: &str) -> String {
    for quote in ['\'', '"'] {
        if let Some(inner) = text.strip_prefix(quote).and_then(|t| t.strip_suffix(quote)) {
            return inner.to_owned();
        }
    }
    text.to_owned()
}

//! Text a command carries: what it prints (`echo`, `printf`, a here-doc to `cat`), the files
//! it writes that text into, the script file it runs, and the strings that are only data.

use super::peel::{Program, program_of};
use super::{Command, Cwd, danger, is_interpreter, is_shell, options};
use crate::paths::normalize;
use crate::shell::Word;

/// What `echo`, `printf` or `cat <<EOF` prints, when it is known.
pub(super) fn printed(command: &Command) -> Option<String> {
    let args = command.args();
    let text = match command.program()? {
        "echo" => {
            let words: Vec<&str> = args
                .iter()
                .map(Word::text)
                .skip_while(|t| matches!(*t, "-n" | "-e" | "-E" | "-ne" | "-en"))
                .collect();
            words.join(" ")
        }
        "printf" => args.iter().map(Word::text).collect::<Vec<_>>().join(" "),
        "cat" | "tee" => {
            let fed = command
                .redirects
                .iter()
                .find(|r| r.reads() && r.op != "<")?;
            match &fed.heredoc {
                Some(body) => body.clone(),
                None => fed.target.as_static()?.to_owned(), // `<<< text`
            }
        }
        _ => return None,
    };
    // Printed escapes (`\n` with `echo -e` and `printf`) end lines.
    Some(text.replace("\\n", "\n"))
}

/// The files a command writes its output to: redirects and `tee`'s operands.
fn output_files(command: &Command) -> Vec<&Word> {
    let mut files: Vec<&Word> = command
        .redirects
        .iter()
        .filter(|r| !r.reads() && !r.op.contains('&'))
        .map(|r| &r.target)
        .collect();
    if command.program() == Some("tee") {
        files.extend(
            options::operands(command.args(), &[])
                .into_iter()
                .map(|(_, w)| w),
        );
    }
    files
}

/// A path as seen from the workspace root, when it is known.
pub(super) fn resolve(path: &str, cwd: &Cwd) -> String {
    match cwd {
        Cwd::Inside(folder) | Cwd::At(folder) if !path.starts_with('/') => {
            normalize(&format!("{folder}/{path}"))
        }
        _ => normalize(path),
    }
}

/// `(file, text)` for each file a printing command fills.
pub(super) fn written(command: &Command) -> Vec<(String, String)> {
    let Some(text) = printed(command) else {
        return Vec::new();
    };
    output_files(command)
        .into_iter()
        .filter_map(|w| w.as_static())
        .map(|file| (resolve(file, &command.cwd), text.clone()))
        .collect()
}

/// Whether a printing command only fills ordinary workspace files (not `.git`, not outside):
/// its text is then inert until something runs it.
fn fills_workspace_files_only(command: &Command) -> bool {
    let files = output_files(command);
    printed(command).is_some()
        && !files.is_empty()
        && files.iter().all(|w| {
            w.as_static()
                .is_some_and(|t| ordinary_file(t, &command.cwd))
        })
}

/// The script file a command runs: `sh F`, `python3 F`, `. F`, `./F`.
pub(super) fn script_run(command: &Command) -> Option<String> {
    let program = command.program()?;
    if is_shell(program) || is_interpreter(program) {
        return match program_of(program, &command.argv) {
            Program::Script(word) => Some(word.text().to_owned()),
            _ => None,
        };
    }
    if matches!(program, "source" | ".") {
        return command.args().first().map(|w| w.text().to_owned());
    }
    command
        .argv
        .first()
        .map(|w| w.text().to_owned())
        .filter(|t| t.contains('/'))
}

/// Whether a command writes its standard input somewhere other than an ordinary workspace
/// file (`tee -a ~/.bashrc`, `cat > .git/hooks/x`): what is piped in is planted there.
pub(super) fn plants_stdin(command: &Command) -> bool {
    if command.program() == Some("crontab") {
        // `crontab -` and `crontab` with no file install standard input.
        return options::operands(command.args(), &["-u"])
            .iter()
            .all(|(_, w)| w.text() == "-");
    }
    let files = output_files(command);
    matches!(command.program(), Some("tee" | "cat" | "dd" | "sponge"))
        && !files.is_empty()
        && !files.iter().all(|w| {
            w.as_static()
                .is_some_and(|t| ordinary_file(t, &command.cwd))
        })
}

/// A file inside the workspace and outside `.git`/`.github`.
fn ordinary_file(text: &str, cwd: &Cwd) -> bool {
    let path = resolve(text, cwd);
    !path.starts_with('/')
        && !path.starts_with("..")
        && !path.starts_with('~')
        && matches!(cwd, Cwd::Inside(_))
        && danger::repository_metadata(&path).is_none()
}

/// Whether a command runs code it reads from standard input.
pub(super) fn runs_stdin(command: &Command) -> bool {
    let Some(program) = command.program() else {
        return false;
    };
    if is_shell(program) || is_interpreter(program) {
        return program_of(program, &command.argv) == Program::Stdin;
    }
    matches!(program, "source" | ".")
        && command
            .args()
            .first()
            .is_some_and(|w| matches!(w.text(), "/dev/stdin" | "-" | "/proc/self/fd/0"))
}

/// Code fed to a shell's standard input by a here-doc or here-string (`sh <<EOF`).
pub(super) fn stdin_code(command: &Command) -> Vec<(String, String)> {
    if !runs_stdin(command) {
        return Vec::new();
    }
    let program = command.program().unwrap_or_default();
    command
        .redirects
        .iter()
        .filter(|r| r.reads() && r.op != "<")
        .map(|r| {
            let text = r
                .heredoc
                .clone()
                .unwrap_or_else(|| r.target.text().to_owned());
            (format!("{program} <<"), text)
        })
        .collect()
}

/// The strings a command carries as data: its words and here-doc bodies, less search
/// patterns, code already followed, and text only written into workspace files.
pub(super) fn data_strings(command: &Command, code: &[(String, String)]) -> Vec<String> {
    // Printed to a terminal or a pipe (a pipe into a shell is followed as code), or into
    // ordinary workspace files: inert text.
    let printed_only = printed(command).is_some() && output_files(command).is_empty();
    if printed_only || fills_workspace_files_only(command) {
        return Vec::new();
    }
    let mut out: Vec<String> = Vec::new();
    let skip = options::pattern_positions(&command.argv);
    for (index, word) in command.argv.iter().enumerate() {
        if let Some(text) = word.as_static().filter(|_| !skip.contains(&index)) {
            // `%n` (git formats) and `\n` (printf, echo -e) become line breaks when printed.
            out.push(text.replace("%n", "\n").replace("\\n", "\n"));
        }
    }
    out.extend(
        command
            .assignments
            .iter()
            .filter_map(|(_, v)| v.as_static().map(str::to_owned)),
    );
    for redirect in command.redirects.iter().filter(|r| r.reads()) {
        match (&redirect.heredoc, redirect.op.as_str()) {
            (Some(body), _) => out.push(body.clone()),
            (None, "<<<") => out.extend(redirect.target.as_static().map(str::to_owned)),
            _ => {}
        }
    }
    out.retain(|text| looks_like_code(text) && !code.iter().any(|(_, c)| c == text));
    out
}

/// Whether a string has anything a shell would treat as more than one plain word.
pub(super) fn looks_like_code(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_whitespace() || ";|&<>$`()".contains(c))
}

//! Deletion: what a recursive delete reaches. The root, a home, the whole workspace or
//! anything outside it is denied; inside it, a person is asked.

use super::super::options::{self, has_long, has_short};
use super::super::peel::{Program, program_of};
use super::super::{Command, Cwd, is_interpreter, unquoted};
use super::Findings;
use crate::paths::normalize;
use crate::shell::Word;

/// What a deleted path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `/`, a top-level folder, a home, the whole workspace.
    Catastrophic(String),
    /// Outside the workspace (`../x`, after `cd ..`).
    Outside(String),
    /// Inside the workspace, or somewhere not known to be outside.
    Inside,
}

/// Classifies a path operand of a delete, run from `cwd`.
pub(crate) fn classify(word: &Word, cwd: &Cwd) -> Target {
    let text = unquoted(word);
    let text = canonical_spelling(&text);
    if let Some(rest) = text.strip_prefix('~') {
        let rest = rest.trim_start_matches('/');
        return match rest.trim_end_matches(['/', '*', '.']) {
            "" => Target::Catastrophic("the home folder".to_owned()),
            _ => Target::Outside(text.clone()),
        };
    }
    if text.starts_with('/') {
        let path = normalize(text.strip_suffix("/*").unwrap_or(&text));
        let depth = path.split('/').filter(|c| !c.is_empty()).count();
        return match (path.as_str(), depth) {
            ("/", _) => Target::Catastrophic("the root folder".to_owned()),
            (_, 1) => Target::Catastrophic(format!("the top-level folder {path}")),
            ("/root", _) => Target::Catastrophic("a home folder".to_owned()),
            (p, 2) if p.starts_with("/home/") => Target::Catastrophic("a home folder".to_owned()),
            _ => Target::Inside,
        };
    }
    if text.contains(['$', '`']) {
        return Target::Inside; // unknown: a person decides
    }
    let everything = matches!(text.as_str(), "*" | "./*" | ".*" | "./.*" | "." | "./");
    let folder = match cwd {
        Cwd::Inside(folder) => folder,
        // A shell whose folder is not known: everything in it may be anything; a named part
        // of it is for a person to judge.
        Cwd::Unknown if everything => {
            return Target::Catastrophic("everything in the shell's folder".to_owned());
        }
        Cwd::Unknown => return Target::Inside,
        Cwd::At(_) | Cwd::Elsewhere => return Target::Outside(format!("{text}, after a cd")),
    };
    let path = normalize(&format!("{folder}/{text}"));
    if path == ".." || path.starts_with("../") {
        Target::Outside(text)
    } else if folder == "." && (everything || path == ".") {
        Target::Catastrophic(WORKSPACE.to_owned())
    } else {
        Target::Inside
    }
}

/// `$HOME`, `${HOME}` → `~`; `$PWD`, `$(pwd)`, `` `pwd` `` → `.`.
fn canonical_spelling(text: &str) -> String {
    // `${HOME:?}`, `${HOME%/}`, `${PWD:-.}`: the variable, whatever the operator.
    for (name, meaning) in [("${HOME", "~"), ("${PWD", ".")] {
        if let Some(rest) = text.strip_prefix(name)
            && rest.starts_with([':', '%', '#', '/', '-', '=', '?', '+'])
            && let Some((_, after)) = rest.split_once('}')
        {
            return format!("{meaning}{after}");
        }
    }
    for (spelling, meaning) in [
        ("${HOME}", "~"),
        ("$HOME", "~"),
        ("${PWD}", "."),
        ("$PWD", "."),
        ("$(pwd)", "."),
        ("`pwd`", "."),
    ] {
        if let Some(rest) = text.strip_prefix(spelling)
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return format!("{meaning}{rest}");
        }
    }
    text.to_owned()
}

/// Deletes and recursive permission changes.
pub(super) fn check(command: &Command, out: &mut Findings) {
    let args = command.args();
    match command.program().unwrap_or_default() {
        "rm" => {
            let recursive = has_short(args, 'r', "")
                || has_short(args, 'R', "")
                || has_long(args, "--recursive");
            if has_long(args, "--no-preserve-root") {
                out.deny("deletes with --no-preserve-root");
            }
            judge_targets(command, recursive, "deletes", out);
            if recursive {
                out.ask("deletes recursively");
            }
        }
        "shred" | "srm" | "wipe" => judge_targets(command, true, "destroys", out),
        // `rsync --delete SRC DEST` deletes what DEST holds that SRC does not: with an empty
        // SRC, all of DEST.
        "rsync"
            if args.iter().any(|w| {
                let text = w.text();
                text == "--del" || text.starts_with("--delete") || text == "--remove-source-files"
            }) =>
        {
            if let Some((_, target)) = options::operands(args, &[]).last() {
                judge(
                    classify(target, &command.cwd),
                    true,
                    "deletes (rsync --delete)",
                    out,
                );
            }
        }
        "rclone"
            if args
                .iter()
                .any(|w| matches!(w.text(), "sync" | "purge" | "delete")) =>
        {
            if let Some((_, target)) = options::operands(args, &[]).last() {
                judge(
                    classify(target, &command.cwd),
                    true,
                    "deletes (rclone)",
                    out,
                );
            }
        }
        // `-exec rm {} +` deletes what find walks, as `-delete` does: judged the same way.
        "find" if args.iter().any(|w| w.text() == "-delete") || find_execs_a_delete(args) => {
            // `find . -name '*.o' -delete` deletes some of the workspace, not all of it.
            let filtered = args.iter().any(|w| FIND_FILTERS.contains(&w.text()));
            for root in find_roots(args) {
                let target = match classify(root, &command.cwd) {
                    Target::Catastrophic(what) if filtered && what == WORKSPACE => Target::Inside,
                    target => target,
                };
                judge(target, true, "deletes", out);
            }
            out.ask("deletes with find -delete");
        }
        "chmod" | "chown" | "chgrp"
            if has_short(args, 'R', "") || has_long(args, "--recursive") =>
        {
            for (_, word) in options::operands(args, &[]).into_iter().skip(1) {
                if let Target::Catastrophic(what) = classify(word, &command.cwd)
                    && what != WORKSPACE
                {
                    out.deny(format!("changes the permissions of {what}"));
                }
            }
        }
        program if is_interpreter(program) => {
            if let Program::Inline(code) = program_of(program, &command.argv) {
                inline_deletes(code.text(), &command.cwd, out);
            }
        }
        _ => {}
    }
}

fn judge_targets(command: &Command, recursive: bool, verb: &str, out: &mut Findings) {
    for (_, word) in options::operands(command.args(), &[]) {
        judge(classify(word, &command.cwd), recursive, verb, out);
    }
}

fn judge(target: Target, recursive: bool, verb: &str, out: &mut Findings) {
    match (target, recursive) {
        (Target::Catastrophic(what), true) => out.deny(format!("{verb} {what}")),
        (Target::Outside(what), true) => out.deny(format!("{verb} outside the workspace ({what})")),
        (Target::Catastrophic(what), false) => out.ask(format!("{verb} files in {what}")),
        (Target::Outside(what), false) => out.ask(format!("{verb} outside the workspace ({what})")),
        (Target::Inside, _) => {}
    }
}

/// Whether `find` runs a program that deletes what it finds (`-exec rm {} +`, `-execdir
/// unlink {} ;`, `-ok shred …`).
fn find_execs_a_delete(args: &[Word]) -> bool {
    args.windows(2).any(|pair| {
        matches!(pair[0].text(), "-exec" | "-execdir" | "-ok" | "-okdir")
            && matches!(
                pair[1].text().rsplit('/').next().unwrap_or_default(),
                "rm" | "unlink" | "shred" | "srm" | "wipe"
            )
    })
}

/// `find`'s starting points: the operands before the first expression word.
fn find_roots(args: &[Word]) -> Vec<&Word> {
    let roots = options::find_roots(args);
    if roots.is_empty() { vec![&DOT] } else { roots }
}

static DOT: Word = Word::Static(String::new());

const WORKSPACE: &str = "the whole workspace";

/// `find` tests that select some files only.
const FIND_FILTERS: &[&str] = &[
    "-name",
    "-iname",
    "-path",
    "-ipath",
    "-wholename",
    "-regex",
    "-iregex",
    "-type",
    "-empty",
    "-newer",
    "-size",
    "-mtime",
    "-mmin",
    "-atime",
    "-amin",
    "-ctime",
    "-cmin",
    "-user",
    "-group",
    "-perm",
    "-lname",
    "-links",
];

/// Recursive deletes in another language's inline code (`shutil.rmtree(".")`,
/// `FileUtils.rm_rf("/")`, `fs.rmSync("~", …)`), judged by their first literal argument.
fn inline_deletes(code: &str, cwd: &Cwd, out: &mut Findings) {
    const CALLS: &[&str] = &[
        "rmtree(",
        "rm_rf(",
        "rm_r(",
        "rmSync(",
        "remove_tree(",
        "rimraf(",
        "rmdirSync(",
    ];
    for call in CALLS {
        let mut rest = code;
        while let Some(at) = rest.find(call) {
            rest = &rest[at + call.len()..];
            let argument = rest
                .split([',', ')'])
                .next()
                .unwrap_or_default()
                .trim()
                .trim_matches(|c| c == '"' || c == '\'');
            // `$ENV{HOME}`, `os.environ["HOME"]`, `Path.home()`, `os.getcwd()` …
            let lower = argument.to_ascii_lowercase();
            let spelled = if lower.contains("home") || argument.contains('~') {
                "~"
            } else if lower.contains("cwd") || lower.contains("pwd") {
                "."
            } else {
                argument
            };
            judge(
                classify(&Word::Static(spelled.to_owned()), cwd),
                true,
                "deletes",
                out,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(text: &str, cwd: &str) -> Target {
        let word = if text.contains(['$', '~', '*']) {
            Word::Dynamic {
                raw: text.to_owned(),
                why: crate::shell::Dynamism::Other,
            }
        } else {
            Word::Static(text.to_owned())
        };
        classify(&word, &Cwd::Inside(cwd.to_owned()))
    }

    #[test]
    fn targets_are_classified() {
        for text in [
            "/",
            "/*",
            "~",
            "~/",
            "$HOME",
            "${HOME}/",
            "\"$HOME\"",
            ".",
            "./",
            "*",
            "$PWD",
            "$(pwd)",
            "/workspace",
            "/home/user",
            "/root",
        ] {
            assert!(
                matches!(class(text, "."), Target::Catastrophic(_)),
                "{text}"
            );
        }
        for text in ["..", "../*", "../other", "~/.cache"] {
            assert!(matches!(class(text, "."), Target::Outside(_)), "{text}");
        }
        for text in ["build", "build/", "./src/x", "/workspace/build", "$d"] {
            assert_eq!(class(text, "."), Target::Inside, "{text}");
        }
        assert_eq!(class("*", "build"), Target::Inside);
        assert_eq!(class("../src", "build"), Target::Inside);
        assert!(matches!(class("../..", "build"), Target::Outside(_)));
    }
}

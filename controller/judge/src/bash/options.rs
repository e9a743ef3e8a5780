//! Reading a command's options the way getopt does: short flags clustered (`-rf`), a short
//! option's value attached or next (`-oFILE`, `-o FILE`), long options with `=` or a separate
//! value, and `--` ending them.

use crate::shell::Word;

/// A word that is an option (starts with `-` and is not `-` itself), before any `--`.
fn option_words(args: &[Word]) -> impl Iterator<Item = (usize, &str)> {
    args.iter()
        .enumerate()
        .take_while(|(_, w)| w.text() != "--")
        .map(|(i, w)| (i, w.text()))
        .filter(|(_, t)| t.starts_with('-') && *t != "-")
}

/// Whether a short flag is set, alone or in a cluster (`-R`, `-fR`); `valued` are the short
/// options that take a value, after which a cluster's rest is that value.
pub(crate) fn has_short(args: &[Word], flag: char, valued: &str) -> bool {
    option_words(args)
        .filter(|(_, t)| !t.starts_with("--"))
        .any(|(_, t)| {
            for c in t[1..].chars() {
                if c == flag {
                    return true;
                }
                if valued.contains(c) {
                    return false;
                }
            }
            false
        })
}

/// Whether a long option is given (`--name` or `--name=…`).
pub(crate) fn has_long(args: &[Word], name: &str) -> bool {
    option_words(args)
        .any(|(_, t)| t == name || t.strip_prefix(name).is_some_and(|r| r.starts_with('=')))
}

/// Every value of an option: `-oV`, `-o V`, a cluster ending in it (`-so V`), `--long=V`,
/// `--long V`. `valued` lists the command's short options that take values.
pub(crate) fn values(
    args: &[Word],
    short: Option<char>,
    long: Option<&str>,
    valued: &str,
) -> Vec<Word> {
    let mut out = Vec::new();
    for (at, text) in option_words(args) {
        let next = || args.get(at + 1).cloned();
        if let Some(long) = long.filter(|_| text.starts_with("--")) {
            if text == long {
                out.extend(next());
            } else if let Some(value) = text.strip_prefix(long).and_then(|r| r.strip_prefix('=')) {
                out.push(part_of(&args[at], value));
            }
            continue;
        }
        let Some(short) = short.filter(|_| !text.starts_with("--")) else {
            continue;
        };
        for (offset, c) in text[1..].char_indices() {
            if c == short {
                let rest = &text[1 + offset + c.len_utf8()..];
                if rest.is_empty() {
                    out.extend(next());
                } else {
                    out.push(part_of(&args[at], rest));
                }
                break;
            }
            if valued.contains(c) {
                break;
            }
        }
    }
    out
}

/// A piece of a word, static when the word is.
pub(crate) fn part_of(word: &Word, text: &str) -> Word {
    match word {
        Word::Static(_) => Word::Static(text.to_owned()),
        Word::Dynamic { why, .. } => Word::Dynamic {
            raw: text.to_owned(),
            why: *why,
        },
    }
}

/// The operands (words that are not options or their values); `valued` are the options,
/// short (`-o`) or long (`--output`), that take a separate value.
pub(crate) fn operands<'a>(args: &'a [Word], valued: &[&str]) -> Vec<(usize, &'a Word)> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut ended = false;
    while at < args.len() {
        let text = args[at].text();
        if ended || !text.starts_with('-') || text == "-" {
            out.push((at, &args[at]));
        } else if text == "--" {
            ended = true;
        } else if valued.contains(&text) {
            at += 1;
        }
        at += 1;
    }
    out
}

/// `find`'s starting points: the operands before its first option or expression word.
pub(crate) fn find_roots(args: &[Word]) -> Vec<&Word> {
    args.iter()
        .skip_while(|w| matches!(w.text(), "-H" | "-L" | "-P"))
        .take_while(|w| !w.text().starts_with('-') && !matches!(w.text(), "(" | "!" | ","))
        .collect()
}

/// Argv positions (program at 0) of search patterns, which are data, not paths or commands:
/// grep's and rg's pattern, `-e`/`--regexp` values, `git grep`'s, `git log --grep`'s.
pub(crate) fn pattern_positions(argv: &[Word]) -> Vec<usize> {
    let Some(program) = argv.first().and_then(Word::as_static) else {
        return Vec::new();
    };
    let program = program.rsplit('/').next().unwrap_or(program);
    let (start, valued): (usize, &[&str]) = match program {
        "grep" | "egrep" | "fgrep" | "zgrep" => (
            1,
            &[
                "-e", "-f", "-m", "-A", "-B", "-C", "-d", "-D", "--regexp", "--file",
            ],
        ),
        "rg" | "ag" | "ack" => (
            1,
            &[
                "-e", "-f", "-g", "-t", "-T", "-m", "-A", "-B", "-C", "-M", "-j", "-E", "--regexp",
            ],
        ),
        "git" => match argv.iter().position(|w| w.text() == "grep") {
            Some(at) => (at + 1, &["-e", "-f", "-m", "-A", "-B", "-C", "--max-depth"]),
            None => return log_patterns(argv),
        },
        _ => return Vec::new(),
    };
    let args = &argv[start..];
    // `rg --files` and `--type-list` take no pattern: every operand is a folder to walk.
    if program == "rg"
        && args
            .iter()
            .any(|w| matches!(w.text(), "--files" | "--type-list"))
    {
        return Vec::new();
    }
    let mut out: Vec<usize> = Vec::new();
    for (at, word) in args.iter().enumerate() {
        let text = word.text();
        if matches!(text, "-e" | "--regexp") {
            out.push(start + at + 1);
        } else if text.starts_with("--regexp=") || (text.starts_with("-e") && text.len() > 2) {
            out.push(start + at);
        }
    }
    if out.is_empty()
        && let Some((at, _)) = operands(args, valued).first()
    {
        out.push(start + at);
    }
    out
}

/// `git log --grep=X`, `-S X`, `-G X`: patterns.
fn log_patterns(argv: &[Word]) -> Vec<usize> {
    let mut out = Vec::new();
    for (at, word) in argv.iter().enumerate() {
        let text = word.text();
        if matches!(text, "-S" | "-G" | "--grep" | "--author" | "--committer") {
            out.push(at + 1);
        } else if ["--grep=", "--author=", "--committer="]
            .iter()
            .any(|p| text.starts_with(p))
            || ((text.starts_with("-S") || text.starts_with("-G")) && text.len() > 2)
        {
            out.push(at);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<Word> {
        text.split(' ')
            .map(|w| Word::Static(w.to_owned()))
            .collect()
    }

    #[test]
    fn clusters_values_and_operands() {
        assert!(has_short(&words("-fR build"), 'R', ""));
        assert!(!has_short(&words("-n -Rx"), 'x', "R"), "x is -R's value");
        assert!(!has_short(&words("-- -r"), 'r', ""));
        assert!(has_long(&words("--recursive x"), "--recursive"));
        let texts = |v: Vec<Word>| v.iter().map(|w| w.text().to_owned()).collect::<Vec<_>>();
        assert_eq!(
            texts(values(
                &words("-so x.sh URL"),
                Some('o'),
                Some("--output"),
                "o"
            )),
            ["x.sh"]
        );
        assert_eq!(
            texts(values(
                &words("-ox.sh --output=y"),
                Some('o'),
                Some("--output"),
                "o"
            )),
            ["x.sh", "y"]
        );
        let found: Vec<usize> = operands(&words("-n 5 a -- -b"), &["-n"])
            .iter()
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(found, [2, 4]);
    }

    #[test]
    fn search_patterns_are_found() {
        assert_eq!(pattern_positions(&words("grep -rn id_rsa src")), [2]);
        assert_eq!(pattern_positions(&words("rg -n -e a -e b docs")), [3, 5]);
        assert_eq!(pattern_positions(&words("grep -A 3 x f")), [3]);
        assert_eq!(pattern_positions(&words("git grep -n TODO")), [3]);
        assert_eq!(
            pattern_positions(&words("git log --grep=fix -S foo")),
            [2, 4]
        );
        assert!(pattern_positions(&words("cat id_rsa")).is_empty());
    }
}

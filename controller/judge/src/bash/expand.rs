//! What bash makes of words before a command runs, as far as the policy follows it: brace
//! expressions spliced into words (`{rm,-rf,~}` is `rm -rf ~`), and the words `xargs` feeds a
//! command from the stage before it (`echo . | xargs rm -rf` runs `rm -rf .`).

use super::{Command, Dynamism, Word};

/// The words as bash makes them of brace expressions: `{rm,-rf,~}` is the three words `rm`,
/// `-rf`, `~`; `rm -rf {build,~}` is `rm -rf build ~`. Each made word is typed again: static,
/// a tilde or a glob; what else it holds (quotes, variables) keeps it one unknown word.
pub(super) fn braces_spliced(argv: &[Word]) -> Vec<Word> {
    /// More words than this from one brace word leave it unknown (`{1..100000}`).
    const MAX_SPLICED: usize = 64;
    let mut out = Vec::with_capacity(argv.len());
    for word in argv {
        let Word::Dynamic {
            raw,
            why: Dynamism::Brace,
        } = word
        else {
            out.push(word.clone());
            continue;
        };
        let made = crate::paths::expand_braces(raw);
        let plain = |text: &str| !text.contains(['"', '\'', '\\', '$', '`', '{', '}']);
        if made.len() < 2 || made.len() > MAX_SPLICED || !made.iter().all(|t| plain(t)) {
            out.push(word.clone());
            continue;
        }
        out.extend(made.into_iter().map(|text| {
            if text.starts_with('~') {
                Word::Dynamic {
                    raw: text,
                    why: Dynamism::Tilde,
                }
            } else if text.contains(['*', '?', '[']) {
                Word::Dynamic {
                    raw: text,
                    why: Dynamism::Glob,
                }
            } else {
                Word::Static(text)
            }
        }));
    }
    out
}

/// The words `xargs` gives a command, where the line says them: its own here-string, or
/// what the stage before it in the pipeline prints (`echo`, `printf`, `pwd`, the folders a
/// `find` walks, the names an `ls -d` lists).
pub(super) fn fed_words(commands: &[Command], command: &Command) -> Option<Vec<Word>> {
    if let Some(here) = command.redirects.iter().find(|r| r.op == "<<<") {
        return Some(split_fed(&here.target));
    }
    let (pipeline, stage) = command.pipeline?;
    let before = Some((pipeline, stage.checked_sub(1)?));
    let feeder = commands.iter().rev().find(|c| c.pipeline == before)?;
    let args = feeder.args();
    let words: Vec<Word> = match feeder.program()? {
        "echo" => args
            .iter()
            .filter(|w| !matches!(w.text(), "-n" | "-e" | "-E"))
            .cloned()
            .collect(),
        "printf" => match args.first() {
            Some(format) if format.text().contains('%') => args[1..].to_vec(),
            _ => args.to_vec(),
        },
        "pwd" => vec![Word::Static(".".to_owned())],
        "find" => found_paths(args),
        "ls" if args.iter().any(|w| w.text() == "-d") => args
            .iter()
            .filter(|w| !w.text().starts_with('-'))
            .cloned()
            .collect(),
        _ => return None,
    };
    Some(words.iter().flat_map(split_fed).collect())
}

/// What a `find` prints, as paths: each folder it walks, joined to the name it looks for
/// (`find ~ -name id_rsa` prints `~/…/id_rsa`, taken as `~/id_rsa` and as `~/*/id_rsa`), or
/// the folder alone when it names none.
pub(super) fn found_paths(args: &[Word]) -> Vec<Word> {
    let roots: Vec<&Word> = args
        .iter()
        .take_while(|w| !w.text().starts_with(['-', '(', '!']))
        .collect();
    let name = args
        .windows(2)
        .find(|pair| matches!(pair[0].text(), "-name" | "-iname"))
        .and_then(|pair| pair[1].as_static().map(str::to_owned));
    let mut out = Vec::new();
    for root in roots {
        match &name {
            Some(name) => {
                for joined in [
                    format!("{}/{name}", root.text()),
                    format!("{}/*/{name}", root.text()),
                ] {
                    out.push(Word::Dynamic {
                        raw: joined,
                        why: Dynamism::Glob,
                    });
                }
            }
            None => out.push(root.clone()),
        }
    }
    out
}

/// A source whose first word is a brace expansion (`{rm,-rf,~} more`), with that word
/// expanded as bash expands it (`rm -rf ~ more`).
pub(super) fn leading_brace_command(source: &str) -> Option<String> {
    let trimmed = source.trim_start();
    if !trimmed.starts_with('{') {
        return None;
    }
    let end = trimmed
        .find(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|'))
        .unwrap_or(trimmed.len());
    let (word, rest) = trimmed.split_at(end);
    if !word.ends_with('}') || !word.contains(',') {
        return None;
    }
    let made = crate::paths::expand_braces(word);
    (made.len() > 1).then(|| format!("{}{rest}", made.join(" ")))
}

/// A fed word as `xargs` splits it (on blanks); an unknown word stays whole.
fn split_fed(word: &Word) -> Vec<Word> {
    match word {
        Word::Static(text) => text
            .split_whitespace()
            .map(|part| Word::Static(part.to_owned()))
            .collect(),
        dynamic @ Word::Dynamic { .. } => vec![dynamic.clone()],
    }
}

//! The flag tables of `docs/`, generated from the command line's own definitions: a test
//! rewrites each table between its `<!-- flags:SPEC -->` and `<!-- /flags -->` markers and
//! fails when the committed copy differed, so the docs cannot drift from `--help`.

use clap::{Arg, ArgAction, CommandFactory};

/// The Markdown table a marker's SPEC names: `COMMAND` (`run`, `batch`, `replay rerun`, …) is
/// every flag of that subcommand; `A & B & C` the rows all of them have word for word (flags
/// several commands share, listed once); `A - B & C` the rows of A but those B and C share
/// (A's own flags, beside that shared table). The rows keep A's order.
pub(crate) fn table(spec: &str) -> String {
    let (keep, shared) = match spec.split_once(" - ") {
        Some((keep, others)) => (keep, shared_rows(others)),
        None => (spec, Vec::new()),
    };
    let mut out = String::from("| flag | default | what |\n|---|---|---|\n");
    for row in shared_rows(keep) {
        if !shared.contains(&row) {
            out.push_str(&row);
            out.push('\n');
        }
    }
    out
}

/// The rows of the first command of `A & B & …` that every other one has too, word for word.
fn shared_rows(commands: &str) -> Vec<String> {
    let mut tables = commands.split('&').map(|path| rows(path.trim()));
    let first = tables.next().unwrap_or_default();
    let others: Vec<Vec<String>> = tables.collect();
    first
        .into_iter()
        .filter(|row| others.iter().all(|other| other.contains(row)))
        .collect()
}

/// A row per flag of a subcommand, in its definition's order.
fn rows(path: &str) -> Vec<String> {
    let mut command = super::Cli::command();
    command.build();
    let mut current = &command;
    for name in path.split_whitespace() {
        current = current
            .find_subcommand(name)
            .unwrap_or_else(|| panic!("no subcommand `{path}`"));
    }
    current.get_arguments().filter_map(row).collect()
}

/// A flag's row: its value, its default (from the definition, the one place it lives) and its
/// help. None for what the table leaves out: hidden flags, `--help`, `--version`, positionals.
fn row(arg: &Arg) -> Option<String> {
    if arg.is_hide_set() || arg.get_id() == "help" || arg.get_id() == "version" {
        return None;
    }
    let long = arg.get_long()?;
    let flag = matches!(
        arg.get_action(),
        ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count
    );
    let value = match (flag, arg.get_value_names()) {
        (true, _) => String::new(),
        (false, Some(names)) => format!(" {}", cell(&names.join(" "))),
        (false, None) => format!(" {}", arg.get_id().as_str().to_uppercase()),
    };
    let short = arg
        .get_short()
        .map(|s| format!("`-{s}`, "))
        .unwrap_or_default();
    let mut default: Vec<String> = match flag {
        true => Vec::new(),
        false => arg
            .get_default_values()
            .iter()
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect(),
    };
    if let Some(env) = arg.get_env() {
        default.push(format!("env `{}`", env.to_string_lossy()));
    }
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    let help = match (possible.is_empty(), flag) {
        (false, false) if !help.contains(&possible[0].replace('`', "")) => {
            format!("{help} (one of {})", possible.join(", "))
        }
        _ => help,
    };
    Some(format!(
        "| {}`--{long}{}` | {} | {} |",
        short,
        value,
        cell(&default.join(", ")),
        cell(&help)
    ))
}

/// Text fit for one table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// `doc` with every marked table regenerated.
pub(crate) fn regenerate(doc: &str) -> String {
    const OPEN: &str = "<!-- flags:";
    const CLOSE: &str = "<!-- /flags -->";
    let mut out = String::new();
    let mut rest = doc;
    while let Some(start) = rest.find(OPEN) {
        let head_end = start + rest[start..].find("-->").expect("an open marker ends") + 3;
        let spec = rest[start + OPEN.len()..head_end - 3].trim();
        let close = head_end
            + rest[head_end..]
                .find(CLOSE)
                .expect("a close marker follows");
        out.push_str(&rest[..head_end]);
        out.push('\n');
        out.push_str(&table(spec));
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn the_docs_flag_tables_are_the_cli_s_own() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
        let mut stale = Vec::new();
        let mut tables = 0;
        for entry in std::fs::read_dir(&docs).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            tables += text.matches("<!-- flags:").count();
            let fresh = super::regenerate(&text);
            if fresh != text {
                std::fs::write(&path, fresh).unwrap();
                stale.push(path.display().to_string());
            }
        }
        assert!(tables >= 3, "docs/ has {tables} flag tables");
        assert!(
            stale.is_empty(),
            "these docs' flag tables were stale and have been regenerated; review and commit them: {stale:?}"
        );
    }

    /// Every flag of every command says what it is for (`--help` is where people look).
    #[test]
    fn every_flag_of_every_command_has_its_help() {
        use clap::CommandFactory;
        fn walk(command: &clap::Command, path: &str, bare: &mut Vec<String>) {
            for arg in command.get_arguments() {
                if arg.is_hide_set() || arg.get_help().is_some() || arg.is_positional() {
                    continue;
                }
                bare.push(format!("{path} --{}", arg.get_id()));
            }
            for sub in command.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), bare);
            }
        }
        let mut command = crate::cli::Cli::command();
        command.build();
        let mut bare = Vec::new();
        walk(&command, "harness", &mut bare);
        assert!(bare.is_empty(), "flags without help: {bare:?}");
    }

    #[test]
    fn a_table_names_each_flag_its_default_and_its_help() {
        let table = super::table("run");
        assert!(table.contains("| `--max-turns MAX_TURNS` |"), "{table}");
        assert!(table.contains("| `--task FILE\\|DIR` |"), "{table}");
        assert!(table.contains("| `--keep-workspace` |  |"), "{table}");
        assert!(
            table.contains("| `--log-dir LOG_DIR` | `runs`, env `CONTROLLER_LOG_DIR` |"),
            "{table}"
        );
    }

    /// `A & B & C` lists the flags the three share once; `A - B & C` lists the rest of A's, so
    /// each command's flags are its own table and the shared one, with none left out.
    #[test]
    fn a_shared_table_and_the_commands_own_tables_hold_each_flag_once() {
        let shared = super::table("run & batch & replay fork");
        let own = super::table("run - batch & replay fork");
        assert!(shared.contains("| `--max-turns MAX_TURNS` |"), "{shared}");
        assert!(!shared.contains("| `--task FILE"), "{shared}");
        assert!(own.contains("| `--task FILE\\|DIR` |"), "{own}");
        assert!(!own.contains("| `--max-turns"), "{own}");
        let rows = |table: &str| table.lines().count() - 2;
        assert_eq!(rows(&super::table("run")), rows(&shared) + rows(&own));
        let fork = super::table("replay fork - run & batch");
        assert!(fork.contains("| `--step STEP` |"), "{fork}");
        assert!(!fork.contains("| `--max-turns"), "{fork}");
    }
}

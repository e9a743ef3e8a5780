//! Local data sent away: uploads, raw connections (`nc`, `/dev/tcp`, `ssh` fed by a pipe),
//! copies and pushes to other hosts, command output inside a request.

use super::super::options::{self, has_short, values};
use super::super::{Command, Line, Origin, is_fetcher};
use super::Findings;
use crate::shell::{Dynamism, Word};

/// Programs that talk to other hosts.
fn is_network(program: &str) -> bool {
    is_fetcher(program)
        || matches!(
            program,
            "nc" | "ncat"
                | "netcat"
                | "socat"
                | "telnet"
                | "ssh"
                | "scp"
                | "sftp"
                | "rsync"
                | "ftp"
                | "dig"
                | "nslookup"
                | "host"
                | "ping"
                | "ping6"
                | "openssl"
                | "mail"
                | "sendmail"
                | "mutt"
                | "rclone"
        )
}

/// Local data sent to another host.
pub(super) fn uploads(command: &Command, out: &mut Findings) {
    let Some(program) = command.program() else {
        return;
    };
    if !is_network(program) {
        return;
    }
    let args = command.args();
    if let Some(word) = args.iter().find(|w| {
        matches!(
            w,
            Word::Dynamic {
                why: Dynamism::CommandSubstitution,
                ..
            }
        ) || w.text().contains("$(")
            || w.text().contains('`')
    }) {
        out.deny(format!(
            "sends command output over the network ({program} {})",
            word.text()
        ));
    }
    let loopback = args.iter().any(|w| is_loopback(w.text()));
    match program {
        "curl" if !loopback && curl_uploads(args) => out.deny("uploads local data (curl)"),
        "curl" if curl_config_piped(command) => {
            out.deny("takes its options from standard input (curl -K -)")
        }
        "wget"
            if !loopback
                && args.iter().any(|w| {
                    w.text().starts_with("--post-file") || w.text().starts_with("--body-file")
                }) =>
        {
            out.deny("uploads local data (wget)")
        }
        "nc" | "ncat" | "netcat" | "socat" | "telnet" | "openssl" | "ssh" if !loopback => {
            let fed = command.pipeline.is_some_and(|(_, stage)| stage > 0)
                || command.redirects.iter().any(|r| r.reads());
            if fed {
                out.deny(format!("sends data over a raw connection ({program})"));
            }
        }
        "scp" | "rsync" | "sftp" | "rclone" => {
            let operands =
                options::operands(args, &["-P", "-i", "-e", "-o", "-F", "-l", "-S", "-J"]);
            if operands.last().is_some_and(|(_, w)| is_remote(w.text())) {
                out.deny(format!("copies files to another host ({program})"));
            }
        }
        _ => {}
    }
}

/// curl options that send a file or standard input.
fn curl_uploads(args: &[Word]) -> bool {
    if has_short(args, 'T', "") || args.iter().any(|w| w.text().starts_with("--upload-file")) {
        return true;
    }
    let data_options: [(Option<char>, &str); 6] = [
        (Some('d'), "--data"),
        (None, "--data-binary"),
        (None, "--data-urlencode"),
        (None, "--json"),
        (Some('F'), "--form"),
        (None, "--data-ascii"),
    ];
    data_options.iter().any(|(short, long)| {
        values(args, *short, Some(long), "dFoOTHuXAeEKrmwy")
            .iter()
            .any(|v| {
                v.text().starts_with('@') || v.text().contains("=@") || v.text().contains("=<")
            })
    })
}

fn is_loopback(text: &str) -> bool {
    let host = text
        .split("://")
        .nth(1)
        .unwrap_or(text)
        .split(['/', ':'])
        .next()
        .unwrap_or_default();
    matches!(host, "localhost" | "127.0.0.1" | "[" | "0.0.0.0") || host.starts_with("127.")
}

/// `host:path` or `user@host:path` (not `./a:b`, not a URL).
fn is_remote(text: &str) -> bool {
    match text.split_once(':') {
        Some((host, _)) => !host.is_empty() && !host.contains('/') && !text.contains("://"),
        None => false,
    }
}

/// `curl -K -` (or `--config -`) fed by a pipe or a here-doc: options nobody sees.
fn curl_config_piped(command: &Command) -> bool {
    let fed = command.pipeline.is_some_and(|(_, stage)| stage > 0)
        || command.redirects.iter().any(|r| r.reads());
    fed && values(
        command.args(),
        Some('K'),
        Some("--config"),
        "dFoOTHuXAeEKrmwy",
    )
    .iter()
    .any(|w| matches!(w.text(), "-" | "/dev/stdin"))
}

/// `/dev/tcp/HOST/PORT` and `/dev/udp/…` in a redirect: bash opens a connection.
pub(super) fn socket_redirects(command: &Command, out: &mut Findings) {
    for redirect in &command.redirects {
        let target = redirect.target.text().trim_matches('"');
        let Some(rest) = target
            .strip_prefix("/dev/tcp/")
            .or_else(|| target.strip_prefix("/dev/udp/"))
        else {
            continue;
        };
        if !is_loopback(rest) {
            out.deny(format!("opens a network connection ({target})"));
        }
    }
}

/// `/dev/tcp/HOST/…` anywhere in code the line runs, even where the grammar gives up
/// (`exec 3<>/dev/tcp/…` does not parse).
pub(super) fn sockets_in_code(line: &Line, out: &mut Findings) {
    for unit in line.units.iter().filter(|u| u.origin != Origin::Data) {
        for prefix in ["/dev/tcp/", "/dev/udp/"] {
            for (at, _) in unit.source.match_indices(prefix) {
                let rest = &unit.source[at + prefix.len()..];
                if !is_loopback(rest) {
                    let end = rest
                        .find(|c: char| c.is_whitespace() || c == ';')
                        .unwrap_or(rest.len());
                    out.deny(format!(
                        "opens a network connection ({prefix}{})",
                        &rest[..end]
                    ));
                }
            }
        }
    }
}

/// `git push` to a URL, or to a remote the same line adds: the repository leaves.
pub(super) fn pushes(line: &Line, out: &mut Findings) {
    let mut added: Vec<String> = Vec::new();
    for command in line.running() {
        if command.program() != Some("git") {
            continue;
        }
        let words: Vec<&str> = command
            .args()
            .iter()
            .map(Word::text)
            .filter(|t| !t.starts_with('-'))
            .collect();
        match words.as_slice() {
            ["remote", "add", name, ..] => added.push((*name).to_owned()),
            ["push", remote, ..]
                if remote.contains("://")
                    || is_remote(remote)
                    || added.iter().any(|a| a == remote) =>
            {
                out.deny(format!("pushes the repository to another host ({remote})"));
            }
            _ => {}
        }
    }
}

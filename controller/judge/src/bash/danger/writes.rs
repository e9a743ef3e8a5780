//! Writes: where a command writes (by redirect or by its arguments), and the checks on it:
//! devices read or written, places outside the workspace, the repository's metadata.

use super::super::options::{self, has_long, has_short};
use super::super::{Command, Cwd};
use super::{Findings, is_metadata};
use crate::paths::{self, normalize};
use crate::shell::Word;

/// Disks and kernel memory: formatted, overwritten.
pub(super) fn devices(command: &Command, out: &mut Findings) {
    let program = command.program().unwrap_or_default();
    if program.starts_with("mkfs") || program.starts_with("mkswap") {
        out.deny(format!("formats a device ({program})"));
    }
    let device = |word: &Word| paths::device_reached(word.text().trim_start_matches("of="));
    let operand_device = command.args().iter().find_map(device);
    if matches!(
        program,
        "wipefs" | "fdisk" | "sfdisk" | "parted" | "blkdiscard" | "shred" | "sgdisk"
    ) && let Some(device) = &operand_device
    {
        out.deny(format!("rewrites a disk ({program}: {device})"));
    }
    for target in write_targets(command) {
        if let Some(device) = device(target) {
            out.deny(format!("writes {device}"));
        }
    }
    // Reading: every operand a program that reads contents takes (not a search pattern), an
    // `if=`, a reading redirect. Listing names (`ls /dev`, `stat /dev/sda`) reads none.
    if is_metadata(command) {
        return;
    }
    let patterns = options::pattern_positions(&command.argv);
    let read = command
        .argv
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(index, _)| !patterns.contains(index))
        .map(|(_, word)| word)
        .chain(
            command
                .redirects
                .iter()
                .filter(|r| r.reads() && r.heredoc.is_none())
                .map(|r| &r.target),
        )
        .find_map(|word| paths::device_reached(word.text().trim_start_matches("if=")));
    if let Some(device) = read {
        out.deny(format!("reads {device}"));
    }
}

/// Where a command writes, by redirect or by its arguments.
fn write_targets(command: &Command) -> Vec<&Word> {
    let mut targets: Vec<&Word> = command
        .redirects
        .iter()
        .filter(|r| !r.reads() && !r.op.contains('&') || matches!(r.op.as_str(), "&>" | "&>>"))
        .map(|r| &r.target)
        .collect();
    let args = command.args();
    let operands: Vec<&Word> = options::operands(args, &[])
        .into_iter()
        .map(|(_, w)| w)
        .collect();
    match command.program().unwrap_or_default() {
        "tee" | "touch" | "mkdir" | "truncate" | "chmod" | "chown" | "chgrp" | "rmdir"
        | "shred" => targets.extend(operands),
        "cp" | "mv" | "install" | "ln" | "rsync" => targets.extend(operands.last()),
        "sed" | "perl" if has_short(args, 'i', "efI") || has_long(args, "--in-place") => {
            targets.extend(operands.into_iter().skip(1))
        }
        "dd" => targets.extend(args.iter().filter(|w| w.text().starts_with("of="))),
        _ => {}
    }
    targets
}

/// Writes outside the workspace, into `.git` or `.github`.
pub(super) fn writes(command: &Command, out: &mut Findings) {
    for target in write_targets(command) {
        let text = target.text().trim_start_matches("of=");
        if let Some(why) = outside(text, &command.cwd) {
            out.ask(format!("writes outside the workspace ({why})"));
        }
        if let Some(place) = repository_metadata(text) {
            out.ask(format!("writes into {place}"));
        }
    }
}

/// Why a written path is outside the workspace, if it is; scratch and null devices are not.
fn outside(text: &str, cwd: &Cwd) -> Option<String> {
    let unquoted = text.trim_matches('"');
    if unquoted.starts_with('~') || unquoted.starts_with("$HOME") || unquoted.starts_with("${HOME}")
    {
        return Some(text.to_owned());
    }
    if unquoted.starts_with('/') {
        let path = normalize(unquoted);
        let harmless = ["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"]
            .contains(&path.as_str())
            || ["/dev/fd/", "/tmp/", "/var/tmp/"]
                .iter()
                .any(|p| path.starts_with(p));
        return (!harmless).then_some(path);
    }
    match cwd {
        Cwd::Inside(folder) => {
            let path = normalize(&format!("{folder}/{unquoted}"));
            (path == ".." || path.starts_with("../")).then(|| text.to_owned())
        }
        Cwd::At(folder) => {
            let path = normalize(&format!("{folder}/{unquoted}"));
            let harmless = ["/tmp/", "/var/tmp/"].iter().any(|p| path.starts_with(p));
            (!harmless).then_some(path)
        }
        Cwd::Elsewhere => Some(format!("{text}, after a cd")),
        Cwd::Unknown => Some(format!("{text}, from a folder the sandbox did not say")),
    }
}

/// `.git/…` or `.github/…` (any case: case-insensitive file systems merge them), at any depth.
pub fn repository_metadata(path: &str) -> Option<&'static str> {
    let path = normalize(path.trim_matches('"'));
    let components: Vec<&str> = path.split('/').collect();
    for (index, component) in components.iter().enumerate() {
        if component.eq_ignore_ascii_case(".git") {
            return Some(".git");
        }
        if component.eq_ignore_ascii_case(".github") && index + 1 < components.len() {
            return Some(".github");
        }
    }
    None
}

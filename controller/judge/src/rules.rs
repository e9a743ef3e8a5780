//! Rules: `deny`, `ask` and `allow` patterns over a tool and its arguments, option-aware
//! `read_only` entries for `bash`, and the built-in checks.
//!
//! A pattern is `tool` (any call of that tool) or `tool(glob)`; `tool` may itself use `*`
//! (`mcp__git__*`, every tool of one MCP server). The glob is matched against the
//! call's subject: each simple command of a `bash` line (its words, quotes removed, and its
//! redirects; with and without wrappers such as `sudo`), a file tool's normalised path, or the
//! JSON arguments of any other tool. In a glob `*` matches any run of characters (for paths,
//! not `/`), `**` any run including `/`, and `?` one character. A `deny` pattern also matches
//! the `bash` line as written.
//!
//! Deny beats ask beats allow. A `bash` line is allowed only when it parses completely and
//! every command in it is allowed: by a `read_only` entry (every option listed) or an allow
//! pattern, with no variable, assignment or writing redirect.

pub use harness_log::Verdict;

use super::bash::{ReadOnly, default_read_only};
use super::judged::{Judged, What};

mod judge;

/// One parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// As written, for the log.
    pub pattern: String,
    pub(super) tool: String,
    pub(super) glob: Option<String>,
}

impl Rule {
    pub fn parse(pattern: &str) -> Result<Rule, String> {
        let pattern = pattern.trim();
        let (tool, glob) = match pattern.split_once('(') {
            None => (pattern, None),
            Some((tool, rest)) => {
                let glob = rest.strip_suffix(')').ok_or_else(|| {
                    format!("`{pattern}`: a `tool(glob)` pattern must end with `)`")
                })?;
                (tool, Some(glob.to_owned()))
            }
        };
        if tool.is_empty()
            || !tool
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '*')
        {
            return Err(format!("`{pattern}`: `{tool}` is not a tool name"));
        }
        Ok(Rule {
            pattern: pattern.to_owned(),
            tool: tool.to_owned(),
            glob,
        })
    }

    /// The tool part is a name, or a glob with `*` (`mcp__git__*`, `*`).
    pub(super) fn tool_matches(&self, tool: &str) -> bool {
        self.tool == tool
            || (self.tool.contains('*') && harness_log::text::glob_matches(&self.tool, tool))
    }

    /// Whether the rule matches a call of `tool` whose subject is `text`.
    pub(super) fn matches(&self, tool: &str, text: &str, is_path: bool) -> bool {
        self.tool_matches(tool)
            && self
                .glob
                .as_ref()
                .is_none_or(|g| glob_match(g, text, is_path))
    }
}

/// What the rules say about a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruling {
    pub verdict: Verdict,
    /// The rule or built-in check, e.g. `rule bash(git push*--force*)`.
    pub provenance: String,
    /// An allow that holds only if the git repositories found from these folders (relative to
    /// the workspace root) run no programs from their config: read-only git commands.
    pub repositories: Vec<String>,
    /// An allow that holds only if none of these workspace paths (relative to its root), which
    /// the allowed commands read, leads out of the workspace through a symlink: the sandbox is
    /// asked where each leads, as the file tools' `read_file` already resolves.
    pub operands: Vec<String>,
}

impl Ruling {
    pub(super) fn new(verdict: Verdict, provenance: impl Into<String>) -> Ruling {
        Ruling {
            verdict,
            provenance: provenance.into(),
            repositories: Vec::new(),
            operands: Vec::new(),
        }
    }
}

/// The rules of a policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSet {
    pub deny: Vec<Rule>,
    pub ask: Vec<Rule>,
    pub allow: Vec<Rule>,
    /// Option-aware allow entries for `bash`.
    pub read_only: Vec<ReadOnly>,
    /// Whether the built-in checks run (credentials, destruction, downloads run …).
    pub builtin: bool,
}

impl RuleSet {
    pub fn parse(deny: &[String], ask: &[String], allow: &[String]) -> Result<RuleSet, String> {
        let parse_all = |patterns: &[String]| {
            patterns
                .iter()
                .map(|p| Rule::parse(p))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(RuleSet {
            deny: parse_all(deny)?,
            ask: parse_all(ask)?,
            allow: parse_all(allow)?,
            read_only: Vec::new(),
            builtin: false,
        })
    }

    /// Adds `read_only` entries.
    pub fn with_read_only(mut self, entries: &[String]) -> Result<RuleSet, String> {
        for entry in entries {
            self.read_only.push(ReadOnly::parse(entry)?);
        }
        Ok(self)
    }

    /// Adds `other`'s rules after this set's own.
    pub fn extend(&mut self, other: RuleSet) {
        self.deny.extend(other.deny);
        self.ask.extend(other.ask);
        self.allow.extend(other.allow);
        self.read_only.extend(other.read_only);
        self.builtin |= other.builtin;
    }

    /// The verdict for a call and what gave it; `None` when nothing decides.
    pub fn evaluate(&self, judged: &Judged) -> Option<Ruling> {
        match &judged.what {
            What::Command { line, from } => self.bash(line, from.as_deref()),
            // Typed into a process that is not known to be a shell (a REPL, or one the sandbox
            // could not name): never routine when it would read a secret or destroy as a
            // command would.
            What::Typed(input) => self
                .typed(input)
                .or_else(|| self.other(&judged.tool, &judged.args.to_string())),
            What::File {
                tool,
                path,
                written,
            } => self.file(*tool, path, written.as_deref()),
            What::Waiting | What::Other => self.other(&judged.tool, &judged.args.to_string()),
        }
    }

    /// Input typed into a process, judged by the built-in denials as a command from an unknown
    /// folder would be; `None` when none applies.
    fn typed(&self, input: &str) -> Option<Ruling> {
        if !self.builtin || input.trim().is_empty() {
            return None;
        }
        let line = crate::bash::Line::parse_from(input, crate::bash::Cwd::Unknown);
        crate::bash::findings(&line)
            .into_iter()
            .find(|f| f.verdict == Verdict::Deny)
            .map(|f| {
                Ruling::new(
                    Verdict::Deny,
                    format!("{} (typed into a process)", f.provenance),
                )
            })
    }

    fn other(&self, tool: &str, subject: &str) -> Option<Ruling> {
        for (rules, verdict) in [
            (&self.deny, Verdict::Deny),
            (&self.ask, Verdict::Ask),
            (&self.allow, Verdict::Allow),
        ] {
            if let Some(rule) = rules.iter().find(|r| r.matches(tool, subject, false)) {
                return Some(Ruling::new(verdict, format!("rule {}", rule.pattern)));
            }
        }
        None
    }

    /// The built-in set: what a careful engineer would sign for an agent in a workspace.
    pub fn defaults() -> RuleSet {
        let to_strings = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let mut rules = RuleSet::parse(
            &to_strings(DEFAULT_DENY),
            &to_strings(DEFAULT_ASK),
            &to_strings(DEFAULT_ALLOW),
        )
        .expect("the built-in rules parse");
        rules.read_only = default_read_only();
        rules.builtin = true;
        rules
    }
}

/// Starting a subagent (the opt-in `agent` tool) is not itself a risk: every call the child
/// makes is judged in the child, against the root user's task. A user's `deny: [agent(*)]`
/// or `ask` wins, as user rules are checked first.
pub const DEFAULT_ALLOW: &[&str] = &["agent(*)"];

/// Beyond the built-in checks (see `bash::danger`): a fork bomb.
pub const DEFAULT_DENY: &[&str] = &["bash(*:(){*)"];

/// History rewrites, force-pushes, privilege and the network. Recursive deletes, writes
/// outside the workspace and into `.git` are built-in checks.
pub const DEFAULT_ASK: &[&str] = &[
    "bash(git push*--force*)",
    "bash(git push*-f*)",
    "bash(git push * :*)",
    "bash(git push*--delete*)",
    "bash(git reset --hard*)",
    "bash(git rebase*)",
    "bash(git filter-branch*)",
    "bash(git filter-repo*)",
    "bash(git clean*-*f*)",
    "bash(git branch -D*)",
    "bash(git checkout -- *)",
    "bash(git commit --amend*)",
    "bash(git gc --prune*)",
    "bash(find *-exec*)",
    "bash(find *-ok*)",
    "bash(xargs *rm*)",
    "bash(sudo *)",
    "bash(su *)",
    "bash(su)",
    "bash(doas *)",
    "bash(chmod -R*)",
    "bash(chown -R*)",
    "bash(chmod *777*)",
    "bash(curl *)",
    "bash(wget *)",
    "bash(ssh *)",
    "bash(scp *)",
    "bash(rsync *)",
    "bash(nc *)",
    "bash(crontab*)",
    "bash(systemctl *)",
    "bash(*authorized_keys*)",
    "bash(*/etc/*)",
];

/// Glob matching: `*` any run (not `/` when `path`), `**` any run, `?` one character.
pub fn glob_match(glob: &str, text: &str, path: bool) -> bool {
    let pattern: Vec<char> = glob.chars().collect();
    let text: Vec<char> = text.chars().collect();
    // Dynamic programming over (pattern index, text index): O(len × len), no backtracking blow-up.
    let mut reachable = vec![vec![false; text.len() + 1]; pattern.len() + 1];
    reachable[0][0] = true;
    let mut p = 0;
    while p < pattern.len() {
        let double = pattern[p] == '*' && pattern.get(p + 1) == Some(&'*');
        let width = if double { 2 } else { 1 };
        for t in 0..=text.len() {
            if !reachable[p][t] {
                continue;
            }
            match pattern[p] {
                '*' => {
                    reachable[p + width][t] = true;
                    let mut k = t;
                    while k < text.len() && (double || !path || text[k] != '/') {
                        k += 1;
                        reachable[p + width][k] = true;
                    }
                }
                '?' => {
                    if t < text.len() && (!path || text[t] != '/') {
                        reachable[p + 1][t + 1] = true;
                    }
                }
                literal => {
                    if t < text.len() && text[t] == literal {
                        reachable[p + 1][t + 1] = true;
                    }
                }
            }
        }
        p += width;
    }
    reachable[pattern.len()][text.len()]
}

#[cfg(test)]
mod tests;

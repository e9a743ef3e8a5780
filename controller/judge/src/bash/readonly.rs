//! Option-aware allow entries: a program (and subcommand) with the options that keep it
//! read-only. A call is allowed by an entry only when every option it passes is listed; any
//! other option makes it an ask.
//!
//! An entry is written `program [sub …] option …`, where an option is `-x` or `--name` (a
//! flag), `-x=` or `--name=` (takes a value, attached or as the next word), `--name=?` (an
//! optional value, attached only), `-#` (numeric options such as `-20`), `<=N` (at most N
//! operands) or `*` (any arguments). A single-dash option longer than one letter (`-name=`)
//! is matched whole, as `find` spells its predicates.

use super::Command;
use super::git;
use crate::shell::{Dynamism, Redirect, Word};

/// One allow entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOnly {
    /// As written, for provenance.
    pub entry: String,
    program: String,
    sub: Vec<String>,
    flags: Vec<String>,
    valued: Vec<String>,
    optional: Vec<String>,
    numeric: bool,
    max_operands: Option<usize>,
    any: bool,
}

/// Why a command an entry names is not allowed by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// An option outside the entry's list: the call is an ask.
    Option(String),
    /// Something else (a variable, a write) keeps it from being allowed by a rule.
    Other(String),
}

impl ReadOnly {
    pub fn parse(entry: &str) -> Result<ReadOnly, String> {
        let mut parsed = ReadOnly {
            entry: entry.trim().to_owned(),
            program: String::new(),
            sub: Vec::new(),
            flags: Vec::new(),
            valued: Vec::new(),
            optional: Vec::new(),
            numeric: false,
            max_operands: None,
            any: false,
        };
        for token in entry.split_whitespace() {
            if parsed.program.is_empty() {
                parsed.program = token.to_owned();
            } else if let Some(n) = token.strip_prefix("<=") {
                parsed.max_operands = Some(n.parse().map_err(|_| {
                    format!("`{entry}`: `{token}` must be `<=` and a number of operands")
                })?);
            } else if token == "*" {
                parsed.any = true;
            } else if token == "-#" {
                parsed.numeric = true;
            } else if let Some(name) = token.strip_suffix("=?") {
                parsed.optional.push(name.to_owned());
            } else if let Some(name) = token.strip_suffix('=') {
                parsed.valued.push(name.to_owned());
            } else if token.starts_with('-') {
                parsed.flags.push(token.to_owned());
            } else if parsed.flags.is_empty() && parsed.valued.is_empty() {
                parsed.sub.push(token.to_owned());
            } else {
                return Err(format!(
                    "`{entry}`: `{token}` is not an option (`-x`, `--name`, `-x=`, `--name=`, `--name=?`, `-#`, `<=N` or `*`)"
                ));
            }
        }
        if parsed.program.is_empty() || parsed.program.contains('/') {
            return Err(format!("`{entry}`: an entry starts with a program name"));
        }
        Ok(parsed)
    }

    /// The program and subcommand, for provenance: `git status`.
    pub fn name(&self) -> String {
        let mut name = self.program.clone();
        for sub in &self.sub {
            name.push(' ');
            name.push_str(sub);
        }
        name
    }

    /// Whether the entry is about this command (program and subcommand words).
    pub fn names(&self, program: &str, args: &[Word]) -> bool {
        program == self.program
            && self.sub.len() <= args.len()
            && self
                .sub
                .iter()
                .zip(args)
                .all(|(s, w)| w.as_static() == Some(s))
    }

    /// Checks a command the entry names; `args` follow the program (and git's global options).
    pub fn check(&self, args: &[Word]) -> Result<(), Refusal> {
        let args = &args[self.sub.len()..];
        let mut operands = 0;
        let mut at = 0;
        let mut ended = false;
        while at < args.len() {
            let word = &args[at];
            at += 1;
            let text = word.text();
            if !ended && text == "--" {
                ended = true;
                continue;
            }
            if ended || self.any || !text.starts_with('-') || text == "-" {
                operand(word)?;
                operands += 1;
                continue;
            }
            if word.as_static().is_none() {
                return Err(Refusal::Other(format!(
                    "an option known only when it runs: {text}"
                )));
            }
            at += self.option(text, args.get(at))?;
        }
        match self.max_operands {
            Some(max) if operands > max => Err(Refusal::Option(format!(
                "more than {max} operand{} (`{}` writes to the next)",
                if max == 1 { "" } else { "s" },
                self.program
            ))),
            _ => Ok(()),
        }
    }

    /// Checks one option word; returns how many following words it takes.
    fn option(&self, text: &str, next: Option<&Word>) -> Result<usize, Refusal> {
        let refuse = || Refusal::Option(text.split('=').next().unwrap_or(text).to_owned());
        let whole = text.split_once('=').map_or(text, |(name, _)| name);
        let attached = text.contains('=');
        if self.flags.iter().any(|f| f == text) {
            return Ok(0);
        }
        if self.valued.iter().any(|v| v == whole) {
            return Ok(usize::from(!attached && next.is_some()));
        }
        if self.optional.iter().any(|v| v == whole) {
            return Ok(0);
        }
        if text.starts_with("--") {
            return Err(refuse());
        }
        let body = &text[1..];
        if self.numeric && body.chars().all(|c| c.is_ascii_digit()) {
            return Ok(0);
        }
        // A cluster of short flags; a valued one takes the rest of the word or the next.
        for (offset, c) in body.char_indices() {
            let short = format!("-{c}");
            if self.valued.contains(&short) {
                let rest = &body[offset + c.len_utf8()..];
                return Ok(usize::from(rest.is_empty()));
            }
            // An optional value is attached only: the rest of the word is it (`-n5`).
            if self.optional.contains(&short) {
                return Ok(0);
            }
            if !self.flags.contains(&short) {
                return Err(Refusal::Option(short));
            }
        }
        Ok(0)
    }
}

/// An operand must be static, or a glob, tilde or brace pattern (whose reach the deny checks
/// have judged); a variable or command output could be anything.
fn operand(word: &Word) -> Result<(), Refusal> {
    match word {
        Word::Static(_) => Ok(()),
        // `<(cmd)` is a pipe's name; the command in it is judged on its own.
        Word::Dynamic {
            why: Dynamism::Glob | Dynamism::Tilde | Dynamism::Brace | Dynamism::ProcessSubstitution,
            ..
        } => Ok(()),
        Word::Dynamic { raw, .. } => Err(Refusal::Other(format!(
            "`{raw}` is known only when it runs"
        ))),
    }
}

/// Whether a redirect keeps a command read-only: reads, `/dev/null`, descriptor copies.
pub fn redirect_is_read_only(redirect: &Redirect) -> bool {
    if redirect.reads() {
        return redirect.heredoc.is_none() || !redirect.heredoc_dynamic;
    }
    match redirect.target.as_static() {
        Some("/dev/null") => true,
        Some(target) => {
            redirect.op.contains('&')
                && (target == "-" || target.chars().all(|c| c.is_ascii_digit()))
        }
        None => false,
    }
}

/// Which entry allows a command, or why none does; `Ok(None)` when no entry names it.
pub fn judge<'a>(
    entries: &'a [ReadOnly],
    command: &Command,
) -> Result<Option<&'a ReadOnly>, Refusal> {
    let Some(program) = command.program() else {
        return Ok(None);
    };
    let (args, is_git) = if program == "git" {
        match git_args(command)? {
            Some(args) => (args, true),
            None => return Ok(None),
        }
    } else {
        (command.args().to_vec(), false)
    };
    let Some(entry) = entries.iter().find(|e| e.names(program, &args)) else {
        return Ok(None);
    };
    if command.substituted {
        return Err(Refusal::Other("a variable set in the same line".to_owned()));
    }
    if let Some((name, _)) = command.assignments.first() {
        return Err(Refusal::Other(format!("sets {name} for the command")));
    }
    if let Some(redirect) = command.redirects.iter().find(|r| !redirect_is_read_only(r)) {
        return Err(Refusal::Other(format!("writes {}", redirect.target.text())));
    }
    entry.check(&args)?;
    if is_git && program == "git" {
        match entry.sub.first().map(String::as_str) {
            Some("branch") => git_branch_lists(&args)?,
            Some("tag") => git_tag_lists(&args)?,
            Some("remote") => git_remote_reads(&args)?,
            _ => {}
        }
    }
    Ok(Some(entry))
}

/// git's arguments from the subcommand on, when its global options are ones a read-only
/// command may have: `--no-pager`, `--no-optional-locks`, and `-c` pairs that turn programs
/// off or set keys that run nothing.
fn git_args(command: &Command) -> Result<Option<Vec<Word>>, Refusal> {
    let global = git::global(&command.argv);
    if let Some(option) = global.other.iter().find(|o| {
        !matches!(
            o.as_str(),
            "--no-pager"
                | "--no-optional-locks"
                | "--literal-pathspecs"
                | "--no-replace-objects"
                | "--glob-pathspecs"
                | "--noglob-pathspecs"
                | "--icase-pathspecs"
        )
    }) {
        return Err(Refusal::Option(option.clone()));
    }
    if !global.config_env.is_empty() || global.dynamic {
        return Err(Refusal::Option("--config-env".to_owned()));
    }
    if let Some((key, _)) = global
        .config
        .iter()
        .find(|(key, value)| git::is_program_key(key) && !git::disables(key, value))
    {
        return Err(Refusal::Option(format!("-c {key}")));
    }
    Ok(global.sub.map(|sub| command.argv[sub..].to_vec()))
}

/// `git branch NAME` creates a branch; operands are patterns only with `--list`.
fn git_branch_lists(args: &[Word]) -> Result<(), Refusal> {
    let listing = args.iter().any(|w| matches!(w.text(), "--list" | "-l"));
    let operands = args[1..]
        .iter()
        .filter(|w| !w.text().starts_with('-'))
        .count();
    if operands > 0 && !listing {
        return Err(Refusal::Option(
            "a branch name (creates a branch)".to_owned(),
        ));
    }
    Ok(())
}

/// `git tag NAME` creates a tag: operands are patterns only in list mode, which `-l`/`--list`
/// or an option that implies it (`-n…`, `--contains`, `--merged`, `--points-at`, …) selects,
/// as git's own `cmdmode` rule does. `--sort`, `--format`, `-i` do not list: with a name, git
/// still creates the tag.
fn git_tag_lists(args: &[Word]) -> Result<(), Refusal> {
    let listing = args[1..].iter().any(|w| {
        let text = w.text();
        matches!(text, "-l" | "--list")
            || text.starts_with("-n")
            || [
                "--contains",
                "--no-contains",
                "--merged",
                "--no-merged",
                "--points-at",
            ]
            .iter()
            .any(|option| text == *option || text.starts_with(&format!("{option}=")))
    });
    let operands = args[1..]
        .iter()
        .filter(|w| !w.text().starts_with('-'))
        .count();
    if operands > 0 && !listing {
        return Err(Refusal::Option("a tag name (creates a tag)".to_owned()));
    }
    Ok(())
}

/// `git remote` reads only when it lists (`git remote`, `-v`), or with `get-url` or `show -n`;
/// its other subcommands write the config (`add`, `set-url`, `rename`, `remove`, `set-head`,
/// `set-branches`) or reach the network (`update`, `prune`, `show` without `-n`).
fn git_remote_reads(args: &[Word]) -> Result<(), Refusal> {
    let words: Vec<&str> = args[1..].iter().map(Word::text).collect();
    let Some(at) = words.iter().position(|w| !w.starts_with('-')) else {
        return Ok(());
    };
    let rest = &words[at + 1..];
    match words[at] {
        "get-url" => Ok(()),
        "show" if rest.contains(&"-n") => Ok(()),
        sub => Err(Refusal::Option(format!(
            "remote {sub} (it writes the repository's config or reaches the network)"
        ))),
    }
}

/// The built-in entries.
pub fn default_read_only() -> Vec<ReadOnly> {
    DEFAULT_READ_ONLY
        .iter()
        .map(|entry| {
            // git diff, log and show share their option lists.
            let entry = entry.replace("{DIFF}", GIT_DIFF).replace("{LOG}", GIT_LOG);
            ReadOnly::parse(&entry).expect("the built-in read-only entries parse")
        })
        .collect()
}

const GIT_DIFF: &str = "--stat=? --shortstat --numstat --dirstat=? --name-only --name-status --summary --raw -p -u --patch --no-patch -s -U= --unified= --color=? --no-color --color-moved=? --word-diff=? --color-words=? -b -w --ignore-space-change --ignore-all-space --ignore-blank-lines --ignore-cr-at-eol --diff-filter= -M=? -C=? --find-renames=? --find-copies=? --no-renames --check -R --relative=? --no-relative --minimal --patience --histogram --diff-algorithm= --no-ext-diff --no-textconv -a --text --exit-code --quiet --src-prefix= --dst-prefix= --no-prefix --abbrev=? --full-index --binary --ita-visible-in-index -z --indent-heuristic --no-indent-heuristic --function-context -W --inter-hunk-context=";

const GIT_LOG: &str = "--oneline -n= --max-count= -# --skip= --format= --pretty=? --graph --all --branches=? --tags=? --remotes=? --decorate=? --no-decorate --author= --committer= --since= --until= --after= --before= --grep= --all-match --invert-grep -i --regexp-ignore-case -E -F -S= -G= --pickaxe-all --follow --reverse --date= --relative-date --abbrev-commit --no-abbrev-commit --first-parent --no-merges --merges --min-parents= --max-parents= --left-right --cherry-pick --cherry-mark --boundary --topo-order --date-order --author-date-order --source --walk-reflogs -g --mailmap --no-mailmap --show-signature --notes=? --no-notes -L= --full-history --simplify-merges --ancestry-path --encoding= --expand-tabs=? --no-expand-tabs -m --cc --dd --remerge-diff --show-pulls";

const DEFAULT_READ_ONLY: &[&str] = &[
    "ls -a -A -l -h -1 -R -t -S -r -d -F -i -s -G -n -o -g -p -x -C -c -u -U -v -X -k -Q -b -N -L -H --all --almost-all --human-readable --recursive --reverse --directory --classify --inode --size --color=? --group-directories-first --full-time --sort= --time-style= --time= --format= --width= -w= --block-size= -I= --ignore= --hide= --dereference --indicator-style= --quoting-style= --literal --escape --numeric-uid-gid --no-group --si --file-type --author",
    "cat -n -b -s -A -E -T -v -e -t -u --number --number-nonblank --show-all --show-ends --show-tabs --show-nonprinting --squeeze-blank",
    "head -n= -c= -q -v -z -# --lines= --bytes= --quiet --silent --verbose --zero-terminated",
    "tail -n= -c= -q -v -z -# --lines= --bytes= --quiet --silent --verbose --zero-terminated",
    "wc -l -w -c -m -L --lines --words --bytes --chars --max-line-length",
    // A second operand is where xxd writes; `-r` turns a dump back into bytes.
    "xxd -l= -s= -c= -g= -o= -p -u -i -e -b -a -d -C <=1",
    "od -A= -t= -N= -j= -w=? -v -x -c -b -d -o <=8",
    "grep -r -R -n -i -y -v -w -x -c -l -L -o -q -s -h -H -E -F -G -P -a -I -b -U -T -Z -z -e= -f= -m= -A= -B= -C= -d= -D= -# --recursive --dereference-recursive --line-number --ignore-case --no-ignore-case --invert-match --word-regexp --line-regexp --count --files-with-matches --files-without-match --only-matching --quiet --silent --no-messages --no-filename --with-filename --extended-regexp --fixed-strings --basic-regexp --perl-regexp --text --binary-files= --byte-offset --initial-tab --null --null-data --regexp= --file= --max-count= --after-context= --before-context= --context= --include= --exclude= --exclude-dir= --exclude-from= --color=? --colour=? --label= --line-buffered --directories= --devices=",
    "egrep -r -R -n -i -v -w -x -c -l -L -o -q -s -h -H -a -I -e= -m= -A= -B= -C= --include= --exclude= --exclude-dir= --color=?",
    "fgrep -r -R -n -i -v -w -x -c -l -L -o -q -s -h -H -a -I -e= -m= -A= -B= -C= --include= --exclude= --exclude-dir= --color=?",
    "rg -n -N -i -S -s -w -x -v -c -l -o -F -P -U -u -H -I -L -0 -. -e= -f= -g= -t= -T= -A= -B= -C= -m= -M= -j= -d= --regexp= --file= --glob= --iglob= --type= --type-not= --type-list --after-context= --before-context= --context= --max-count= --max-columns= --max-depth= --threads= --hidden --no-ignore --no-ignore-vcs --no-ignore-parent --no-ignore-dot --ignore-file= --follow --files --files-with-matches --files-without-match --count --count-matches --json --no-heading --heading --color= --colors= --line-number --no-line-number --column --no-column --ignore-case --smart-case --case-sensitive --fixed-strings --word-regexp --line-regexp --invert-match --only-matching --multiline --multiline-dotall --trim --vimgrep --with-filename --no-filename --null --stats --sort= --sortr= --no-messages --quiet -q --pcre2 --engine= --text -a --binary --passthru --replace= -r= --crlf --encoding= -E= --max-filesize= --one-file-system",
    "find -name= -iname= -path= -ipath= -wholename= -iwholename= -regex= -iregex= -regextype= -lname= -ilname= -type= -xtype= -maxdepth= -mindepth= -size= -mtime= -mmin= -atime= -amin= -ctime= -cmin= -newer= -anewer= -cnewer= -newermt= -used= -perm= -user= -group= -uid= -gid= -links= -inum= -samefile= -empty -print -print0 -printf= -ls -prune -not -and -or -o -a -true -false -follow -depth -d -xdev -mount -readable -writable -executable -nouser -nogroup -daystart -quit -noleaf -L -H -P",
    "tree -a -d -f -i -l -x -q -N -Q -p -u -g -s -h -D -F -v -t -c -U -r -C -n -A -S -J -L= -P= -I= --gitignore --noreport --dirsfirst --filesfirst --du --si --prune --matchdirs --ignore-case --charset= --filelimit= --timefmt= --sort= --noreport --inodes --device",
    "file -b -i -L -h -k -r -N -0 -p -S --brief --mime --mime-type --mime-encoding --dereference --no-dereference --keep-going --raw --no-pad --print0 --preserve-date --no-sandbox --extension --apple -E",
    "stat -L -f -t -c= --format= --printf= --dereference --file-system --terse --cached=",
    "du -s -h -a -c -k -m -b -x -L -P -H -S -l -0 -d= -t= --summarize --human-readable --all --total --apparent-size --bytes --max-depth= --exclude= --one-file-system --dereference --no-dereference --separate-dirs --count-links --inodes --si --time=? --time-style= --threshold= --null --block-size= -B=",
    "sort -n -r -u -f -b -d -g -h -M -V -s -z -c -C -m -i -k= -t= -S= --key= --field-separator= --numeric-sort --reverse --unique --ignore-case --ignore-leading-blanks --dictionary-order --general-numeric-sort --human-numeric-sort --month-sort --version-sort --stable --zero-terminated --check=? --merge --ignore-nonprinting --buffer-size= --parallel= --debug",
    "uniq -c -d -D -u -i -z -f= -s= -w= --count --repeated --all-repeated=? --unique --ignore-case --zero-terminated --skip-fields= --skip-chars= --check-chars= --group=? <=1",
    "diff -u -U= -c -C= -r -N -q -s -y -w -b -B -i -a -p -t -T -W= -x= -X= -I= -L= -d -e -n --brief --report-identical-files --unified=? --context=? --recursive --new-file --unidirectional-new-file --side-by-side --width= --ignore-all-space --ignore-space-change --ignore-blank-lines --ignore-case --ignore-tab-expansion --ignore-trailing-space --ignore-matching-lines= --text --show-c-function --show-function-line= --color=? --from-file= --to-file= --exclude= --exclude-from= --label= --suppress-common-lines --left-column --minimal --speed-large-files --normal --strip-trailing-cr --expand-tabs --initial-tab --suppress-blank-empty --no-dereference --tabsize= --horizon-lines=",
    "cmp -b -l -s -i= -n= --print-bytes --verbose --quiet --silent --ignore-initial= --bytes=",
    "comm -1 -2 -3 -z --check-order --nocheck-order --output-delimiter= --total --zero-terminated",
    "echo -n -e -E",
    "printf",
    "pwd -L -P",
    "which -a",
    "type -a -t -p -P -f",
    "basename -a -s= -z --multiple --suffix= --zero",
    "dirname -z --zero",
    "realpath -e -m -L -P -q -s -z --canonicalize-existing --canonicalize-missing --logical --physical --quiet --strip --no-symlinks --zero --relative-to= --relative-base=",
    "readlink -f -e -m -n -q -s -v -z --canonicalize --canonicalize-existing --canonicalize-missing --no-newline --quiet --silent --verbose --zero",
    "nl -b= -n= -w= -s= -v= -i= -d= --body-numbering= --number-format= --number-width= --number-separator= --starting-line-number= --line-increment=",
    "cut -b= -c= -d= -f= -s -z -n --bytes= --characters= --delimiter= --fields= --only-delimited --complement --output-delimiter= --zero-terminated",
    "tr -c -C -d -s -t --complement --delete --squeeze-repeats --truncate-set1",
    "md5sum -b -t -c -z --binary --text --check --tag --quiet --status --strict --warn --zero",
    "sha1sum -b -t -c -z --binary --text --check --tag --quiet --status --strict --warn --zero",
    "sha256sum -b -t -c -z --binary --text --check --tag --quiet --status --strict --warn --zero",
    "sha512sum -b -t -c -z --binary --text --check --tag --quiet --status --strict --warn --zero",
    "test *",
    "[ *",
    "true *",
    "false *",
    "cd -L -P <=1",
    "date -u -R -d= -I=? --date= --utc --universal --rfc-email --rfc-3339= --iso-8601=? -r= --reference=",
    "whoami",
    "id -u -g -G -n -r -z --user --group --groups --name --real --zero",
    "uname -a -s -n -r -v -m -p -i -o --all --kernel-name --nodename --kernel-release --kernel-version --machine --processor --hardware-platform --operating-system",
    "git status -s --short -b --branch --porcelain=? --long -v --verbose -u=? --untracked-files=? --ignored=? -z --show-stash --ahead-behind --no-ahead-behind --renames --no-renames --find-renames=? --column=? --no-column --ignore-submodules=?",
    "git diff --cached --staged --merge-base --no-index {DIFF}",
    "git log {LOG} {DIFF}",
    "git show {LOG} {DIFF}",
    "git branch -a -r -v -vv -l --list --all --remotes --verbose --contains= --no-contains= --merged=? --no-merged=? --sort= --format= --show-current --points-at= --color=? --no-color --column=? --no-column --abbrev=? --no-abbrev -i --ignore-case",
    "git blame -L= -w -M=? -C=? -e -s -l -t -p -n -f -c -b --porcelain --line-porcelain --date= --root --show-name --show-number --show-email --incremental --abbrev=? --ignore-rev= --ignore-revs-file= --color-lines --color-by-age --minimal -S=",
    "git rev-parse --show-toplevel --git-dir --abbrev-ref=? --short=? --verify -q --quiet --is-inside-work-tree --is-inside-git-dir --show-prefix --show-cdup --symbolic --symbolic-full-name --git-common-dir --absolute-git-dir --is-bare-repository --all --branches=? --tags=? --remotes=? --show-object-format=? --default= --revs-only --no-revs --flags --no-flags",
    "git ls-files -c -d -m -o -i -s -u -k -z -t -v -f --cached --deleted --modified --others --ignored --stage --unmerged --killed --exclude-standard --exclude= -x= --exclude-per-directory= --full-name --directory --no-empty-directory --error-unmatch --abbrev=? --deduplicate --format= --eol --recurse-submodules --sparse",
    "git grep -n -i -I -w -v -c -l -L -h -H -E -F -G -P -o -p -W -z -q -e= -f= -m= -A= -B= -C= -# --line-number --column --ignore-case --word-regexp --invert-match --count --files-with-matches --name-only --files-without-match --full-name --no-index --cached --untracked --no-exclude-standard --exclude-standard --recurse-submodules --extended-regexp --fixed-strings --basic-regexp --perl-regexp --only-matching --show-function --function-context --heading --break --null --quiet --and --or --not --all-match --max-depth= --max-count= --after-context= --before-context= --context= --color=? --no-color --threads=",
    "git remote -v --verbose --push --all -n",
    "git tag -l --list -n=? --sort= --contains= --no-contains= --merged=? --no-merged=? --points-at= --format= --color=? -i --ignore-case --column=? --no-column",
    "git describe --tags --all --long --abbrev= --always --dirty=? --broken=? --exact-match --first-parent --match= --exclude= --contains --candidates=",
    "git shortlog -s -n -e -c --summary --numbered --email --committer --group= --format= -w=?",
    "git cat-file -t -s -p -e --batch-check=? --textconv=?",
    "git ls-tree -r -d -t -l -z --name-only --name-status --object-only --full-name --full-tree --abbrev=? --long --format=",
    "git rev-list --count --all --max-count= -n= -# --first-parent --no-merges --merges --since= --until= --reverse --objects --branches=? --tags=? --left-right --topo-order --date-order",
    "git merge-base --is-ancestor --all --octopus --independent --fork-point",
    "git count-objects -v -H --verbose --human-readable",
];

//! A `bash` command as the shell will run it: every simple command (its assignments, argv and
//! redirects), wherever it sits (pipelines, lists, `&`, subshells, groups, loops, `$(…)`,
//! backticks, `<(…)`, here-docs), parsed with tree-sitter-bash.
//!
//! Fail-closed: the walker knows a fixed set of node kinds. Anything else (parse errors,
//! arithmetic, `[[ ]]`, function definitions, an unknown escape) is recorded in
//! [`Analysis::unknown`], and a rule never allows a command whose analysis has any; deny and
//! ask rules still see every simple command that was found inside it.

mod words;

use tree_sitter::{Node, Parser};

pub use words::{brace_expands, decode_ansi_c};

/// One shell word after static evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Word {
    /// Fully static: the exact string bash would pass (quotes removed, escapes applied).
    Static(String),
    /// Depends on run-time state; `raw` is the source text, `why` the first reason found.
    Dynamic { raw: String, why: Dynamism },
}

/// Why a word is not static.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dynamism {
    /// `*`, `?` or `[…]`: expands to the names that match.
    Glob,
    /// A leading `~`.
    Tilde,
    /// `{a,b}` or `{1..3}`.
    Brace,
    /// `$x`, `${x…}`.
    Parameter,
    /// `$(…)`, backticks.
    CommandSubstitution,
    /// `<(…)`, `>(…)`.
    ProcessSubstitution,
    /// Anything else (arithmetic, an escape not decoded, a parse error).
    Other,
}

impl Word {
    /// The text: the value when static, the source when not.
    pub fn text(&self) -> &str {
        match self {
            Word::Static(text) => text,
            Word::Dynamic { raw, .. } => raw,
        }
    }

    pub fn as_static(&self) -> Option<&str> {
        match self {
            Word::Static(text) => Some(text),
            Word::Dynamic { .. } => None,
        }
    }
}

/// A redirection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// The file descriptor written before the operator (`2>`), if any.
    pub fd: Option<String>,
    /// As written: `>`, `>>`, `<`, `&>`, `&>>`, `>&`, `<&`, `>|`, `<<`, `<<-`, `<<<`.
    pub op: String,
    /// The file, descriptor, here-doc delimiter or here-string word.
    pub target: Word,
    /// A here-doc's body as written, when the command has one.
    pub heredoc: Option<String>,
    /// Whether a here-doc's body expands (an unquoted delimiter with `$` or backticks in it).
    pub heredoc_dynamic: bool,
}

impl Redirect {
    /// Whether it reads: `<`, `<<`, `<<-`, `<<<`, `<&`.
    pub fn reads(&self) -> bool {
        self.op.starts_with('<') && self.op != "<>"
    }
}

/// One simple command.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SimpleCommand {
    /// Enclosing constructs, outermost first, e.g. `["$()"]` or `["|"]`.
    pub context: Vec<&'static str>,
    /// `FOO=1` prefixes (name, value).
    pub assignments: Vec<(String, Word)>,
    /// argv; empty for a bare assignment like `a=1`.
    pub argv: Vec<Word>,
    pub redirects: Vec<Redirect>,
    /// The pipeline this command is in (a number shared by its stages), and its stage.
    pub pipeline: Option<(usize, usize)>,
}

/// What a command line holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Analysis {
    /// In the order they appear.
    pub commands: Vec<SimpleCommand>,
    /// Redirects applied to compound commands (`{ …; } > f`, loops).
    pub compound_redirects: Vec<Redirect>,
    /// Why the line cannot be fully classified; non-empty means no rule may allow it.
    pub unknown: Vec<String>,
    /// `for NAME in WORDS`: the loop variable and the values it takes.
    pub loops: Vec<(String, Vec<Word>)>,
    /// `# …` comments, as written: not run, but read by whoever reviews the call.
    pub comments: Vec<String>,
}

const MAX_DEPTH: usize = 64;

/// Parses `source` and walks it.
pub fn analyse(source: &str) -> Analysis {
    let mut analysis = Analysis::default();
    let mut parser = Parser::new();
    if parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .is_err()
    {
        analysis
            .unknown
            .push("the shell grammar did not load".to_owned());
        return analysis;
    }
    let Some(tree) = parser.parse(source, None) else {
        analysis
            .unknown
            .push("the parser returned no tree".to_owned());
        return analysis;
    };
    if source
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        // tree-sitter-bash splits words at `\r` and the like; bash does not.
        analysis.unknown.push("a control character".to_owned());
    }
    if words::joins_words_by_line_continuation(source) {
        // tree-sitter-bash treats `\<newline>` as a space, so `r\<nl>m` would be two words
        // where bash sees `rm`.
        analysis
            .unknown
            .push("a line continuation inside a word".to_owned());
    }
    let root = tree.root_node();
    if root.has_error() {
        analysis.unknown.push("a syntax error".to_owned());
    }
    let mut walker = Walker {
        src: source.as_bytes(),
        analysis,
        context: Vec::new(),
        next_pipeline: 0,
        stage: None,
    };
    walker.statement(root, 0);
    let mut analysis = walker.analysis;
    analysis.comments = comments(root, source.as_bytes());
    analysis
}

/// Every comment node's text, anywhere in the tree.
fn comments(root: Node<'_>, src: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = root.walk();
    let mut descending = true;
    loop {
        if descending && cursor.node().kind() == "comment" {
            out.push(String::from_utf8_lossy(&src[cursor.node().byte_range()]).into_owned());
        }
        if descending && cursor.goto_first_child() {
            continue;
        }
        if cursor.goto_next_sibling() {
            descending = true;
            continue;
        }
        if !cursor.goto_parent() {
            return out;
        }
        descending = false;
    }
}

struct Walker<'s> {
    src: &'s [u8],
    analysis: Analysis,
    context: Vec<&'static str>,
    next_pipeline: usize,
    /// The pipeline and stage the statement being walked belongs to.
    stage: Option<(usize, usize)>,
}

/// (field name, child) for every child, named or not.
fn children<'t>(node: Node<'t>) -> Vec<(Option<&'static str>, Node<'t>)> {
    let mut out = Vec::new();
    let mut cursor = node.walk();
    if cursor.goto_first_child() {
        loop {
            out.push((cursor.field_name(), cursor.node()));
            if !cursor.goto_next_sibling() {
                break;
            }
        }
    }
    out
}

/// Kinds walked as statements wherever they appear.
const STATEMENTS: &[&str] = &[
    "command",
    "redirected_statement",
    "pipeline",
    "list",
    "subshell",
    "compound_statement",
    "if_statement",
    "while_statement",
    "for_statement",
    "case_statement",
    "negated_command",
    "variable_assignment",
    "variable_assignments",
    "declaration_command",
    "unset_command",
    "function_definition",
    "test_command",
    "c_style_for_statement",
    "do_group",
];

impl Walker<'_> {
    fn text(&self, node: Node<'_>) -> String {
        String::from_utf8_lossy(&self.src[node.byte_range()]).into_owned()
    }

    fn unknown(&mut self, node: Node<'_>, why: &str) {
        let text: String = self.text(node).chars().take(40).collect();
        self.analysis
            .unknown
            .push(format!("{why}: {} `{text}`", node.kind()));
    }

    fn push(
        &mut self,
        assignments: Vec<(String, Word)>,
        argv: Vec<Word>,
        redirects: Vec<Redirect>,
    ) {
        self.analysis.commands.push(SimpleCommand {
            context: self.context.clone(),
            assignments,
            argv,
            redirects,
            pipeline: self.stage,
        });
    }

    /// Statements and structural nodes.
    fn statement(&mut self, node: Node<'_>, depth: usize) {
        if depth > MAX_DEPTH {
            self.unknown(node, "nesting too deep");
            return;
        }
        if node.is_error() || node.is_missing() {
            self.unknown(node, "a parse error");
        }
        match node.kind() {
            "command" => self.command(node, Vec::new(), Vec::new(), depth),
            "variable_assignment" | "variable_assignments" => {
                let mut assignments = Vec::new();
                self.assignments(node, &mut assignments, depth);
                self.push(assignments, Vec::new(), Vec::new());
            }
            "redirected_statement" => self.redirected(node, depth),
            "program" | "list" | "compound_statement" | "do_group" | "else_clause"
            | "elif_clause" | "if_statement" | "while_statement" | "case_item" => {
                self.each_statement(node, depth)
            }
            "pipeline" => self.pipeline(node, depth),
            "subshell" => self.nested_statements(node, "subshell", depth),
            "negated_command" => self.nested_statements(node, "!", depth),
            "case_statement" => self.case(node, depth),
            "for_statement" => self.for_loop(node, depth),
            "comment" => {}
            "declaration_command" | "unset_command" => self.declaration(node, depth),
            other => self.unsupported(node, other, depth),
        }
    }

    /// Outside the known set: flagged, but walked inside so deny rules see nested commands.
    fn unsupported(&mut self, node: Node<'_>, kind: &str, depth: usize) {
        let why = match kind {
            "function_definition" => "defines a function",
            "test_command" => "a [[ ]] test (may evaluate arithmetic)",
            "c_style_for_statement" => "an arithmetic for loop",
            "ERROR" => "a parse error",
            _ => "an unsupported construct",
        };
        self.unknown(node, why);
        self.context.push("unsupported");
        for (_, child) in children(node) {
            if child.is_named() {
                self.any(child, depth + 1);
            }
        }
        self.context.pop();
    }

    fn each_statement(&mut self, node: Node<'_>, depth: usize) {
        for (field, child) in children(node) {
            if !child.is_named() || child.kind() == "comment" {
                continue;
            }
            if field == Some("value") {
                // A case pattern: globs are fine; only nested commands matter.
                if !matches!(child.kind(), "extglob_pattern" | "word") {
                    self.word(child, depth);
                }
            } else {
                self.statement(child, depth + 1);
            }
        }
    }

    fn nested_statements(&mut self, node: Node<'_>, context: &'static str, depth: usize) {
        self.context.push(context);
        for (_, child) in children(node) {
            if child.is_named() && child.kind() != "comment" {
                self.statement(child, depth + 1);
            }
        }
        self.context.pop();
    }

    fn pipeline(&mut self, node: Node<'_>, depth: usize) {
        let id = self.next_pipeline;
        self.next_pipeline += 1;
        self.context.push("|");
        let stages = children(node)
            .into_iter()
            .filter(|(_, child)| child.is_named() && child.kind() != "comment");
        // Every command of a stage is tagged (`{ a; b; } | sh`: both feed sh); a pipeline
        // inside a stage tags its own, then the outer stage resumes.
        let outer = self.stage;
        for (index, (_, child)) in stages.enumerate() {
            self.stage = Some((id, index));
            self.statement(child, depth + 1);
        }
        self.stage = outer;
        self.context.pop();
    }

    fn case(&mut self, node: Node<'_>, depth: usize) {
        for (field, child) in children(node) {
            if field == Some("value") {
                self.word(child, depth);
            } else if child.is_named() {
                self.statement(child, depth + 1);
            }
        }
    }

    fn for_loop(&mut self, node: Node<'_>, depth: usize) {
        let mut name = None;
        let mut values = Vec::new();
        for (field, child) in children(node) {
            match field {
                Some("variable") => name = Some(self.text(child)),
                Some("value") => values.push(self.word(child, depth)),
                Some("body") => {
                    if let Some(name) = name.take() {
                        // `for x; do` iterates over "$@": values unknown.
                        self.analysis
                            .loops
                            .push((name, std::mem::take(&mut values)));
                    }
                    self.context.push("for");
                    self.statement(child, depth + 1);
                    self.context.pop();
                }
                _ => {}
            }
        }
    }

    /// `declare`/`export`/`local`/`readonly`/`typeset` and `unset`: argv-like.
    fn declaration(&mut self, node: Node<'_>, depth: usize) {
        let mut argv = Vec::new();
        let mut assignments = Vec::new();
        for (_, child) in children(node) {
            match child.kind() {
                "variable_assignment" => self.assignments(child, &mut assignments, depth),
                "variable_name" => argv.push(Word::Static(self.text(child))),
                "comment" => {}
                _ if !child.is_named() => argv.push(Word::Static(self.text(child))),
                _ => argv.push(self.word(child, depth)),
            }
        }
        // `export a=1` assigns as an argument; kept as argv for the policy.
        for (name, value) in assignments {
            argv.push(match value {
                Word::Static(v) => Word::Static(format!("{name}={v}")),
                Word::Dynamic { raw, why } => Word::Dynamic {
                    raw: format!("{name}={raw}"),
                    why,
                },
            });
        }
        self.push(Vec::new(), argv, Vec::new());
    }

    /// A node of unknown role: statements are walked as statements, anything else as a word
    /// (which finds nested commands).
    fn any(&mut self, node: Node<'_>, depth: usize) {
        if STATEMENTS.contains(&node.kind()) {
            self.statement(node, depth);
        } else {
            self.word(node, depth);
        }
    }

    fn redirected(&mut self, node: Node<'_>, depth: usize) {
        let mut redirects = Vec::new();
        let mut extra = Vec::new();
        let mut body = None;
        for (field, child) in children(node) {
            match field {
                Some("body") => body = Some(child),
                _ if child.is_named() => self.redirect(child, &mut redirects, &mut extra, depth),
                _ => {}
            }
        }
        match body {
            Some(body) if body.kind() == "command" => self.command(body, redirects, extra, depth),
            Some(body) => {
                if !extra.is_empty() {
                    self.unknown(node, "words after a compound command's redirect");
                }
                self.analysis
                    .compound_redirects
                    .extend(redirects.iter().cloned());
                // Judged as a command of its own too (`while …; done < ~/.ssh/id_rsa` reads
                // the key; `{ …; } > /dev/sda` writes the disk), in the folder it runs in.
                self.push(Vec::new(), Vec::new(), redirects);
                self.statement(body, depth + 1);
            }
            // `> f` alone truncates f.
            None => self.push(Vec::new(), Vec::new(), redirects),
        }
    }

    fn command(
        &mut self,
        node: Node<'_>,
        mut redirects: Vec<Redirect>,
        extra: Vec<Word>,
        depth: usize,
    ) {
        let mut later = Vec::new();
        let mut assignments = Vec::new();
        let mut argv = Vec::new();
        for (field, child) in children(node) {
            match (field, child.kind()) {
                (Some("name"), _) => {
                    let inner = child.named_child(0).unwrap_or(child);
                    argv.push(self.word(inner, depth));
                }
                (Some("argument"), _) => argv.push(self.word(child, depth)),
                (Some("redirect"), _) => self.redirect(child, &mut redirects, &mut later, depth),
                (_, "variable_assignment") => self.assignments(child, &mut assignments, depth),
                (_, "comment") => {}
                (_, "subshell") => self.statement(child, depth + 1),
                _ if child.is_named() => {
                    self.unknown(child, "an unexpected part of a command");
                    self.any(child, depth + 1);
                }
                // Anonymous tokens inside a command (`=~`, `==`, `$`) are literal arguments.
                _ => argv.push(Word::Static(self.text(child))),
            }
            // `>x rm -rf /`: words after a leading redirect are arguments, in order.
            argv.append(&mut later);
        }
        argv.extend(extra);
        self.push(assignments, argv, redirects);
    }

    fn assignments(&mut self, node: Node<'_>, out: &mut Vec<(String, Word)>, depth: usize) {
        if node.kind() == "variable_assignments" {
            for (_, child) in children(node) {
                if child.kind() == "variable_assignment" {
                    self.assignments(child, out, depth);
                }
            }
            return;
        }
        let name_node = node.child_by_field_name("name");
        let name = name_node.map(|c| self.text(c)).unwrap_or_default();
        let value = match node.child_by_field_name("value") {
            Some(value) => self.word(value, depth),
            None => Word::Static(String::new()),
        };
        if let Some(subscript) = name_node.filter(|c| c.kind() == "subscript") {
            // `a[$(cmd)]=1`: the index is evaluated.
            self.unknown(node, "an array-element assignment");
            self.word(subscript, depth);
        }
        out.push((name, value));
    }
}

//! Walks a parsed program and hands every simple command, with its words analysed, to
//! the classifier. Scripts found on the way (substitutions, `bash -c` bodies, heredocs
//! fed to a shell) come back here, one level deeper.

use std::collections::BTreeSet;
use std::io::Cursor;

use brush_parser::Parser;
use brush_parser::ast::{
    Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundList, ExtendedTestExpr, IoFileRedirectKind,
    IoFileRedirectTarget, IoRedirect, Pipeline, RedirectList, SimpleCommand,
};

use super::words::{self, Arg, Substitution};
use super::{MAX_LINE_BYTES, Part, classify};
use crate::effect::{CommandClass, Effect};

/// Scripts inside scripts deeper than this are opaque.
const MAX_DEPTH: usize = 12;
/// More simple commands than this in one line and the rest is opaque.
const MAX_PARTS: usize = 512;

/// A simple command as the classifier sees it.
#[derive(Debug, Default)]
pub struct Simple {
    pub argv: Vec<Arg>,
    /// Files its redirections write (`> f`, `>> f`, `&> f`, `<> f`).
    pub writes: Vec<Arg>,
    /// What it reads on stdin when that is in the line itself (a heredoc or here-string).
    pub stdin_text: Option<String>,
    /// Files its redirections read (`< f`): only `/dev/tcp/…` matters.
    pub reads: Vec<Arg>,
    /// `NAME=value` before the command (or alone): some names change what runs.
    pub assignments: Vec<(String, Arg)>,
}

pub struct Analyzer {
    pub parts: Vec<Part>,
    via: Vec<&'static str>,
    /// Functions defined in this line; calling one runs a body already analysed.
    pub functions: BTreeSet<String>,
    /// git aliases this line configures (`git config alias.p push && git p`).
    pub git_aliases: std::collections::BTreeMap<String, String>,
    defining: Vec<String>,
}

impl Analyzer {
    pub fn analyze(line: &str) -> Vec<Part> {
        let mut an = Analyzer {
            parts: Vec::new(),
            via: Vec::new(),
            functions: BTreeSet::new(),
            git_aliases: Default::default(),
            defining: Vec::new(),
        };
        an.script(line, None);
        an.parts
    }

    /// Analyses `text` as a script found at `via` (None at top level).
    pub fn script(&mut self, text: &str, via: Option<&'static str>) {
        if let Some(v) = via {
            self.via.push(v);
        }
        if self.via.len() > MAX_DEPTH {
            self.opaque(text, "scripts nested too deeply to analyse");
        } else if text.len() > MAX_LINE_BYTES {
            self.opaque(text, "too long to analyse");
        } else {
            match parse(text) {
                Ok(program) => {
                    for list in &program.complete_commands {
                        self.list(list);
                    }
                }
                Err(message) => self.salvage(text, &message),
            }
        }
        if via.is_some() {
            self.via.pop();
        }
    }

    /// A script that does not parse as a whole. Bash still runs the lines before the
    /// one it cannot parse, so those are analysed as they are; what never parses is
    /// opaque, and its words are still read crudely for anything denied outright.
    fn salvage(&mut self, text: &str, message: &str) {
        const MAX_LINES: usize = 200;
        let mut chunk = String::new();
        let mut lines = text.split_inclusive('\n');
        for line in lines.by_ref().take(MAX_LINES) {
            chunk.push_str(line);
            if let Ok(program) = parse(&chunk) {
                for list in &program.complete_commands {
                    self.list(list);
                }
                chunk.clear();
            }
        }
        chunk.extend(lines);
        if chunk.trim().is_empty() {
            return;
        }
        let error = parse(&chunk).err().unwrap_or_else(|| message.to_owned());
        self.opaque(&chunk, &format!("does not parse: {error}"));
        self.crude(&chunk);
    }

    /// Splits text that does not parse at every operator and reads each piece as a
    /// command of plain words: an over-approximation, used only to add restrictions.
    fn crude(&mut self, text: &str) {
        let separators = [';', '&', '|', '\n', '(', ')', '{', '}', '`', '<', '>'];
        for segment in text.split(separators) {
            let words: Vec<Arg> = segment
                .split_whitespace()
                .map(|w| w.replace(['\'', '"', '\\', '$'], ""))
                .filter(|w| !w.is_empty())
                .map(|w| Arg { text: w, literal: true, glob: false, home: false })
                .collect();
            if words.is_empty() {
                continue;
            }
            let mut part = self.new_part(words.iter().map(|w| w.text.clone()).collect());
            part.via.push("unparsed text");
            classify::argv(self, &words, None, &mut part);
            part.add(CommandClass::Opaque, "read from text that does not parse");
            part.effects.insert(Effect::RunCommand);
            self.push(part);
        }
    }

    /// Records a part whose meaning we cannot see.
    pub fn opaque(&mut self, text: &str, why: &str) {
        let mut part = self.new_part(vec![text.chars().take(200).collect()]);
        part.add(CommandClass::Opaque, why);
        self.push(part);
    }

    pub fn new_part(&self, argv: Vec<String>) -> Part {
        Part { argv, via: self.via.clone(), ..Part::default() }
    }

    pub fn push(&mut self, part: Part) {
        if self.parts.len() < MAX_PARTS {
            self.parts.push(part);
        } else if self.parts.len() == MAX_PARTS {
            let mut last = self.new_part(vec!["…".into()]);
            last.add(CommandClass::Opaque, "too many commands to analyse");
            self.parts.push(last);
        }
    }

    fn list(&mut self, list: &CompoundList) {
        for item in &list.0 {
            self.pipeline(&item.0.first);
            for and_or in &item.0.additional {
                let (brush_parser::ast::AndOr::And(p) | brush_parser::ast::AndOr::Or(p)) = and_or;
                self.pipeline(p);
            }
        }
    }

    fn pipeline(&mut self, pipeline: &Pipeline) {
        for command in &pipeline.seq {
            self.command(command);
        }
    }

    fn command(&mut self, command: &Command) {
        match command {
            Command::Simple(simple) => self.simple(simple),
            Command::Compound(compound, redirects) => {
                self.compound(compound);
                self.redirect_list(redirects.as_ref());
            }
            Command::Function(def) => {
                let name = def.fname.value.clone();
                self.functions.insert(name.clone());
                self.defining.push(name);
                self.via.push("function body");
                self.compound(&def.body.0);
                self.via.pop();
                self.defining.pop();
                self.redirect_list(def.body.1.as_ref());
            }
            Command::ExtendedTest(test, redirects) => {
                let mut subs = Vec::new();
                test_words(&test.expr, &mut subs);
                self.substitutions(subs);
                self.redirect_list(redirects.as_ref());
            }
        }
    }

    fn compound(&mut self, compound: &CompoundCommand) {
        match compound {
            CompoundCommand::Arithmetic(a) => self.scan(&a.expr.value),
            CompoundCommand::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater].into_iter().flatten() {
                    self.scan(&e.value);
                }
                self.list(&f.body.list);
            }
            CompoundCommand::BraceGroup(b) => self.list(&b.list),
            CompoundCommand::Subshell(s) => self.list(&s.list),
            CompoundCommand::ForClause(f) => {
                // `for PS4 in '$(…)'` sets a variable as surely as an assignment does.
                let mut part = self.new_part(vec![format!("for {}", f.variable_name)]);
                let unknown = Arg { text: String::new(), literal: false, glob: false, home: false };
                classify::assignment(self, &f.variable_name, &unknown, &mut part);
                if !part.classes.is_empty() {
                    part.effects.insert(Effect::RunCommand);
                    self.push(part);
                }
                for w in f.values.iter().flatten() {
                    self.word(&w.value);
                }
                self.list(&f.body.list);
            }
            CompoundCommand::CaseClause(c) => {
                self.word(&c.value.value);
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value);
                    }
                    if let Some(cmd) = &item.cmd {
                        self.list(cmd);
                    }
                }
            }
            CompoundCommand::IfClause(i) => {
                self.list(&i.condition);
                self.list(&i.then);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.list(c);
                    }
                    self.list(&e.body);
                }
            }
            CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
                self.list(&w.0);
                self.list(&w.1.list);
            }
            CompoundCommand::Coprocess(c) => self.command(&c.body),
        }
    }

    /// A word outside any simple command (a `for` list, a `case` subject): only the
    /// commands hidden in it matter.
    fn word(&mut self, raw: &str) -> Arg {
        let mut subs = Vec::new();
        let arg = words::analyse(raw, &mut subs);
        self.substitutions(subs);
        arg
    }

    fn scan(&mut self, text: &str) {
        let mut subs = Vec::new();
        words::scan_for_substitutions(text, &mut subs, 0);
        self.substitutions(subs);
    }

    fn substitutions(&mut self, subs: Vec<Substitution>) {
        for s in subs {
            self.script(&s.script, Some("$(…)"));
        }
    }

    /// Redirections on a compound command: a write there is a part of its own.
    fn redirect_list(&mut self, redirects: Option<&RedirectList>) {
        let Some(list) = redirects else { return };
        let mut simple = Simple::default();
        for r in &list.0 {
            self.redirect(r, &mut simple);
        }
        if !simple.writes.is_empty() {
            let argv = simple.writes.iter().map(|w| format!("> {}", w.text)).collect();
            let mut part = self.new_part(argv);
            classify::redirections(&simple, &mut part);
            self.push(part);
        }
    }

    /// Words that bash evaluates again as arithmetic or as a variable name, where an
    /// array subscript's `$(…)` runs even when the word was quoted: the arguments of
    /// `let`, `test`, `[`, `read`, `printf -v`, `declare`…, and every assignment's value
    /// (a later `(( x ))` evaluates it).
    fn evaluated_words(&mut self, simple: &Simple) {
        const EVALUATING: &[&str] = &[
            "let",
            "test",
            "[",
            "read",
            "printf",
            "declare",
            "typeset",
            "local",
            "export",
            "readonly",
            "mapfile",
            "readarray",
            "getopts",
            "unset",
            "shift",
            "return",
            "exit",
            "ulimit",
            "wait",
            "kill",
        ];
        let evaluating = simple.argv.first().is_some_and(|a| EVALUATING.contains(&classify::basename(&a.text)));
        let args = simple.argv.iter().skip(1).filter(|_| evaluating);
        let values = simple.assignments.iter().map(|(_, v)| v);
        let texts: Vec<String> = args.chain(values).filter(|a| a.literal).map(|a| a.text.clone()).collect();
        for text in texts {
            self.scan(&text);
        }
    }

    fn redirect(&mut self, redirect: &IoRedirect, simple: &mut Simple) {
        match redirect {
            IoRedirect::File(_, kind, target) => match target {
                IoFileRedirectTarget::Filename(w) => {
                    let arg = self.word(&w.value);
                    if matches!(kind, IoFileRedirectKind::Read | IoFileRedirectKind::ReadAndWrite) {
                        simple.reads.push(arg.clone());
                    }
                    let writes = matches!(
                        kind,
                        IoFileRedirectKind::Write
                            | IoFileRedirectKind::Append
                            | IoFileRedirectKind::Clobber
                            | IoFileRedirectKind::ReadAndWrite
                            | IoFileRedirectKind::DuplicateOutput
                    );
                    if writes {
                        simple.writes.push(arg);
                    }
                }
                IoFileRedirectTarget::Duplicate(w) => {
                    // `>&2` duplicates a descriptor; `>& file` writes stdout and stderr to a file.
                    let arg = self.word(&w.value);
                    let is_fd =
                        arg.literal && (arg.text == "-" || arg.text.trim_end_matches('-').parse::<u32>().is_ok());
                    if !is_fd && matches!(kind, IoFileRedirectKind::DuplicateOutput) {
                        simple.writes.push(arg);
                    }
                }
                IoFileRedirectTarget::Fd(_) => {}
                IoFileRedirectTarget::ProcessSubstitution(_, sub) => {
                    self.via.push("<(…)");
                    self.list(&sub.list);
                    self.via.pop();
                }
            },
            IoRedirect::HereDocument(_, doc) => {
                if doc.requires_expansion {
                    let mut subs = Vec::new();
                    words::heredoc_substitutions(&doc.doc.value, &mut subs);
                    self.substitutions(subs);
                }
                simple.stdin_text = Some(doc.doc.value.clone());
            }
            IoRedirect::HereString(_, w) => {
                let arg = self.word(&w.value);
                simple.stdin_text = Some(arg.text);
            }
            IoRedirect::OutputAndError(w, _) => {
                let arg = self.word(&w.value);
                simple.writes.push(arg);
            }
        }
    }

    fn simple(&mut self, command: &SimpleCommand) {
        let mut simple = Simple::default();
        let mut subs = Vec::new();
        let items = command
            .prefix
            .iter()
            .flat_map(|p| p.0.iter())
            .map(Item::Prefix)
            .chain(command.word_or_name.iter().map(Item::Name))
            .chain(command.suffix.iter().flat_map(|s| s.0.iter()).map(Item::Prefix));
        for item in items {
            match item {
                Item::Name(w) | Item::Prefix(CommandPrefixOrSuffixItem::Word(w)) => {
                    let arg = words::analyse(&w.value, &mut subs);
                    simple.argv.extend(words::brace_expand(&w.value, arg));
                }
                Item::Prefix(CommandPrefixOrSuffixItem::AssignmentWord(_, w)) => {
                    // `FOO=$(cmd) git push`: the value runs; the name does not.
                    let (name, value) = w.value.split_once('=').unwrap_or((&w.value, ""));
                    let arg = words::analyse(value, &mut subs);
                    // After the command word an assignment is just an argument (`env A=b
                    // cmd`, `alias x='…'`), unquoted like any other.
                    if simple.argv.is_empty() {
                        simple.assignments.push((name.to_owned(), arg));
                    } else {
                        let text = if arg.literal { format!("{name}={}", arg.text) } else { w.value.clone() };
                        simple.argv.push(Arg { text, literal: arg.literal, glob: false, home: false });
                    }
                }
                Item::Prefix(CommandPrefixOrSuffixItem::IoRedirect(r)) => {
                    self.substitutions(std::mem::take(&mut subs));
                    self.redirect(r, &mut simple);
                }
                Item::Prefix(CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub)) => {
                    self.via.push("<(…)");
                    self.list(&sub.list);
                    self.via.pop();
                }
            }
        }
        self.substitutions(subs);
        if simple.argv.is_empty() {
            self.evaluated_words(&simple);
            // Only assignments and redirections: `> file` still writes, `PAGER=…` still
            // chooses what runs later.
            let mut argv: Vec<String> = simple.assignments.iter().map(|(n, v)| format!("{n}={}", v.text)).collect();
            argv.extend(simple.writes.iter().map(|w| format!("> {}", w.text)));
            let mut part = self.new_part(argv);
            classify::redirections(&simple, &mut part);
            classify::assignments(self, &simple.assignments, &mut part);
            if !part.classes.is_empty() {
                part.effects.insert(Effect::RunCommand);
                self.push(part);
            }
            return;
        }
        let mut part = self.new_part(simple.argv.iter().map(|a| a.text.clone()).collect());
        if let Some(name) = simple.argv.first().filter(|a| a.literal).map(|a| a.text.clone())
            && self.defining.contains(&name)
        {
            part.add(CommandClass::SystemDestruction, "a function that calls itself (fork bomb shape)");
        }
        classify::redirections(&simple, &mut part);
        classify::assignments(self, &simple.assignments, &mut part);
        self.evaluated_words(&simple);
        classify::simple(self, &simple, &mut part);
        if part.classes.is_empty() && part.effects.is_empty() {
            part.classes.insert(CommandClass::ReadOnly);
        }
        part.effects.insert(Effect::RunCommand);
        self.push(part);
    }
}

enum Item<'a> {
    Name(&'a brush_parser::ast::Word),
    Prefix(&'a CommandPrefixOrSuffixItem),
}

fn test_words(expr: &ExtendedTestExpr, subs: &mut Vec<Substitution>) {
    match expr {
        ExtendedTestExpr::And(a, b) | ExtendedTestExpr::Or(a, b) => {
            test_words(a, subs);
            test_words(b, subs);
        }
        ExtendedTestExpr::Not(a) | ExtendedTestExpr::Parenthesized(a) => test_words(a, subs),
        // `[[ 'a[$(…)]' -eq 0 ]]` evaluates the subscript even in quotes.
        ExtendedTestExpr::UnaryTest(_, w) => {
            let a = words::analyse(&w.value, subs);
            words::scan_for_substitutions(&a.text, subs, 0);
        }
        ExtendedTestExpr::BinaryTest(_, a, b) => {
            for w in [a, b] {
                let arg = words::analyse(&w.value, subs);
                if arg.literal {
                    words::scan_for_substitutions(&arg.text, subs, 0);
                }
            }
        }
    }
}

/// Parses a script; a panic inside the parser (a bug of its, never seen in fuzzing) is
/// taken as "does not parse" rather than taking the gate down.
fn parse(text: &str) -> Result<brush_parser::ast::Program, String> {
    // brush's grammar backtracks exponentially over unclosed parentheses (32 of them
    // took 90 s in the fuzzer); a line like that is refused before it reaches it.
    let (depth, unclosed) = paren_nesting(text);
    if depth > MAX_PAREN_DEPTH || unclosed > MAX_UNCLOSED_PARENS {
        return Err(format!("parentheses nested {depth} deep ({unclosed} unclosed): too deep to parse"));
    }
    // brush unwraps the parse of a descriptor number before `<` or `>` (`99999999999>f`
    // panics on overflow): such a line is refused here instead.
    if has_oversized_fd_number(text) {
        return Err("a file descriptor number too large for a redirection".into());
    }
    let options = words::options();
    std::panic::catch_unwind(|| {
        let mut parser = Parser::new(Cursor::new(text.as_bytes()), &options);
        parser.parse_program().map_err(|e| e.to_string())
    })
    .unwrap_or_else(|_| Err("the parser failed on this input".into()))
}

/// A run of more than nine digits right before `<` or `>`: more than an i32 holds.
fn has_oversized_fd_number(text: &str) -> bool {
    let mut digits = 0usize;
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits += 1;
        } else {
            if (c == '<' || c == '>') && digits > 9 {
                return true;
            }
            digits = 0;
        }
    }
    false
}

/// Deeper nesting than this is refused before parsing (real command lines stay far
/// below; bash itself would take it).
const MAX_PAREN_DEPTH: usize = 24;
/// Unclosed parentheses are where the grammar backtracks; a line with more than this
/// does not parse in bash either.
const MAX_UNCLOSED_PARENS: usize = 6;

/// The deepest nesting of parentheses outside quotes, and how many stay unclosed.
fn paren_nesting(text: &str) -> (usize, usize) {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut chars = text.chars();
    let mut double = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if !double => {
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                }
            }
            '"' => double = !double,
            // Counted in double quotes too: a `$(` there opens shell syntax again, and
            // counting too many only makes a line opaque.
            '(' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    (max, depth)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unclosed_parentheses_are_refused_before_the_parser_sees_them() {
        let started = std::time::Instant::now();
        let parts = Analyzer::analyze(&format!("{}ls", "((".repeat(40)));
        assert!(started.elapsed() < std::time::Duration::from_secs(1), "{:?}", started.elapsed());
        assert!(parts.iter().any(|p| p.notes.iter().any(|n| n.contains("too deep to parse"))), "{parts:?}");
        assert_eq!(paren_nesting("echo '((((((((' \\( \"(\" $(ls) \"$(a (b))\""), (3, 1));
        assert_eq!(paren_nesting("((a)"), (2, 1));
        assert!(has_oversized_fd_number("cc<&c<&e&(<$4e$$ee&(2222222222222222222222<$4e$$e"));
        assert!(!has_oversized_fd_number("echo 123456789> f 2>&1"));
        let parts = Analyzer::analyze("ls 99999999999>f");
        assert!(parts.iter().any(|p| p.notes.iter().any(|n| n.contains("descriptor number"))), "{parts:?}");
        // Balanced nesting parses (it is fast) up to the limit.
        let balanced = format!("{}ls{}", "(".repeat(20), ")".repeat(20));
        assert!(parse(&balanced).is_ok());
    }
}

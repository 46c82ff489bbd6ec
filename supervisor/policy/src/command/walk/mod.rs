//! Walks a parsed program and hands every simple command, with its words analysed, to
//! the classifier. Scripts found on the way (substitutions, `bash -c` bodies, heredocs
//! fed to a shell) come back here, one level deeper.

mod simple;

use simple::test_words;

use std::collections::BTreeSet;

use brush_parser::ast::{Command, CompoundCommand, CompoundList, Pipeline};

use super::cwd::{Cwd, DirStack};
use super::parse::parse;
use super::printing::{literal_output, single_command};
use super::vars::{self, Vars};
use super::words::{self, Arg, Substitution};
use super::{MAX_LINE_BYTES, Part, classify};
use crate::effect::{CommandClass, Effect};

/// Scripts inside scripts deeper than this are opaque.
const MAX_DEPTH: usize = 12;
/// More simple commands than this in one line and the rest is opaque.
const MAX_PARTS: usize = 512;
/// Candidate values tried per line, all commands together: a line cannot make the
/// gate re-analyse a long value thousands of times.
const MAX_CANDIDATE_TRIES: usize = 64;

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
    /// Variables whose value the line shows (see [`vars`]).
    pub vars: Vars,
    /// Where the next command runs (see [`super::cwd`]).
    pub dirs: DirStack,
    /// How many branches, loops, subshells or nested scripts we are inside: an
    /// assignment there is not certain to have happened in this shell.
    pub branch: u32,
    /// The command being classified runs as a child of a wrapper (`env cd /` changes
    /// no directory of ours).
    pub in_child: bool,
    /// Set while an unknown program's arguments are searched for a command, so the
    /// search does not nest.
    pub searching: bool,
    /// The command being classified gets more arguments at run time (xargs, `find
    /// -exec … +`), so its `$@` cannot be known.
    pub args_appended: bool,
    /// Inside the second walk of a loop that changes directory.
    rewalking: bool,
    /// Candidate values still to be tried in this line (see `candidate_commands`).
    candidate_budget: usize,
}

impl Analyzer {
    pub fn analyze(line: &str) -> Vec<Part> {
        let mut an = Analyzer {
            parts: Vec::new(),
            via: Vec::new(),
            functions: BTreeSet::new(),
            git_aliases: Default::default(),
            defining: Vec::new(),
            vars: Vars::new_shell(None),
            dirs: DirStack::default(),
            branch: 0,
            in_child: false,
            searching: false,
            args_appended: false,
            rewalking: false,
            candidate_budget: MAX_CANDIDATE_TRIES,
        };
        an.script(line, None);
        an.parts
    }

    /// Analyses `text` as a script found at `via` (None at top level) that runs in this
    /// shell, later or not at all (`eval`, `trap`, an alias): its assignments are not
    /// certain, and afterwards we may be in the directory it went to or still here.
    pub fn script(&mut self, text: &str, via: Option<&'static str>) {
        if via.is_none() {
            return self.parse_and_walk(text, None);
        }
        let before = self.dirs.cwd.clone();
        self.branch += 1;
        self.parse_and_walk(text, via);
        self.branch -= 1;
        self.dirs.cwd.union(&before);
    }

    /// Analyses `text` as the script of a new shell process (`bash -c`, a shell reading
    /// a heredoc): it starts where we are, knows only the positional parameters it was
    /// given, and changes neither our variables nor our directory.
    pub fn shell_script(&mut self, text: &str, via: &'static str, positional: Option<Vec<String>>) {
        // Started directly, the shell gets our exported values; through a wrapper
        // (`env`, `sudo`) its environment is not ours to know.
        let fresh = if self.in_child { Vars::new_shell(positional) } else { self.vars.child(positional) };
        let vars = std::mem::replace(&mut self.vars, fresh);
        let dirs = self.dirs.clone();
        let branch = std::mem::replace(&mut self.branch, 0);
        self.dirs.cdpath = false;
        self.parse_and_walk(text, Some(via));
        self.vars = vars;
        self.dirs = dirs;
        self.branch = branch;
    }

    /// A subshell, a substitution, a pipeline element: our directory is restored after
    /// it, its assignments are not ours.
    fn isolated(&mut self, walk: impl FnOnce(&mut Self)) {
        let dirs = self.dirs.clone();
        self.branch += 1;
        walk(self);
        self.branch -= 1;
        self.dirs = dirs;
    }

    /// Code that may run or not (a branch of `&&`, `if`, `case`): afterwards we may be
    /// where it left us or where we were.
    fn maybe(&mut self, walk: impl FnOnce(&mut Self)) {
        let before = self.dirs.cwd.clone();
        self.branch += 1;
        walk(self);
        self.branch -= 1;
        self.dirs.cwd.union(&before);
    }

    /// A loop body may run many times: if it changes directory, the second time round it
    /// starts somewhere else, so it is walked again from anywhere.
    /// Only the outermost moving loop is walked twice: inside a second walk everything
    /// already starts from anywhere, and nested loops must not double the work per level.
    fn looped(&mut self, walk: impl Fn(&mut Self)) {
        let before = self.dirs.cwd.clone();
        let parts = self.parts.len();
        self.branch += 1;
        walk(self);
        if self.dirs.cwd != before && !self.rewalking {
            self.parts.truncate(parts);
            self.dirs.cwd = Cwd::unknown();
            self.rewalking = true;
            walk(self);
            self.rewalking = false;
        }
        self.branch -= 1;
        self.dirs.cwd.union(&before);
    }

    fn parse_and_walk(&mut self, text: &str, via: Option<&'static str>) {
        // The script's commands are run by its own shell, not by the wrapper that
        // started it, and get only the arguments they are given.
        let in_child = std::mem::replace(&mut self.in_child, false);
        let appended = std::mem::replace(&mut self.args_appended, false);
        self.walk_script(text, via);
        self.in_child = in_child;
        self.args_appended = appended;
    }

    fn walk_script(&mut self, text: &str, via: Option<&'static str>) {
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
                .map(Arg::word)
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
            let brush_parser::ast::CompoundListItem(and_or, separator) = item;
            if matches!(separator, brush_parser::ast::SeparatorOperator::Async) {
                // `cmd &` runs in a subshell of its own.
                self.isolated(|an| an.and_or(and_or));
            } else {
                self.and_or(and_or);
            }
        }
    }

    /// `a && b || c`: `a` always runs; each later part may or may not. After `||` the
    /// part before may have failed before or after it changed directory.
    fn and_or(&mut self, list: &brush_parser::ast::AndOrList) {
        let start = self.dirs.cwd.clone();
        self.pipeline(&list.first);
        let mut seen = start;
        seen.union(&self.dirs.cwd);
        for and_or in &list.additional {
            // After `&&` the part before succeeded, so we are where it left us.
            let p = match and_or {
                brush_parser::ast::AndOr::And(p) => p,
                brush_parser::ast::AndOr::Or(p) => {
                    self.dirs.cwd = seen.clone();
                    p
                }
            };
            self.branch += 1;
            self.pipeline(p);
            self.branch -= 1;
            seen.union(&self.dirs.cwd);
        }
        if !list.additional.is_empty() {
            self.dirs.cwd = seen;
        }
    }

    fn pipeline(&mut self, pipeline: &Pipeline) {
        match pipeline.seq.as_slice() {
            [] => return,
            [only] => return self.command(only, None),
            _ => {}
        }
        // Each element is a subshell (zsh and ksh run the last one in this shell, so
        // where it goes is kept as a possibility). What a literal `echo` or `printf`
        // prints is what the next element reads: `echo 'sudo id' | sh`.
        let last = pipeline.seq.len() - 1;
        let mut piped: Option<String> = None;
        for (i, command) in pipeline.seq.iter().enumerate() {
            let input = piped.take();
            piped = literal_output(command, input.as_deref());
            if i == last {
                self.maybe(|an| an.command(command, input));
            } else {
                self.isolated(|an| an.command(command, input));
            }
        }
    }

    fn command(&mut self, command: &Command, piped: Option<String>) {
        match command {
            Command::Simple(simple) => self.simple(simple, piped),
            Command::Compound(compound, redirects) => {
                self.compound(compound);
                self.redirect_list(redirects.as_ref());
            }
            Command::Function(def) => {
                // The body runs when the function is called, not here: walked apart.
                let name = def.fname.value.clone();
                self.functions.insert(name.clone());
                self.defining.push(name);
                self.via.push("function body");
                self.isolated(|an| an.compound(&def.body.0));
                self.via.pop();
                self.defining.pop();
                self.redirect_list(def.body.1.as_ref());
            }
            Command::ExtendedTest(test, redirects) => {
                let mut subs = Vec::new();
                test_words(&test.expr, &mut subs, &self.vars);
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
                self.looped(|an| an.list(&f.body.list));
            }
            CompoundCommand::BraceGroup(b) => self.list(&b.list),
            CompoundCommand::Subshell(s) => self.isolated(|an| an.list(&s.list)),
            CompoundCommand::ForClause(f) => {
                // `for PS4 in '$(…)'` sets a variable as surely as an assignment does.
                let mut part = self.new_part(vec![format!("for {}", f.variable_name)]);
                classify::assignment(self, &f.variable_name, &Arg::dynamic(""), &mut part);
                if !part.classes.is_empty() {
                    part.effects.insert(Effect::RunCommand);
                    self.push(part);
                }
                for w in f.values.iter().flatten() {
                    let value = self.word(&w.value);
                    if value.literal && !value.glob {
                        self.vars.may_be(&f.variable_name, &value.text);
                    } else {
                        self.vars.assign(&f.variable_name, None, false);
                    }
                }
                self.looped(|an| an.list(&f.body.list));
            }
            CompoundCommand::CaseClause(c) => {
                self.word(&c.value.value);
                let start = self.dirs.cwd.clone();
                let mut seen = start.clone();
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value);
                    }
                    if let Some(cmd) = &item.cmd {
                        // `;&` falls through: the next branch may start where this one ended.
                        self.maybe(|an| an.list(cmd));
                        seen.union(&self.dirs.cwd);
                        self.dirs.cwd = seen.clone();
                    }
                }
            }
            CompoundCommand::IfClause(i) => {
                // The first condition always runs; what follows it may or may not.
                let start = self.dirs.cwd.clone();
                self.list(&i.condition);
                let mut seen = start;
                seen.union(&self.dirs.cwd);
                self.maybe(|an| an.list(&i.then));
                seen.union(&self.dirs.cwd);
                for e in i.elses.iter().flatten() {
                    self.dirs.cwd = seen.clone();
                    if let Some(c) = &e.condition {
                        self.maybe(|an| an.list(c));
                        seen.union(&self.dirs.cwd);
                    }
                    self.maybe(|an| an.list(&e.body));
                    seen.union(&self.dirs.cwd);
                }
                self.dirs.cwd = seen;
            }
            CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
                self.looped(|an| {
                    an.list(&w.0);
                    an.list(&w.1.list);
                });
            }
            CompoundCommand::Coprocess(c) => self.isolated(|an| an.command(&c.body, None)),
        }
    }

    /// A word outside any simple command (a `for` list, a `case` subject): only the
    /// commands hidden in it matter.
    fn word(&mut self, raw: &str) -> Arg {
        let mut subs = Vec::new();
        let arg = words::analyse(raw, &mut subs, &self.vars);
        self.substitutions(subs);
        self.forget_assigned_by(raw);
        arg
    }

    /// `${NAME:=x}` assigns while it expands.
    fn forget_assigned_by(&mut self, raw: &str) {
        if raw.contains("${") {
            let names: Vec<String> = vars::assigned_by_expansion(raw).map(str::to_owned).collect();
            for name in names {
                self.vars.assign(&name, None, false);
            }
        }
    }

    fn scan(&mut self, text: &str) {
        let mut subs = Vec::new();
        words::scan_for_substitutions(text, &mut subs, 0);
        self.substitutions(subs);
    }

    fn substitutions(&mut self, subs: Vec<Substitution>) {
        for s in subs {
            // A substitution is a subshell: it inherits our variables, keeps its own.
            self.isolated(|an| an.parse_and_walk(&s.script, Some("$(…)")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines shaped to make the walker repeat itself: nested loops that move, many
    /// candidate values, wrappers of unknown programs. Each must stay fast.
    #[test]
    fn pathological_lines_are_analysed_in_bounded_time() {
        let nested_loops = format!("{}cd x; rm -rf *{}", "for a in 1; do ".repeat(40), "; done".repeat(40));
        let candidates =
            format!("{}$X $X $X $X", (0..8).map(|i| format!("if c; then X=v{i}; fi; ")).collect::<String>());
        let wrappers = format!("mywrap {}", "mywrap sh -c 'mywrap ls' ".repeat(30));
        let pipes = "echo 'echo sudo id | sh' | ".repeat(10) + "sh";
        let big = format!("sh -c '{}'", "ls -la; ".repeat(3000));
        let long_candidate = format!("X=ls; if c; then X=\"{big}\"; fi; {}", "$X; ".repeat(2000));
        for line in [nested_loops, candidates, wrappers, pipes, long_candidate] {
            let started = std::time::Instant::now();
            let parts = Analyzer::analyze(&line);
            assert!(!parts.is_empty());
            assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?} for {line:.80}", started.elapsed());
        }
    }
}

//! One simple command: its words evaluated as the shell would (each value a computed
//! command may take is tried), its redirections, and the part it becomes for the
//! classifier.

use brush_parser::ast::{
    CommandPrefixOrSuffixItem, ExtendedTestExpr, IoFileRedirectKind, IoFileRedirectTarget, IoRedirect, RedirectList,
    SimpleCommand,
};

use super::*;

impl Analyzer {
    /// Redirections on a compound command: a write there is a part of its own.
    pub(super) fn redirect_list(&mut self, redirects: Option<&RedirectList>) {
        let Some(list) = redirects else { return };
        let mut simple = Simple::default();
        for r in &list.0 {
            self.redirect(r, &mut simple);
        }
        if !simple.writes.is_empty() {
            let argv = simple.writes.iter().map(|w| format!("> {}", w.text)).collect();
            let mut part = self.new_part(argv);
            classify::redirections(self, &simple, &mut part);
            self.push(part);
        }
    }

    /// `X=ls; if …; then X=sudo; fi; $X id`: the command is computed, but each value
    /// the line may have given the variable is tried, and what it would do is added.
    /// Only restrictions are added: the part stays opaque.
    fn candidate_commands(&mut self, simple: &Simple, part: &mut Part) {
        const MAX_VARIANTS: usize = 8;
        let mut tried = 0;
        for (i, arg) in simple.argv.iter().enumerate() {
            if arg.literal {
                continue;
            }
            let quoted = arg.text.starts_with('"');
            let Some(name) = vars::simple_expansion(arg.text.trim_matches('"')) else { continue };
            for value in self.vars.candidates(name).to_vec() {
                if tried == MAX_VARIANTS || self.candidate_budget == 0 {
                    return;
                }
                tried += 1;
                self.candidate_budget -= 1;
                let mut variant: Vec<Arg> = simple.argv[..i].to_vec();
                if quoted {
                    variant.push(Arg::word(value.as_str()));
                } else {
                    variant.extend(value.split_whitespace().map(Arg::word));
                }
                variant.extend(simple.argv[i + 1..].iter().cloned());
                let mut found = Part::default();
                let in_child = std::mem::replace(&mut self.in_child, true);
                classify::argv(self, &variant, simple.stdin_text.as_deref(), &mut found);
                self.in_child = in_child;
                found.classes.remove(&CommandClass::ReadOnly);
                if !found.classes.is_empty() {
                    part.add_note(format!("if ${name} is {value:?}"));
                }
                part.classes.extend(found.classes);
                part.effects.extend(found.effects);
                for note in found.notes {
                    part.add_note(note);
                }
            }
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
                    self.isolated(|an| an.list(&sub.list));
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

    pub(super) fn simple(&mut self, command: &SimpleCommand, piped: Option<String>) {
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
                    let mut fields = words::analyse_fields(&w.value, &mut subs, &self.vars);
                    if fields.len() == 1 {
                        simple.argv.extend(words::brace_expand(&w.value, fields.remove(0)));
                    } else {
                        simple.argv.extend(fields);
                    }
                    self.forget_assigned_by(&w.value);
                }
                Item::Prefix(CommandPrefixOrSuffixItem::AssignmentWord(_, w)) => {
                    // `FOO=$(cmd) git push`: the value runs; the name does not.
                    let (name, value) = w.value.split_once('=').unwrap_or((&w.value, ""));
                    let arg = words::analyse(value, &mut subs, &self.vars);
                    self.forget_assigned_by(value);
                    // After the command word an assignment is just an argument (`env A=b
                    // cmd`, `alias x='…'`), unquoted like any other.
                    if simple.argv.is_empty() {
                        simple.assignments.push((name.to_owned(), arg));
                    } else {
                        let text = if arg.literal { format!("{name}={}", arg.text) } else { w.value.clone() };
                        simple.argv.push(Arg { text, literal: arg.literal, ..Arg::word("") });
                    }
                }
                Item::Prefix(CommandPrefixOrSuffixItem::IoRedirect(r)) => {
                    self.substitutions(std::mem::take(&mut subs));
                    self.redirect(r, &mut simple);
                }
                Item::Prefix(CommandPrefixOrSuffixItem::ProcessSubstitution(kind, sub)) => {
                    // `bash <(echo 'sudo id')`: the shell reads what the list prints,
                    // through a /dev/fd path; the line may show what that is.
                    if matches!(kind, brush_parser::ast::ProcessSubstitutionKind::Read) {
                        let output = single_command(&sub.list).and_then(|c| literal_output(c, None));
                        simple.argv.push(Arg { output, ..Arg::word("/dev/fd/63") });
                    }
                    self.via.push("<(…)");
                    self.isolated(|an| an.list(&sub.list));
                    self.via.pop();
                }
            }
        }
        self.substitutions(subs);
        if simple.stdin_text.is_none() {
            simple.stdin_text = piped;
        }
        if simple.assignments.iter().any(|(n, _)| n == "CDPATH") {
            self.dirs.cdpath = true;
        }
        if simple.argv.is_empty() {
            self.evaluated_words(&simple);
            // Only assignments and redirections: `> file` still writes, `PAGER=…` still
            // chooses what runs later.
            let mut argv: Vec<String> = simple.assignments.iter().map(|(n, v)| format!("{n}={}", v.text)).collect();
            argv.extend(simple.writes.iter().map(|w| format!("> {}", w.text)));
            let mut part = self.new_part(argv);
            classify::redirections(self, &simple, &mut part);
            classify::assignments(self, &simple.assignments, &mut part);
            let certain = self.branch == 0;
            for (name, value) in &simple.assignments {
                let literal = value.literal.then_some(value.text.as_str());
                self.vars.assign(name, literal, certain);
            }
            if !part.classes.is_empty() {
                part.effects.insert(Effect::RunCommand);
                self.push(part);
            }
            return;
        }
        // `A=x cmd`: A is set for cmd alone (and, before a special builtin, for the rest
        // of a POSIX shell): we stop claiming to know it.
        for (name, _) in &simple.assignments {
            self.vars.assign(name, None, false);
        }
        let mut part = self.new_part(simple.argv.iter().map(|a| a.text.clone()).collect());
        if let Some(name) = simple.argv.first().filter(|a| a.literal).map(|a| a.text.clone())
            && self.defining.contains(&name)
        {
            part.add(CommandClass::SystemDestruction, "a function that calls itself (fork bomb shape)");
        }
        classify::redirections(self, &simple, &mut part);
        // `IFS=, read -r a b`: for read, IFS only says where to split the line it reads.
        let splits_only = simple
            .argv
            .first()
            .is_some_and(|a| a.literal && matches!(a.text.as_str(), "read" | "mapfile" | "readarray"));
        if splits_only && simple.assignments.iter().any(|(name, _)| name == "IFS") {
            let others: Vec<(String, Arg)> = simple.assignments.iter().filter(|(n, _)| n != "IFS").cloned().collect();
            classify::assignments(self, &others, &mut part);
        } else {
            classify::assignments(self, &simple.assignments, &mut part);
        }
        self.evaluated_words(&simple);
        self.candidate_commands(&simple, &mut part);
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

pub(super) fn test_words(expr: &ExtendedTestExpr, subs: &mut Vec<Substitution>, vars: &Vars) {
    match expr {
        ExtendedTestExpr::And(a, b) | ExtendedTestExpr::Or(a, b) => {
            test_words(a, subs, vars);
            test_words(b, subs, vars);
        }
        ExtendedTestExpr::Not(a) | ExtendedTestExpr::Parenthesized(a) => test_words(a, subs, vars),
        // `[[ 'a[$(…)]' -eq 0 ]]` evaluates the subscript even in quotes.
        ExtendedTestExpr::UnaryTest(_, w) => {
            let a = words::analyse(&w.value, subs, vars);
            words::scan_for_substitutions(&a.text, subs, 0);
        }
        ExtendedTestExpr::BinaryTest(_, a, b) => {
            for w in [a, b] {
                let arg = words::analyse(&w.value, subs, vars);
                if arg.literal {
                    words::scan_for_substitutions(&arg.text, subs, 0);
                }
            }
        }
    }
}

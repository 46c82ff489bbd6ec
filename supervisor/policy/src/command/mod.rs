//! The command policy: what a shell command line would do, decided before it runs.
//!
//! The line is parsed by brush-parser, a real bash grammar written in Rust (no C in the
//! gate, nothing to install, fuzzable with the rest of this crate; tree-sitter-bash would
//! bring a C parser built for editors, which recovers from errors instead of reporting
//! them). [`walk`] visits every place a command can hide — lists, pipelines, subshells,
//! groups, substitutions in words, assignments and redirections, heredocs, `bash -c`
//! bodies — and [`classify`] decides what each simple command is after unwrapping the
//! wrappers. The decision for the line is the most restrictive of its parts.
//!
//! This recognizes the conventional spelling of an action. An agent set on hiding one (a
//! script file, an obfuscated eval, a direct API call) can: pushes are enforced by the
//! gateway and files by the envelope, not here.

mod classify;
mod cwd;
mod parse;
mod printing;
mod programs;
mod vars;
mod walk;
mod words;
mod wrappers;

use std::collections::BTreeSet;

use crate::effect::{CommandClass, Decision, Effect, Mode};

/// The longest line we analyse; a longer one is opaque rather than a parser workload.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// One simple command found in the line, after unwrapping, and what it would do.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Part {
    /// The words as written (dynamic words keep their source text).
    pub argv: Vec<String>,
    pub classes: BTreeSet<CommandClass>,
    pub effects: BTreeSet<Effect>,
    /// Why it got its classes, for people: "git push", "writes to out.txt".
    pub notes: Vec<String>,
    /// Where it was found when not at top level: "bash -c", "$(…)", "find -exec".
    pub via: Vec<&'static str>,
    pub scope: PartScope,
}

/// What the part touches, for rules with scopes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartScope {
    /// Refs a push names, short for branches (`main`), full for the rest (`refs/tags/v1`).
    pub refs: Vec<String>,
    /// True when the part pushes refs we cannot name (`git push` with no refspec, `--all`).
    pub refs_unknown: bool,
    pub paths: Vec<String>,
    pub domains: Vec<String>,
}

impl Part {
    pub(crate) fn add(&mut self, class: CommandClass, note: impl Into<String>) {
        self.classes.insert(class);
        self.add_note(note.into());
    }

    /// Takes in what was found about the same command separately.
    pub(crate) fn absorb(&mut self, other: Part) {
        self.classes.extend(other.classes);
        self.effects.extend(other.effects);
        for note in other.notes {
            self.add_note(note);
        }
        self.via.extend(other.via);
        self.scope.refs.extend(other.scope.refs);
        self.scope.refs_unknown |= other.scope.refs_unknown;
        self.scope.paths.extend(other.scope.paths);
        self.scope.domains.extend(other.scope.domains);
    }

    pub(crate) fn add_note(&mut self, note: String) {
        if !note.is_empty() && !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// The classes that count: `read_only` only when nothing else was found.
    pub fn effective_classes(&self) -> BTreeSet<CommandClass> {
        let mut classes = self.classes.clone();
        if classes.len() > 1 {
            classes.remove(&CommandClass::ReadOnly);
        }
        if classes.is_empty() {
            classes.insert(CommandClass::ReadOnly);
        }
        classes
    }
}

/// The package managers whose installs and publishes the classifier knows by name.
pub fn package_managers() -> &'static [&'static str] {
    programs::package_managers()
}

/// Every simple command of the line, in source order (inner commands before the one
/// whose words contain them).
pub fn analyze(line: &str) -> Vec<Part> {
    walk::Analyzer::analyze(line)
}

/// A part and what the mode makes of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartVerdict {
    pub part: Part,
    pub decision: Decision,
    pub reason: String,
    /// See [`ModeDecision::rules_decide`].
    pub rules_decide: bool,
}

/// What a mode decides for one part, and why, in words a person can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeDecision {
    pub decision: Decision,
    pub reason: String,
    /// The decision is only chat's ask on a remote change or an install: the default of
    /// the rules about the part's effects, which a person's rule about them replaces
    /// (issue 37; `evaluate`). Never for a read-only mode's denial or a fixed one.
    pub rules_decide: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandVerdict {
    pub decision: Decision,
    pub reason: String,
    pub parts: Vec<PartVerdict>,
}

/// The command policy alone (no effect-class rules): each part judged by the mode, the
/// most restrictive part decides.
pub fn check(line: &str, mode: Mode) -> CommandVerdict {
    let parts: Vec<PartVerdict> = analyze(line)
        .into_iter()
        .map(|part| {
            let ModeDecision { decision, reason, rules_decide } = mode_decision(mode, &part);
            PartVerdict { part, decision, reason, rules_decide }
        })
        .collect();
    let worst = parts.iter().max_by_key(|p| p.decision);
    match worst {
        Some(p) => CommandVerdict { decision: p.decision, reason: p.reason.clone(), parts },
        None => CommandVerdict { decision: Decision::Allow, reason: "nothing to run".into(), parts },
    }
}

/// What `mode` decides for `part`.
pub fn mode_decision(mode: Mode, part: &Part) -> ModeDecision {
    let fixed = |decision, reason| ModeDecision { decision, reason, rules_decide: false };
    let by_default = |reason| ModeDecision { decision: Decision::Ask, reason, rules_decide: true };
    let classes = part.effective_classes();
    let what = part.argv.first().map(String::as_str).unwrap_or("the command");
    let severe = [
        (CommandClass::PrivilegeEscalation, "privilege escalation"),
        (CommandClass::SystemDestruction, "system or disk destruction"),
        (CommandClass::NamespaceEscape, "container or namespace escape"),
    ];
    for (class, words) in severe {
        if classes.contains(&class) {
            return fixed(Decision::Deny, format!("{what}: {words} is never allowed{}", detail(part)));
        }
    }
    if mode.is_read_only() {
        if classes.iter().all(|c| *c == CommandClass::ReadOnly) {
            return fixed(Decision::Allow, format!("{what}: read-only"));
        }
        let why = if classes.contains(&CommandClass::Opaque) {
            "cannot be seen into (opaque)"
        } else if classes.contains(&CommandClass::RemoteMutation) {
            "changes remote state"
        } else {
            "changes files or state"
        };
        return fixed(Decision::Deny, format!("{what}: {why}, denied in {mode} mode{}", detail(part)));
    }
    if classes.contains(&CommandClass::RemoteMutation) {
        return by_default(format!("{what}: changes remote state{}", detail(part)));
    }
    if part.effects.contains(&Effect::InstallPackage) {
        return by_default(format!("{what}: installs packages{}", detail(part)));
    }
    if classes.contains(&CommandClass::Opaque) {
        return fixed(
            Decision::Allow,
            format!("{what}: opaque, allowed in chat mode (the envelope is the boundary){}", detail(part)),
        );
    }
    fixed(Decision::Allow, format!("{what}: {}", classes.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")))
}

fn detail(part: &Part) -> String {
    if part.notes.is_empty() { String::new() } else { format!(" ({})", part.notes.join("; ")) }
}

//! Approvals that outlast their question (issue 37). An approver answers once, for the
//! run, or always; the two longer answers become allow rules that cover exactly what
//! was asked and nothing more, and the "always" ones are kept as blocks of a rules file
//! the person can read, edit and revoke.
//!
//! An approval never widens past its question:
//! - each rule names the effect asked about, the mode, the repository, and the exact
//!   refs, path or host, written as literals (a name with glob characters is refused,
//!   not escaped), and a push's rule says whether it forces or deletes;
//! - an effect with nothing to pin it by (a package install names no branch, path or
//!   host a rule could hold) is answered once only;
//! - a read-only mode's question is answered once only;
//! - the rules are tried before they are kept: with them the same action must be an
//!   allow, so an approval never lands as a rule that does nothing, and a person's own
//!   ask rule (the strictest matching rule wins) is never overruled.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use crate::command;
use crate::effect::{Decision, Effect, Mode};
use crate::evaluate::{Action, Scope, evaluate, judge_effect, part_scope};
use crate::rules::{Rule, RuleSet};

/// How long an approver's yes lasts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApprovalScope {
    /// This question only.
    #[default]
    Once,
    /// Every question of this run that the same rules answer.
    Run,
    /// From now on: a rule in the approved rules file.
    Always,
}

impl ApprovalScope {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalScope::Once => "once",
            ApprovalScope::Run => "run",
            ApprovalScope::Always => "always",
        }
    }
}

impl fmt::Display for ApprovalScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an approval cannot last beyond its question. The approver may still answer once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotGrantable {
    #[error("{0} mode is read-only: its questions are answered once, never for longer")]
    ReadOnlyMode(Mode),
    #[error("{0} names no branch, path or host a rule could be limited to: answer once, or write a rule yourself")]
    NothingToPin(Effect),
    #[error("{what} {value:?} cannot be written as an exact rule: answer once")]
    NotLiteral { what: &'static str, value: String },
    #[error("the question names several {0}: answer once, or approve each on its own")]
    Several(&'static str),
    #[error("the rule {0} asks every time, and an approval does not overrule a person's rule: answer once")]
    RuleAsks(String),
    #[error("an approval beyond once would not change this decision ({0}): answer once")]
    WouldStillAsk(String),
    #[error("a refusal is for its question only: write a deny rule to refuse for longer")]
    Refusal,
    #[error("the question comes from no run: answer once, or always")]
    NoRun,
}

/// The allow rules, as rules-file text, that answer `action` the way the approver
/// did and nothing else; `reason` is written into each. The text loads with
/// [`RuleSet::parse`]. `rule_sets` are the rules in force, which the grant is tried
/// against.
pub fn grant(action: &Action, rule_sets: &[&RuleSet], reason: &str) -> Result<String, NotGrantable> {
    if action.mode.is_read_only() {
        return Err(NotGrantable::ReadOnlyMode(action.mode));
    }
    let rules: Vec<&Rule> = rule_sets.iter().flat_map(|s| s.rules.iter()).collect();
    let mut tables = Vec::new();
    for (effect, scope) in asked(action) {
        let verdict = judge_effect(effect, &scope, action.mode, &rules);
        if verdict.decision != Decision::Ask {
            continue;
        }
        if verdict.source != "default" {
            return Err(NotGrantable::RuleAsks(verdict.source));
        }
        let table = rule_for(effect, &scope, action.mode, reason)?;
        if !tables.contains(&table) {
            tables.push(table);
        }
    }
    let text = render(tables);
    let granted = RuleSet::parse(&text, "approval").map_err(|e| NotGrantable::WouldStillAsk(e.to_string()))?;
    let mut with = rule_sets.to_vec();
    with.push(&granted);
    let after = evaluate(action, &with);
    if granted.rules.is_empty() || after.decision != Decision::Allow {
        return Err(NotGrantable::WouldStillAsk(after.reason));
    }
    Ok(text)
}

/// Every effect of the action with the scope it is judged in: the action's own, then
/// each command part's, as [`evaluate`] judges them.
fn asked(action: &Action) -> Vec<(Effect, Scope)> {
    let mut out: Vec<(Effect, Scope)> = action.effects.iter().map(|e| (*e, action.scope.clone())).collect();
    if let Some(line) = &action.command_line {
        for p in command::check(line, action.mode).parts {
            let scope = part_scope(&action.scope, &p.part.scope);
            for e in &p.part.effects {
                if !(*e == Effect::PushRemote && action.pushes_through_gateway) {
                    out.push((*e, scope.clone()));
                }
            }
        }
    }
    out
}

fn rule_for(effect: Effect, scope: &Scope, mode: Mode, reason: &str) -> Result<toml::Table, NotGrantable> {
    let mut t = toml::Table::new();
    t.insert("effect".into(), effect.as_str().into());
    t.insert("decision".into(), "allow".into());
    t.insert("mode".into(), mode.as_str().into());
    t.insert("reason".into(), reason.into());
    if let Some(repo) = &scope.repo {
        t.insert("repo".into(), literal("repository", repo)?.into());
    }
    match effect {
        Effect::PushRemote => {
            if scope.refs_unknown || scope.refs.is_empty() {
                return Err(NotGrantable::NothingToPin(effect));
            }
            let refs = scope.refs.iter().map(|r| literal("ref", r).map(full_ref)).collect::<Result<Vec<_>, _>>()?;
            t.insert("ref".into(), alternatives(refs).into());
            t.insert("force".into(), scope.force.into());
            t.insert("delete".into(), scope.delete.into());
        }
        Effect::AccessNetwork => match scope.domains.as_slice() {
            [] => return Err(NotGrantable::NothingToPin(effect)),
            [host] => {
                t.insert("domain".into(), literal("host", host)?.to_ascii_lowercase().into());
            }
            _ => return Err(NotGrantable::Several("hosts")),
        },
        Effect::WriteFile | Effect::DeleteFile if !scope.paths.is_empty() => {
            let paths = scope
                .paths
                .iter()
                .map(|p| literal("path", p.trim_start_matches("./")).map(str::to_owned))
                .collect::<Result<Vec<_>, _>>()?;
            t.insert("path".into(), alternatives(paths).into());
        }
        other => return Err(NotGrantable::NothingToPin(other)),
    }
    Ok(t)
}

fn full_ref(r: &str) -> String {
    if r.starts_with("refs/") { r.to_owned() } else { format!("refs/heads/{r}") }
}

/// A glob that matches exactly one of `values`, all of them literals.
fn alternatives(mut values: Vec<String>) -> String {
    values.sort();
    values.dedup();
    if values.len() == 1 { values.remove(0) } else { format!("{{{}}}", values.join(",")) }
}

/// `value` when it reads the same as a glob and as a name: no glob characters, no
/// spaces or controls, no quotes. Anything else is refused rather than escaped.
fn literal<'a>(what: &'static str, value: &'a str) -> Result<&'a str, NotGrantable> {
    let plain = |c: char| c.is_ascii_graphic() && !"*?[]{},\\!\"'`$#".contains(c);
    if value.is_empty() || value.len() > 200 || !value.chars().all(plain) || value.contains("..") {
        return Err(NotGrantable::NotLiteral { what, value: value.chars().take(80).collect() });
    }
    Ok(value)
}

fn render(rule: Vec<toml::Table>) -> String {
    #[derive(serde::Serialize)]
    struct File {
        rule: Vec<toml::Table>,
    }
    toml::to_string(&File { rule }).unwrap_or_default()
}

/// One approval of the approved rules file: its `# approval ID: …` line, and the lines
/// up to the next approval (or the end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovedBlock {
    pub id: String,
    /// What the header says: who approved, when, from which question.
    pub granted: String,
    /// The block's lines, 1-based, end exclusive.
    pub lines: Range<usize>,
}

impl ApprovedBlock {
    /// The rules of `set` (parsed from the same file) that this block holds.
    pub fn rules<'a>(&self, set: &'a RuleSet) -> Vec<&'a Rule> {
        set.rules.iter().filter(|r| self.lines.contains(&r.line)).collect()
    }
}

const HEADER: &str = "# approval ";

/// What a new approved rules file begins with.
pub const PREAMBLE: &str = "\
# Rules written by approvers who answered \"always\". Each block begins with a line
# naming who approved, when and from which question. The file is yours: read it, edit
# it, delete blocks (`ccctl approvals rules --revoke ID`); `ccctl reload` applies an edit.
";

/// The approvals of an approved rules file, in order.
pub fn blocks(text: &str) -> Vec<ApprovedBlock> {
    let mut out: Vec<ApprovedBlock> = Vec::new();
    let total = text.lines().count() + 1;
    for (n, line) in text.lines().enumerate() {
        let Some(rest) = line.strip_prefix(HEADER) else { continue };
        let Some((id, granted)) = rest.split_once(':') else { continue };
        if let Some(last) = out.last_mut() {
            last.lines.end = n + 1;
        }
        out.push(ApprovedBlock { id: id.trim().to_owned(), granted: granted.trim().to_owned(), lines: n + 1..total });
    }
    out
}

/// An id no block of `text` has: `a` and one more than the largest number.
pub fn next_id(text: &str) -> String {
    let last = blocks(text).iter().filter_map(|b| b.id.strip_prefix('a')?.parse::<u64>().ok()).max().unwrap_or(0);
    format!("a{}", last + 1)
}

/// `text` with a block appended: its header (made one line, whatever `granted` holds)
/// and `rules`, the text [`grant`] returned.
pub fn append(text: &str, id: &str, granted: &str, rules: &str) -> String {
    let granted: String = granted.chars().map(|c| if c.is_control() { ' ' } else { c }).take(300).collect::<String>();
    let mut out = if text.is_empty() { PREAMBLE.to_owned() } else { text.to_owned() };
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&format!("{HEADER}{id}: {}\n", granted.trim()));
    out.push_str(rules);
    out
}

/// `text` without the block `id`, or `None` when it has no such block.
pub fn revoke(text: &str, id: &str) -> Option<String> {
    let block = blocks(text).into_iter().find(|b| b.id == id)?;
    let kept: Vec<&str> =
        text.lines().enumerate().filter(|(n, _)| !block.lines.contains(&(n + 1))).map(|(_, l)| l).collect();
    let mut out = kept.join("\n");
    out.push('\n');
    Some(out)
}

impl FromStr for ApprovalScope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "once" => Ok(ApprovalScope::Once),
            "run" => Ok(ApprovalScope::Run),
            "always" => Ok(ApprovalScope::Always),
            other => Err(format!("unknown approval scope {other:?}: once, run or always")),
        }
    }
}

#[cfg(test)]
mod tests;

//! What an agent is told when the gate refuses one of its calls (issue 37): the action,
//! what decided (a rule, the fixed list, the mode, where a write lands, a person),
//! whether a person could approve it, and what would be allowed instead where there is
//! a simple answer. One line, for a model to act on.
//!
//! It never names a rules file or repeats a rule beyond the reason its author wrote for
//! it: the agent learns that a rule decided, not where the policy lives or what else
//! it says.

use crate::command::CommandVerdict;
use crate::effect::{CommandClass, Decision, Effect, Mode};
use crate::evaluate::{Action, Evaluation};

/// How a refused call ended, beyond what the policy said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The policy denied it outright.
    Policy,
    /// It asked, and a person said no (`reason` names them, with their note).
    Refused { reason: String },
    /// It asked, and no one answered: none connected, none in time, or they left.
    Unanswered { reason: String },
    /// The write lands outside the run's roots or in a registered checkout.
    Misplaced { reason: String },
}

/// The line the agent is given for a refused `action`.
pub fn for_agent(action: &Action, evaluation: &Evaluation, outcome: &Outcome) -> String {
    let what = describe(action);
    let (why, approve) = match outcome {
        Outcome::Refused { reason } => (format!("a person was asked and said no ({reason})"), Approval::Refused),
        Outcome::Unanswered { reason } => {
            (format!("it needs a person's approval and got none ({reason})"), Approval::Possible)
        }
        Outcome::Misplaced { reason } => (reason.clone(), Approval::Never),
        Outcome::Policy => policy_reason(action, evaluation),
    };
    let mut line = format!("Control Center denied {what}: {why}. {}", approve.words(action.mode));
    if let Some(instead) = instead(action, evaluation, outcome) {
        line.push_str(" Instead: ");
        line.push_str(instead);
        line.push('.');
    }
    line
}

/// The line for a write refused before the policy was asked: it lands outside the
/// run's roots or in a registered checkout.
pub fn misplaced(action: &Action, reason: &str) -> String {
    let evaluation = Evaluation {
        decision: Decision::Deny,
        reason: reason.to_owned(),
        source: "roots".into(),
        effects: Vec::new(),
        command: None,
    };
    for_agent(action, &evaluation, &Outcome::Misplaced { reason: reason.to_owned() })
}

/// Whether a person could make it an allow.
enum Approval {
    /// They could; no one did.
    Possible,
    /// One was asked and refused.
    Refused,
    /// A rule of the policy decides, not an approver.
    ByRule,
    /// Nothing makes it an allow: the fixed list, the mode, the roots.
    Never,
}

impl Approval {
    fn words(&self, mode: Mode) -> String {
        match self {
            Approval::Possible => "A person could approve it if one is watching; ask them, or do without it.".into(),
            Approval::Refused => "Do not ask again for the same thing.".into(),
            Approval::ByRule => "No approver can allow it; only the person who owns the policy can change it.".into(),
            Approval::Never if mode.is_read_only() => format!("Nothing allows it in {mode} mode."),
            Approval::Never => "Nothing allows it in this run.".into(),
        }
    }
}

/// The command, or the tool and what it touches.
fn describe(action: &Action) -> String {
    if let Some(line) = &action.command_line {
        let short: String = line.chars().take(120).collect();
        let more = if line.chars().count() > 120 { "…" } else { "" };
        return format!("`{}{more}`", short.replace('\n', " "));
    }
    let tool = action.tool.as_deref().unwrap_or("the call");
    let touched: Vec<&str> =
        action.scope.paths.iter().chain(&action.scope.domains).map(String::as_str).take(3).collect();
    if touched.is_empty() { tool.to_owned() } else { format!("{tool} {}", touched.join(" ")) }
}

/// What in the policy decided, in the agent's terms.
fn policy_reason(action: &Action, evaluation: &Evaluation) -> (String, Approval) {
    match evaluation.source.as_str() {
        "mode" => (evaluation.reason.clone(), Approval::Never),
        "command policy" => {
            let fixed = worst_part_classes(evaluation.command.as_ref()).iter().any(|c| {
                matches!(
                    c,
                    CommandClass::PrivilegeEscalation | CommandClass::SystemDestruction | CommandClass::NamespaceEscape
                )
            });
            if fixed {
                (format!("{} (on a fixed list no rule or person can change)", evaluation.reason), Approval::Never)
            } else if action.mode.is_read_only() {
                (evaluation.reason.clone(), Approval::Never)
            } else {
                (evaluation.reason.clone(), Approval::ByRule)
            }
        }
        source => {
            // A rule: its author's reason, never its file.
            let rule = evaluation.effects.iter().find(|v| v.source == source && v.decision == Decision::Deny);
            let effect = rule.map_or_else(|| "this".to_owned(), |v| v.effect.to_string());
            let because = rule.and_then(|v| v.written.clone()).map(|r| format!(": {r}")).unwrap_or_default();
            (format!("a rule of this workspace's policy denies {effect}{because}"), Approval::ByRule)
        }
    }
}

fn worst_part_classes(command: Option<&CommandVerdict>) -> Vec<CommandClass> {
    command
        .and_then(|c| c.parts.iter().max_by_key(|p| p.decision))
        .map(|p| p.part.effective_classes().into_iter().collect())
        .unwrap_or_default()
}

/// A simple alternative, where there is one.
fn instead(action: &Action, evaluation: &Evaluation, outcome: &Outcome) -> Option<&'static str> {
    if matches!(outcome, Outcome::Misplaced { .. }) {
        // Where to write instead is in the reason already.
        return None;
    }
    if action.mode.is_read_only() && matches!(outcome, Outcome::Policy) {
        return Some("this run only reads: describe the change in your answer rather than making it");
    }
    let classes = worst_part_classes(evaluation.command.as_ref());
    if classes.contains(&CommandClass::PrivilegeEscalation) {
        return Some("the run has no root: do it without sudo, or tell the person what needs it");
    }
    let pushes = action.effects.contains(&Effect::PushRemote)
        || evaluation.effects.iter().any(|v| v.effect == Effect::PushRemote && v.decision != Decision::Allow);
    if pushes {
        let default = |r: &String| match &action.scope.default_branch {
            Some(d) => r == d,
            None => r == "main" || r == "master",
        };
        if action.scope.force {
            return Some("push without rewriting history, to a new branch if yours diverged");
        }
        let to_default = action.scope.refs.iter().any(default)
            || evaluation
                .command
                .as_ref()
                .is_some_and(|c| c.parts.iter().any(|p| p.part.scope.refs.iter().any(default)));
        if to_default {
            return Some("push a branch of your own and open a pull request");
        }
    }
    None
}

#[cfg(test)]
mod tests;

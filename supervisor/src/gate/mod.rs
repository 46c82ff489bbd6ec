//! The gate engine: the rules files loaded at start, the pure evaluation of
//! [`cc_policy`], approvals for what asks, and an event for every decision.
//!
//! An ask is never a yes by default: no approver connected, no answer in time, or the
//! approver gone mid-question are all denies.

mod approvals;
pub mod service;
pub mod wire;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cc_policy::{Action, Decision, Evaluation, RuleSet};
use serde_json::json;

pub use approvals::{Approvals, Outcome};

use crate::config::{ConfigError, GateConfig, read_trusted};
use crate::events::EventLog;

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error(transparent)]
    File(#[from] ConfigError),
    #[error("invalid rules: {0}")]
    Rules(#[from] cc_policy::RuleError),
}

pub struct Gate {
    global: RuleSet,
    workspaces: BTreeMap<String, RuleSet>,
    pub approvals: Approvals,
    events: Arc<EventLog>,
}

/// An action as the gate got it, with who asks.
pub struct Request {
    pub action: Action,
    pub workspace: String,
    pub run_id: String,
    pub summary: String,
}

/// What the gate decided, and on whose word.
pub struct Decided {
    pub decision: Decision,
    pub reason: String,
    pub decided_by: String,
    /// An ask that no approver answered (see [`Outcome::unanswered`]).
    pub unanswered: bool,
    pub evaluation: Evaluation,
}

impl Gate {
    /// Loads every rules file the configuration names; `base` is the directory that
    /// relative paths are taken from (the configuration file's).
    pub fn load(config: &GateConfig, base: &Path, events: Arc<EventLog>) -> Result<Self, GateError> {
        let resolve = |p: &PathBuf| if p.is_absolute() { p.clone() } else { base.join(p) };
        let load = |p: &PathBuf| -> Result<RuleSet, GateError> {
            let path = resolve(p);
            let text = read_trusted(&path)?;
            Ok(RuleSet::parse(&text, &path.display().to_string())?)
        };
        let global = config.rules.as_ref().map(load).transpose()?.unwrap_or_default();
        let mut workspaces = BTreeMap::new();
        for (name, path) in &config.workspaces {
            workspaces.insert(name.clone(), load(path)?);
        }
        Ok(Self { global, workspaces, approvals: Approvals::new(config.approval_timeout()), events })
    }

    /// The rule sets that apply in `workspace`: the global ones, then its own.
    pub fn rule_sets(&self, workspace: &str) -> Vec<&RuleSet> {
        let mut sets = vec![&self.global];
        sets.extend(self.workspaces.get(workspace));
        sets
    }

    pub fn evaluate(&self, action: &Action, workspace: &str) -> Evaluation {
        cc_policy::evaluate(action, &self.rule_sets(workspace))
    }

    /// Decides an action: the policy first, then (for an ask) the approvers. Every
    /// decision is an event.
    pub async fn decide(&self, request: Request) -> Decided {
        let evaluation = self.evaluate(&request.action, &request.workspace);
        let (decision, reason, decided_by, unanswered) = match evaluation.decision {
            Decision::Ask => {
                let question = wire::question(&request, &evaluation);
                self.events.record(
                    "approval_asked",
                    &subject(&request),
                    json!({ "question": question.question_id, "summary": request.summary, "reason": evaluation.reason }),
                );
                let outcome = self.approvals.ask(question).await;
                (outcome.decision, outcome.reason, outcome.decided_by, outcome.unanswered)
            }
            other => (other, evaluation.reason.clone(), "policy".to_owned(), false),
        };
        self.events.record(
            "gate_decision",
            &subject(&request),
            json!({
                "decision": decision.as_str(),
                "reason": reason,
                "decided_by": decided_by,
                "policy": evaluation.decision.as_str(),
                "source": evaluation.source,
                "tool": request.action.tool,
                "mode": request.action.mode.as_str(),
                "effects": request.action.effects.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
                "command_line": request.action.command_line,
                "summary": request.summary,
            }),
        );
        Decided { decision, reason, decided_by, unanswered, evaluation }
    }
}

fn subject(request: &Request) -> String {
    if request.run_id.is_empty() { "gate".to_owned() } else { format!("run:{}", request.run_id) }
}

//! The gate engine: the rules files (loaded at start, and again on a reload), the pure
//! evaluation of [`cc_policy`], approvals for what asks, and an event for every
//! decision.
//!
//! An ask is never a yes by default: no approver connected, no answer in time, or the
//! approver gone mid-question are all denies.

mod approvals;
pub mod service;
pub mod wire;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use cc_policy::{Action, Decision, Evaluation, RuleSet};
use serde_json::json;

pub use approvals::{Approvals, Outcome};

use crate::events::EventLog;
use cc_config::{ConfigError, GateConfig, read_trusted};

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("cannot read rules file {path} (named by [gate] in config.toml): {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    File(ConfigError),
    #[error("invalid rules: {source}")]
    Rules { path: PathBuf, source: cc_policy::RuleError },
}

impl GateError {
    /// The file at fault.
    pub fn path(&self) -> &Path {
        match self {
            GateError::Read { path, .. } | GateError::Rules { path, .. } => path,
            GateError::File(ConfigError::Read { path, .. } | ConfigError::Invalid { path, .. }) => path,
        }
    }
}

/// The rule sets in force: replaced whole by a reload, never edited in place.
#[derive(Default)]
pub struct Rules {
    global: RuleSet,
    workspaces: BTreeMap<String, RuleSet>,
    /// Every file read, with its text: what a reload compares.
    files: Vec<(PathBuf, String)>,
}

impl Rules {
    /// Reads every rules file the configuration names; `base` is the directory that
    /// relative paths are taken from (the configuration file's). All or nothing.
    pub fn load(config: &GateConfig, base: &Path) -> Result<Self, GateError> {
        let resolve = |p: &PathBuf| if p.is_absolute() { p.clone() } else { base.join(p) };
        let mut files = Vec::new();
        let mut load = |p: &PathBuf| -> Result<RuleSet, GateError> {
            let path = resolve(p);
            let text = read_trusted(&path).map_err(|e| match e {
                ConfigError::Read { path, source } => GateError::Read { path, source },
                other => GateError::File(other),
            })?;
            let set = RuleSet::parse(&text, &path.display().to_string())
                .map_err(|source| GateError::Rules { path: path.clone(), source })?;
            files.push((path, text));
            Ok(set)
        };
        let global = config.rules.as_ref().map(&mut load).transpose()?.unwrap_or_default();
        let mut workspaces = BTreeMap::new();
        for (name, path) in &config.workspaces {
            workspaces.insert(name.clone(), load(path)?);
        }
        Ok(Self { global, workspaces, files })
    }

    /// The rule sets that apply in `workspace`: the global ones, then its own.
    pub fn sets(&self, workspace: &str) -> Vec<&RuleSet> {
        let mut sets = vec![&self.global];
        sets.extend(self.workspaces.get(workspace));
        sets
    }

    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|(path, _)| path.as_path())
    }

    /// Whether `other` reads differently: another file, or another text.
    pub fn differ(&self, other: &Rules) -> bool {
        self.files != other.files
    }
}

pub struct Gate {
    rules: RwLock<Arc<Rules>>,
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
        let rules = RwLock::new(Arc::new(Rules::load(config, base)?));
        Ok(Self { rules, approvals: Approvals::new(config.approval_timeout()), events })
    }

    /// The rules in force now. A decision evaluates against one snapshot, so that a
    /// reload in the middle never mixes two sets.
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Puts `rules` in force for every decision from now on; the old ones back.
    pub fn replace_rules(&self, rules: Rules) -> Arc<Rules> {
        let mut guard = self.rules.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        std::mem::replace(&mut *guard, Arc::new(rules))
    }

    pub fn evaluate(&self, action: &Action, workspace: &str) -> Evaluation {
        cc_policy::evaluate(action, &self.rules().sets(workspace))
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

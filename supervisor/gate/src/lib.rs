//! The gate engine: the rules files (loaded at start, and again on a reload), the pure
//! evaluation of [`cc_policy`], approvals for what asks, and an event for every
//! decision.
//!
//! An ask is never a yes by default: no approver connected, no answer in time, or the
//! approver gone mid-question are all denies.
#![forbid(unsafe_code)]

mod approvals;
mod grants;
pub mod service;
pub mod wire;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use cc_policy::{Action, Decision, Evaluation, RuleSet};
use serde_json::json;

pub use approvals::{Approvals, Outcome};
pub use grants::GrantError;

use cc_config::{ConfigError, GateConfig, read_trusted};
use cc_store::events::EventLog;

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
#[derive(Default, Clone)]
pub struct Rules {
    global: RuleSet,
    /// The approvers' "always" answers ([`cc_policy::grants`]), beside the global rules.
    approved: RuleSet,
    approved_file: PathBuf,
    workspaces: BTreeMap<String, RuleSet>,
    /// Every file read, with its text: what a reload compares.
    files: Vec<(PathBuf, String)>,
}

/// A rules file's text, if it is ours or root's and writable by no one else.
fn read_rules_file(path: &Path) -> Result<String, GateError> {
    read_trusted(path).map_err(|e| match e {
        ConfigError::Read { path, source } => GateError::Read { path, source },
        other => GateError::File(other),
    })
}

fn parse_rules(path: &Path, text: &str) -> Result<RuleSet, GateError> {
    RuleSet::parse(text, &path.display().to_string())
        .map_err(|source| GateError::Rules { path: path.to_owned(), source })
}

impl Rules {
    /// Reads every rules file the configuration names; `base` is the directory that
    /// relative paths are taken from (the configuration file's). All or nothing.
    pub fn load(config: &GateConfig, base: &Path) -> Result<Self, GateError> {
        let resolve = |p: &PathBuf| if p.is_absolute() { p.clone() } else { base.join(p) };
        let mut files = Vec::new();
        let mut load = |p: &PathBuf| -> Result<RuleSet, GateError> {
            let path = resolve(p);
            let text = read_rules_file(&path)?;
            let set = parse_rules(&path, &text)?;
            files.push((path, text));
            Ok(set)
        };
        let global = config.rules.as_ref().map(&mut load).transpose()?.unwrap_or_default();
        let approved_file = resolve(&config.approved);
        // No file until the first "always".
        let approved = if approved_file.exists() { load(&config.approved)? } else { RuleSet::default() };
        let mut workspaces = BTreeMap::new();
        for (name, path) in &config.workspaces {
            workspaces.insert(name.clone(), load(path)?);
        }
        Ok(Self { global, approved, approved_file, workspaces, files })
    }

    /// These rules with the approved rules file's text replaced by `text`.
    pub fn with_approved(&self, text: &str) -> Result<Rules, GateError> {
        let mut new = self.clone();
        new.approved = parse_rules(&self.approved_file, text)?;
        new.files.retain(|(p, _)| *p != self.approved_file);
        new.files.push((self.approved_file.clone(), text.to_owned()));
        Ok(new)
    }

    /// The rule sets that apply in `workspace`: the global ones, the approved ones,
    /// then the workspace's own.
    pub fn sets(&self, workspace: &str) -> Vec<&RuleSet> {
        let mut sets = vec![&self.global, &self.approved];
        sets.extend(self.workspaces.get(workspace));
        sets
    }

    /// Where "always" approvals are written.
    pub fn approved_file(&self) -> &Path {
        &self.approved_file
    }

    /// The approved rules file's text as in force, and its rules.
    pub fn approved(&self) -> (&str, &RuleSet) {
        let text = self.files.iter().find(|(p, _)| *p == self.approved_file).map_or("", |(_, t)| t.as_str());
        (text, &self.approved)
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
    run_grants: grants::RunGrants,
    /// Held while the approved rules file is read, changed and written.
    approved_writer: std::sync::Mutex<()>,
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

impl Decided {
    /// What the agent is told when this is a refusal of `action` (see
    /// [`cc_policy::denial`]): never a rules file, always whether a person could allow it.
    pub fn for_agent(&self, action: &Action) -> String {
        use cc_policy::denial::{Outcome, for_agent};
        let outcome = if self.unanswered {
            Outcome::Unanswered { reason: self.reason.clone() }
        } else if self.decided_by != "policy" {
            Outcome::Refused { reason: self.reason.clone() }
        } else {
            Outcome::Policy
        };
        for_agent(action, &self.evaluation, &outcome)
    }
}

impl Gate {
    /// Loads every rules file the configuration names; `base` is the directory that
    /// relative paths are taken from (the configuration file's).
    pub fn load(config: &GateConfig, base: &Path, events: Arc<EventLog>) -> Result<Self, GateError> {
        let rules = RwLock::new(Arc::new(Rules::load(config, base)?));
        let approvals = Approvals::new(config.approval_timeout());
        let run_grants = grants::RunGrants::new(events.store().clone());
        Ok(Self { rules, approvals, events, run_grants, approved_writer: Default::default() })
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
        self.evaluate_in_run(action, workspace, "")
    }

    /// As [`Gate::evaluate`], with what approvers granted `run_id` for its life.
    fn evaluate_in_run(&self, action: &Action, workspace: &str, run_id: &str) -> Evaluation {
        let rules = self.rules();
        let mut sets = rules.sets(workspace);
        let granted = self.run_grants.of(run_id);
        sets.extend(granted.as_ref());
        cc_policy::evaluate(action, &sets)
    }

    /// An approver's answer (see [`Approvals::answer`]); an allow for longer than
    /// once becomes rules first, and if it cannot, the answer is not taken.
    pub fn answer(
        &self,
        approver: u64,
        question_id: &str,
        answer: approvals::Answer,
    ) -> Result<(), approvals::AnswerError> {
        self.approvals.answer(approver, question_id, answer, |question, scope, name| self.grant(question, scope, name))
    }

    /// A run ended: what was approved for it goes.
    pub fn forget_run(&self, run_id: &str) {
        self.run_grants.forget(run_id);
    }

    /// Decides an action: the policy first, then (for an ask) the approvers. Every
    /// decision is an event.
    pub async fn decide(&self, request: Request) -> Decided {
        let evaluation = self.evaluate_in_run(&request.action, &request.workspace, &request.run_id);
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

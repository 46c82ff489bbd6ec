//! Approvals that outlast their question: "for this run" rules held in memory for the
//! run's life, and "always" rules written into the approved rules file and put in force
//! at once. What the rules are, and that they never widen past the question, is
//! [`cc_policy::grants`]; this is where they are kept.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cc_policy::RuleSet;
use cc_policy::grants::{self, ApprovalScope, NotGrantable};
use cc_proto::supervisor::v1::ApprovalQuestion;
use cc_store::Store;

use super::{Gate, GateError, Rules, wire};

/// Why an approval for longer than once was not taken. The question stays open.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error(transparent)]
    Not(#[from] NotGrantable),
    #[error("the question cannot be read back: {0}")]
    Question(String),
    #[error("cannot write the approved rules file {path}: {source}; answer once, or fix the file")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("the approved rules file does not load ({0}); fix it, or answer once")]
    Load(#[from] GateError),
    #[error("no approval {0:?} in the approved rules file (ccctl approvals rules lists them)")]
    Unknown(String),
    #[error("cannot keep the approval for the run: {0}; answer once")]
    Store(cc_store::StoreError),
}

/// The "for this run" grants: kept in `state.db` (so that they last as long as the run,
/// across a restart of the supervisor) and cached by run. The store drops a run's when
/// the run ends; the cache is told by [`Gate::forget_run`].
pub struct RunGrants {
    store: Arc<Store>,
    cached: Mutex<BTreeMap<String, RuleSet>>,
}

impl RunGrants {
    pub fn new(store: Arc<Store>) -> Self {
        Self { store, cached: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, RuleSet>> {
        self.cached.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What was approved for `run_id`'s life. A run with none is not cached, so that
    /// made-up run ids from a client fill nothing.
    pub fn of(&self, run_id: &str) -> Option<RuleSet> {
        if run_id.is_empty() {
            return None;
        }
        if let Some(set) = self.lock().get(run_id) {
            return Some(set.clone());
        }
        let rows = match self.store.run_approvals(run_id) {
            Ok(rows) => rows,
            Err(e) => {
                // Failing closed: without them the gate asks again.
                tracing::error!(run = run_id, error = %e, "cannot read what was approved for the run");
                return None;
            }
        };
        let mut set = RuleSet::default();
        for (question, text) in rows {
            match RuleSet::parse(&text, &run_source(&question, run_id)) {
                Ok(granted) => set.rules.extend(granted.rules),
                Err(e) => tracing::error!(run = run_id, question, error = %e, "an approval for the run does not load"),
            }
        }
        if set.rules.is_empty() {
            return None;
        }
        self.lock().insert(run_id.to_owned(), set.clone());
        Some(set)
    }

    fn add(&self, run_id: &str, question: &str, text: &str) -> Result<(), GrantError> {
        // It loads before it is kept: what is kept is read back on every decision.
        RuleSet::parse(text, &run_source(question, run_id)).map_err(|e| GrantError::Question(e.to_string()))?;
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        self.store.add_run_approval(run_id, question, text, now).map_err(GrantError::Store)?;
        // Read back whole on the next decision.
        self.lock().remove(run_id);
        Ok(())
    }

    pub fn forget(&self, run_id: &str) {
        self.lock().remove(run_id);
    }
}

fn run_source(question: &str, run_id: &str) -> String {
    format!("approval {question} for run {run_id}")
}

impl Gate {
    /// Turns an approver's yes to `question` into rules for `scope` and puts them in
    /// force; returns the words the decision is recorded with. Called with the
    /// question still open, so that a refusal here leaves it open.
    pub(super) fn grant(
        &self,
        question: &ApprovalQuestion,
        scope: ApprovalScope,
        approver: &str,
    ) -> Result<String, GrantError> {
        let request =
            wire::request_from(question.action.clone()).map_err(|s| GrantError::Question(s.message().into()))?;
        let in_force = self.rules();
        let run_grants = self.run_grants.of(&request.run_id);
        let mut sets = in_force.sets(&request.workspace);
        sets.extend(run_grants.as_ref());
        let qid = &question.question_id;
        match scope {
            ApprovalScope::Once => Ok(String::new()),
            ApprovalScope::Run => {
                if request.run_id.is_empty() {
                    return Err(NotGrantable::NoRun.into());
                }
                let reason = format!("approved for run {} by {approver} ({qid})", request.run_id);
                let text = grants::grant(&request.action, &sets, &reason)?;
                self.run_grants.add(&request.run_id, qid, &text)?;
                self.events.record(
                    "approval_granted",
                    &super::subject(&request),
                    serde_json::json!({ "scope": "run", "question": qid, "approver": approver, "rules": text }),
                );
                Ok(" (for this run)".into())
            }
            ApprovalScope::Always => {
                let reason = format!("approved always by {approver} ({qid})");
                let text = grants::grant(&request.action, &sets, &reason)?;
                let _writing = self.approved_writer.lock().unwrap_or_else(|p| p.into_inner());
                let path = in_force.approved_file().to_owned();
                let current = read_approved(&path)?;
                let id = grants::next_id(&current);
                let run = if request.run_id.is_empty() { String::new() } else { format!(" of run {}", request.run_id) };
                let what = if request.summary.is_empty() {
                    request.action.command_line.clone().unwrap_or_default()
                } else {
                    request.summary.clone()
                };
                let when = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
                let header = format!("by {approver} at {when}, question {qid}{run}: {what}");
                let updated = grants::append(&current, &id, &header, &text);
                self.put_approved(&in_force, &path, &updated)?;
                self.events.record(
                    "approval_granted",
                    &super::subject(&request),
                    serde_json::json!({ "scope": "always", "question": qid, "approver": approver, "approval_rule": id, "rules": text }),
                );
                Ok(format!(" (always: approval {id} in {})", path.file_name().unwrap_or_default().to_string_lossy()))
            }
        }
    }

    /// Revokes the "always" approval `id`: its block leaves the file and its rules the
    /// gate, at once.
    pub fn revoke(&self, id: &str) -> Result<(), GrantError> {
        let _writing = self.approved_writer.lock().unwrap_or_else(|p| p.into_inner());
        let in_force = self.rules();
        let path = in_force.approved_file().to_owned();
        let current = read_approved(&path)?;
        let updated = grants::revoke(&current, id).ok_or_else(|| GrantError::Unknown(id.to_owned()))?;
        self.put_approved(&in_force, &path, &updated)?;
        self.events.record("approval_revoked", "gate", serde_json::json!({ "approval_rule": id }));
        Ok(())
    }

    /// Loads `text` as the approved rules (all or nothing), writes it, and puts it in
    /// force beside the other rules files as they are then: computed from the rules in
    /// force under the lock, so that a reload that landed meanwhile is kept, never undone.
    fn put_approved(&self, in_force: &Rules, path: &Path, text: &str) -> Result<(), GrantError> {
        in_force.with_approved(text)?;
        write_atomically(path, text).map_err(|source| GrantError::Write { path: path.to_owned(), source })?;
        let mut guard = self.rules.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let updated = guard.with_approved(text)?;
        *guard = Arc::new(updated);
        Ok(())
    }
}

/// The approved rules file as it is on disk now (a person's edits included); empty when
/// there is none yet.
fn read_approved(path: &Path) -> Result<String, GateError> {
    if !path.exists() {
        return Ok(String::new());
    }
    super::read_rules_file(path)
}

/// Writes beside the file and renames over it, so that a reader (or a crash) sees the
/// old text or the new one, never half of it. Writable by its owner only, as every
/// rules file must be.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut staging = path.as_os_str().to_owned();
    staging.push(".writing");
    let staging = PathBuf::from(staging);
    let _ = std::fs::remove_file(&staging);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&staging)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&staging, path)
}

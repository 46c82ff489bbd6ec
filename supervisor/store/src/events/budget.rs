//! What one run may write to the event log (issue 36). Every record a run causes
//! (subject `run:ID`: gate decisions, refusals, its agent's steps, violations) counts
//! against that run, per prompt and in all; each event is also a log line, so this
//! bounds the log too. Past a budget, records are counted by kind instead of written:
//! one `records_suppressed` says so as it is crossed, and another gives the counts when
//! the prompt or the run ends.
//!
//! Pure: the event log asks [`RecordBudgets::admit`] before it writes.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

/// Records one prompt may cause.
pub const PROMPT_RECORDS: u64 = 20_000;
/// Records one run may cause in all.
pub const RUN_RECORDS: u64 = 100_000;

/// The kinds never suppressed: how a run and its processes start and end, and the
/// notes this budget writes itself. Without them, no one could tell what happened.
fn always_recorded(kind: &str) -> bool {
    kind.starts_with("run_")
        || kind.starts_with("runner_")
        || matches!(kind, "agent_exited" | "agent_disconnected" | "agent_output_unread" | SUPPRESSED)
}

pub const SUPPRESSED: &str = "records_suppressed";

/// Which budget was spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spent {
    Prompt,
    Run,
}

impl Spent {
    fn name(self) -> &'static str {
        match self {
            Spent::Prompt => "prompt",
            Spent::Run => "run",
        }
    }

    fn limit(self) -> u64 {
        match self {
            Spent::Prompt => PROMPT_RECORDS,
            Spent::Run => RUN_RECORDS,
        }
    }
}

/// What to do with one record.
#[derive(Debug, PartialEq)]
pub enum Admit {
    Record,
    /// Record it, and then this note: the budget is spent from here on.
    RecordThenNote(Value),
    Suppress,
}

#[derive(Default)]
struct RunCount {
    in_run: u64,
    in_prompt: Option<u64>,
    /// Kinds suppressed since the last summary, and how many of each.
    suppressed: BTreeMap<String, u64>,
    spent: Option<Spent>,
}

/// Every live run's count.
#[derive(Default)]
pub struct RecordBudgets {
    runs: HashMap<String, RunCount>,
}

impl RecordBudgets {
    /// Whether the record of `kind` for `subject` is written.
    pub fn admit(&mut self, subject: &str, kind: &str) -> Admit {
        let Some(run) = subject.strip_prefix("run:") else { return Admit::Record };
        if always_recorded(kind) {
            return Admit::Record;
        }
        let count = self.runs.entry(run.to_owned()).or_default();
        let spent = if count.in_run >= RUN_RECORDS {
            Some(Spent::Run)
        } else if count.in_prompt.is_some_and(|n| n >= PROMPT_RECORDS) {
            Some(Spent::Prompt)
        } else {
            None
        };
        if spent.is_some() {
            *count.suppressed.entry(kind.to_owned()).or_default() += 1;
            return Admit::Suppress;
        }
        count.in_run += 1;
        if let Some(n) = count.in_prompt.as_mut() {
            *n += 1;
        }
        let crossed = if count.in_run == RUN_RECORDS {
            Spent::Run
        } else if count.in_prompt == Some(PROMPT_RECORDS) {
            Spent::Prompt
        } else {
            return Admit::Record;
        };
        count.spent = Some(crossed);
        Admit::RecordThenNote(json!({
            "budget": crossed.name(),
            "after": crossed.limit(),
            "what": format!("the {}'s records past {} are counted, not written", crossed.name(), crossed.limit()),
        }))
    }

    /// A prompt of `run` begins: its own budget starts afresh.
    pub fn begin_prompt(&mut self, run: &str) {
        self.runs.entry(run.to_owned()).or_default().in_prompt = Some(0);
    }

    /// A prompt of `run` ended: the counts of what it had suppressed, if anything.
    pub fn end_prompt(&mut self, run: &str) -> Option<Value> {
        let count = self.runs.get_mut(run)?;
        count.in_prompt = None;
        Self::summary(count)
    }

    /// `run` ended: what it had suppressed since the last summary, if anything.
    pub fn forget(&mut self, run: &str) -> Option<Value> {
        let mut count = self.runs.remove(run)?;
        Self::summary(&mut count)
    }

    fn summary(count: &mut RunCount) -> Option<Value> {
        if count.suppressed.is_empty() {
            return None;
        }
        let counts = std::mem::take(&mut count.suppressed);
        let spent = if count.in_run >= RUN_RECORDS { Spent::Run } else { count.spent.unwrap_or(Spent::Prompt) };
        Some(json!({ "budget": spent.name(), "suppressed": counts, "total": counts_total(&counts) }))
    }
}

fn counts_total(counts: &BTreeMap<String, u64>) -> u64 {
    counts.values().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admit_n(budgets: &mut RecordBudgets, kind: &str, n: u64) -> (u64, u64, Vec<Value>) {
        let (mut recorded, mut suppressed, mut notes) = (0, 0, vec![]);
        for _ in 0..n {
            match budgets.admit("run:r1", kind) {
                Admit::Record => recorded += 1,
                Admit::RecordThenNote(note) => {
                    recorded += 1;
                    notes.push(note);
                }
                Admit::Suppress => suppressed += 1,
            }
        }
        (recorded, suppressed, notes)
    }

    #[test]
    fn a_prompt_records_up_to_its_budget_then_counts_by_kind() {
        let mut b = RecordBudgets::default();
        b.begin_prompt("r1");
        let (recorded, suppressed, notes) = admit_n(&mut b, "gate_decision", PROMPT_RECORDS + 5);
        assert_eq!((recorded, suppressed), (PROMPT_RECORDS, 5));
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0]["budget"], "prompt");
        // The run's lifecycle is still written.
        assert_eq!(b.admit("run:r1", "runner_restarted"), Admit::Record);
        let summary = b.end_prompt("r1").unwrap();
        assert_eq!(summary["suppressed"]["gate_decision"], 5);
        assert_eq!(summary["total"], 5);
        // The next prompt starts afresh; outside a prompt only the run's budget counts.
        b.begin_prompt("r1");
        assert_eq!(b.admit("run:r1", "agent_text"), Admit::Record);
        assert!(b.end_prompt("r1").is_none());
        assert_eq!(b.admit("run:r1", "tool_refused"), Admit::Record);
    }

    #[test]
    fn a_run_records_up_to_its_budget_in_all_and_its_end_gives_the_counts() {
        let mut b = RecordBudgets::default();
        let (recorded, suppressed, notes) = admit_n(&mut b, "tool_refused", RUN_RECORDS + 3);
        assert_eq!((recorded, suppressed), (RUN_RECORDS, 3));
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0]["budget"], "run");
        b.begin_prompt("r1");
        assert_eq!(b.admit("run:r1", "agent_text"), Admit::Suppress, "a new prompt does not refill the run's");
        assert_eq!(b.admit("run:r1", "run_ended"), Admit::Record);
        let summary = b.forget("r1").unwrap();
        assert_eq!((summary["budget"].as_str(), summary["total"].as_u64()), (Some("run"), Some(4)));
        assert!(b.forget("r1").is_none());
    }

    #[test]
    fn what_is_not_a_runs_is_never_counted() {
        let mut b = RecordBudgets::default();
        for subject in ["gate", "helper:sandboxd", "conversation:c1", "runner"] {
            assert_eq!(b.admit(subject, "gate_decision"), Admit::Record);
        }
        assert!(b.runs.is_empty());
    }
}

//! The `runs` table: one row per run, kept after it ends.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use cc_policy::Mode;
use cc_proto::common::v1::Adapter;
use rusqlite::{OptionalExtension, params};

use crate::ids::ConversationId;
use crate::store::{Store, StoreError};

/// A run's one state machine, kept by its row and followed by its runner slot:
/// `Starting → Running → Stopped | Failed`, and `Starting → Stopped | Failed` for a
/// run stopped, or whose runner failed, before the runner served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Registered with sandboxd; its runner is starting (bash calls already work).
    Starting,
    /// Its runner serves.
    Running,
    Stopped,
    Failed,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Starting => "starting",
            RunState::Running => "running",
            RunState::Stopped => "stopped",
            RunState::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "starting" => RunState::Starting,
            "running" => RunState::Running,
            "stopped" => RunState::Stopped,
            _ => RunState::Failed,
        }
    }

    pub fn is_live(self) -> bool {
        matches!(self, RunState::Starting | RunState::Running)
    }

    /// Whether a run in this state may go to `next`.
    pub fn may_become(self, next: RunState) -> bool {
        use RunState::*;
        matches!((self, next), (Starting, Running | Stopped | Failed) | (Running, Stopped | Failed))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    pub id: String,
    pub conversation: ConversationId,
    pub workspace: String,
    pub agent: String,
    pub mode: Mode,
    pub adapter: Adapter,
    pub network: bool,
    pub state: RunState,
    pub work_dir: PathBuf,
    pub started_unix_ms: i64,
    pub ended_unix_ms: Option<i64>,
    pub end_reason: Option<String>,
}

const COLUMNS: &str = "id, conversation, workspace, agent, mode, adapter, network, state, work_dir, \
                       started_unix_ms, ended_unix_ms, end_reason";

/// The states a run may be in to become `next`, as an SQL list of our own constants.
fn states_before(next: RunState) -> String {
    let all = [RunState::Starting, RunState::Running, RunState::Stopped, RunState::Failed];
    let from: Vec<String> = all.iter().filter(|s| s.may_become(next)).map(|s| format!("'{}'", s.as_str())).collect();
    if from.is_empty() { "NULL".to_owned() } else { from.join(", ") }
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    let mode: String = r.get(4)?;
    let adapter: String = r.get(5)?;
    let state: String = r.get(7)?;
    let work_dir: Vec<u8> = r.get(8)?;
    Ok(RunRecord {
        id: r.get(0)?,
        conversation: ConversationId::from_wire(r.get::<_, String>(1)?),
        workspace: r.get(2)?,
        agent: r.get(3)?,
        // Written by us from a Mode; a hand-edited value reads as the strictest.
        mode: mode.parse().unwrap_or(Mode::Plan),
        // Written by us from an Adapter; no agent is ever started from a row, so a
        // hand-edited value reads as the harness.
        adapter: Adapter::from_name(&adapter).unwrap_or(Adapter::Harness),
        network: r.get(6)?,
        state: RunState::parse(&state),
        work_dir: PathBuf::from(std::ffi::OsStr::from_bytes(&work_dir)),
        started_unix_ms: r.get(9)?,
        ended_unix_ms: r.get(10)?,
        end_reason: r.get(11)?,
    })
}

impl Store {
    pub fn insert_run(&self, run: &RunRecord) -> Result<(), StoreError> {
        self.conn()?.execute(
            &format!("INSERT INTO runs ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"),
            params![
                run.id,
                run.conversation.as_str(),
                run.workspace,
                run.agent,
                run.mode.as_str(),
                run.adapter.name(),
                run.network,
                run.state.as_str(),
                run.work_dir.as_os_str().as_bytes(),
                run.started_unix_ms,
                run.ended_unix_ms,
                run.end_reason,
            ],
        )?;
        Ok(())
    }

    /// Moves a run to `state`, if its state machine allows it from where the row is;
    /// a row elsewhere (already ended) is left as it is.
    pub fn set_run_state(&self, id: &str, state: RunState) -> Result<(), StoreError> {
        let sql = format!("UPDATE runs SET state = ?2 WHERE id = ?1 AND state IN ({})", states_before(state));
        self.conn()?.execute(&sql, params![id, state.as_str()])?;
        Ok(())
    }

    /// Ends a live run (see [`Store::set_run_state`]): an ended run keeps its end.
    pub fn end_run(&self, id: &str, state: RunState, ended_unix_ms: i64, reason: &str) -> Result<(), StoreError> {
        let sql = format!(
            "UPDATE runs SET state = ?2, ended_unix_ms = ?3, end_reason = ?4 WHERE id = ?1 AND state IN ({})",
            states_before(state)
        );
        let conn = self.conn()?;
        conn.execute(&sql, params![id, state.as_str(), ended_unix_ms, reason])?;
        // What was approved for the run's life ends with it.
        conn.execute("DELETE FROM run_approvals WHERE run = ?1", [id])?;
        Ok(())
    }

    /// Keeps the rules an approver allowed for `run`'s life (from `question`).
    pub fn add_run_approval(&self, run: &str, question: &str, rules: &str, now_unix_ms: i64) -> Result<(), StoreError> {
        self.conn()?.execute(
            "INSERT OR REPLACE INTO run_approvals (run, question, rules, created_unix_ms) VALUES (?1, ?2, ?3, ?4)",
            params![run, question, rules, now_unix_ms],
        )?;
        Ok(())
    }

    /// What was approved for `run`'s life, as (question, rules text), oldest first.
    pub fn run_approvals(&self, run: &str) -> Result<Vec<(String, String)>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT question, rules FROM run_approvals WHERE run = ?1 ORDER BY created_unix_ms, question",
        )?;
        let rows = stmt.query_map([run], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn run(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let conn = self.conn()?;
        Ok(conn.query_row(&format!("SELECT {COLUMNS} FROM runs WHERE id = ?1"), [id], row).optional()?)
    }

    /// Newest first; `conversation` filters when given.
    pub fn runs(&self, conversation: Option<&str>) -> Result<Vec<RunRecord>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM runs WHERE ?1 IS NULL OR conversation = ?1 ORDER BY started_unix_ms DESC, id"
        ))?;
        let rows = stmt.query_map([conversation], row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_machine_only_goes_forward() {
        use RunState::*;
        let all = [Starting, Running, Stopped, Failed];
        let allowed: Vec<(RunState, RunState)> =
            all.iter().flat_map(|a| all.iter().map(move |b| (*a, *b))).filter(|(a, b)| a.may_become(*b)).collect();
        assert_eq!(
            allowed,
            vec![(Starting, Running), (Starting, Stopped), (Starting, Failed), (Running, Stopped), (Running, Failed)]
        );
    }

    #[test]
    fn a_run_is_recorded_and_ended() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("state.db")).unwrap();
        let run = RunRecord {
            id: "r1".into(),
            conversation: ConversationId::from_wire("c1"),
            workspace: "default".into(),
            agent: "default".into(),
            mode: Mode::Review,
            adapter: Adapter::Harness,
            network: false,
            state: RunState::Running,
            work_dir: PathBuf::from("/w"),
            started_unix_ms: 5,
            ended_unix_ms: None,
            end_reason: None,
        };
        store.insert_run(&run).unwrap();
        assert_eq!(store.run("r1").unwrap().unwrap(), run);
        store.add_run_approval("r1", "q1", "[[rule]]\n", 6).unwrap();
        store.add_run_approval("r2", "q2", "[[rule]]\n", 6).unwrap();
        assert_eq!(store.run_approvals("r1").unwrap(), [("q1".to_owned(), "[[rule]]\n".to_owned())]);
        store.end_run("r1", RunState::Failed, 9, "runner exited").unwrap();
        assert!(store.run_approvals("r1").unwrap().is_empty(), "what was approved for a run ends with it");
        assert_eq!(store.run_approvals("r2").unwrap().len(), 1);
        let ended = store.run("r1").unwrap().unwrap();
        assert_eq!(
            (ended.state, ended.ended_unix_ms, ended.end_reason.as_deref()),
            (RunState::Failed, Some(9), Some("runner exited"))
        );
        // An ended run stays as it ended: the state machine only goes forward.
        store.end_run("r1", RunState::Stopped, 10, "stopped on request").unwrap();
        store.set_run_state("r1", RunState::Running).unwrap();
        assert_eq!(store.run("r1").unwrap().unwrap(), ended);
        assert_eq!(store.runs(Some("c1")).unwrap().len(), 1);
        assert_eq!(store.runs(Some("c2")).unwrap().len(), 0);
        assert!(store.run("nope").unwrap().is_none());
    }
}

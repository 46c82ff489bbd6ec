//! The event log: every event is a row in `state.db` first, then is broadcast to
//! followers. Followers that fall behind re-read from the database, so none is lost.
//! What one run may write is bounded ([`budget`]). Every decision is also appended to
//! the audit trail ([`cc_audit`]), whatever the budget: the trail is the whole record.

pub mod budget;

use std::sync::Arc;
use std::time::SystemTime;

use cc_proto::common::v1::Event;
use cc_proto::helper::unix_ms;
use cc_proto::supervisor::v1::WatchEventsResponse;
use tokio::sync::{broadcast, mpsc};
use tonic::Status;

use crate::store::{Store, StoreError};

/// One prompt's records, as long as it lasts: see [`EventLog::prompt_scope`].
pub struct PromptScope {
    log: Arc<EventLog>,
    run_id: String,
}

impl Drop for PromptScope {
    fn drop(&mut self) {
        self.log.end_prompt(&self.run_id);
    }
}

/// How many events one database read returns while replaying.
const PAGE: usize = 512;

pub struct EventLog {
    store: Arc<Store>,
    live: broadcast::Sender<Event>,
    /// Held across insert and broadcast, so that followers see ids in order: a
    /// follower skips ids it has passed, and out-of-order sends would lose events.
    /// It holds the runs' record budgets, which are counted in the same order.
    order: std::sync::Mutex<budget::RecordBudgets>,
    /// The audit trail, when it is kept; appended under `order`, in the log's order.
    audit: Option<std::sync::Mutex<cc_audit::AuditWriter>>,
}

/// The events that are decisions, and so go to the audit trail: the gate's and its
/// approvers', egress refusals, credentials, reloads, runs (issue 38). Agents' own
/// steps and the helpers' comings and goings are not.
pub const AUDITED: &[&str] = &[
    "gate_decision",
    "approval_asked",
    "approval_granted",
    "approval_revoked",
    "egress_denied",
    "egress_denied_suppressed",
    "credentials_issued",
    "credentials_revoked",
    "credentials_revoke_pending",
    "credentials_unavailable",
    "config_reloaded",
    "config_reload_refused",
    "run_started",
    "run_ended",
    "tool_refused",
    "sandbox_violation",
    "limit_reached",
    "product_tool",
    "model_usage",
    "model_budget_reached",
    "forward_connection",
    "supervisor_started",
    "supervisor_stopped",
];

impl EventLog {
    pub fn new(store: Arc<Store>) -> Self {
        let (live, _) = broadcast::channel(1024);
        Self { store, live, order: std::sync::Mutex::default(), audit: None }
    }

    /// Keeps the audit trail with `writer` from now on.
    pub fn with_audit(mut self, writer: cc_audit::AuditWriter) -> Self {
        self.audit = Some(std::sync::Mutex::new(writer));
        self
    }

    /// The trail's last record, (sequence number, hash), when it is kept.
    pub fn audit_head(&self) -> Option<(u64, String)> {
        let audit = self.audit.as_ref()?.lock().unwrap_or_else(|p| p.into_inner());
        let (seq, hash) = audit.head();
        Some((seq, hash.to_owned()))
    }

    /// The database the log is kept in.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Records an event. A failure to store is logged, not fatal: the supervisor's job
    /// is to keep the helpers running, and the log line carries the event.
    pub fn record(&self, kind: &str, subject: &str, payload: serde_json::Value) {
        let mut budgets = self.order.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(audit) = &self.audit
            && AUDITED.contains(&kind)
        {
            let mut audit = audit.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = audit.append(kind, subject, payload.clone()) {
                tracing::error!(kind, subject, error = %e, "cannot append to the audit trail");
            }
        }
        match budgets.admit(subject, kind) {
            budget::Admit::Record => self.write(kind, subject, payload),
            budget::Admit::RecordThenNote(note) => {
                self.write(kind, subject, payload);
                self.write(budget::SUPPRESSED, subject, note);
            }
            budget::Admit::Suppress => {}
        }
    }

    /// A prompt of `run_id` begins: its records have a budget of their own until the
    /// scope returned is dropped.
    pub fn prompt_scope(self: &Arc<Self>, run_id: &str) -> PromptScope {
        self.order.lock().unwrap_or_else(|p| p.into_inner()).begin_prompt(run_id);
        PromptScope { log: self.clone(), run_id: run_id.to_owned() }
    }

    /// A prompt of `run_id` ended: what its records' budget suppressed is summed up.
    fn end_prompt(&self, run_id: &str) {
        let mut budgets = self.order.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(summary) = budgets.end_prompt(run_id) {
            self.write(budget::SUPPRESSED, &format!("run:{run_id}"), summary);
        }
    }

    /// `run_id` ended: what its records' budget suppressed since the last summary is
    /// summed up, and its count dropped.
    pub fn end_run(&self, run_id: &str) {
        let mut budgets = self.order.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(summary) = budgets.forget(run_id) {
            self.write(budget::SUPPRESSED, &format!("run:{run_id}"), summary);
        }
    }

    /// Writes and broadcasts one event; the caller holds `order`.
    fn write(&self, kind: &str, subject: &str, payload: serde_json::Value) {
        match self.store.append_event(unix_ms(SystemTime::now()), kind, subject, &payload) {
            Ok(event) => {
                tracing::info!(event.kind = kind, event.subject = subject, event.payload = %event.payload_json, "event");
                let _ = self.live.send(event);
            }
            Err(e) => tracing::error!(kind, subject, %payload, error = %e, "cannot record event"),
        }
    }

    /// Streams the events after `since` into `out`, then (with `follow`) every new one,
    /// until the receiver goes away.
    pub async fn stream(&self, since: u64, follow: bool, out: mpsc::Sender<Result<WatchEventsResponse, Status>>) {
        // Subscribe before replaying so that nothing recorded in between is missed;
        // duplicates are skipped by id.
        let mut live = self.live.subscribe();
        let Ok(mut last) = self.replay(since, &out).await else { return };
        if !follow {
            return;
        }
        loop {
            // A follower that went away is noticed at once, not at the next event.
            let received = tokio::select! {
                received = live.recv() => received,
                _ = out.closed() => return,
            };
            match received {
                Ok(event) if event.id > last => {
                    last = event.id;
                    if out.send(Ok(WatchEventsResponse { event: Some(event) })).await.is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => match self.replay(last, &out).await {
                    Ok(newest) => last = newest,
                    Err(()) => return,
                },
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Sends every stored event after `since`; returns the last id sent (or `since`).
    /// `Err(())` when the receiver is gone or the database failed (already reported).
    async fn replay(&self, since: u64, out: &mpsc::Sender<Result<WatchEventsResponse, Status>>) -> Result<u64, ()> {
        let mut last = since;
        loop {
            let page = match self.page_after(last).await {
                Ok(page) => page,
                Err(e) => {
                    let _ = out.send(Err(Status::internal(format!("cannot read the event log: {e}")))).await;
                    return Err(());
                }
            };
            let full = page.len() == PAGE;
            for event in page {
                last = event.id;
                out.send(Ok(WatchEventsResponse { event: Some(event) })).await.map_err(|_| ())?;
            }
            if !full {
                return Ok(last);
            }
        }
    }

    async fn page_after(&self, after: u64) -> Result<Vec<Event>, StoreError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.events_after(after, PAGE)).await.unwrap_or(Err(StoreError::Poisoned))
    }
}

/// `text` cut to `max` characters, control characters escaped: for what an agent sent
/// that a record repeats (a host it named, a proxy's reason quoting it).
pub fn printable(text: &str, max: usize) -> String {
    let escaped = || {
        text.chars().flat_map(|c| {
            let mut one = String::new();
            if c.is_control() {
                one.extend(c.escape_debug())
            } else {
                one.push(c)
            }
            one.chars().collect::<Vec<_>>()
        })
    };
    let mut out: String = escaped().take(max).collect();
    if escaped().nth(max).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_from_an_agent_are_escaped_and_cut() {
        assert_eq!(printable("a\r\nb\0", 100), "a\\r\\nb\\0");
        assert_eq!(printable(&"x".repeat(10), 4), "xxxx…");
        assert_eq!(printable("plain.test", 10), "plain.test");
        assert_eq!(printable("isn't \"quoted\"", 20), "isn't \"quoted\"", "only control characters");
    }
}

//! Approvals: questions out to every connected approver, the first answer wins, and
//! every way of not getting an answer is a deny.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use cc_policy::Decision;
use cc_policy::grants::ApprovalScope;
use cc_proto::supervisor::v1::{
    ApprovalAnswerRejected, ApprovalQuestion, ApprovalResolved, ApprovalWatching,
    WatchApprovalsResponse as ApprovalEvent, watch_approvals_response::Event as Kind,
};
use cc_proto::time::{timestamp, unix_ms};
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

/// Why an approver's answer changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("an answer is allow or deny")]
    Ask,
    #[error("this approver is no longer registered")]
    Unregistered,
    #[error("{0}")]
    CannotLast(#[from] super::GrantError),
}

/// An approver's answer to one question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub decision: Decision,
    /// How long an allow lasts; a deny is for its question only.
    pub scope: ApprovalScope,
    /// Said with the decision, in the event log.
    pub note: String,
}

/// How an ask ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Allow or deny, never ask.
    pub decision: Decision,
    pub reason: String,
    pub decided_by: String,
    /// Denied because no approver answered: none connected, none in time, or the
    /// ones there went away. A client tells it from a refusal by its reason.
    pub unanswered: bool,
    /// How long the approver's allow lasts.
    pub scope: ApprovalScope,
}

impl Outcome {
    fn deny(reason: impl Into<String>) -> Self {
        Outcome {
            decision: Decision::Deny,
            reason: reason.into(),
            decided_by: "gate".into(),
            unanswered: true,
            scope: ApprovalScope::Once,
        }
    }
}

pub type EventSender = mpsc::Sender<Result<ApprovalEvent, Status>>;

struct Approver {
    name: String,
    events: EventSender,
}

struct Pending {
    question: ApprovalQuestion,
    answer: oneshot::Sender<Outcome>,
}

#[derive(Default)]
struct Inner {
    approvers: BTreeMap<u64, Approver>,
    pending: BTreeMap<String, Pending>,
    next_approver: u64,
}

pub struct Approvals {
    inner: Mutex<Inner>,
    timeout: Duration,
}

/// Queued events per approver; one that cannot keep up this far behind is dropped.
const APPROVER_QUEUE: usize = 256;

impl Approvals {
    pub fn new(timeout: Duration) -> Self {
        Self { inner: Mutex::default(), timeout }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers an approver; it is sent `watching`, then every open question.
    pub fn connect(&self, name: String) -> (u64, mpsc::Receiver<Result<ApprovalEvent, Status>>) {
        let (tx, rx) = mpsc::channel(APPROVER_QUEUE);
        let mut inner = self.lock();
        let id = inner.next_approver;
        inner.next_approver += 1;
        let _ = tx.try_send(Ok(event(Kind::Watching(ApprovalWatching { approver: name.clone() }))));
        for p in inner.pending.values() {
            let _ = tx.try_send(Ok(event(Kind::Question(p.question.clone()))));
        }
        inner.approvers.insert(id, Approver { name, events: tx });
        tracing::info!(approver = id, "approver connected");
        (id, rx)
    }

    /// An approver went away. Its open questions stay with the others; with no one
    /// left, every open question is denied.
    pub fn disconnect(&self, id: u64) {
        let mut inner = self.lock();
        let Some(gone) = inner.approvers.remove(&id) else { return };
        tracing::info!(approver = id, name = gone.name, "approver disconnected");
        if inner.approvers.is_empty() {
            for (_, p) in std::mem::take(&mut inner.pending) {
                let _ =
                    p.answer.send(Outcome::deny(format!("the approver ({}) disconnected before answering", gone.name)));
            }
        }
    }

    /// An approver's answer. The first answer to a question decides it; everyone is
    /// told. An answer to a question already decided (or unknown) changes nothing.
    /// An allow for longer than once is first made rules by `grant` (with the question
    /// still open, so that no other answer slips in between); when it cannot be, the
    /// answer is not taken, the approver is told why, and the question stays open.
    pub fn answer(
        &self,
        approver: u64,
        question_id: &str,
        answer: Answer,
        grant: impl FnOnce(&ApprovalQuestion, ApprovalScope, &str) -> Result<String, super::GrantError>,
    ) -> Result<(), AnswerError> {
        let Answer { decision, scope, note } = answer;
        if decision == Decision::Ask {
            return Err(AnswerError::Ask);
        }
        let mut inner = self.lock();
        let Some(name) = inner.approvers.get(&approver).map(|a| a.name.clone()) else {
            return Err(AnswerError::Unregistered);
        };
        let Some(question) = inner.pending.get(question_id).map(|p| p.question.clone()) else { return Ok(()) };
        let lasting = match (decision, scope) {
            (_, ApprovalScope::Once) => Ok(String::new()),
            (Decision::Deny, _) => Err(cc_policy::grants::NotGrantable::Refusal.into()),
            _ => grant(&question, scope, &name),
        }
        .map_err(|e| reject(&mut inner, approver, question_id, e))?;
        let Some(pending) = inner.pending.remove(question_id) else { return Ok(()) };
        let verb = if decision == Decision::Allow { "approved" } else { "refused" };
        let reason = if note.is_empty() {
            format!("{verb} by {name}{lasting}")
        } else {
            format!("{verb} by {name}{lasting}: {note}")
        };
        let outcome = Outcome { decision, reason, decided_by: name, unanswered: false, scope };
        let _ = pending.answer.send(outcome.clone());
        broadcast(&mut inner, resolved(question_id, &outcome));
        Ok(())
    }

    /// Puts a question to the approvers and waits for the first answer, the timeout,
    /// or the last approver leaving. If the asker goes away first, the question is
    /// withdrawn.
    pub async fn ask(&self, mut question: ApprovalQuestion) -> Outcome {
        let asked = unix_ms(question.ask_time.as_ref());
        question.expire_time = Some(timestamp(asked.saturating_add(self.timeout.as_millis() as i64)));
        let id = question.question_id.clone();
        let (tx, rx) = oneshot::channel();
        {
            let mut inner = self.lock();
            if inner.approvers.is_empty() {
                return Outcome::deny("no approver connected");
            }
            broadcast(&mut inner, event(Kind::Question(question.clone())));
            if inner.approvers.is_empty() {
                return Outcome::deny("no approver connected");
            }
            inner.pending.insert(id.clone(), Pending { question, answer: tx });
        }
        let _withdraw = Withdraw { approvals: self, id: &id };
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Outcome::deny("the question was withdrawn"),
            Err(_) => {
                let outcome = Outcome::deny(format!("no answer within {}", humantime::format_duration(self.timeout)));
                let mut inner = self.lock();
                if inner.pending.remove(&id).is_some() {
                    broadcast(&mut inner, resolved(&id, &outcome));
                }
                outcome
            }
        }
    }

    pub fn approver_count(&self) -> usize {
        self.lock().approvers.len()
    }
}

/// Removes a question whose asker stopped waiting (its call was cancelled).
struct Withdraw<'a> {
    approvals: &'a Approvals,
    id: &'a str,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let mut inner = self.approvals.lock();
        if inner.pending.remove(self.id).is_some() {
            let outcome = Outcome::deny("the asker went away");
            broadcast(&mut inner, resolved(self.id, &outcome));
        }
    }
}

fn event(kind: Kind) -> ApprovalEvent {
    ApprovalEvent { event: Some(kind) }
}

fn resolved(id: &str, outcome: &Outcome) -> ApprovalEvent {
    event(Kind::Resolved(ApprovalResolved {
        question_id: id.to_owned(),
        decision: super::wire::decision(outcome.decision) as i32,
        decided_by: outcome.decided_by.clone(),
        reason: outcome.reason.clone(),
        scope: super::wire::approval_scope(outcome.scope) as i32,
    }))
}

/// Tells the approver its answer was not taken, and why; the question stays open.
fn reject(inner: &mut Inner, approver: u64, question_id: &str, why: super::GrantError) -> AnswerError {
    if let Some(a) = inner.approvers.get(&approver) {
        let reason = why.to_string();
        let _ = a.events.try_send(Ok(event(Kind::Rejected(ApprovalAnswerRejected {
            question_id: question_id.to_owned(),
            reason,
        }))));
    }
    AnswerError::CannotLast(why)
}

/// Sends to every approver; one whose queue is closed or full is dropped (a full queue
/// means it stopped reading, and a question it never reads is no question).
fn broadcast(inner: &mut Inner, e: ApprovalEvent) {
    let mut gone = Vec::new();
    for (id, a) in &inner.approvers {
        if a.events.try_send(Ok(e.clone())).is_err() {
            gone.push(*id);
        }
    }
    for id in gone {
        inner.approvers.remove(&id);
    }
    if inner.approvers.is_empty() {
        for (_, p) in std::mem::take(&mut inner.pending) {
            let _ = p.answer.send(Outcome::deny("the approver stopped reading before answering"));
        }
    }
}

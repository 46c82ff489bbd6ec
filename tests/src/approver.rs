//! An approver speaking the gate's wire protocol directly: questions in, answers out.

use std::time::Duration;

use cc_proto::common::v1::Decision;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::watch_approvals_response::Event as Kind;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use crate::Supervisor;

pub struct Approver {
    answers: mpsc::Sender<pb::WatchApprovalsRequest>,
    events: tonic::Streaming<pb::WatchApprovalsResponse>,
}

impl Approver {
    /// Registers as `name`, and returns once the gate says it watches.
    pub async fn connect(sup: &Supervisor, name: &str) -> Self {
        let (answers, rx) = mpsc::channel(8);
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        request.metadata_mut().insert("x-cc-approver", name.parse().unwrap());
        let mut gate = cc_client::connect_gate(&sup.api_socket()).await.expect("connect");
        let mut events = gate.watch_approvals(request).await.expect("watch").into_inner();
        match Self::next(&mut events).await {
            Kind::Watching(w) => assert!(w.approver.starts_with(name), "{w:?}"),
            other => panic!("first event is not watching: {other:?}"),
        }
        Approver { answers, events }
    }

    async fn next(events: &mut tonic::Streaming<pb::WatchApprovalsResponse>) -> Kind {
        let e = tokio::time::timeout(Duration::from_secs(10), events.next()).await.expect("an approval event in time");
        e.expect("stream open").expect("event").event.expect("event kind")
    }

    pub async fn question(&mut self) -> pb::ApprovalQuestion {
        match Self::next(&mut self.events).await {
            Kind::Question(q) => q,
            other => panic!("expected a question, got {other:?}"),
        }
    }

    pub async fn resolved(&mut self) -> pb::ApprovalResolved {
        match Self::next(&mut self.events).await {
            Kind::Resolved(r) => r,
            other => panic!("expected a resolution, got {other:?}"),
        }
    }

    /// The gate's word that this approver's last answer was not taken.
    pub async fn rejected(&mut self) -> pb::ApprovalAnswerRejected {
        match Self::next(&mut self.events).await {
            Kind::Rejected(r) => r,
            other => panic!("expected the answer rejected, got {other:?}"),
        }
    }

    pub async fn answer(&self, id: &str, decision: Decision) {
        self.answer_for(id, decision, pb::ApprovalScope::Unspecified).await;
    }

    /// An answer that lasts `scope`.
    pub async fn answer_for(&self, id: &str, decision: Decision, scope: pb::ApprovalScope) {
        let answer = pb::WatchApprovalsRequest {
            question_id: id.into(),
            decision: decision as i32,
            note: String::new(),
            scope: scope as i32,
        };
        self.answers.send(answer).await.expect("send answer");
    }
}

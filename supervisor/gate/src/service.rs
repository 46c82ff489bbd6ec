//! The Gate service on the supervisor's socket.

use std::pin::Pin;
use std::sync::Arc;

use cc_policy::evaluate::default_summary;
use cc_policy::{Effect, grants, tools};
use cc_proto::auth::Caller;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::gate_server::Gate as GateRpc;
use futures::Stream;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::approvals::Answer;
use super::{Gate, GrantError, wire};

pub struct GateService {
    gate: Arc<Gate>,
    /// What `GetPolicy` shows of a workspace's network (the configuration's part and the
    /// workspaces' entries).
    network: NetworkLists,
}

/// A workspace's network lists, each entry with its source: (allowlist, always denied).
pub type NetworkLists = Arc<dyn Fn(&str) -> (Vec<(String, String)>, Vec<(String, String)>) + Send + Sync>;

impl GateService {
    pub fn new(gate: Arc<Gate>, network: NetworkLists) -> Self {
        Self { gate, network }
    }
}

/// The approver's name: what it calls itself (`x-cc-approver`), with its uid.
fn approver_name<T>(request: &Request<T>) -> String {
    let uid = request.extensions().get::<Caller>().map(|c| c.uid);
    let given = request
        .metadata()
        .get("x-cc-approver")
        .and_then(|v| v.to_str().ok())
        .map(|s| s.chars().filter(|c| !c.is_control()).take(64).collect::<String>())
        .filter(|s| !s.is_empty());
    match (given, uid) {
        (Some(name), Some(uid)) => format!("{name} (uid {uid})"),
        (Some(name), None) => name,
        (None, Some(uid)) => format!("uid {uid}"),
        (None, None) => "an approver".into(),
    }
}

type ApprovalStream = Pin<Box<dyn Stream<Item = Result<pb::WatchApprovalsResponse, Status>> + Send>>;

#[tonic::async_trait]
impl GateRpc for GateService {
    async fn decide_action(
        &self,
        request: Request<pb::DecideActionRequest>,
    ) -> Result<Response<pb::DecideActionResponse>, Status> {
        let req = wire::request_from(request.into_inner().action)?;
        let decided = self.gate.decide(req).await;
        Ok(Response::new(pb::DecideActionResponse {
            decision: wire::decision(decided.decision) as i32,
            reason: decided.reason,
            verdict: Some(wire::verdict(&decided.evaluation)),
            decided_by: decided.decided_by,
        }))
    }

    async fn check_command(
        &self,
        request: Request<pb::CheckCommandRequest>,
    ) -> Result<Response<pb::CheckCommandResponse>, Status> {
        let r = request.into_inner();
        if r.command_line.is_empty() {
            return Err(Status::invalid_argument("a command line is required"));
        }
        let action = pb::Action {
            effects: vec![wire::effect(Effect::RunCommand) as i32],
            mode: r.mode,
            tool: "bash".into(),
            command_line: r.command_line,
            workspace_id: r.workspace_id,
            ..Default::default()
        };
        let req = wire::request_from(Some(action))?;
        let evaluation = self.gate.evaluate(&req.action, &req.workspace);
        Ok(Response::new(pb::CheckCommandResponse { verdict: Some(wire::verdict(&evaluation)) }))
    }

    async fn get_policy(
        &self,
        request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        let workspace = request.into_inner().workspace_id;
        let in_force = self.gate.rules();
        let rules = in_force.sets(&workspace).into_iter().flat_map(|set| set.rules.iter()).map(policy_rule).collect();
        let defaults = Effect::ALL
            .iter()
            .map(|e| {
                let (decision, description) = default_summary(*e);
                pb::DefaultDecision {
                    effect: wire::effect(*e) as i32,
                    decision: wire::decision(decision) as i32,
                    description,
                }
            })
            .collect();
        let (allow, deny) = (self.network)(if workspace.is_empty() { "default" } else { &workspace });
        let entries = |list: Vec<(String, String)>| {
            list.into_iter().map(|(entry, source)| pb::NetworkEntry { entry, source }).collect()
        };
        Ok(Response::new(pb::GetPolicyResponse {
            rules,
            defaults,
            approval_timeout_ms: self.gate.approvals.timeout().as_millis() as u64,
            network_allowlist: entries(allow),
            network_always_denied: entries(deny),
        }))
    }

    async fn list_tools(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let r = request.into_inner();
        let mode = wire::mode_from(r.mode)?;
        let present = tools::registry(mode, r.egress);
        let tools = present
            .iter()
            .map(|t| pb::ToolInfo {
                name: t.name.into(),
                effects: t.effects.iter().map(|e| wire::effect(*e) as i32).collect(),
                summary: t.summary.into(),
                mutates: t.mutates(),
            })
            .collect();
        let absent = tools::TOOLS
            .iter()
            .filter(|t| !present.iter().any(|p| p.name == t.name))
            .map(|t| match tools::lookup(t.name, mode, r.egress) {
                Err(why) => format!("{}: {why}", t.name),
                Ok(_) => t.name.to_owned(),
            })
            .collect();
        Ok(Response::new(pb::ListToolsResponse { tools, absent }))
    }

    type WatchApprovalsStream = ApprovalStream;

    async fn watch_approvals(
        &self,
        request: Request<Streaming<pb::WatchApprovalsRequest>>,
    ) -> Result<Response<Self::WatchApprovalsStream>, Status> {
        let name = approver_name(&request);
        let mut answers = request.into_inner();
        let (id, events) = self.gate.approvals.connect(name);
        let gate = self.gate.clone();
        tokio::spawn(async move {
            // The approver is registered for as long as its stream of answers lasts.
            while let Some(next) = answers.next().await {
                let Ok(answer) = next else { break };
                let outcome = wire::decision_from(answer.decision)
                    .and_then(|d| Ok((d, wire::approval_scope_from(answer.scope)?)))
                    .map_err(|e| e.message().to_owned())
                    .and_then(|(decision, scope)| {
                        let answer_is = Answer { decision, scope, note: answer.note.clone() };
                        gate.answer(id, &answer.question_id, answer_is).map_err(|e| e.to_string())
                    });
                if let Err(why) = outcome {
                    tracing::warn!(approver = id, question = answer.question_id, why, "an answer was refused");
                }
            }
            gate.approvals.disconnect(id);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(events))))
    }

    async fn list_approval_rules(
        &self,
        _request: Request<pb::ListApprovalRulesRequest>,
    ) -> Result<Response<pb::ListApprovalRulesResponse>, Status> {
        let in_force = self.gate.rules();
        let (text, set) = in_force.approved();
        let approval_rules = grants::blocks(text)
            .into_iter()
            .map(|b| pb::ApprovalRule {
                rules: b.rules(set).into_iter().map(policy_rule).collect(),
                approval_rule_id: b.id,
                granted: b.granted,
            })
            .collect();
        let file = in_force.approved_file().display().to_string();
        Ok(Response::new(pb::ListApprovalRulesResponse { approval_rules, file }))
    }

    async fn delete_approval_rule(
        &self,
        request: Request<pb::DeleteApprovalRuleRequest>,
    ) -> Result<Response<pb::DeleteApprovalRuleResponse>, Status> {
        let id = request.into_inner().approval_rule_id;
        match self.gate.revoke(&id) {
            Ok(()) => Ok(Response::new(pb::DeleteApprovalRuleResponse {})),
            Err(e @ GrantError::Unknown(_)) => Err(Status::not_found(e.to_string())),
            Err(e) => Err(Status::failed_precondition(e.to_string())),
        }
    }
}

fn policy_rule(r: &cc_policy::Rule) -> pb::PolicyRule {
    pb::PolicyRule {
        effect: wire::effect(r.effect) as i32,
        decision: wire::decision(r.decision) as i32,
        reason: r.reason.clone().unwrap_or_default(),
        scope: r.scopes().into_iter().map(|(key, value)| pb::ScopeEntry { key: key.into(), value }).collect(),
        source: r.source.clone(),
    }
}

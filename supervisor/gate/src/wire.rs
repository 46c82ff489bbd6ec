//! Conversions between the gate's own types and the wire's. A value the wire can
//! carry but the gate does not know (an effect class from a newer client) is an
//! error, never a silent default.

use cc_policy::command::CommandVerdict;
use cc_policy::evaluate::EffectVerdict;
use cc_policy::grants::ApprovalScope;
use cc_policy::{Action, Decision, Effect, Evaluation, Mode, Scope};
use cc_proto::common::v1 as common;
use cc_proto::supervisor::v1 as pb;
use tonic::Status;

use super::Request;

pub fn effect(e: Effect) -> common::EffectClass {
    use common::EffectClass as W;
    match e {
        Effect::WriteFile => W::WriteFile,
        Effect::DeleteFile => W::DeleteFile,
        Effect::RunCommand => W::RunCommand,
        Effect::CreateCommit => W::CreateCommit,
        Effect::PushRemote => W::PushRemote,
        Effect::OpenPullRequest => W::OpenPullRequest,
        Effect::PublishReviewOrMerge => W::PublishReviewOrMerge,
        Effect::WriteExternalTracker => W::WriteExternalTracker,
        Effect::InstallPackage => W::InstallPackage,
        Effect::PublishPackage => W::PublishPackage,
        Effect::AccessNetwork => W::AccessNetwork,
    }
}

pub fn effect_from(raw: i32) -> Result<Effect, Status> {
    let known = common::EffectClass::try_from(raw).ok();
    Effect::ALL
        .into_iter()
        .find(|e| Some(effect(*e)) == known)
        .ok_or_else(|| Status::invalid_argument(format!("unknown effect class {raw}")))
}

pub fn decision(d: Decision) -> common::Decision {
    match d {
        Decision::Allow => common::Decision::Allow,
        Decision::Ask => common::Decision::Ask,
        Decision::Deny => common::Decision::Deny,
    }
}

pub fn decision_from(raw: i32) -> Result<Decision, Status> {
    match common::Decision::try_from(raw) {
        Ok(common::Decision::Allow) => Ok(Decision::Allow),
        Ok(common::Decision::Ask) => Ok(Decision::Ask),
        Ok(common::Decision::Deny) => Ok(Decision::Deny),
        _ => Err(Status::invalid_argument(format!("a decision is allow or deny, not {raw}"))),
    }
}

pub fn approval_scope(s: ApprovalScope) -> pb::ApprovalScope {
    match s {
        ApprovalScope::Once => pb::ApprovalScope::Once,
        ApprovalScope::Run => pb::ApprovalScope::Run,
        ApprovalScope::Always => pb::ApprovalScope::Always,
    }
}

/// Unspecified is once: an answer from a client that predates scopes lasts as it did.
pub fn approval_scope_from(raw: i32) -> Result<ApprovalScope, Status> {
    match pb::ApprovalScope::try_from(raw) {
        Ok(pb::ApprovalScope::Unspecified | pb::ApprovalScope::Once) => Ok(ApprovalScope::Once),
        Ok(pb::ApprovalScope::Run) => Ok(ApprovalScope::Run),
        Ok(pb::ApprovalScope::Always) => Ok(ApprovalScope::Always),
        Err(_) => Err(Status::invalid_argument(format!("unknown approval scope {raw}: once, run or always"))),
    }
}

pub fn mode(m: Mode) -> common::Mode {
    match m {
        Mode::Chat => common::Mode::Chat,
        Mode::Plan => common::Mode::Plan,
        Mode::Review => common::Mode::Review,
        Mode::Orchestrate => common::Mode::Orchestrate,
    }
}

/// Unspecified is chat, the mode a run has unless it says otherwise.
pub fn mode_from(raw: i32) -> Result<Mode, Status> {
    match common::Mode::try_from(raw) {
        Ok(common::Mode::Unspecified | common::Mode::Chat) => Ok(Mode::Chat),
        Ok(common::Mode::Plan) => Ok(Mode::Plan),
        Ok(common::Mode::Review) => Ok(Mode::Review),
        Ok(common::Mode::Orchestrate) => Ok(Mode::Orchestrate),
        Err(_) => Err(Status::invalid_argument(format!("unknown mode {raw}"))),
    }
}

/// Unspecified is the harness; a value this build does not know is refused.
pub fn adapter_from(raw: i32) -> Result<cc_proto::common::v1::Adapter, Status> {
    use cc_proto::common::v1::Adapter;
    Adapter::from_wire(raw).ok_or_else(|| {
        Status::invalid_argument(format!(
            "unknown adapter {raw}: the adapters are {} (`ccctl adapters`)",
            Adapter::listed()
        ))
    })
}

/// The longest command line the gate takes; the classifier treats longer ones as
/// opaque, and the wire refuses what no agent would type.
const MAX_COMMAND_LINE: usize = 256 * 1024;

pub fn request_from(action: Option<pb::Action>) -> Result<Request, Status> {
    let a = action.ok_or_else(|| Status::invalid_argument("an action is required"))?;
    if a.command_line.len() > MAX_COMMAND_LINE {
        return Err(Status::invalid_argument(format!("the command line is over {MAX_COMMAND_LINE} bytes")));
    }
    let scope = a.scope.unwrap_or_default();
    let effects = a.effects.iter().map(|e| effect_from(*e)).collect::<Result<_, _>>()?;
    let action = Action {
        effects,
        mode: mode_from(a.mode)?,
        tool: (!a.tool.is_empty()).then_some(a.tool),
        command_line: (!a.command_line.is_empty()).then_some(a.command_line),
        egress: a.egress,
        // A client's DecideAction judges what it describes, words and all.
        pushes_through_gateway: false,
        scope: Scope {
            repo: (!scope.repository_name.is_empty()).then_some(scope.repository_name),
            refs: scope.refs,
            refs_unknown: scope.refs_unknown,
            paths: scope.paths,
            domains: scope.domains,
            default_branch: (!scope.default_branch.is_empty()).then_some(scope.default_branch),
            force: scope.force,
            delete: scope.delete,
        },
    };
    Ok(Request { action, workspace: a.workspace_id, run_id: a.run_id, summary: a.summary })
}

pub fn action(request: &Request) -> pb::Action {
    let a = &request.action;
    pb::Action {
        effects: a.effects.iter().map(|e| effect(*e) as i32).collect(),
        scope: Some(pb::ActionScope {
            repository_name: a.scope.repo.clone().unwrap_or_default(),
            refs: a.scope.refs.clone(),
            refs_unknown: a.scope.refs_unknown,
            paths: a.scope.paths.clone(),
            domains: a.scope.domains.clone(),
            default_branch: a.scope.default_branch.clone().unwrap_or_default(),
            force: a.scope.force,
            delete: a.scope.delete,
        }),
        mode: mode(a.mode) as i32,
        tool: a.tool.clone().unwrap_or_default(),
        command_line: a.command_line.clone().unwrap_or_default(),
        workspace_id: request.workspace.clone(),
        run_id: request.run_id.clone(),
        summary: request.summary.clone(),
        egress: a.egress,
    }
}

fn effect_verdict(v: &EffectVerdict) -> pb::EffectDecision {
    pb::EffectDecision {
        effect: effect(v.effect) as i32,
        decision: decision(v.decision) as i32,
        source: v.source.clone(),
        reason: v.reason.clone(),
    }
}

fn commands(c: &CommandVerdict) -> Vec<pb::CommandPart> {
    c.parts
        .iter()
        .map(|p| pb::CommandPart {
            argv: p.part.argv.clone(),
            classes: p.part.effective_classes().iter().map(|c| c.as_str().to_owned()).collect(),
            effects: p.part.effects.iter().map(|e| effect(*e) as i32).collect(),
            decision: decision(p.decision) as i32,
            reason: p.reason.clone(),
            via: p.part.via.iter().map(|v| (*v).to_owned()).collect(),
        })
        .collect()
}

pub fn verdict(e: &Evaluation) -> pb::Verdict {
    pb::Verdict {
        decision: decision(e.decision) as i32,
        reason: e.reason.clone(),
        source: e.source.clone(),
        effects: e.effects.iter().map(effect_verdict).collect(),
        commands: e.command.as_ref().map(commands).unwrap_or_default(),
    }
}

static NEXT_QUESTION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub fn question(request: &Request, evaluation: &Evaluation) -> pb::ApprovalQuestion {
    let n = NEXT_QUESTION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    pb::ApprovalQuestion {
        question_id: format!("q{n}"),
        action: Some(action(request)),
        verdict: Some(verdict(evaluation)),
        ask_time: Some(cc_proto::time::timestamp(cc_proto::helper::unix_ms(std::time::SystemTime::now()))),
        // Set when the question is put (Approvals::ask), from the configured timeout.
        expire_time: None,
    }
}

//! `ccctl approvals`: answer the gate's questions, once, for a run or always, and list
//! and revoke what was approved always.

use std::collections::VecDeque;
use std::io::Write;

use anyhow::{Context, anyhow, bail};
use cc_proto::common::v1 as common;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::watch_approvals_response::Event as Kind;
use clap::Subcommand;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::gate::{decision_name, effects};
use super::render::one_line;
use super::rpc_error;

type GateClient = pb::gate_client::GateClient<Channel>;

#[derive(Subcommand)]
pub enum ApprovalsAction {
    /// Answer the gate's questions as they come (interactively, or with --answer)
    Watch {
        /// Answer every question this way, without asking
        #[arg(long, value_parser = ["allow", "deny"])]
        answer: Option<String>,
        /// Stop after answering this many questions
        #[arg(long)]
        count: Option<u64>,
        /// The name the gate records for this approver [default: ccctl pid <pid>]
        #[arg(long)]
        name: Option<String>,
        /// A note recorded with every answer
        #[arg(long, default_value = "")]
        note: String,
        /// How long --answer allow lasts: this question, every same question of the run,
        /// or always (a rule in the approved rules file)
        #[arg(long, value_parser = ["once", "run", "always"], default_value = "once")]
        scope: String,
    },
    /// What was approved always, each with who approved it, when and from which question
    Rules {
        /// Revoke this approval (its id, as listed): its rules stop deciding at once
        #[arg(long)]
        revoke: Option<String>,
    },
}

/// One answer: allow (for how long) or deny.
#[derive(Clone, Copy)]
struct Answer {
    decision: common::Decision,
    scope: pb::ApprovalScope,
}

impl Answer {
    fn reply(self, question_id: &str, note: &str) -> pb::WatchApprovalsRequest {
        pb::WatchApprovalsRequest {
            question_id: question_id.to_owned(),
            decision: self.decision as i32,
            note: note.to_owned(),
            scope: self.scope as i32,
        }
    }

    /// What a person typed at the prompt; `None` for anything else.
    fn typed(line: &str) -> Option<Answer> {
        let allow = |scope| Some(Answer { decision: common::Decision::Allow, scope });
        match line.trim() {
            "y" | "yes" | "allow" | "once" => allow(pb::ApprovalScope::Once),
            "r" | "run" => allow(pb::ApprovalScope::Run),
            "a" | "always" => allow(pb::ApprovalScope::Always),
            "n" | "no" | "deny" | "" => {
                Some(Answer { decision: common::Decision::Deny, scope: pb::ApprovalScope::Once })
            }
            _ => None,
        }
    }
}

fn scope_from(name: &str) -> pb::ApprovalScope {
    match name {
        "run" => pb::ApprovalScope::Run,
        "always" => pb::ApprovalScope::Always,
        _ => pb::ApprovalScope::Once,
    }
}

pub async fn approvals(gate: GateClient, action: ApprovalsAction, json: bool) -> anyhow::Result<()> {
    match action {
        ApprovalsAction::Watch { answer, count, name, note, scope } => {
            let fixed = match (answer.as_deref(), scope.as_str()) {
                (Some("deny"), "run" | "always") => {
                    bail!("--scope is for --answer allow: a refusal is for its question only")
                }
                (Some("deny"), _) => Some(Answer { decision: common::Decision::Deny, scope: pb::ApprovalScope::Once }),
                (Some(_), s) => Some(Answer { decision: common::Decision::Allow, scope: scope_from(s) }),
                (None, "once") => None,
                (None, _) => bail!("--scope goes with --answer allow; at the prompt, answer r (run) or a (always)"),
            };
            watch(gate, fixed, count, name, note, json).await
        }
        ApprovalsAction::Rules { revoke } => rules(gate, revoke, json).await,
    }
}

async fn watch(
    mut gate: GateClient,
    fixed: Option<Answer>,
    count: Option<u64>,
    name: Option<String>,
    note: String,
    json: bool,
) -> anyhow::Result<()> {
    let name = name.unwrap_or_else(|| format!("ccctl pid {}", std::process::id()));
    let (answers, outbound) = tokio::sync::mpsc::channel::<pb::WatchApprovalsRequest>(16);
    let mut request = tonic::Request::new(ReceiverStream::new(outbound));
    let header = name.parse().context("the approver name must be printable ASCII")?;
    request.metadata_mut().insert("x-cc-approver", header);
    let mut events = gate.watch_approvals(request).await.map_err(rpc_error)?.into_inner();
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut waiting: VecDeque<pb::ApprovalQuestion> = VecDeque::new();
    // Counted when the gate confirms: leaving before that could lose the answer.
    let mut answered = 0u64;
    let mut sent: Vec<pb::ApprovalQuestion> = Vec::new();
    let mut stdin_open = true;
    loop {
        if count.is_some_and(|c| answered >= c) {
            return Ok(());
        }
        let prompting = fixed.is_none() && stdin_open && !waiting.is_empty();
        tokio::select! {
            event = events.next() => {
                let event = match event {
                    None => bail!("the supervisor ended the approval stream"),
                    Some(e) => e.map_err(rpc_error)?,
                };
                match event.event {
                    Some(Kind::Watching(w)) => say(json, json!({ "watching": w.approver }), &format!("watching for approvals as {}", w.approver)),
                    Some(Kind::Question(q)) => {
                        say(json, question_json(&q), &question_text(&q));
                        match fixed {
                            Some(answer) => {
                                answers.send(answer.reply(&q.question_id, &note)).await.map_err(|_| anyhow!("the approval stream closed"))?;
                                sent.push(q);
                            }
                            None => {
                                waiting.push_back(q);
                                if waiting.len() == 1 { prompt() }
                            }
                        }
                    }
                    Some(Kind::Resolved(r)) => {
                        let decision = decision_name(r.decision);
                        say(json, json!({ "resolved": r.question_id, "decision": decision, "decided_by": r.decided_by, "reason": r.reason }),
                            &format!("{}: {decision} ({})", r.question_id, one_line(&r.reason)));
                        if let Some(pos) = sent.iter().position(|q| q.question_id == r.question_id) {
                            sent.remove(pos);
                            answered += 1;
                        }
                        let was_first = waiting.front().is_some_and(|q| q.question_id == r.question_id);
                        waiting.retain(|q| q.question_id != r.question_id);
                        if was_first && !waiting.is_empty() { prompt() }
                    }
                    Some(Kind::Rejected(r)) => {
                        say(json, json!({ "rejected": r.question_id, "reason": r.reason }),
                            &format!("{}: answer not taken: {}", r.question_id, one_line(&r.reason)));
                        // The question is still open: at the prompt, it is asked again.
                        if let Some(pos) = sent.iter().position(|q| q.question_id == r.question_id) {
                            let q = sent.remove(pos);
                            if fixed.is_none() {
                                waiting.push_front(q);
                                prompt();
                            }
                        }
                    }
                    None => {}
                }
            }
            line = stdin.next_line(), if prompting => {
                let Some(q) = waiting.front().cloned() else { continue };
                let answer = match line.context("cannot read the answer")? {
                    None => { stdin_open = false; continue }
                    Some(l) => match Answer::typed(&l) {
                        Some(a) => a,
                        None => { prompt(); continue }
                    },
                };
                answers.send(answer.reply(&q.question_id, &note)).await.map_err(|_| anyhow!("the approval stream closed"))?;
                sent.push(q);
                waiting.pop_front();
                if !waiting.is_empty() { prompt() }
            }
        }
    }
}

fn prompt() {
    print!("allow? [y]es once, for this [r]un, [a]lways, or [N]o: ");
    let _ = std::io::stdout().flush();
}

fn say(json: bool, value: Value, text: &str) {
    if json {
        println!("{value}");
    } else {
        println!("{}", one_line(text));
    }
    let _ = std::io::stdout().flush();
}

fn question_text(q: &pb::ApprovalQuestion) -> String {
    let a = q.action.clone().unwrap_or_default();
    let what = if !a.summary.is_empty() {
        a.summary.clone()
    } else if !a.command_line.is_empty() {
        a.command_line.clone()
    } else {
        effects(&a.effects).join(", ")
    };
    let why = q.verdict.as_ref().map(|v| v.reason.clone()).unwrap_or_default();
    let run = if a.run_id.is_empty() { String::new() } else { format!(" run {}", a.run_id) };
    format!("{}{run}: {what} ({why})", q.question_id)
}

fn question_json(q: &pb::ApprovalQuestion) -> Value {
    let a = q.action.clone().unwrap_or_default();
    json!({
        "question": q.question_id,
        "run": a.run_id,
        "tool": a.tool,
        "summary": a.summary,
        "command_line": a.command_line,
        "effects": effects(&a.effects),
        "reason": q.verdict.as_ref().map(|v| v.reason.clone()),
        "deadline": super::render::json_time(q.expire_time.as_ref()),
    })
}

async fn rules(mut gate: GateClient, revoke: Option<String>, json: bool) -> anyhow::Result<()> {
    if let Some(id) = revoke {
        let request = pb::DeleteApprovalRuleRequest { approval_rule_id: id.clone() };
        gate.delete_approval_rule(request).await.map_err(rpc_error)?;
        say(json, json!({ "revoked": id }), &format!("revoked {id}: its rules no longer decide"));
        return Ok(());
    }
    let list = gate.list_approval_rules(pb::ListApprovalRulesRequest {}).await.map_err(rpc_error)?.into_inner();
    let rule_line = |r: &pb::PolicyRule| {
        let scope: Vec<String> = r.scope.iter().map(|s| format!("{}={}", s.key, s.value)).collect();
        format!("{} {} {}", decision_name(r.decision), effects(&[r.effect])[0], scope.join(" "))
    };
    if json {
        let approvals: Vec<Value> = list
            .approval_rules
            .iter()
            .map(|a| json!({ "id": a.approval_rule_id, "granted": a.granted, "rules": a.rules.iter().map(rule_line).collect::<Vec<_>>() }))
            .collect();
        println!("{}", json!({ "file": list.file, "approvals": approvals }));
        return Ok(());
    }
    if list.approval_rules.is_empty() {
        println!("no approval was answered always (they would be written to {})", list.file);
        return Ok(());
    }
    println!("approved always, in {} (revoke with --revoke ID):", list.file);
    for a in &list.approval_rules {
        println!("{:<4} {}", a.approval_rule_id, one_line(&a.granted));
        for r in &a.rules {
            println!("       {}", rule_line(r));
        }
    }
    Ok(())
}

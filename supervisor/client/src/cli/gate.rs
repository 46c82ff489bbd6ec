//! `ccctl policy`, `ccctl approvals` and `ccctl tools`: the gate, from a terminal.

use std::collections::VecDeque;
use std::io::Write;

use anyhow::{Context, anyhow, bail};
use cc_proto::common::v1 as common;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::watch_approvals_response::Event as Kind;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::render::one_line;
use super::rpc_error;

type GateClient = pb::gate_client::GateClient<Channel>;

#[derive(Clone, Copy, ValueEnum)]
pub enum ModeArg {
    Chat,
    Plan,
    Review,
    Orchestrate,
}

impl ModeArg {
    pub(crate) fn wire(self) -> i32 {
        (match self {
            ModeArg::Chat => common::Mode::Chat,
            ModeArg::Plan => common::Mode::Plan,
            ModeArg::Review => common::Mode::Review,
            ModeArg::Orchestrate => common::Mode::Orchestrate,
        }) as i32
    }
}

#[derive(Subcommand)]
pub enum PolicyAction {
    /// The effective rules, each with the file and line it came from, and the defaults
    Show {
        /// Include this workspace's rules
        #[arg(long, default_value = "")]
        workspace: String,
    },
    /// What the gate would decide for a command line (exit 0 whatever the decision)
    Check {
        #[arg(long, value_enum, default_value = "chat")]
        mode: ModeArg,
        #[arg(long, default_value = "")]
        workspace: String,
        /// The command line (several words are joined with spaces)
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

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
    },
}

#[derive(Args)]
pub struct ToolsArgs {
    #[arg(long, value_enum, default_value = "chat")]
    mode: ModeArg,
    /// As for a run with an egress proxy
    #[arg(long)]
    egress: bool,
}

pub async fn policy(mut gate: GateClient, action: PolicyAction, json: bool) -> anyhow::Result<()> {
    match action {
        PolicyAction::Show { workspace } => {
            let p = gate
                .get_policy(pb::GetPolicyRequest { workspace_id: workspace })
                .await
                .map_err(rpc_error)?
                .into_inner();
            show_policy(&p, json);
        }
        PolicyAction::Check { mode, workspace, command } => {
            let command_line = command.join(" ");
            let request = pb::CheckCommandRequest { command_line, mode: mode.wire(), workspace_id: workspace };
            let reply = gate.check_command(request).await.map_err(rpc_error)?.into_inner();
            let verdict = reply.verdict.ok_or_else(|| anyhow!("the supervisor sent no verdict"))?;
            show_verdict(&verdict, json);
        }
    }
    Ok(())
}

pub async fn tools(mut gate: GateClient, args: ToolsArgs, json: bool) -> anyhow::Result<()> {
    let request = pb::ListToolsRequest { mode: args.mode.wire(), egress: args.egress };
    let list = gate.list_tools(request).await.map_err(rpc_error)?.into_inner();
    if json {
        let tools: Vec<Value> = list
            .tools
            .iter()
            .map(|t| json!({ "name": t.name, "effects": effects(&t.effects), "summary": t.summary, "mutates": t.mutates }))
            .collect();
        println!("{}", json!({ "tools": tools, "absent": list.absent }));
        return Ok(());
    }
    for t in &list.tools {
        let classes = effects(&t.effects).join(",");
        println!("{:<13} {:<24} {}", t.name, if classes.is_empty() { "-" } else { &classes }, t.summary);
    }
    for a in &list.absent {
        println!("absent: {}", one_line(a));
    }
    Ok(())
}

pub async fn approvals(mut gate: GateClient, action: ApprovalsAction, json: bool) -> anyhow::Result<()> {
    let ApprovalsAction::Watch { answer, count, name, note } = action;
    let fixed = answer.map(|a| if a == "allow" { common::Decision::Allow } else { common::Decision::Deny });
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
    let mut sent: Vec<String> = Vec::new();
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
                            Some(decision) => {
                                let reply = pb::WatchApprovalsRequest { question_id: q.question_id.clone(), decision: decision as i32, note: note.clone() };
                                answers.send(reply).await.map_err(|_| anyhow!("the approval stream closed"))?;
                                sent.push(q.question_id.clone());
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
                        if let Some(pos) = sent.iter().position(|id| *id == r.question_id) {
                            sent.remove(pos);
                            answered += 1;
                        }
                        let was_first = waiting.front().is_some_and(|q| q.question_id == r.question_id);
                        waiting.retain(|q| q.question_id != r.question_id);
                        if was_first && !waiting.is_empty() { prompt() }
                    }
                    None => {}
                }
            }
            line = stdin.next_line(), if prompting => {
                let Some(q) = waiting.front().cloned() else { continue };
                let decision = match line.context("cannot read the answer")? {
                    None => { stdin_open = false; continue }
                    Some(l) if matches!(l.trim(), "y" | "yes" | "allow") => common::Decision::Allow,
                    Some(l) if matches!(l.trim(), "n" | "no" | "deny" | "") => common::Decision::Deny,
                    Some(_) => { prompt(); continue }
                };
                let reply = pb::WatchApprovalsRequest { question_id: q.question_id.clone(), decision: decision as i32, note: note.clone() };
                answers.send(reply).await.map_err(|_| anyhow!("the approval stream closed"))?;
                sent.push(q.question_id.clone());
                waiting.pop_front();
                if !waiting.is_empty() { prompt() }
            }
        }
    }
}

fn prompt() {
    print!("allow? [y/N] ");
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

fn effects(list: &[i32]) -> Vec<String> {
    list.iter()
        .map(|e| match common::EffectClass::try_from(*e) {
            Ok(c) => c.as_str_name().trim_start_matches("EFFECT_CLASS_").to_ascii_lowercase(),
            Err(_) => format!("unknown({e})"),
        })
        .collect()
}

fn decision_name(d: i32) -> &'static str {
    match common::Decision::try_from(d) {
        Ok(common::Decision::Allow) => "allow",
        Ok(common::Decision::Ask) => "ask",
        Ok(common::Decision::Deny) => "deny",
        _ => "unknown",
    }
}

fn show_verdict(v: &pb::Verdict, json: bool) {
    if json {
        let commands: Vec<Value> = v
            .commands
            .iter()
            .map(|c| {
                json!({
                    "argv": c.argv,
                    "classes": c.classes,
                    "effects": effects(&c.effects),
                    "decision": decision_name(c.decision),
                    "reason": c.reason,
                    "via": c.via,
                })
            })
            .collect();
        let effect_list: Vec<Value> = v
            .effects
            .iter()
            .map(|e| json!({ "effect": effects(&[e.effect])[0], "decision": decision_name(e.decision), "source": e.source, "reason": e.reason }))
            .collect();
        println!(
            "{}",
            json!({ "decision": decision_name(v.decision), "reason": v.reason, "source": v.source, "commands": commands, "effects": effect_list })
        );
        return;
    }
    println!("{}", decision_name(v.decision));
    println!("reason: {} [{}]", one_line(&v.reason), v.source);
    for c in &v.commands {
        let via = if c.via.is_empty() { String::new() } else { format!(" (in {})", c.via.join(" > ")) };
        println!("  {:<5} {}{via}", decision_name(c.decision), super::render::shell_words(&c.argv));
        println!("        classes: {}; effects: {}", c.classes.join(", "), effects(&c.effects).join(", "));
        println!("        {}", one_line(&c.reason));
    }
    for e in &v.effects {
        println!(
            "  {:<5} effect {} [{}]: {}",
            decision_name(e.decision),
            effects(&[e.effect])[0],
            e.source,
            one_line(&e.reason)
        );
    }
}

fn show_policy(p: &pb::GetPolicyResponse, json: bool) {
    if json {
        let rules: Vec<Value> = p
            .rules
            .iter()
            .map(|r| {
                let scope: serde_json::Map<String, Value> = r.scope.iter().map(|s| (s.key.clone(), json!(s.value))).collect();
                json!({ "effect": effects(&[r.effect])[0], "decision": decision_name(r.decision), "reason": r.reason, "scope": scope, "source": r.source })
            })
            .collect();
        let defaults: Vec<Value> = p
            .defaults
            .iter()
            .map(|d| {
                json!({ "effect": effects(&[d.effect])[0], "decision": decision_name(d.decision), "description": d.description })
            })
            .collect();
        let entries = |list: &[pb::NetworkEntry]| -> Vec<Value> {
            list.iter().map(|e| json!({ "entry": e.entry, "source": e.source })).collect()
        };
        println!(
            "{}",
            json!({
                "rules": rules,
                "defaults": defaults,
                "approval_timeout_ms": p.approval_timeout_ms,
                "network_allowlist": entries(&p.network_allowlist),
                "network_always_denied": entries(&p.network_always_denied),
            })
        );
        return;
    }
    if p.rules.is_empty() {
        println!("rules: none (the defaults below apply)");
    } else {
        println!("rules (every matching rule counts; deny > ask > allow):");
    }
    for r in &p.rules {
        let scope: Vec<String> = r.scope.iter().map(|s| format!("{}={}", s.key, s.value)).collect();
        let reason = if r.reason.is_empty() { String::new() } else { format!(" — {}", r.reason) };
        let (decision, effect) = (decision_name(r.decision), &effects(&[r.effect])[0]);
        println!("  {decision:<5} {effect:<24} {:<28} {}{reason}", scope.join(" "), r.source);
    }
    println!("defaults (when no rule matches):");
    for d in &p.defaults {
        println!("  {:<5} {:<24} {}", decision_name(d.decision), effects(&[d.effect])[0], d.description);
    }
    println!("an unanswered question is denied after {} ms", p.approval_timeout_ms);
    println!("network allowlist (runs with --network on; each new host also asks access_network):");
    for e in &p.network_allowlist {
        println!("  {:<40} {}", e.entry, e.source);
    }
    println!("always denied (beats the allowlist):");
    for e in &p.network_always_denied {
        println!("  {:<40} {}", e.entry, e.source);
    }
}

//! `ccctl policy` and `ccctl tools`: the gate, from a terminal.

use anyhow::anyhow;
use cc_proto::common::v1 as common;
use cc_proto::supervisor::v1 as pb;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};
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

pub(super) fn effects(list: &[i32]) -> Vec<String> {
    list.iter()
        .map(|e| match common::EffectClass::try_from(*e) {
            Ok(c) => c.as_str_name().trim_start_matches("EFFECT_CLASS_").to_ascii_lowercase(),
            Err(_) => format!("unknown({e})"),
        })
        .collect()
}

pub(super) fn decision_name(d: i32) -> &'static str {
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

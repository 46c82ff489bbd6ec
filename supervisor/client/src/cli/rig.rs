//! `ccctl rig start|exec|list|stop`: microVMs that stay up for a conversation.

use std::io::Write;

use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::exec_rig_response::Event;
use cc_proto::supervisor::v1::rigs_client::RigsClient;
use clap::Subcommand;
use serde_json::json;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

use super::{ExitWith, rpc_error};

#[derive(Subcommand)]
pub enum RigAction {
    /// Boot a rig for a conversation and print its name (seconds under emulation)
    Start {
        #[arg(long)]
        conversation: String,
        /// MiB of memory [default: 512, never over the run's limit]
        #[arg(long, default_value_t = 0)]
        memory: u32,
        /// vCPUs [default: 1]
        #[arg(long, default_value_t = 0)]
        cpus: u32,
        /// The run's network, through its egress proxy (its allowlist and gate)
        #[arg(long, default_value = "off", value_parser = ["on", "off"])]
        network: String,
    },
    /// Run a command line in a rig, gated as bash is; exits with its status
    Exec {
        name: String,
        /// Seconds before it is killed [default: the bash tool's]
        #[arg(long, default_value_t = 0)]
        timeout: u32,
        /// The command line, run by the guest's /bin/sh -c
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// List the rigs
    List,
    /// Stop a rig (its VM and its run)
    Stop { name: String },
}

fn rig_json(r: &pb::Rig) -> serde_json::Value {
    json!({
        "name": r.name,
        "conversation_id": r.conversation_id,
        "run_id": r.run_id,
        "running": r.running,
        "ended_reason": (!r.ended_reason.is_empty()).then_some(&r.ended_reason),
        "memory_mib": r.memory_mib,
        "cpus": r.cpus,
        "boot_ms": r.boot_ms,
        "accel": r.accel,
        "mounts": r.mounts,
        "qemu_pid": (r.qemu_pid != 0).then_some(r.qemu_pid),
        "network": r.network,
    })
}

fn show(rigs: &[pb::Rig], json: bool) {
    if json {
        println!("{}", serde_json::Value::Array(rigs.iter().map(rig_json).collect()));
        return;
    }
    println!("{:<20}{:<20}{:<10}{:<8}{:<6}{:<10}ACCEL", "NAME", "CONVERSATION", "STATE", "MIB", "CPUS", "BOOT");
    for r in rigs {
        let state = if r.running { "running".to_owned() } else { "ended".to_owned() };
        println!(
            "{:<20}{:<20}{:<10}{:<8}{:<6}{:<10}{}",
            r.name,
            r.conversation_id,
            state,
            r.memory_mib,
            r.cpus,
            format!("{} ms", r.boot_ms),
            r.accel
        );
    }
}

pub async fn rig(mut client: RigsClient<Channel>, action: RigAction, json: bool) -> anyhow::Result<()> {
    match action {
        RigAction::Start { conversation, memory, cpus, network } => {
            let network = network == "on";
            let request = pb::StartRigRequest { conversation_id: conversation, memory_mib: memory, cpus, network };
            let rig = client.start_rig(request).await.map_err(rpc_error)?.into_inner().rig.unwrap_or_default();
            if json {
                println!("{}", rig_json(&rig));
            } else {
                println!("{}", rig.name);
                eprintln!("ccctl: booted in {} ms ({}); shared in: {}", rig.boot_ms, rig.accel, rig.mounts.join(", "));
            }
        }
        RigAction::Exec { name, timeout, command } => {
            let request = pb::ExecRigRequest { name, command_line: command.join(" "), timeout_seconds: timeout };
            // A denial is the gate's, as for `ccctl tool`: exit 125.
            let mut events = client.exec_rig(request).await.map_err(super::runs::tool_error)?.into_inner();
            let (mut stdout, mut stderr) = (std::io::stdout().lock(), std::io::stderr().lock());
            while let Some(event) = events.next().await {
                match event.map_err(rpc_error)?.event {
                    Some(Event::Stdout(b)) => {
                        stdout.write_all(&b)?;
                        stdout.flush()?;
                    }
                    Some(Event::Stderr(b)) => stderr.write_all(&b)?,
                    Some(Event::Exit(exit)) => {
                        if exit.timed_out {
                            return Err(ExitWith::error(
                                super::runs::EXIT_TIMED_OUT,
                                "the command timed out in the rig",
                            ));
                        }
                        return match (exit.code, exit.signal) {
                            (Some(0), _) => Ok(()),
                            (Some(code), _) => Err(ExitWith::silent(code.clamp(1, 255) as u8)),
                            (None, Some(signal)) => {
                                Err(ExitWith::silent((128i64 + i64::from(signal)).clamp(1, 255) as u8))
                            }
                            (None, None) => Err(ExitWith::error(1, "the rig's VM ended under the command")),
                        };
                    }
                    None => {}
                }
            }
            return Err(ExitWith::error(1, "the rig's stream ended without the command's exit"));
        }
        RigAction::List => {
            let rigs = client.list_rigs(pb::ListRigsRequest {}).await.map_err(rpc_error)?.into_inner().rigs;
            show(&rigs, json);
        }
        RigAction::Stop { name } => {
            let rig = client.stop_rig(pb::StopRigRequest { name }).await.map_err(rpc_error)?.into_inner().rig;
            show(&rig.into_iter().collect::<Vec<_>>(), json);
        }
    }
    Ok(())
}

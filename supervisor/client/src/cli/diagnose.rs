//! `ccctl diagnose [RUN]`: the checks a person can verify by hand, each with its result
//! and the command that verifies it. Without a run: the host (the backend, and which
//! layers reach each adapter). With one: the same, then probes inside the run's own
//! envelope (its harness bash, which the run's policy builds as every launch of it):
//! a write outside its roots, a write to a registered checkout, its environment, its
//! network and allowlist, its git remotes, and the layers of its adapter.
//!
//! The probes are the run's tool calls: the gate judges them and they appear in the
//! run's events like any other.

use std::fmt::Write as _;

use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::call_tool_request::Tool;
use cc_proto::supervisor::v1::call_tool_response::Event;
use serde_json::json;
use tokio_stream::StreamExt;

use super::ExitWith;
use super::render::one_line;
use crate::Client;

/// Names that look like a secret in an environment.
const SECRET_LOOKING: &[&str] =
    &["TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "APIKEY", "PRIVATE_KEY", "CREDENTIAL"];

struct Check {
    ok: bool,
    what: String,
    found: String,
    verify: String,
}

/// A bash call in the run's envelope: (exit code, stdout and stderr together), or the
/// gate's refusal as text.
async fn probe(client: &mut Client, run: &str, command: &str) -> Result<(Option<i32>, String), String> {
    let tool = Tool::Bash(pb::BashArgs { command: command.to_owned(), timeout_seconds: 30 });
    let request = pb::CallToolRequest { run_id: run.to_owned(), tool: Some(tool) };
    let mut stream = client.runs.call_tool(request).await.map_err(|s| s.message().to_owned())?.into_inner();
    let (mut out, mut code) = (Vec::new(), None);
    while let Some(event) = stream.next().await {
        match event.map_err(|s| s.message().to_owned())?.event {
            Some(Event::Stdout(b)) | Some(Event::Stderr(b)) => out.extend_from_slice(&b),
            Some(Event::Exit(e)) => code = e.code,
            _ => {}
        }
    }
    Ok((code, String::from_utf8_lossy(&out).into_owned()))
}

fn verify(run: &str, command: &str) -> String {
    format!("ccctl tool {run} bash -- {}", shlex::try_quote(command).map(|c| c.into_owned()).unwrap_or_default())
}

/// The part of a probe's output worth a line.
fn gist(text: &str) -> String {
    one_line(&text.lines().take(3).collect::<Vec<_>>().join(" / ")).chars().take(200).collect()
}

/// A write that must fail: the probe's own refusal, a denial, or a failed command.
async fn must_not_write(client: &mut Client, run: &str, what: &str, path: &str) -> Check {
    let command = format!("touch {}", shlex::try_quote(path).map(|c| c.into_owned()).unwrap_or_default());
    let (ok, found) = match probe(client, run, &command).await {
        Err(refused) => (true, format!("refused before it ran: {}", gist(&refused))),
        Ok((Some(0), _)) => {
            let _ = probe(client, run, &format!("rm -f {}", shlex::try_quote(path).unwrap_or_default())).await;
            (false, "the write succeeded (the file was removed again)".to_owned())
        }
        Ok((_, out)) => (true, format!("failed: {}", gist(&out))),
    };
    Check { ok, what: what.to_owned(), found, verify: verify(run, &command) }
}

pub async fn diagnose(mut client: Client, run: Option<String>, json: bool) -> anyhow::Result<()> {
    let probe_result = client.sandbox.get_probe(pb::GetProbeRequest {}).await.map_err(super::rpc_error)?.into_inner();
    let native = probe_result.backend == cc_proto::common::v1::SandboxBackend::Native as i32;
    let mut checks = vec![Check {
        ok: native,
        what: "sandbox backend".into(),
        found: format!(
            "{} ({}); limits {}",
            if native { "native" } else { "none: commands run without an OS sandbox" },
            probe_result.detail,
            probe_result.limits
        ),
        verify: "ccctl sandbox probe".into(),
    }];
    let matrix = client.sandbox.list_adapters(pb::ListAdaptersRequest {}).await.map_err(super::rpc_error)?.into_inner();
    let layers_of = |adapter: i32| -> String {
        matrix
            .adapters
            .iter()
            .find(|a| a.adapter == adapter)
            .map(|a| {
                a.layers
                    .iter()
                    .map(|l| {
                        let word = match pb::Coverage::try_from(l.coverage) {
                            Ok(pb::Coverage::Yes) => "yes",
                            Ok(pb::Coverage::Partial) => "partial",
                            _ => "no",
                        };
                        format!("{} {word}", l.layer)
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_else(|| "unknown adapter".into())
    };

    if let Some(run_id) = &run {
        let got = client.runs.get_run(pb::GetRunRequest { run_id: run_id.clone() }).await.map_err(super::rpc_error)?;
        let r = got.into_inner().run.unwrap_or_default();
        let conversations = client
            .conversations
            .list_conversations(pb::ListConversationsRequest { workspace_id: String::new() })
            .await
            .map_err(super::rpc_error)?
            .into_inner()
            .conversations;
        let checkouts: Vec<String> = conversations
            .iter()
            .filter(|c| c.conversation_id == r.conversation_id)
            .flat_map(|c| c.repositories.iter().map(|repo| String::from_utf8_lossy(&repo.source_resolved).into_owned()))
            .collect();

        checks.push(
            must_not_write(&mut client, run_id, "a write outside the run's roots fails", "/opt/cc-diagnose").await,
        );
        for checkout in &checkouts {
            let what = format!("the registered checkout {checkout} is not writable");
            checks.push(must_not_write(&mut client, run_id, &what, &format!("{checkout}/.cc-diagnose")).await);
        }

        let env_command = "env";
        let (ok, found) = match probe(&mut client, run_id, env_command).await {
            Err(refused) => (false, format!("could not look: {}", gist(&refused))),
            Ok((_, out)) => {
                let names: Vec<&str> = out.lines().filter_map(|l| l.split_once('=').map(|(k, _)| k)).collect();
                // The proxy variables carry a credential only for a run without an envelope.
                let secret: Vec<&str> = names
                    .iter()
                    .copied()
                    .filter(|n| SECRET_LOOKING.iter().any(|s| n.to_ascii_uppercase().contains(s)))
                    .collect();
                if secret.is_empty() {
                    (true, format!("{} variables, none named like a secret", names.len()))
                } else {
                    (false, format!("variables named like secrets: {}", secret.join(", ")))
                }
            }
        };
        checks.push(Check { ok, what: "the environment is clean".into(), found, verify: verify(run_id, env_command) });

        let policy = client
            .gate
            .get_policy(pb::GetPolicyRequest { workspace_id: r.workspace_id.clone() })
            .await
            .map_err(super::rpc_error)?
            .into_inner();
        let allowlist: Vec<String> = policy.network_allowlist.iter().map(|e| e.entry.clone()).collect();
        let net_command = "curl -s -o /dev/null -w '%{http_code}' -m 10 http://cc-diagnose.invalid/";
        let (ok, found) = match probe(&mut client, run_id, net_command).await {
            // The proxy was never reached: nothing was checked, so it is no pass.
            Err(refused) => (
                false,
                format!(
                    "not checked: the gate refused the probe before it ran ({}); keep `ccctl approvals watch` running, or allow curl by a rule, and diagnose again",
                    gist(&refused)
                ),
            ),
            Ok((_, out)) => {
                let code = out.trim();
                let state = if r.network { "on" } else { "off" };
                let shown: Vec<&str> = allowlist.iter().take(8).map(String::as_str).collect();
                let more = allowlist.len().saturating_sub(shown.len());
                let list = format!(
                    "{}{}",
                    shown.join(", "),
                    if more > 0 { format!(" and {more} more") } else { String::new() }
                );
                (
                    code == "403" || (!native && !r.network),
                    format!(
                        "network {state}; a name off the allowlist gets {code} from the run's proxy; allowlist: {list}"
                    ),
                )
            }
        };
        checks.push(Check {
            ok,
            what: "the network goes through the run's proxy and its allowlist".into(),
            found,
            verify: format!("{}; ccctl policy show --workspace {}", verify(run_id, net_command), r.workspace_id),
        });

        let git_command = "git config --global --list";
        let (ok, found) = match probe(&mut client, run_id, git_command).await {
            Err(refused) => (false, format!("could not look: {}", gist(&refused))),
            Ok((_, out)) => {
                let gateway = format!("127.0.0.1:{}", r.git_gateway_port);
                let rewritten = out.lines().filter(|l| l.contains(".insteadof=") && l.contains(&gateway)).count();
                (
                    rewritten > 0,
                    format!("{rewritten} GitHub spellings go to the gateway at 127.0.0.1:{}", r.git_gateway_port),
                )
            }
        };
        checks.push(Check {
            ok,
            what: "git remotes are rewritten to the gateway".into(),
            found,
            verify: verify(run_id, git_command),
        });

        if !r.forwards.is_empty() {
            let ports: Vec<String> = r.forwards.iter().map(|p| format!("127.0.0.1:{p}")).collect();
            checks.push(Check {
                ok: true,
                what: "host forwards: these host ports, and no other, are reachable inside".into(),
                found: format!("{} (each the same port on the host)", ports.join(", ")),
                verify: format!("ccctl run show {run_id}; ccctl run events {run_id} | grep forward_connection"),
            });
        }
        checks.push(Check {
            ok: true,
            what: format!("the layers that reach adapter {}", super::words::adapter_name(r.adapter)),
            found: layers_of(r.adapter),
            verify: "ccctl adapters".into(),
        });
    } else {
        for adapter in &matrix.adapters {
            checks.push(Check {
                ok: true,
                what: format!("the layers that reach adapter {}", super::words::adapter_name(adapter.adapter)),
                found: layers_of(adapter.adapter),
                verify: "ccctl adapters".into(),
            });
        }
    }

    let failed = checks.iter().filter(|c| !c.ok).count();
    if json {
        let all: Vec<serde_json::Value> = checks
            .iter()
            .map(|c| json!({ "ok": c.ok, "check": c.what, "found": c.found, "verify": c.verify }))
            .collect();
        println!("{}", json!({ "run": run, "checks": all, "failed": failed }));
    } else {
        let mut out = String::new();
        for c in &checks {
            let _ = writeln!(out, "{}  {}: {}", if c.ok { "ok  " } else { "FAIL" }, c.what, one_line(&c.found));
            let _ = writeln!(out, "      verify: {}", c.verify);
        }
        if run.is_none() {
            let _ = writeln!(out, "(give a run's id for the checks inside its envelope: ccctl diagnose RUN)");
        }
        print!("{out}");
    }
    if failed > 0 {
        return Err(ExitWith::error(1, &format!("{failed} check{} failed", if failed == 1 { "" } else { "s" })));
    }
    Ok(())
}

//! A run's host forwards: host loopback ports (a database on the host's localhost)
//! bridged into the run's envelopes at the same port, served by the gateway
//! (`forward-PORT.sock`, see `cc_gateway::door::forward`). Asked for per run
//! (`ccctl run start --forward PORT`) and per workspace (`[runs.forwards]`), and
//! decided once, at the run's start: each port must be allowed by an `access_network`
//! rule for `localhost:PORT` (or `localhost`) without asking anyone, and none may be on
//! the always-deny list. Off unless configured: with no rule, `access_network` asks,
//! and a forward that would ask is refused.

use cc_policy::egress::allowlist::Entry;
use cc_policy::egress::host::Host;
use cc_policy::{Action, Decision, Effect, Mode, Scope};

use super::{RunError, RunManager, egress};

/// The most forwards one run may have.
pub const MAX_FORWARDS: usize = 16;

/// The gate's question for one forward: network access to `localhost:PORT`.
pub fn action(port: u16, mode: Mode) -> Action {
    Action {
        effects: [Effect::AccessNetwork].into(),
        scope: Scope { domains: vec![format!("localhost:{port}")], ..Scope::default() },
        mode,
        ..Action::default()
    }
}

/// The first always-deny entry that names `localhost:PORT` (or `127.0.0.1:PORT`).
fn always_denied(denied: &[(String, String)], port: u16) -> Option<String> {
    let hosts = [Host::Name("localhost".into()), Host::Ip(std::net::Ipv4Addr::LOCALHOST.into())];
    denied.iter().find_map(|(text, source)| {
        let entry = Entry::parse(text, source).ok()?;
        hosts.iter().any(|h| entry.matches(h, port)).then(|| format!("{text} ({source})"))
    })
}

impl RunManager {
    /// The run's forwards, decided: the ports it asked for and its workspace's, each
    /// checked. Any refusal refuses the start, naming the port and why.
    pub(super) fn decide_forwards(
        &self,
        asked: &[u32],
        workspace: &str,
        mode: Mode,
        enveloped: bool,
    ) -> Result<Vec<u16>, RunError> {
        let config = self.config();
        let configured = config.forwards.get(workspace).map(Vec::as_slice).unwrap_or_default();
        let mut ports: Vec<u32> = asked.iter().copied().chain(configured.iter().map(|p| u32::from(*p))).collect();
        ports.sort_unstable();
        ports.dedup();
        if ports.is_empty() {
            return Ok(Vec::new());
        }
        if !enveloped {
            return Err(RunError::Precondition(
                "a run without an envelope already reaches the host's loopback; forwards are for runs in one".into(),
            ));
        }
        if ports.len() > MAX_FORWARDS {
            return Err(RunError::BadRequest(format!(
                "{} forwards; a run may have at most {MAX_FORWARDS}",
                ports.len()
            )));
        }
        let denied = egress::always_denied(&self.egress());
        let mut decided = Vec::with_capacity(ports.len());
        for port in ports {
            if let Some(why) = cc_config::forward_refusal(port) {
                return Err(RunError::BadRequest(format!("--forward {port}: {why}")));
            }
            let port = port as u16;
            if let Some(entry) = always_denied(&denied, port) {
                return Err(RunError::Precondition(format!(
                    "localhost:{port} is never forwarded: the always-deny list names it, {entry}"
                )));
            }
            let evaluation = self.gate().evaluate(&action(port, mode), workspace);
            if evaluation.decision != Decision::Allow {
                return Err(RunError::Precondition(format!(
                    "localhost:{port} is not forwarded: the gate says {} ({}); a rule allowing access_network for \
                     domain \"localhost:{port}\" turns it on",
                    evaluation.decision.as_str(),
                    evaluation.reason
                )));
            }
            decided.push(port);
        }
        Ok(decided)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_always_deny_list_can_name_a_forwarded_port() {
        let denied = vec![
            ("localhost:22".to_owned(), "config".to_owned()),
            ("127.0.0.1:2375".to_owned(), "config".to_owned()),
            ("metadata.google.internal".to_owned(), "built in".to_owned()),
        ];
        assert_eq!(always_denied(&denied, 22).as_deref(), Some("localhost:22 (config)"));
        assert_eq!(always_denied(&denied, 2375).as_deref(), Some("127.0.0.1:2375 (config)"));
        assert_eq!(always_denied(&denied, 5432), None);
        let all = vec![("localhost".to_owned(), "config".to_owned())];
        assert!(always_denied(&all, 5432).is_some());
    }
}

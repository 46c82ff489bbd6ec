//! An agent's own tool calls, asked before they run by its PreToolUse hook (cc-hook,
//! through the run's agent socket and the gateway). Claude Code's Bash becomes the
//! harness's `bash` (the command policy and the rules judge its command line), its
//! Write, Edit, MultiEdit and NotebookEdit the harness's `write` and `edit` (path
//! rules and the mode judge the file they name). The product's own MCP tools ask
//! their gates themselves when called; every other tool is denied, since no rule
//! could have been written for it.

use cc_proto::agent::v1::ToolUse;
use cc_proto::agent::v1::tool_use::Input;
use cc_proto::common::v1::Decision;
use std::path::Path;

use super::RunError;
use super::tools::ToolCalls;
use super::tools::{Described, gate_path};
use crate::ids::RunId;

/// The run's agent socket, in its gateway directory beside the git door.
pub const AGENT_SOCKET: &str = "agent.sock";
/// Where the agent socket is bridged inside the run's envelopes: `127.0.0.1:41419`.
pub const AGENT_PORT: u16 = 41419;

/// The product's MCP server's name in the agent's MCP config: its tools are
/// `mcp__cc__<tool>` to the agent.
pub const MCP_SERVER_NAME: &str = "cc";

/// What a hooked call is to the gate.
#[derive(Debug, PartialEq, Eq)]
pub enum Hooked {
    /// Judged as this harness call.
    Gate(Described),
    /// One of the product's MCP tools: it asks its own gate when it runs.
    OwnTool,
    /// Denied before anyone is asked, for this reason.
    Refused(String),
}

/// How the gate sees `tool_use` in a run whose working directory is `work_dir`. The
/// agent's JSON was read by cc-hook inside the envelope; here only its typed fields.
pub fn describe(tool_use: &ToolUse, work_dir: &Path) -> Hooked {
    let name = tool_use.tool_name.as_str();
    let file = |tool: &'static str, field: &str| match &tool_use.input {
        Some(Input::Path(path)) if !path.is_empty() => Hooked::Gate(Described {
            tool,
            paths: vec![gate_path(path, work_dir)],
            command_line: None,
            domains: vec![],
        }),
        _ => Hooked::Refused(format!("the {name} call names no {field}")),
    };
    match name {
        "Bash" => match &tool_use.input {
            Some(Input::Command(command)) => Hooked::Gate(Described {
                tool: "bash",
                paths: vec![],
                command_line: Some(command.clone()),
                domains: vec![],
            }),
            _ => Hooked::Refused("the Bash call has no command".into()),
        },
        "Write" => file("write", "file_path"),
        "Edit" | "MultiEdit" => file("edit", "file_path"),
        "NotebookEdit" => file("edit", "notebook_path"),
        name if name
            .strip_prefix("mcp__")
            .and_then(|rest| rest.strip_prefix(MCP_SERVER_NAME))
            .is_some_and(|rest| rest.starts_with("__")) =>
        {
            Hooked::OwnTool
        }
        name if name.starts_with("mcp__") => {
            Hooked::Refused(format!("{name} is not one of Control Center's MCP tools, the only ones this run may use"))
        }
        name => Hooked::Refused(format!("Control Center has no rule for the {name} tool; denied")),
    }
}

impl ToolCalls {
    /// The gate's answer to one of the agent's tool calls: allow or deny, with the
    /// reason the agent is shown. Only a run that is not live is an error.
    pub async fn decide_tool_use(&self, run_id: &RunId, tool_use: &ToolUse) -> Result<(Decision, String), RunError> {
        let run = self.runs.require_live(run_id)?;
        let described = match describe(tool_use, &run.record.work_dir) {
            Hooked::Gate(described) => described,
            Hooked::OwnTool => return Ok((Decision::Allow, "a Control Center tool: it asks its own gate".into())),
            Hooked::Refused(why) => return Ok((Decision::Deny, format!("Control Center: {why}"))),
        };
        match self.ask_gate(&run, &described, true).await {
            Ok(()) => Ok((Decision::Allow, "allowed by Control Center".into())),
            Err(RunError::GateDenied { for_agent, .. } | RunError::NoApprover { for_agent, .. }) => {
                Ok((Decision::Deny, for_agent))
            }
            Err(e @ (RunError::NotFound(_) | RunError::Ended { .. })) => Err(e),
            Err(e) => Ok((Decision::Deny, format!("Control Center could not decide ({e}); denied"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, input: Option<Input>) -> ToolUse {
        ToolUse { tool_name: name.into(), input, ..Default::default() }
    }

    fn command(line: &str) -> Option<Input> {
        Some(Input::Command(line.into()))
    }

    fn path(path: &str) -> Option<Input> {
        Some(Input::Path(path.into()))
    }

    fn gate(tool: &'static str, paths: &[&str], command: Option<&str>) -> Hooked {
        Hooked::Gate(Described {
            tool,
            paths: paths.iter().map(|p| (*p).to_owned()).collect(),
            command_line: command.map(str::to_owned),
            domains: vec![],
        })
    }

    #[test]
    fn claude_codes_tools_become_the_harness_calls_the_rules_are_written_for() {
        let work = Path::new("/w/run");
        assert_eq!(
            describe(&call("Bash", command("git push origin main")), work),
            gate("bash", &[], Some("git push origin main"))
        );
        assert_eq!(describe(&call("Write", path("/w/run/secret/k")), work), gate("write", &["secret/k"], None));
        assert_eq!(describe(&call("Edit", path("/w/run/./a/../secret/k")), work), gate("edit", &["secret/k"], None));
        assert_eq!(describe(&call("MultiEdit", path("src/x.rs")), work), gate("edit", &["src/x.rs"], None));
        assert_eq!(describe(&call("NotebookEdit", path("/w/run/n.ipynb")), work), gate("edit", &["n.ipynb"], None));
        // Outside the working directory a path stays absolute: no relative rule can be
        // matched by accident.
        assert_eq!(describe(&call("Write", path("/etc/passwd")), work), gate("write", &["/etc/passwd"], None));
    }

    #[test]
    fn only_the_products_own_mcp_tools_pass_the_hook_to_ask_their_gates() {
        let work = Path::new("/w");
        assert_eq!(describe(&call("mcp__cc__create_ticket", None), work), Hooked::OwnTool);
        for other in ["mcp__ccx__create_ticket", "mcp__evil__run", "mcp__cc", "mcp__"] {
            assert!(matches!(describe(&call(other, None), work), Hooked::Refused(_)), "{other}");
        }
    }

    #[test]
    fn anything_unreadable_or_unknown_is_denied() {
        let work = Path::new("/w");
        for (name, input) in [
            ("Bash", None),
            ("Bash", path("ls")),
            ("Write", None),
            ("Write", path("")),
            ("Write", command("ls")),
            ("NotebookEdit", None),
            ("WebFetch", None),
            ("Task", None),
        ] {
            assert!(matches!(describe(&call(name, input.clone()), work), Hooked::Refused(_)), "{name} {input:?}");
        }
    }
}

//! cc-hook: Claude Code's PreToolUse hook. It reads the hook's JSON on stdin, asks the
//! run's gate through the run's agent socket (`cc.agent.v1.AgentGate`), and answers
//! allow or deny in the hook's own JSON.
//!
//! Claude Code runs a tool whose hook times out, fails to start or answers nonsense,
//! so this hook fails closed by itself: any failure (unreadable input, an unreachable
//! socket, no answer before its own deadline) is a deny, given as exit status 2 with
//! the reason on stderr, which Claude Code treats as a blocking error. The deadline is
//! kept by a thread of its own, so even a hung runtime answers deny in time.
//!
//! Pure here: reading the input and writing the answer. The binary (`src/bin/cc-hook.rs`)
//! does the I/O.

use cc_proto::agent::v1::ToolUse;
use cc_proto::agent::v1::tool_use::Input;
use serde_json::{Value, json};

/// The most the hook reads on stdin: a Write's content, with room.
pub const MAX_INPUT_BYTES: usize = 1 << 20;
/// The exit status Claude Code treats as "block this call, stderr says why".
pub const BLOCK: u8 = 2;

/// Why the hook could not even ask.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InputError {
    #[error("the hook's input is not JSON: {0}")]
    NotJson(String),
    #[error("the hook's input has no {0}")]
    Missing(&'static str),
    #[error("the hook was called for {0:?}, not PreToolUse")]
    NotPreToolUse(String),
    #[error("the hook's input is over {MAX_INPUT_BYTES} bytes")]
    TooLong,
}

/// The question in Claude Code's hook input: `tool_name`, `tool_input`, `cwd`,
/// `permission_mode`, `hook_event_name`.
pub fn tool_use(input: &[u8]) -> Result<ToolUse, InputError> {
    if input.len() > MAX_INPUT_BYTES {
        return Err(InputError::TooLong);
    }
    let value: Value = serde_json::from_slice(input).map_err(|e| InputError::NotJson(e.to_string()))?;
    let text = |field: &str| value.get(field).and_then(Value::as_str).map(str::to_owned);
    if let Some(event) = text("hook_event_name")
        && event != "PreToolUse"
    {
        return Err(InputError::NotPreToolUse(event.chars().take(64).collect()));
    }
    let tool_name = text("tool_name").filter(|n| !n.is_empty()).ok_or(InputError::Missing("tool_name"))?;
    let tool_input = value.get("tool_input").filter(|v| v.is_object()).ok_or(InputError::Missing("tool_input"))?;
    let input_text = |field: &str| tool_input.get(field).and_then(Value::as_str).map(str::to_owned);
    // Only what the gate judges leaves the envelope; the rest of the agent's JSON
    // stays here (trust rule 8).
    let input = match tool_name.as_str() {
        "Bash" => input_text("command").map(Input::Command),
        "Write" | "Edit" | "MultiEdit" => input_text("file_path").map(Input::Path),
        "NotebookEdit" => input_text("notebook_path").map(Input::Path),
        _ => None,
    };
    Ok(ToolUse {
        tool_name,
        input,
        cwd: text("cwd").unwrap_or_default(),
        permission_mode: text("permission_mode").unwrap_or_default(),
    })
}

/// The hook's answer on stdout, for a decision the gate made.
pub fn answer(allowed: bool, reason: &str) -> String {
    json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": if allowed { "allow" } else { "deny" },
            "permissionDecisionReason": reason,
        }
    })
    .to_string()
}

/// The one line on stderr when the hook blocks a call by itself.
pub fn blocked(why: &str) -> String {
    let why: String = why.chars().map(|c| if c.is_control() { ' ' } else { c }).take(1000).collect();
    format!("Control Center blocked this call: {why}")
}

/// Where the agent socket is: `http://127.0.0.1:PORT` inside an envelope (the bridge),
/// or `unix:PATH` for a run without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Tcp(String),
    Unix(std::path::PathBuf),
}

impl std::str::FromStr for Address {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            return Ok(Address::Unix(path.into()));
        }
        if s.starts_with("http://127.0.0.1:") && s["http://127.0.0.1:".len()..].parse::<u16>().is_ok() {
            return Ok(Address::Tcp(s.to_owned()));
        }
        Err(format!("{s:?} is neither unix:PATH nor http://127.0.0.1:PORT"))
    }
}

/// A client of the run's agent socket at `address`.
pub async fn agent_client(
    address: &Address,
) -> Result<cc_proto::agent::v1::agent_gate_client::AgentGateClient<tonic::transport::Channel>, String> {
    let channel = match address {
        Address::Tcp(url) => tonic::transport::Endpoint::from_shared(url.clone())
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| format!("cannot reach the run's agent socket at {url}: {e}"))?,
        Address::Unix(path) => cc_proto::client::connect(path).await.map_err(|e| e.to_string())?,
    };
    Ok(cc_proto::agent::v1::agent_gate_client::AgentGateClient::new(channel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_codes_hook_input_becomes_the_question() {
        let input = br#"{"session_id":"s","transcript_path":"/t","cwd":"/w","permission_mode":"bypassPermissions",
            "hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"git push origin main","description":"push"}}"#;
        let asked = tool_use(input).unwrap();
        assert_eq!(asked.tool_name, "Bash");
        assert_eq!(asked.cwd, "/w");
        assert_eq!(asked.permission_mode, "bypassPermissions");
        assert_eq!(asked.input, Some(Input::Command("git push origin main".into())));
        // Only what the gate judges leaves the envelope.
        let ask = |name: &str, input: &str| {
            let hook = format!(r#"{{"tool_name":"{name}","tool_input":{input}}}"#);
            tool_use(hook.as_bytes()).unwrap().input
        };
        assert_eq!(ask("Write", r#"{"file_path":"a","content":"x"}"#), Some(Input::Path("a".into())));
        assert_eq!(ask("MultiEdit", r#"{"file_path":"b","edits":[]}"#), Some(Input::Path("b".into())));
        assert_eq!(ask("NotebookEdit", r#"{"notebook_path":"n.ipynb"}"#), Some(Input::Path("n.ipynb".into())));
        assert_eq!(ask("Bash", r#"{"command":7}"#), None);
        assert_eq!(ask("Write", r#"{"path":"a"}"#), None);
        assert_eq!(ask("WebFetch", r#"{"url":"http://x"}"#), None);
        assert_eq!(ask("mcp__cc__create_ticket", r#"{"title":"t"}"#), None);
    }

    #[test]
    fn unreadable_input_is_an_error_never_a_question() {
        assert!(matches!(tool_use(b""), Err(InputError::NotJson(_))));
        assert!(matches!(tool_use(b"{"), Err(InputError::NotJson(_))));
        assert_eq!(tool_use(br#"{"tool_input":{}}"#), Err(InputError::Missing("tool_name")));
        assert_eq!(tool_use(br#"{"tool_name":"","tool_input":{}}"#), Err(InputError::Missing("tool_name")));
        assert_eq!(tool_use(br#"{"tool_name":"Bash"}"#), Err(InputError::Missing("tool_input")));
        assert_eq!(tool_use(br#"{"tool_name":"Bash","tool_input":"ls"}"#), Err(InputError::Missing("tool_input")));
        assert!(matches!(
            tool_use(br#"{"hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{}}"#),
            Err(InputError::NotPreToolUse(_))
        ));
        assert_eq!(tool_use(&vec![b' '; MAX_INPUT_BYTES + 1]), Err(InputError::TooLong));
    }

    #[test]
    fn answers_are_claude_codes_hook_output() {
        let out: Value = serde_json::from_str(&answer(false, "Control Center policy: no pushes")).unwrap();
        assert_eq!(out["hookSpecificOutput"]["hookEventName"], "PreToolUse");
        assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "deny");
        assert_eq!(out["hookSpecificOutput"]["permissionDecisionReason"], "Control Center policy: no pushes");
        let out: Value = serde_json::from_str(&answer(true, "ok")).unwrap();
        assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "allow");
        assert_eq!(blocked("a\nb"), "Control Center blocked this call: a b");
    }

    #[test]
    fn only_loopback_or_a_unix_socket_is_an_address() {
        assert_eq!("http://127.0.0.1:41419".parse(), Ok(Address::Tcp("http://127.0.0.1:41419".into())));
        assert_eq!("unix:/d/agent.sock".parse(), Ok(Address::Unix("/d/agent.sock".into())));
        for bad in ["http://example.com:80", "http://127.0.0.1:", "http://127.0.0.1:99999", "/d/agent.sock", ""] {
            assert!(bad.parse::<Address>().is_err(), "{bad}");
        }
    }
}

//! The claude-code adapter's pure parts: the settings and MCP config written into the
//! agent's config directory (read-only inside the envelope) and the CLI's command
//! line. Its stream-json output is the agent's, and is read by the run's own process
//! (`cc-runner`'s `adapters::claude_code`), never here.
//!
//! What reaches Claude Code's own tool calls, honestly: its Read, Write and Edit run
//! inside the CLI and are seen only through the PreToolUse hook registered here (for
//! Write, Edit, MultiEdit and NotebookEdit; reads are not hooked) and, around
//! everything, the envelope. Its Bash calls are asked of the gate by the hook before
//! they run, and run in the same envelope.

use serde_json::{Value, json};

/// Where sandboxd shows cc-hook inside the overlay envelope.
pub const HOOK_INSIDE: &str = "/run/cc/hook";
/// The settings file's name in the agent's config directory.
pub const SETTINGS_FILE: &str = "claude-settings.json";
/// The MCP config's.
pub const MCP_CONFIG_FILE: &str = "claude-mcp.json";
/// What the hook matches: Bash (the command policy), the file-writing tools (path
/// rules and modes) and every MCP tool (only the product's own pass).
pub const HOOKED: &[&str] = &["Bash", "Write|Edit|MultiEdit|NotebookEdit", "mcp__.*"];

/// The hook's own deadline, and the timeout Claude Code is told, which is later: the
/// hook answers deny itself before Claude Code would give up on it and run the tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookTiming {
    pub deadline_ms: u64,
    pub timeout_seconds: u64,
}

impl HookTiming {
    /// An ask may wait for an approver for `approval_timeout_ms`: the hook waits that
    /// long and 10 s more, and Claude Code 10 s more again.
    pub fn for_approvals(approval_timeout_ms: u64) -> Self {
        let deadline_ms = approval_timeout_ms + 10_000;
        Self { deadline_ms, timeout_seconds: deadline_ms.div_ceil(1000) + 10 }
    }
}

/// Where the agent's CLI finds cc-hook and cc-mcp, and how they reach the run's agent
/// socket: inside the envelope at fixed paths through the bridge, or on the host
/// (claude-code-nosandbox) at their installed paths, on the socket itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Helpers {
    pub hook: String,
    pub mcp: String,
    /// `--agent` for both; `None`: their default, the envelope's bridge.
    pub agent: Option<String>,
}

impl Helpers {
    pub fn enveloped() -> Self {
        Self { hook: HOOK_INSIDE.into(), mcp: MCP_INSIDE.into(), agent: None }
    }

    pub fn on_host(hook: &std::path::Path, mcp: &std::path::Path, agent_socket: &std::path::Path) -> Self {
        Self {
            hook: hook.to_string_lossy().into_owned(),
            mcp: mcp.to_string_lossy().into_owned(),
            agent: Some(format!("unix:{}", agent_socket.to_string_lossy())),
        }
    }

    /// cc-hook and its options, quoted for `/bin/sh`.
    fn hook_words(&self) -> String {
        let mut words = quoted(&self.hook);
        if let Some(agent) = &self.agent {
            words.push_str(" --agent ");
            words.push_str(&quoted(agent));
        }
        words
    }
}

/// One word for `/bin/sh`, single-quoted.
fn quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// The hook's command line, run by `/bin/sh -c`. Claude Code runs the tool when a
/// hook fails in any other way than exit 2 (not found, killed, nonsense on stdout), so
/// every failure of cc-hook becomes exit 2 here.
pub fn hook_command(timing: HookTiming, helpers: &Helpers) -> String {
    format!(
        "{} --deadline-ms {} || {{ s=$?; [ $s = 2 ] || echo \"Control Center: the hook ended without an answer (status $s); denied\" >&2; exit 2; }}",
        helpers.hook_words(),
        timing.deadline_ms
    )
}

/// What the CLI's `apiKeyHelper` gives it: never a key, only the run's placeholder,
/// which opens the run's model door and nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyHelper {
    /// No provider: no helper, and prompts fail at once.
    None,
    /// The placeholder, known when the settings were written: the helper prints it,
    /// so the CLI needs nothing of the run's sockets to reach its model.
    Placeholder(String),
    /// The broker could not be asked then: cc-hook asks it, through the agent socket.
    AskHook,
}

/// Claude Code's settings for a run: the hooks, the environment the CLI runs with,
/// and its key helper.
pub fn settings(timing: HookTiming, env: &[(String, String)], key: &KeyHelper, helpers: &Helpers) -> Value {
    let hook = json!([{
        "type": "command",
        "command": hook_command(timing, helpers),
        "timeout": timing.timeout_seconds,
    }]);
    let pre_tool_use: Vec<Value> = HOOKED.iter().map(|m| json!({ "matcher": m, "hooks": hook })).collect();
    let env: serde_json::Map<String, Value> = env.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
    let mut settings = json!({
        "hooks": { "PreToolUse": pre_tool_use },
        "env": env,
        // Nothing of the CLI's own reaches out on its own: updates, telemetry, error reports.
        "autoUpdates": false,
    });
    match key {
        KeyHelper::None => {}
        KeyHelper::Placeholder(placeholder) => {
            settings["apiKeyHelper"] = Value::from(format!("echo {}", quoted(placeholder)));
        }
        KeyHelper::AskHook => {
            settings["apiKeyHelper"] = Value::from(format!("{} --api-key", helpers.hook_words()));
        }
    }
    settings
}

/// The environment every claude-code launch gets through its settings, on top of the
/// envelope's sanitized one (which carries the run's proxy variables).
pub fn environment(base_url: Option<&str>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("DISABLE_AUTOUPDATER", "1"),
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    if let Some(url) = base_url.filter(|u| !u.is_empty()) {
        env.push(("ANTHROPIC_BASE_URL".into(), url.to_owned()));
    }
    env
}

/// Where sandboxd shows cc-mcp inside the overlay envelope.
pub const MCP_INSIDE: &str = "/run/cc/mcp";

/// The MCP config: the product's own server and no one else's (`--strict-mcp-config`).
/// Its tools are `mcp__cc__<tool>` to the agent.
pub fn mcp_config(helpers: &Helpers) -> Value {
    let args: Vec<&str> = helpers.agent.as_deref().map(|a| vec!["--agent", a]).unwrap_or_default();
    json!({ "mcpServers": { super::hook::MCP_SERVER_NAME: { "type": "stdio", "command": helpers.mcp, "args": args } } })
}

/// The CLI's command line for one prompt: print mode, stream-json, no approval prompt
/// of its own (the hook and the gate decide), only our settings and MCP config.
pub fn argv(program: &str, prompt: &str, config_dir: &str, resume: Option<&str>) -> Vec<String> {
    let mut argv: Vec<String> = vec![
        program.into(),
        "-p".into(),
        "--output-format".into(),
        "stream-json".into(),
        "--verbose".into(),
        "--dangerously-skip-permissions".into(),
        "--settings".into(),
        format!("{config_dir}/{SETTINGS_FILE}"),
        // Only the settings given here: not the person's ~/.claude, nor a project's
        // .claude/settings.json, which the agent itself could write.
        "--setting-sources".into(),
        String::new(),
        "--mcp-config".into(),
        format!("{config_dir}/{MCP_CONFIG_FILE}"),
        "--strict-mcp-config".into(),
    ];
    if let Some(session) = resume {
        argv.push("--resume".into());
        argv.push(session.into());
    }
    // After `--`, so that a prompt starting with `-` is never an option.
    argv.push("--".into());
    argv.push(prompt.into());
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_answers_before_claude_code_gives_up_on_it() {
        let t = HookTiming::for_approvals(300_000);
        assert!(t.deadline_ms < t.timeout_seconds * 1000, "{t:?}");
        let inside = Helpers::enveloped();
        let s = settings(t, &environment(Some("http://model.test:9")), &KeyHelper::AskHook, &inside);
        assert_eq!(s["apiKeyHelper"], format!("'{HOOK_INSIDE}' --api-key"));
        assert!(settings(t, &[], &KeyHelper::None, &inside).get("apiKeyHelper").is_none());
        let placeholder = KeyHelper::Placeholder("cc-placeholder-ab".into());
        assert_eq!(settings(t, &[], &placeholder, &inside)["apiKeyHelper"], "echo 'cc-placeholder-ab'");
        let hooks = s["hooks"]["PreToolUse"].as_array().unwrap();
        let matchers: Vec<&str> = hooks.iter().map(|h| h["matcher"].as_str().unwrap()).collect();
        assert_eq!(matchers, HOOKED);
        for h in hooks {
            let command = h["hooks"][0]["command"].as_str().unwrap();
            assert!(command.starts_with(&format!("'{HOOK_INSIDE}' --deadline-ms 310000 || ")), "{command}");
            assert_eq!(h["hooks"][0]["timeout"], 320);
        }
        assert_eq!(s["env"]["ANTHROPIC_BASE_URL"], "http://model.test:9");
        assert_eq!(s["env"]["DISABLE_TELEMETRY"], "1");
        assert!(environment(None).iter().all(|(k, _)| k != "ANTHROPIC_BASE_URL"));
    }

    #[test]
    fn on_the_host_the_helpers_are_named_by_path_and_reach_the_socket_itself() {
        let host = Helpers::on_host(
            std::path::Path::new("/opt/cc it's/cc-hook"),
            std::path::Path::new("/opt/cc/cc-mcp"),
            std::path::Path::new("/d/gateway/runs/r1/agent.sock"),
        );
        let command = hook_command(HookTiming::for_approvals(0), &host);
        assert!(
            command.starts_with(
                "'/opt/cc it'\\''s/cc-hook' --agent 'unix:/d/gateway/runs/r1/agent.sock' --deadline-ms 10000 || "
            ),
            "{command}"
        );
        let mcp = mcp_config(&host);
        assert_eq!(mcp["mcpServers"]["cc"]["command"], "/opt/cc/cc-mcp");
        assert_eq!(mcp["mcpServers"]["cc"]["args"], json!(["--agent", "unix:/d/gateway/runs/r1/agent.sock"]));
        assert_eq!(mcp_config(&Helpers::enveloped())["mcpServers"]["cc"]["args"], json!([]));
    }

    #[test]
    fn the_command_line_loads_only_our_settings_and_keeps_the_prompt_an_argument() {
        let a = argv("claude", "--help me", "/c", None);
        let at = |flag: &str| a.iter().position(|x| x == flag).unwrap();
        assert_eq!(a[at("--settings") + 1], "/c/claude-settings.json");
        assert_eq!(a[at("--setting-sources") + 1], "");
        assert_eq!(a[at("--mcp-config") + 1], "/c/claude-mcp.json");
        assert!(
            a.contains(&"--strict-mcp-config".to_owned()) && a.contains(&"--dangerously-skip-permissions".to_owned())
        );
        assert_eq!(&a[a.len() - 2..], ["--", "--help me"]);
        let b = argv("claude", "go on", "/c", Some("s-1"));
        assert_eq!(b[b.iter().position(|x| x == "--resume").unwrap() + 1], "s-1");
    }
}

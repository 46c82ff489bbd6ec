//! `[runs]`: how runs' tools and agents behave, and the tables under it
//! (`[runs.limits]`, `[runs.claude_code]`, `[runs.forwards]`), with their defaults and
//! their checks.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::limits;

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct RunsConfig {
    pub bash_timeout_seconds: u32,
    pub bash_max_timeout_seconds: u32,
    pub bash_output_cap_bytes: u64,
    /// Directories added to PATH inside envelopes, after the system's program
    /// directories (the host's PATH never passes).
    pub path: Vec<PathBuf>,
    pub limits: LimitsConfig,
    pub claude_code: ClaudeCodeConfig,
    /// GitHub's REST API, where the product's MCP tools open pull requests and write
    /// issues (a stand-in in tests).
    pub github_api_url: String,
    /// The model tokens (input, output and cache, every model) a run may use through
    /// its model door; 0: no budget. `ccctl run start --model-budget-tokens` sets a
    /// run's own.
    pub model_budget_tokens: u64,
    /// The model tokens a workspace's runs may use together in a day (UTC); 0: no
    /// budget.
    pub workspace_model_budget_tokens_per_day: u64,
    /// Host loopback ports bridged into every run of a workspace, by workspace name
    /// (`ccctl run start --forward` adds a run's own).
    pub forwards: BTreeMap<String, Vec<u16>>,
}

/// The ports of 127.0.0.1 inside an envelope that its own bridges hold (the proxies,
/// the git door, the agent socket, the model door): no forward may take one.
pub const BRIDGE_PORTS: [u16; 5] = [41080, 41081, 41418, 41419, 41420];

/// Why `port` cannot be forwarded into a run, if it cannot.
pub fn forward_refusal(port: u32) -> Option<String> {
    match u16::try_from(port) {
        Ok(0) | Err(_) => Some(format!("{port} is not a port")),
        Ok(p) if BRIDGE_PORTS.contains(&p) => {
            Some(format!("port {p} is one of the run's own bridges inside its envelope; forward another"))
        }
        Ok(_) => None,
    }
}

/// The claude-code adapter (`[runs.claude_code]`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct ClaudeCodeConfig {
    /// The `claude` CLI, as the envelope finds it: a name on the envelope's PATH or an
    /// absolute path (which must be visible inside: under a system directory).
    pub program: String,
    /// The provider (`[models.NAME]`, of api "anthropic") the CLI's requests go to,
    /// through the run's model door.
    pub model: String,
    /// Gone: the provider's table says where the model is. Kept to say so.
    #[cfg_attr(feature = "config-schema", schemars(skip))]
    pub base_url: Option<String>,
    /// A prompt that names no timeout gets this.
    pub prompt_timeout_seconds: u32,
    /// A prompt may ask for at most this.
    pub prompt_max_timeout_seconds: u32,
}

impl Default for ClaudeCodeConfig {
    fn default() -> Self {
        Self {
            program: "claude".into(),
            model: "anthropic".into(),
            base_url: None,
            prompt_timeout_seconds: 1800,
            prompt_max_timeout_seconds: 4 * 3600,
        }
    }
}

impl Default for RunsConfig {
    fn default() -> Self {
        Self {
            bash_timeout_seconds: 120,
            bash_max_timeout_seconds: 3600,
            bash_output_cap_bytes: 1 << 20,
            path: vec![],
            limits: LimitsConfig::default(),
            claude_code: ClaudeCodeConfig::default(),
            github_api_url: "https://api.github.com".into(),
            model_budget_tokens: 0,
            workspace_model_budget_tokens_per_day: 0,
            forwards: BTreeMap::new(),
        }
    }
}

impl RunsConfig {
    /// What is wrong with `[runs]` and the tables under it, in one line naming the key.
    /// (What it says of `[models]` is checked with the rest of the configuration.)
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.bash_timeout_seconds == 0 || self.bash_max_timeout_seconds < self.bash_timeout_seconds {
            return Err("[runs]: need 0 < bash_timeout_seconds <= bash_max_timeout_seconds".into());
        }
        if let Some(bad) = self.path.iter().find(|p| !p.is_absolute() || p.to_str().is_none_or(|s| s.contains(':'))) {
            return Err(format!("[runs]: path entry {:?} must be an absolute UTF-8 path without ':'", bad.display()));
        }
        limits::check(&limits::RunLimits::from_config(&self.limits)).map_err(|e| format!("[runs.limits]: {e}"))?;
        if self.bash_output_cap_bytes == 0 {
            return Err("[runs]: bash_output_cap_bytes must be positive".into());
        }
        let claude = &self.claude_code;
        if claude.program.is_empty() || claude.program.contains('\0') {
            return Err("[runs.claude_code]: program must name the claude CLI".into());
        }
        if claude.prompt_timeout_seconds == 0 || claude.prompt_max_timeout_seconds < claude.prompt_timeout_seconds {
            return Err("[runs.claude_code]: need 0 < prompt_timeout_seconds <= prompt_max_timeout_seconds".into());
        }
        if claude.base_url.is_some() {
            return Err(crate::MOVED_TO_MODELS.replace("{key}", "[runs.claude_code] base_url"));
        }
        for (workspace, ports) in &self.forwards {
            if let Some(why) = ports.iter().find_map(|p| forward_refusal(u32::from(*p))) {
                return Err(format!("[runs.forwards] {workspace}: {why}"));
            }
        }
        let url = &self.github_api_url;
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(format!("[runs] github_api_url {url:?} is not an http(s) URL"));
        }
        Ok(())
    }
}

/// Every run's limits unless its start overrides them. The defaults leave a 2-core,
/// 8 GiB laptop standing with a few runs at their limits at once.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    pub pids_max: u64,
    pub memory_max_mb: u64,
    pub cpu_weight: u32,
    pub cpu_max_percent: u32,
    pub tmp_size_mb: u64,
    pub open_files_max: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            pids_max: 1024,
            memory_max_mb: 2048,
            cpu_weight: 100,
            cpu_max_percent: 0,
            tmp_size_mb: 512,
            open_files_max: 4096,
        }
    }
}

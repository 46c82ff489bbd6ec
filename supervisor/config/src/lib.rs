//! The supervisor's configuration file (TOML). Every key is known: a typo is an error
//! at load, never a silent default.
//!
//! A crate of its own: the types, their defaults and their checks are pure, and the
//! package's reference check (`cc-package`) reads their schema without linking the
//! daemon.
//!
//! ```toml
//! [restart]
//! initial_backoff_ms = 100    # first delay after a helper exits
//! max_backoff_ms = 30000      # the doubling stops here
//! healthy_after_ms = 60000    # a helper that ran this long starts over at the first delay
//! budget = 10                 # restarts in a row without a healthy run before it is "failed"
//!
//! [helpers.broker]
//! program = "/opt/cc/bin/cc-broker"   # default: next to cc-supervisor
//!
//! [sandbox]
//! bwrap = "/usr/bin/bwrap"            # default: bwrap on PATH
//!
//! [gateway]
//! github_url = "https://github.com"   # where the gateway forwards runs' fetches and pushes
//!
//! [egress]                            # what runs with --network on may reach, on top of the curated base
//! registries = ["registry.example"]   # the package-registry group, which ships empty
//! allow = ["docs.example.com", "*.cdn.example.net:443"]
//! telemetry = ["telemetry.example"]   # always denied, whatever the allowlist says
//! handshake_timeout_ms = 10000        # a proxy's client has this long to send its request
//! [egress.resolve]                    # like curl's --resolve: these names never go to DNS
//! "api.internal.example" = ["10.0.0.7"]
//!
//! [gate]
//! rules = "rules.toml"                # global rules; relative to this file
//! approved = "approved.toml"          # approvers' "always" answers, as rules (the default)
//! approval_timeout_ms = 300000        # an ask unanswered this long is a deny
//! [gate.workspaces]
//! default = "rules/default.toml"      # a workspace's rules, on top of the global ones
//!
//! [deadlines]
//! helper_call_ms = 5000               # any call to sandboxd, the broker or the gateway
//! runner_call_ms = 60000              # a file tool call to a run's runner (a search of a big tree)
//! launch_grace_ms = 5000              # a bash call gets its own timeout plus this, then sandboxd is given up on
//! health_interval_ms = 2000           # each helper is asked for its status this often
//! health_timeout_ms = 2000            # an answer later than this is a missed check
//! health_misses = 3                   # missed in a row: the helper is killed and restarted
//!
//! [runs]
//! bash_timeout_seconds = 120          # a bash call that names no timeout gets this
//! bash_max_timeout_seconds = 3600     # a call may ask for at most this
//! bash_output_cap_bytes = 1048576     # stdout + stderr of one call; over it, the command is killed
//! path = ["/opt/tools/bin"]           # added to PATH in envelopes, after the system's program dirs
//! github_api_url = "https://api.github.com"  # where the product's MCP tools open pull requests and write issues
//!
//! [runs.claude_code]                  # the claude-code adapter
//! program = "claude"                  # the CLI, on the envelope's PATH (or an absolute path under a system dir)
//! model = "anthropic"                 # the [models.NAME] its requests go to, through the run's model door
//! prompt_timeout_seconds = 1800       # a prompt that names no timeout gets this
//! prompt_max_timeout_seconds = 14400  # a prompt may ask for at most this
//!
//!
//! [models.anthropic]                  # a model provider, served to runs by their model door
//! api = "anthropic"                   # or "openai" (chat completions)
//! base_url = "https://api.anthropic.com"
//! key_file = "anthropic.key"          # relative to the data directory; 0600; read by cc-broker
//!
//! [runs.limits]                       # per run: its runner and every launch together
//! pids_max = 1024                     # processes and threads at once
//! memory_max_mb = 2048                # memory, swap included; over it the OOM killer ends a process of the run
//! cpu_weight = 100                    # 1–10000, 100 is an even share
//! cpu_max_percent = 0                 # cap in percent of one CPU (200: two CPUs); 0: none
//! tmp_size_mb = 512                   # each envelope's /tmp (and /run)
//! open_files_max = 4096               # RLIMIT_NOFILE in every envelope
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use cc_proto::helper::HelperKind;

pub mod limits;
pub mod models;
mod runs;

pub use models::{ModelApi, ModelProvider, ModelsConfig};
pub use runs::{BRIDGE_PORTS, ClaudeCodeConfig, LimitsConfig, RunsConfig, forward_refusal};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid config {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// What is wrong with a configuration's text, in one line that names the key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct Invalid(pub String);

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub restart: RestartPolicy,
    #[serde(default)]
    pub helpers: BTreeMap<String, HelperConfig>,
    #[serde(default)]
    pub sandbox: SandboxConfig,
    #[serde(default)]
    pub gateway: GatewayConfig,
    #[serde(default)]
    pub egress: EgressConfig,
    #[serde(default)]
    pub gate: GateConfig,
    #[serde(default)]
    pub runs: RunsConfig,
    #[serde(default)]
    pub deadlines: Deadlines,
    #[serde(default)]
    pub terminals: TerminalsConfig,
    #[serde(default)]
    pub audit: AuditConfig,
    /// The model providers runs' agents reach through their model door, by name.
    #[serde(default)]
    pub models: ModelsConfig,
    /// The runner program [default: cc-runner next to cc-supervisor].
    #[serde(default)]
    pub runner: Option<PathBuf>,
    /// Where runs' credentials come from: read by cc-broker, which gets this table in
    /// its bootstrap (never argv or env: static tokens are secrets). See the README.
    #[serde(default)]
    pub credentials: Option<CredentialsTable>,
}

/// The `[credentials]` table, kept as written: the broker reads it (see cc-broker's
/// `config`), the supervisor only hands it over.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct CredentialsTable(pub toml::Table);

// A table of configuration is compared as a whole; no NaN is ever in one.
impl Eq for CredentialsTable {}

/// Its keys are cc-broker's (`cc_broker::config::CredentialsConfig`): the docs check
/// reads them from there.
#[cfg(feature = "config-schema")]
impl schemars::JsonSchema for CredentialsTable {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "CredentialsTable".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "object", "x-keys-from": "cc_broker::config::CredentialsConfig" })
    }
}

impl CredentialsTable {
    pub fn to_toml(&self) -> String {
        toml::to_string(&self.0).unwrap_or_default()
    }
}

/// How long the supervisor waits for its helpers: no call between processes waits
/// without a deadline.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct Deadlines {
    pub helper_call_ms: u64,
    pub runner_call_ms: u64,
    pub launch_grace_ms: u64,
    pub health_interval_ms: u64,
    pub health_timeout_ms: u64,
    pub health_misses: u32,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            helper_call_ms: 5_000,
            runner_call_ms: 60_000,
            launch_grace_ms: 5_000,
            health_interval_ms: 2_000,
            health_timeout_ms: 2_000,
            health_misses: 3,
        }
    }
}

impl Deadlines {
    pub fn helper_call(&self) -> Duration {
        Duration::from_millis(self.helper_call_ms)
    }
    pub fn runner_call(&self) -> Duration {
        Duration::from_millis(self.runner_call_ms)
    }
    pub fn launch_grace(&self) -> Duration {
        Duration::from_millis(self.launch_grace_ms)
    }
    pub fn health_interval(&self) -> Duration {
        Duration::from_millis(self.health_interval_ms)
    }
    pub fn health_timeout(&self) -> Duration {
        Duration::from_millis(self.health_timeout_ms)
    }

    fn check(&self) -> Result<(), String> {
        let all = [
            self.helper_call_ms,
            self.runner_call_ms,
            self.launch_grace_ms,
            self.health_interval_ms,
            self.health_timeout_ms,
            u64::from(self.health_misses),
        ];
        if all.contains(&0) {
            return Err("[deadlines]: every value must be positive".into());
        }
        Ok(())
    }
}

/// The audit trail (`cc-audit`): every decision, hash-chained, in `audit/` under the
/// data directory.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Whether decisions are appended to the trail.
    pub enabled: bool,
    /// A new file of the trail is started past this size.
    pub max_file_bytes: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self { enabled: true, max_file_bytes: 64 * 1024 * 1024 }
    }
}

/// The hosted terminals (`ccctl terminal`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct TerminalsConfig {
    /// A terminal no client has been attached to for this long is ended; 0: never.
    pub idle_timeout_seconds: u64,
    /// The output a terminal keeps for the next attach to replay.
    pub scrollback_bytes: u64,
    /// A client that takes no output for this long is detached, so that the others
    /// (and the command) go on.
    pub stalled_client_ms: u64,
    /// Terminals at once.
    pub max_terminals: u32,
}

impl Default for TerminalsConfig {
    fn default() -> Self {
        Self { idle_timeout_seconds: 0, scrollback_bytes: 256 << 10, stalled_client_ms: 10_000, max_terminals: 64 }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct GateConfig {
    pub rules: Option<PathBuf>,
    /// Where approvers' "always" answers are written as rules; relative to this file.
    pub approved: PathBuf,
    pub approval_timeout_ms: u64,
    pub workspaces: BTreeMap<String, PathBuf>,
}

impl Default for GateConfig {
    fn default() -> Self {
        Self {
            rules: None,
            approved: PathBuf::from("approved.toml"),
            approval_timeout_ms: 300_000,
            workspaces: BTreeMap::new(),
        }
    }
}

impl GateConfig {
    pub fn approval_timeout(&self) -> Duration {
        Duration::from_millis(self.approval_timeout_ms)
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct RestartPolicy {
    pub initial_backoff_ms: u64,
    pub max_backoff_ms: u64,
    pub healthy_after_ms: u64,
    pub budget: u32,
    /// How long a helper may take to announce that it serves.
    pub ready_timeout_ms: u64,
    /// How long a helper may take to exit after SIGTERM before it is killed.
    pub stop_timeout_ms: u64,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            initial_backoff_ms: 100,
            max_backoff_ms: 30_000,
            healthy_after_ms: 60_000,
            budget: 10,
            ready_timeout_ms: 5_000,
            stop_timeout_ms: 1_200,
        }
    }
}

impl RestartPolicy {
    pub fn initial_backoff(&self) -> Duration {
        Duration::from_millis(self.initial_backoff_ms)
    }
    pub fn max_backoff(&self) -> Duration {
        Duration::from_millis(self.max_backoff_ms)
    }
    pub fn healthy_after(&self) -> Duration {
        Duration::from_millis(self.healthy_after_ms)
    }
    pub fn ready_timeout(&self) -> Duration {
        Duration::from_millis(self.ready_timeout_ms)
    }
    pub fn stop_timeout(&self) -> Duration {
        Duration::from_millis(self.stop_timeout_ms)
    }
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct HelperConfig {
    pub program: Option<PathBuf>,
    #[serde(default)]
    pub args: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    pub bwrap: Option<PathBuf>,
    /// The microVM guest image (`vmlinux`, `initramfs.gz`, `release`) [default:
    /// `microvm/` beside the helper binaries].
    pub microvm_image: Option<PathBuf>,
    /// No run may start unwrapped: without a native backend the supervisor refuses to
    /// start, as with `--sandbox native` (srt's `failIfUnavailable`).
    #[serde(default)]
    pub require: bool,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// GitHub's git host, where runs' fetches and pushes go (a stand-in in tests).
    pub github_url: String,
}

/// `[egress]`: the configuration's part of every run's network allowlist.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    /// How long a proxy's client may take to send its whole request (a slow client's
    /// connection is closed after it).
    pub handshake_timeout_ms: u64,
    /// The package-registry group of the curated base (ships empty).
    pub registries: Vec<String>,
    /// More entries for every run.
    pub allow: Vec<String>,
    /// Always denied, like the cloud metadata endpoints.
    pub telemetry: Vec<String>,
    /// Names resolved to these addresses instead of through DNS.
    pub resolve: BTreeMap<String, Vec<String>>,
}

impl Default for EgressConfig {
    fn default() -> Self {
        Self {
            handshake_timeout_ms: 10_000,
            registries: vec![],
            allow: vec![],
            telemetry: vec![],
            resolve: BTreeMap::new(),
        }
    }
}

impl EgressConfig {
    fn check(&self) -> Result<(), String> {
        if !(1..=600_000).contains(&self.handshake_timeout_ms) {
            return Err(format!(
                "[egress] handshake_timeout_ms {} must be between 1 and 600000",
                self.handshake_timeout_ms
            ));
        }
        use cc_policy::egress::allowlist::Entry;
        for (key, list) in [("registries", &self.registries), ("allow", &self.allow), ("telemetry", &self.telemetry)] {
            for entry in list {
                Entry::parse(entry, key).map_err(|e| format!("[egress] {key}: {e}"))?;
            }
        }
        for (host, addresses) in &self.resolve {
            cc_policy::egress::host::canonical(host).map_err(|e| format!("[egress.resolve] {host:?}: {e}"))?;
            if addresses.is_empty() {
                return Err(format!("[egress.resolve] {host:?}: name at least one address"));
            }
            if let Some(bad) = addresses.iter().find(|a| a.parse::<std::net::IpAddr>().is_err()) {
                return Err(format!("[egress.resolve] {host:?}: {bad:?} is not an IP address"));
            }
        }
        Ok(())
    }
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self { github_url: "https://github.com".into() }
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        // The file names programs we run: only we (or root) may be able to change it.
        let text = read_trusted(path)?;
        Self::parse(&text).map_err(|Invalid(message)| ConfigError::Invalid { path: path.to_owned(), message })
    }

    /// Parses and validates; the error is one line and names the place.
    pub fn parse(text: &str) -> Result<Self, Invalid> {
        Self::checked(text).map_err(Invalid)
    }

    fn checked(text: &str) -> Result<Self, String> {
        let config: Config = toml::from_str(text).map_err(|e| one_line(&e.to_string()))?;
        if let Some(unknown) = config.helpers.keys().find(|name| HelperKind::from_name(name).is_none()) {
            let known: Vec<&str> = HelperKind::ALL.iter().map(|k| k.name()).collect();
            return Err(format!("[helpers.{unknown}]: unknown helper (known: {})", known.join(", ")));
        }
        let r = &config.restart;
        if r.initial_backoff_ms == 0 || r.max_backoff_ms < r.initial_backoff_ms {
            return Err("[restart]: need 0 < initial_backoff_ms <= max_backoff_ms".into());
        }
        if r.ready_timeout_ms == 0 || r.stop_timeout_ms == 0 {
            return Err("[restart]: ready_timeout_ms and stop_timeout_ms must be positive".into());
        }
        config.deadlines.check()?;
        if config.gate.approval_timeout_ms == 0 {
            return Err("[gate]: approval_timeout_ms must be positive".into());
        }
        config.egress.check()?;
        let github = config.gateway.github_url.trim_end_matches('/');
        let scheme_ok = github.starts_with("https://") || github.starts_with("http://");
        if !scheme_ok || github.contains(['?', '#', ' ']) || github.split("://").nth(1).is_none_or(str::is_empty) {
            return Err(format!(
                "[gateway]: github_url {:?} must be an http(s) URL without query or fragment",
                config.gateway.github_url
            ));
        }
        config.runs.check()?;
        let claude = &config.runs.claude_code;
        if config.credentials.as_ref().is_some_and(|c| c.0.contains_key("model")) {
            return Err(MOVED_TO_MODELS.replace("{key}", "[credentials.model]"));
        }
        models::check(&config.models)?;
        if let Some(provider) = config.models.get(&claude.model)
            && provider.api != ModelApi::Anthropic
        {
            return Err(format!(
                "[runs.claude_code] model = {:?} names a provider of api \"openai\": Claude Code speaks Anthropic's",
                claude.model
            ));
        }
        if r.healthy_after_ms <= r.ready_timeout_ms {
            return Err("[restart]: healthy_after_ms must be longer than ready_timeout_ms, or no helper would ever be reported failed".into());
        }
        Ok(config)
    }
}

/// What an older configuration is told about the keys the model door replaced.
pub(crate) const MOVED_TO_MODELS: &str = "{key} is gone: a model provider is one table now, [models.NAME] with api, base_url and \
     key_file (docs/guides/agents.md)";

/// Reads a file that decides what we run or allow: it must be ours or root's and
/// writable by no one else, or anyone who can edit it could loosen us.
pub fn read_trusted(path: &Path) -> Result<String, ConfigError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    let us = nix::unistd::geteuid().as_raw();
    if (meta.uid() != us && meta.uid() != 0) || meta.mode() & 0o022 != 0 {
        return Err(ConfigError::Invalid {
            path: path.to_owned(),
            message: format!(
                "it is owned by uid {} with mode {:o}: it must be ours or root's and writable by no one else",
                meta.uid(),
                meta.mode() & 0o777
            ),
        });
    }
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })
}

/// toml's messages span several lines (a snippet with a caret); keep the first line
/// and the line/column it names.
fn one_line(message: &str) -> String {
    let mut lines = message.lines().map(str::trim).filter(|l| !l.is_empty());
    let head = lines.next().unwrap_or("parse error").to_owned();
    let detail = message.lines().last().map(str::trim).filter(|l| !l.is_empty() && *l != head);
    match detail {
        Some(detail) => format!("{head}: {detail}"),
        None => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_default() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn full_example_parses() {
        let c = Config::parse(
            "[restart]\ninitial_backoff_ms = 10\nbudget = 3\n[helpers.broker]\nprogram = \"/bin/false\"\n[sandbox]\nbwrap = \"/nope\"\n",
        )
        .unwrap();
        assert_eq!(c.restart.initial_backoff_ms, 10);
        assert_eq!(c.restart.max_backoff_ms, 30_000);
        assert_eq!(c.helpers["broker"].program.as_deref(), Some(Path::new("/bin/false")));
        let c = Config::parse("[runs]\npath = [\"/opt/tools/bin\"]\n").unwrap();
        assert_eq!(c.runs.path, vec![PathBuf::from("/opt/tools/bin")]);
    }

    #[test]
    fn errors_name_the_problem() {
        for (text, needle) in [
            ("[restart]\nbudgt = 3\n", "budgt"),
            ("[helpers.brokr]\n", "unknown helper"),
            ("[restart]\ninitial_backoff_ms = 0\n", "initial_backoff_ms"),
            ("[restart\n", "line 1"),
            ("[restart]\nbudget = \"x\"\n", "line 2"),
            ("color = 1\n", "color"),
            ("[runs]\npath = [\"bin\"]\n", "path entry \"bin\""),
            ("[runs]\npath = [\"/a:/b\"]\n", "without ':'"),
            ("[deadlines]\nhealth_misses = 0\n", "[deadlines]"),
            ("[runs.limits]\npids_max = 3\n", "pids_max"),
            ("[runs.limits]\ncpu_weight = 0\n", "cpu_weight"),
            ("[runs.claude_code]\nprogram = \"\"\n", "program"),
            ("[runs.claude_code]\nprompt_timeout_seconds = 0\n", "prompt_timeout_seconds"),
            ("[runs.claude_code]\nbase_url = \"http://model.example\"\n", "[runs.claude_code] base_url is gone"),
            ("[credentials.model]\napi_key_file = \"k\"\n", "[credentials.model] is gone"),
            ("[models.x]\napi = \"anthropic\"\nbase_url = \"http://10.1.1.1\"\nkey_file = \"k\"\n", "use https"),
            ("[models.x]\napi = \"gemini\"\nbase_url = \"https://x\"\nkey_file = \"k\"\n", "gemini"),
            (
                "[models.anthropic]\napi = \"openai\"\nbase_url = \"https://x/v1\"\nkey_file = \"k\"\n",
                "Claude Code speaks Anthropic's",
            ),
            ("[runs]\ngithub_api_url = \"\"\n", "github_api_url"),
            ("[runs.claude_code]\nmodel_key = true\n", "model_key"),
            ("[runs.forwards]\ndefault = [41419]\n", "one of the run's own bridges"),
            ("[runs.forwards]\ndefault = [0]\n", "0 is not a port"),
        ] {
            let Invalid(err) = Config::parse(text).unwrap_err();
            assert!(err.contains(needle), "{text:?} → {err}");
            assert!(!err.contains('\n'), "multi-line error: {err}");
        }
    }
}

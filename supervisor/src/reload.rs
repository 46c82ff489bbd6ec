//! Reloading the configuration without ending a run (issue 35): `ccctl config reload`
//! (which the units' `ExecReload=` runs, so that `systemctl reload` fails on a bad
//! file) and SIGHUP read `config.toml` and the rules files again.
//!
//! All or nothing: every file is read and checked before anything changes, and an
//! invalid one keeps the configuration in force, refused with its file and line.
//! What changed applies at once to every decision after it, live runs' included:
//! the gate's rules, `[runs]` (timeouts, caps, the agents' programs) and `[egress]`
//! for runs started from then on. What a live run took at its start stays as it
//! was ([`FIXED_FOR_LIVE_RUNS`]), and the sections only a restart applies keep their
//! old values until then, named in the answer.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::json;

use crate::events::EventLog;
use crate::gate::{Gate, GateError, Rules};
use crate::runs::RunManager;
use cc_config::{Config, ConfigError};

/// What a live run holds from its start, whatever the configuration says later.
pub const FIXED_FOR_LIVE_RUNS: &[&str] = &[
    "its network on or off, and its allowlist (its proxies hold them from its start)",
    "its mounts and envelope",
    "its resource limits (its cgroup)",
    "its adapter and mode",
];

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Rules(#[from] GateError),
}

impl ReloadError {
    /// The file at fault.
    pub fn file(&self) -> &Path {
        match self {
            ReloadError::Config(ConfigError::Read { path, .. } | ConfigError::Invalid { path, .. }) => path,
            ReloadError::Rules(e) => e.path(),
        }
    }
}

/// What one reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// `None` when there is no file and the defaults stand.
    pub config_file: Option<PathBuf>,
    pub rules_files: Vec<PathBuf>,
    pub applied: Vec<&'static str>,
    pub restart_required: Vec<&'static str>,
    pub live_runs: usize,
    pub elapsed_ms: u64,
}

/// Where the configuration comes from: the file named on the command line, or the
/// data directory's `config.toml` when it exists (it may appear after the start).
#[derive(Debug, Clone)]
pub struct ConfigSource {
    pub named: Option<PathBuf>,
    pub default_file: PathBuf,
}

impl ConfigSource {
    /// The file to read now, and the directory relative rules paths start from.
    fn locate(&self) -> (Option<PathBuf>, PathBuf) {
        // By path: the file named on the command line is the person's, and the
        // default is in the data directory's top, which is root's (or ours) and
        // writable by no one else; no agent writes either. `Config::load` then refuses
        // a file others can write.
        let file = match &self.named {
            Some(path) => Some(path.clone()),
            None => self.default_file.exists().then(|| self.default_file.clone()),
        };
        let base = match &self.named {
            Some(path) => path.parent().map(Path::to_owned).unwrap_or_default(),
            None => self.default_file.parent().map(Path::to_owned).unwrap_or_default(),
        };
        (file, base)
    }

    /// The file read (if any), the rules' base directory, and the configuration.
    pub fn read(&self) -> Result<(Option<PathBuf>, PathBuf, Config), ConfigError> {
        let (file, base) = self.locate();
        let config = match &file {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        Ok((file, base, config))
    }
}

pub struct Reloader {
    source: ConfigSource,
    /// The configuration in force: the reloadable sections as last reloaded, the rest
    /// as the supervisor started with.
    in_force: Mutex<Config>,
    gate: Arc<Gate>,
    runs: Arc<RunManager>,
    events: Arc<EventLog>,
}

impl Reloader {
    pub fn new(
        source: ConfigSource,
        started_with: Config,
        gate: Arc<Gate>,
        runs: Arc<RunManager>,
        events: Arc<EventLog>,
    ) -> Self {
        Self { source, in_force: Mutex::new(started_with), gate, runs, events }
    }

    /// Reads everything again and puts what changed in force, or changes nothing and
    /// says why. Blocking (files): call it off the async threads. Reloads are one at
    /// a time.
    pub fn reload(&self) -> Result<Reloaded, ReloadError> {
        let started = Instant::now();
        let mut in_force = self.in_force.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let outcome = self.read_and_apply(&mut in_force, started);
        match &outcome {
            Ok(done) => self.events.record(
                "config_reloaded",
                "supervisor",
                json!({
                    "config_file": done.config_file.as_ref().map(|p| p.display().to_string()),
                    "rules_files": done.rules_files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                    "applied": done.applied,
                    "restart_required": done.restart_required,
                    "live_runs": done.live_runs,
                    "elapsed_ms": done.elapsed_ms,
                }),
            ),
            Err(e) => self.events.record(
                "config_reload_refused",
                "supervisor",
                json!({ "file": e.file().display().to_string(), "error": e.to_string() }),
            ),
        }
        outcome
    }

    fn read_and_apply(&self, in_force: &mut Config, started: Instant) -> Result<Reloaded, ReloadError> {
        let (file, base, new) = self.source.read()?;
        let rules = Rules::load(&new.gate, &base)?;
        // Everything read and valid: from here on nothing fails.
        let changes = compare(in_force, &new, self.gate.rules().differ(&rules));
        let rules_files = rules.files().map(Path::to_owned).collect();
        self.gate.replace_rules(rules);
        self.runs.replace_settings(new.runs.clone(), new.egress.clone());
        in_force.gate.rules = new.gate.rules.clone();
        in_force.gate.workspaces = new.gate.workspaces.clone();
        in_force.runs = new.runs;
        // The proxies' handshake timeout is the gateway's, given at its start.
        in_force.egress =
            cc_config::EgressConfig { handshake_timeout_ms: in_force.egress.handshake_timeout_ms, ..new.egress };
        Ok(Reloaded {
            config_file: file,
            rules_files,
            applied: changes.applied,
            restart_required: changes.restart_required,
            live_runs: self.runs.live_count(),
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Changes {
    applied: Vec<&'static str>,
    restart_required: Vec<&'static str>,
}

/// Which sections differ between the configuration in force and the one read, and
/// whether each applies now or at the next start. Pure, so that every section is
/// tested.
fn compare(old: &Config, new: &Config, rules_differ: bool) -> Changes {
    let mut changes = Changes::default();
    let mut now = |differs: bool, name| {
        if differs {
            changes.applied.push(name);
        }
    };
    now(rules_differ || old.gate.rules != new.gate.rules || old.gate.workspaces != new.gate.workspaces, "[gate] rules");
    now(old.runs != new.runs, "[runs]");
    let egress_now =
        |e: &cc_config::EgressConfig| (e.registries.clone(), e.allow.clone(), e.telemetry.clone(), e.resolve.clone());
    now(egress_now(&old.egress) != egress_now(&new.egress), "[egress]");
    let later: [(bool, &'static str); 12] = [
        (old.gate.approval_timeout_ms != new.gate.approval_timeout_ms, "[gate] approval_timeout_ms"),
        (old.egress.handshake_timeout_ms != new.egress.handshake_timeout_ms, "[egress] handshake_timeout_ms"),
        (old.restart != new.restart, "[restart]"),
        (old.helpers != new.helpers, "[helpers]"),
        (old.sandbox != new.sandbox, "[sandbox]"),
        (old.gateway != new.gateway, "[gateway]"),
        (old.deadlines != new.deadlines, "[deadlines]"),
        (old.terminals != new.terminals, "[terminals]"),
        (old.audit != new.audit, "[audit]"),
        (old.runner != new.runner, "runner"),
        (old.credentials != new.credentials, "[credentials]"),
        (old.models != new.models, "[models]"),
    ];
    changes.restart_required = later.into_iter().filter_map(|(differs, name)| differs.then_some(name)).collect();
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Config {
        Config::parse(text).unwrap()
    }

    #[test]
    fn nothing_changed_is_nothing_applied() {
        let c = parse("[runs]\nbash_timeout_seconds = 30\n");
        assert_eq!(compare(&c, &c.clone(), false), Changes::default());
    }

    #[test]
    fn each_section_is_applied_now_or_named_for_a_restart() {
        let old = Config::default();
        let cases: &[(&str, &[&str], &[&str])] = &[
            ("[runs]\nbash_timeout_seconds = 30\n", &["[runs]"], &[]),
            ("[egress]\nallow = [\"example.org\"]\n", &["[egress]"], &[]),
            ("[egress]\nhandshake_timeout_ms = 5\n", &[], &["[egress] handshake_timeout_ms"]),
            ("[gate]\nrules = \"rules.toml\"\n", &["[gate] rules"], &[]),
            ("[gate]\napproval_timeout_ms = 5\n", &[], &["[gate] approval_timeout_ms"]),
            ("[sandbox]\nbwrap = \"/opt/bwrap\"\n", &[], &["[sandbox]"]),
            ("[deadlines]\nhelper_call_ms = 5\n", &[], &["[deadlines]"]),
        ];
        for (text, applied, later) in cases {
            let changes = compare(&old, &parse(text), false);
            assert_eq!((changes.applied.as_slice(), changes.restart_required.as_slice()), (*applied, *later), "{text}");
        }
        // The same rules file named, its text changed.
        assert_eq!(compare(&old, &old.clone(), true).applied, ["[gate] rules"]);
    }
}

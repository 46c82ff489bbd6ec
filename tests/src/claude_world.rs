//! A supervisor whose claude-code runs drive the real `claude` CLI against the
//! scripted provider ([`crate::model_api`]), reached through each run's model door:
//! the world the claude-code and model-door tests share.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use serde_json::json;

use crate::Options;
use crate::model_api::{Block, ModelApi, tool};
use crate::runs::{Fixture, fixture_with};

/// The provider's key, which only the model door may hold.
pub const REAL_KEY: &str = "sk-scripted-key";

/// The rule every world has: the agent may reach the network (its model).
pub const NETWORK: &str = "[[rule]]\neffect = \"access_network\"\ndecision = \"allow\"\n";
pub const DENY_MAIN: &str = "[[rule]]\neffect = \"push_remote\"\nbranch = \"main\"\ndecision = \"deny\"\nreason = \"direct pushes to main are not allowed\"\n";
pub const DENY_SECRET: &str = "[[rule]]\neffect = \"write_file\"\npath = \"secret/**\"\ndecision = \"deny\"\nreason = \"secret/ is off limits\"\n";

pub struct World {
    pub f: Fixture,
    pub model: ModelApi,
    pub run: String,
    _keys: tempfile::TempDir,
}

/// A supervisor whose claude-code runs reach `turns` as their model, with `rules`, and
/// one such run, its network on (to its model only).
pub fn world(turns: Vec<Vec<Block>>, rules: &str) -> World {
    world_with(turns, rules, "", None)
}

/// [`world`] with more configuration, and a repository linked to the workspace
/// before the run starts.
pub fn world_with(turns: Vec<Vec<Block>>, rules: &str, config: &str, link: Option<&str>) -> World {
    world_of("claude-code", turns, rules, config, link, &[])
}

/// A world whose run has `adapter`. Its CLI reaches the scripted provider through the
/// run's model door (bridged into the envelope, or a loopback port for a run without
/// one), which swaps the run's placeholder for the provider's key: the provider takes
/// nothing else. One table of configuration is all it takes.
pub fn world_of(
    adapter: &str,
    turns: Vec<Vec<Block>>,
    rules: &str,
    config: &str,
    link: Option<&str>,
    args: &[&str],
) -> World {
    assert!(
        Command::new("claude").arg("--version").output().is_ok_and(|o| o.status.success()),
        "the claude CLI is not installed (.ci/run installs it from the npm registry)"
    );
    let model = ModelApi::start(turns);
    let keys = tempfile::tempdir().unwrap();
    let rules_path = keys.path().join("rules.toml");
    std::fs::write(&rules_path, format!("{NETWORK}{rules}")).unwrap();
    std::fs::set_permissions(&rules_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let key = keys.path().join("model.key");
    std::fs::write(&key, format!("{REAL_KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    model.require_key(REAL_KEY);
    let config = format!(
        "[gate]\nrules = \"{}\"\n\n{config}\n[models.anthropic]\napi = \"anthropic\"\n\
         base_url = \"http://127.0.0.1:{}\"\nkey_file = \"{}\"\n",
        rules_path.display(),
        model.port,
        key.display()
    );
    let args = args.iter().map(|a| (*a).to_owned()).collect();
    let f = fixture_with(Options { config: Some(config), args, ..Default::default() });
    if let Some(repository) = link {
        assert!(f.sup.ccctl(&["workspace", "link-repo", "default", repository]).status.success());
    }
    let out =
        f.sup.ccctl(&["run", "start", "--conversation", &f.conversation, "--adapter", adapter, "--network", "on"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    World { f, model, run, _keys: keys }
}

impl World {
    pub fn prompt(&self, prompt: &str) -> Output {
        self.f.sup.ccctl(&["run", "prompt", &self.run, prompt, "--timeout", "120"])
    }

    /// The tool results the CLI sent the model: (content, is_error).
    pub fn results(&self) -> Vec<(String, bool)> {
        self.model.tool_results()
    }

    pub fn events(&self) -> String {
        String::from_utf8_lossy(&self.f.sup.ccctl(&["--json", "events"]).stdout).into_owned()
    }
}

pub fn stdout(out: &Output) -> String {
    format!("{}\n--- stderr:\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

pub fn bash(command: &str) -> Block {
    tool("Bash", json!({ "command": command, "description": "scripted" }))
}

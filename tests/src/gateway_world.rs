//! What the gateway tests start from: a stand-in GitHub (its API issuing and revoking
//! App installation tokens, its git host serving `octo/project` and `octo/other`
//! through real `git http-backend`), a checkout cloned from `octo/project` whose
//! origin is `https://github.com/octo/project.git`, and a supervisor whose broker uses
//! the App, whose gateway forwards to the stand-in, and whose gate has push rules.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::git_host::GitHost;
use crate::github_api::{self, GitHubApi};
use crate::runs::text;
use crate::{Options, Supervisor};

/// The gate's push rules in every gateway test.
pub const RULES: &str = r#"
[[rule]]
effect = "push_remote"
decision = "allow"
reason = "feature branches are the agent's"

[[rule]]
effect = "push_remote"
branch = "main"
decision = "deny"
reason = "pushes to main go through a pull request"

[[rule]]
effect = "push_remote"
force = true
decision = "deny"
reason = "history is not rewritten"

[[rule]]
effect = "push_remote"
ref = "refs/tags/*"
decision = "deny"
reason = "tags are made by the release job"
"#;

pub struct GatewayWorld {
    pub sup: Supervisor,
    pub api: GitHubApi,
    pub host: GitHost,
    /// `octo/project` upstream, a bare repository.
    pub upstream: PathBuf,
    /// The commit upstream `main` started at.
    pub main: String,
    pub conversation: String,
    pub tmp: tempfile::TempDir,
}

impl GatewayWorld {
    pub fn new() -> GatewayWorld {
        Self::with_credentials(true)
    }

    /// `credentials`: false gives the broker no provider (runs get no token).
    pub fn with_credentials(credentials: bool) -> GatewayWorld {
        Self::with_config(credentials, "", "")
    }

    /// With `rules` after the push rules and `config` after the rest of config.toml.
    pub fn with_config(credentials: bool, rules: &str, config: &str) -> GatewayWorld {
        let extra_rules = rules;
        let extra_config = config;
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let (private, public) = github_api::key_pair(tmp.path());
        let api = GitHubApi::start(public);
        let host = GitHost::start(&tmp.path().join("upstream"), api.git_access());
        let (upstream, main) = host.create("octo/project", &tmp.path().join("seed"));
        host.create("octo/other", &tmp.path().join("seed-other"));

        // The person's checkout: a clone, whose origin then names GitHub.
        let checkout = tmp.path().join("checkout");
        crate::fs::git(tmp.path(), &["clone", "-q", upstream.to_str().unwrap(), checkout.to_str().unwrap()]);
        crate::fs::git(&checkout, &["remote", "set-url", "origin", "https://github.com/octo/project.git"]);

        let rules = tmp.path().join("rules.toml");
        std::fs::write(&rules, format!("{RULES}{extra_rules}")).unwrap();
        std::fs::set_permissions(&rules, std::fs::Permissions::from_mode(0o644)).unwrap();
        let provider = format!(
            "[credentials]\nprovider = \"github-app\"\n[credentials.github_app]\napp_id = \"{}\"\ninstallation_id = {}\n\
             private_key = \"{}\"\napi_base = \"{}\"\n\n",
            github_api::APP_ID,
            github_api::INSTALLATION,
            private.display(),
            api.base(),
        );
        let config = format!(
            "{}[gateway]\ngithub_url = \"{}\"\n\n[gate]\nrules = \"{}\"\n\n{extra_config}",
            if credentials { provider.as_str() } else { "" },
            host.base(),
            rules.display()
        );
        let options = Options { config: Some(config), ..Default::default() };
        let sup = Supervisor::start_on(&tmp.path().join("data"), options);
        let added = sup.ccctl(&["repo", "add", checkout.to_str().unwrap(), "--name", "project"]);
        assert!(added.status.success(), "{}", text(&added).1);
        let out = sup.ccctl(&["conversation", "new", "--repo", "project", "--worktree-backend", "copy"]);
        assert!(out.status.success(), "{}", text(&out).1);
        let conversation = text(&out).0.trim().to_owned();
        GatewayWorld { sup, api, host, upstream, main, conversation, tmp }
    }

    pub fn start_run(&self) -> String {
        let out = self.sup.ccctl(&["run", "start", "--conversation", &self.conversation, "--mode", "chat"]);
        assert!(out.status.success(), "{}", text(&out).1);
        text(&out).0.trim().to_owned()
    }

    /// The run's bash, in its copy of the checkout; git with an identity of its own.
    pub fn bash(&self, run: &str, script: &str) -> Output {
        let script = format!(
            "export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@example.invalid \
             GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@example.invalid GIT_TERMINAL_PROMPT=0\n{script}"
        );
        self.sup.ccctl(&["tool", run, "bash", "--timeout", "120", "--", &script])
    }

    /// Upstream's ref, or None.
    pub fn upstream_ref(&self, name: &str) -> Option<String> {
        upstream_ref(&self.upstream, name)
    }
}

impl Default for GatewayWorld {
    fn default() -> Self {
        Self::new()
    }
}

pub fn upstream_ref(bare: &Path, name: &str) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(bare)
        .args(["rev-parse", "--verify", "-q", name])
        .output()
        .unwrap();
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

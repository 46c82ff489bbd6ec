//! The run's git configuration, written where the run is set up: every way of naming a
//! GitHub repository is rewritten to the run's gateway bridge (`url.<bridge>.insteadOf`),
//! which covers fetch and push alike. The agent can add a longer `insteadOf` or a
//! `pushurl` of its own; it then reaches GitHub with no credential at all, since the
//! gateway holds them all.

/// Spellings of a GitHub remote, longest first as git compares them.
pub const GITHUB_SPELLINGS: &[&str] = &[
    "ssh://git@github.com/",
    "https://github.com/",
    "http://github.com/",
    "ssh://github.com/",
    "git://github.com/",
    "git@github.com:",
    "github.com:",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the gateway bridge must be http://127.0.0.1:PORT/, not {0:?}")]
pub struct BadBridge(pub String);

/// The gitconfig text for a run whose gateway bridge listens on `port` inside its
/// envelope, and whose HTTP proxy on `proxy_port`: git's `http.proxy` names it (as
/// the environment does), and the bridge itself is exempt. Credential helpers are
/// switched off: there is nothing for one to find, and none should prompt.
pub fn run_gitconfig(port: u16, proxy_port: u16) -> Result<String, BadBridge> {
    if port == 0 || proxy_port == 0 {
        return Err(BadBridge(format!("http://127.0.0.1:{port}/")));
    }
    let mut text = format!(
        "# Written by cc-supervisor: GitHub remotes go through this run's gateway.\n[url \"http://127.0.0.1:{port}/\"]\n"
    );
    for spelling in GITHUB_SPELLINGS {
        text.push_str(&format!("\tinsteadOf = {spelling}\n"));
    }
    text.push_str(&format!("[http]\n\tproxy = http://127.0.0.1:{proxy_port}\n"));
    text.push_str(&format!("[http \"http://127.0.0.1:{port}/\"]\n\tproxy =\n"));
    text.push_str("[credential]\n\thelper =\n");
    Ok(text)
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn the_config_names_every_spelling_once() {
        let text = run_gitconfig(40123, 40080).unwrap();
        for s in GITHUB_SPELLINGS {
            assert_eq!(text.matches(&format!("insteadOf = {s}\n")).count(), 1, "{s}");
        }
        assert!(text.contains("[http]\n\tproxy = http://127.0.0.1:40080\n"), "{text}");
        assert!(text.contains("[http \"http://127.0.0.1:40123/\"]\n\tproxy =\n"), "the bridge is exempt: {text}");
        assert!(run_gitconfig(0, 1).is_err() && run_gitconfig(1, 0).is_err());
    }

    /// Every spelling of a GitHub remote resolves to the bridge, for fetch and for push,
    /// with real git reading the generated configuration.
    #[test]
    fn github_remotes_are_rewritten_to_the_bridge_for_fetch_and_push() {
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join("gitconfig");
        std::fs::write(&config, run_gitconfig(40123, 40080).unwrap()).unwrap();
        let repo = tmp.path().join("r");
        let init = Command::new("git").args(["init", "-q"]).arg(&repo).output().unwrap();
        assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
        for (remote, path) in [
            ("https://github.com/o/r.git", "o/r.git"),
            ("http://github.com/o/r", "o/r"),
            ("git@github.com:o/r.git", "o/r.git"),
            ("ssh://git@github.com/o/r.git", "o/r.git"),
            ("ssh://github.com/o/r.git", "o/r.git"),
            ("git://github.com/o/r.git", "o/r.git"),
            ("github.com:o/r.git", "o/r.git"),
        ] {
            let run = |args: &[&str]| {
                let out = Command::new("git")
                    .args(args)
                    .current_dir(&repo)
                    .env("GIT_CONFIG_GLOBAL", &config)
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
                String::from_utf8_lossy(&out.stdout).trim().to_owned()
            };
            let _ = Command::new("git").args(["remote", "remove", "origin"]).current_dir(&repo).output();
            run(&["remote", "add", "origin", remote]);
            let want = format!("http://127.0.0.1:40123/{path}");
            assert_eq!(run(&["ls-remote", "--get-url", "origin"]), want, "fetch of {remote}");
            assert_eq!(run(&["remote", "get-url", "--push", "origin"]), want, "push of {remote}");
        }
        // Any other http(s) remote goes through the run's proxy; the bridge never does.
        let proxy_for = |url: &str| {
            let out = Command::new("git")
                .args(["config", "--get-urlmatch", "http.proxy", url])
                .env("GIT_CONFIG_GLOBAL", &config)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        assert_eq!(proxy_for("https://gitlab.com/o/r.git"), "http://127.0.0.1:40080");
        assert_eq!(proxy_for("http://127.0.0.1:40123/o/r.git"), "");
    }
}

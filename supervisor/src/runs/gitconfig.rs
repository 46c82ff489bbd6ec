//! The run's git configuration: every way of naming a GitHub repository is rewritten
//! to the run's gateway bridge (`url.<bridge>.insteadOf`), which covers fetch and push
//! alike. The agent can add a longer `insteadOf` or a `pushurl` of its own; it then
//! reaches GitHub with no credential at all, since the gateway holds them all.

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
}

//! The environment of every wrapped process, built from an allowlist (DESIGN.md §5).
//!
//! Nothing of the caller's environment passes unless its name is on the allowlist, and
//! nothing passes, from the caller or from the run policy's additions, that is a
//! dynamic-linker or interpreter injection vector or that looks like a secret (by name
//! or by the shape of its value). Pure: the same function serves every wrapped kind.

use std::collections::BTreeMap;

/// Names taken from the caller's environment as they are. Not PATH: the host's may
/// name directories under the supervisor's home, and a program found there runs in
/// the envelope; every envelope gets [`SYSTEM_PATH`] instead.
const PASSED: &[&str] = &["LANG", "LANGUAGE", "TERM", "COLORTERM", "NO_COLOR", "TZ", "USER", "LOGNAME"];

/// PATH inside every envelope: the system's program directories. A run's policy may
/// add directories after them (`[runs] path` in the supervisor's config).
pub use cc_host::SYSTEM_PATH;

/// Prefixes taken from the caller's environment (locale settings).
const PASSED_PREFIXES: &[&str] = &["LC_"];

/// Injection vectors: never passed, whoever asks.
const INJECTION: &[&str] = &[
    "LD_PRELOAD",
    "LD_AUDIT",
    "LD_LIBRARY_PATH",
    "LD_BIND_NOW",
    "LD_DEBUG",
    "LD_PROFILE",
    "GCONV_PATH",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "RES_OPTIONS",
    "NLSPATH",
    "MALLOC_CHECK_",
    "NODE_OPTIONS",
    "NODE_PATH",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PROMPT_COMMAND",
    // A prompt's command substitutions run at every prompt (bash's promptvars).
    "PS0",
    "PS1",
    "PS2",
    "PS3",
    "PS4",
    // Read at start by readline and curses, and run by less and man.
    "INPUTRC",
    "TERMINFO",
    "TERMINFO_DIRS",
    "MANPAGER",
    "IFS",
    "CDPATH",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONINSPECT",
    "PERL5OPT",
    "PERL5LIB",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_EXEC_PATH",
    "GIT_ASKPASS",
    "GIT_PROXY_COMMAND",
    "GIT_EXTERNAL_DIFF",
    "GIT_TEMPLATE_DIR",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "SSH_ASKPASS",
    "SSH_AUTH_SOCK",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "GIT_PAGER",
    "GIT_EDITOR",
    "SUDO_ASKPASS",
    "ZDOTDIR",
    "LESSOPEN",
    "LESSCLOSE",
    "DOTNET_STARTUP_HOOKS",
    "GIT_SEQUENCE_EDITOR",
    "PYTHONWARNINGS",
    "BROWSER",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_HOME",
];

/// Prefixes of injection vectors.
const INJECTION_PREFIXES: &[&str] = &["LD_", "DYLD_", "GIT_CONFIG_", "GIT_TRACE", "MALLOC_", "BASH_FUNC_"];

/// What the run policy may set that the caller may not: where git finds the run's config.
const POLICY_ONLY: &[&str] = &["GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM"];

/// Fragments of secret names, anywhere in the upper-cased name (`GHTOKEN`, `MYSECRET`).
const SECRET_FRAGMENTS: &[&str] = &["TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "APIKEY", "PRIVATE_KEY"];

/// Whole `_`-separated words of secret names: `KEY` in `OPENAI_API_KEY`, not in `MONKEY`;
/// `AUTH` in `NPM_CONFIG__AUTH`, not in `GIT_AUTHOR_NAME`.
const SECRET_WORDS: &[&str] = &["KEY", "KEYS", "PASS", "AUTH", "SESSION", "COOKIE", "PRIVATE", "CREDENTIALS"];

/// Prefixes of cloud and service credentials.
const SECRET_PREFIXES: &[&str] =
    &["AWS_", "AZURE_", "GCP_", "GOOGLE_", "GCLOUD_", "DOCKER_", "KUBE", "VAULT_", "NPM_CONFIG_"];

/// Value shapes of well-known tokens, whatever the variable is called.
const SECRET_VALUE_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xapp-",
    "sk-",
    "sk_live_",
    "rk_live_",
    "npm_",
    "hf_",
    "pypi-",
    "AKIA",
    "ASIA",
    "AIza",
    "ya29.",
    "eyJ",
    "-----BEGIN",
];

/// A URL with a password in it (`scheme://user:secret@host`).
fn has_url_credentials(value: &str) -> bool {
    value.split("://").skip(1).any(|rest| {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        authority.rsplit_once('@').is_some_and(|(userinfo, _)| userinfo.contains(':'))
    })
}

/// Proxy variables the run policy may set with a credential in the URL: a run
/// without an envelope reaches its own proxies on host loopback ports, where a
/// credential of the run's (good for nothing else) tells it from other processes.
const PROXY_VARIABLES: &[&str] = &["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"];

/// The run's own loopback proxy: one URL, its host 127.0.0.1, nothing after the port.
fn is_loopback_proxy(value: &str) -> bool {
    let Some((scheme, rest)) = value.split_once("://") else { return false };
    let Some((_, host_port)) = rest.rsplit_once('@') else { return false };
    let port = host_port.strip_prefix("127.0.0.1:").unwrap_or("");
    matches!(scheme, "http" | "socks5h")
        && !rest.contains("://")
        && !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
}

/// Why a variable was left out (for `ccctl sandbox explain` and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    NotAllowed,
    Injection,
    Secret,
}

/// Decides one variable. `from_policy` is true for the run policy's own additions.
pub fn judge(name: &str, value: &str, from_policy: bool) -> Result<(), Dropped> {
    if name.is_empty() || name.contains('=') || name.contains('\0') || value.contains('\0') {
        return Err(Dropped::NotAllowed);
    }
    let upper = name.to_ascii_uppercase();
    let injection = INJECTION.contains(&upper.as_str()) || INJECTION_PREFIXES.iter().any(|p| upper.starts_with(p));
    if injection && !(from_policy && POLICY_ONLY.contains(&upper.as_str())) {
        return Err(Dropped::Injection);
    }
    if SECRET_FRAGMENTS.iter().any(|f| upper.contains(f))
        || upper.split('_').any(|word| SECRET_WORDS.contains(&word))
        || SECRET_PREFIXES.iter().any(|p| upper.starts_with(p))
        || SECRET_VALUE_PREFIXES.iter().any(|p| value.trim_start().starts_with(p))
        || (has_url_credentials(value)
            && !(from_policy && PROXY_VARIABLES.contains(&upper.as_str()) && is_loopback_proxy(value)))
    {
        return Err(Dropped::Secret);
    }
    if from_policy || PASSED.contains(&name) || PASSED_PREFIXES.iter().any(|p| name.starts_with(p)) {
        Ok(())
    } else {
        Err(Dropped::NotAllowed)
    }
}

/// The environment of a wrapped process: the allowed part of `inherited`, then the
/// policy's `additions` (which win), then `HOME` set to the agent's directory. PATH is
/// [`SYSTEM_PATH`], followed by the absolute directories of the policy's PATH.
pub fn build<'a>(
    inherited: impl IntoIterator<Item = (&'a str, &'a str)>,
    additions: impl IntoIterator<Item = (&'a str, &'a str)>,
    home: &str,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, value) in inherited {
        if judge(name, value, false).is_ok() {
            out.insert(name.to_owned(), value.to_owned());
        }
    }
    let mut path: Vec<&str> = SYSTEM_PATH.split(':').collect();
    for (name, value) in additions {
        if name == "PATH" {
            let extra = value.split(':').filter(|d| d.starts_with('/') && !d.contains('\0'));
            path.extend(extra.filter(|d| !path.contains(d)).collect::<Vec<_>>());
        } else if judge(name, value, true).is_ok() {
            out.insert(name.to_owned(), value.to_owned());
        }
    }
    out.insert("PATH".to_owned(), path.join(":"));
    out.insert("HOME".to_owned(), home.to_owned());
    out
}

/// Adds the variables a launch's caller asks for to `env`, built by [`build`]: any
/// name (the host's allowlist is for what the supervisor happens to have, not for what
/// a person asks for), but never an injection vector or a secret-looking one, and none
/// replacing PATH, HOME or a variable of the run's policy (`policy_names`). A run's
/// model placeholder passes under a key's name (an ACP agent's `OPENAI_API_KEY`): it
/// opens the run's own model door and nothing else.
pub fn add_requested<'a>(
    env: &mut BTreeMap<String, String>,
    requested: impl IntoIterator<Item = (&'a str, &'a str)>,
    policy_names: &[&str],
) {
    for (name, value) in requested {
        let reserved = ["PATH", "HOME"].iter().chain(policy_names).any(|r| r.eq_ignore_ascii_case(name));
        let well_formed = !name.is_empty() && !name.contains(['=', '\0']) && !value.contains('\0');
        // NotAllowed, for a well-formed name, says only that it is not on the host's list.
        let judged = match judge(name, value, false) {
            Err(Dropped::Secret) if cc_proto::secret::is_model_placeholder(value) => Ok(()),
            judged => judged,
        };
        if !reserved && well_formed && matches!(judged, Ok(()) | Err(Dropped::NotAllowed)) {
            env.insert(name.to_owned(), value.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_variables_are_judged_and_never_replace_the_policys() {
        let mut env = build([("TERM", "dumb")], [("HTTPS_PROXY", "http://127.0.0.1:1")], "/home/agent");
        let placeholder = format!("{}{}", cc_proto::secret::MODEL_PLACEHOLDER_PREFIX, "ab".repeat(32));
        let requested = [
            ("TERM", "xterm-256color"),
            ("LD_PRELOAD", "/tmp/x.so"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("OPENAI_API_KEY", "sk-real-key"),
            ("ANTHROPIC_API_KEY", placeholder.as_str()),
            ("PATH", "/tmp"),
            ("HOME", "/"),
            ("HTTPS_PROXY", "http://evil:1"),
            ("https_proxy", "http://evil:1"),
            ("Path", "/tmp"),
            ("PS1", "$(touch /tmp/x)"),
            ("COLUMNS", "80"),
        ];
        add_requested(&mut env, requested, &["HTTPS_PROXY"]);
        assert_eq!(env["TERM"], "xterm-256color");
        assert_eq!(env["COLUMNS"], "80");
        assert_eq!(env["HOME"], "/home/agent");
        assert_eq!(env["HTTPS_PROXY"], "http://127.0.0.1:1");
        assert!(!env["PATH"].contains("/tmp"));
        assert!(!env.contains_key("LD_PRELOAD") && !env.contains_key("GITHUB_TOKEN"));
        assert!(!env.contains_key("OPENAI_API_KEY"), "a real key never passes");
        assert_eq!(env["ANTHROPIC_API_KEY"], placeholder, "a run's placeholder does");
        assert!(!env.contains_key("https_proxy") && !env.contains_key("Path") && !env.contains_key("PS1"));
    }

    #[test]
    fn only_the_policys_loopback_proxy_may_carry_a_credential() {
        let proxy = "http://cc-run:abc@127.0.0.1:41234";
        assert_eq!(judge("HTTPS_PROXY", proxy, true), Ok(()));
        assert_eq!(judge("all_proxy", "socks5h://cc-run:abc@127.0.0.1:41235", true), Ok(()));
        assert_eq!(judge("HTTPS_PROXY", proxy, false), Err(Dropped::Secret), "never from the host");
        assert_eq!(judge("GIT_URL", proxy, true), Err(Dropped::Secret), "only the proxy variables");
        for elsewhere in [
            "http://u:p@proxy.example:8080",
            "http://u:p@127.0.0.1:80/path",
            "http://u:p@127.0.0.1:x",
            "http://u:p@127.0.0.1:1 http://a:b@evil:1",
            "ftp://u:p@127.0.0.1:21",
        ] {
            assert_eq!(judge("HTTP_PROXY", elsewhere, true), Err(Dropped::Secret), "{elsewhere}");
        }
    }

    #[test]
    fn the_allowlist_passes_and_home_is_the_agents() {
        let env = build([("PATH", "/usr/bin"), ("LANG", "C.UTF-8"), ("LC_ALL", "C"), ("HOME", "/root")], [], "/work");
        assert_eq!(env["PATH"], SYSTEM_PATH, "the host's PATH never passes");
        assert_eq!(env["LC_ALL"], "C");
        assert_eq!(env["HOME"], "/work");
    }

    #[test]
    fn injection_vectors_never_pass_from_anyone() {
        for name in [
            "LD_PRELOAD",
            "ld_preload",
            "LD_AUDIT",
            "LD_LIBRARY_PATH",
            "LD_ANYTHING",
            "DYLD_INSERT_LIBRARIES",
            "NODE_OPTIONS",
            "BASH_ENV",
            "ENV",
            "PYTHONSTARTUP",
            "PERL5OPT",
            "RUBYOPT",
            "JAVA_TOOL_OPTIONS",
            "GIT_SSH_COMMAND",
            "GIT_SSH",
            "GIT_EXEC_PATH",
            "GIT_CONFIG_COUNT",
            "GIT_CONFIG_KEY_0",
            "GIT_CONFIG_VALUE_0",
            "GIT_CONFIG_PARAMETERS",
            "BASH_FUNC_ls%%",
            "SSH_AUTH_SOCK",
            "GLIBC_TUNABLES",
        ] {
            assert_eq!(judge(name, "x", false), Err(Dropped::Injection), "{name} from the caller");
            assert_eq!(judge(name, "x", true), Err(Dropped::Injection), "{name} from the policy");
        }
        // The run's own git config is set by the policy only.
        assert_eq!(judge("GIT_CONFIG_GLOBAL", "/run/gitconfig", true), Ok(()));
        assert_eq!(judge("GIT_CONFIG_GLOBAL", "/home/me/.gitconfig", false), Err(Dropped::Injection));
    }

    #[test]
    fn secrets_never_pass_by_name_or_by_value() {
        for name in [
            "GITHUB_TOKEN",
            "GH_TOKEN",
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "DB_PASSWORD",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_PROFILE",
            "AZURE_CLIENT_SECRET",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "NPM_CONFIG__AUTH",
            "KUBECONFIG",
            "DOCKER_HOST",
            "my_secret",
        ] {
            assert_eq!(judge(name, "x", false), Err(Dropped::Secret), "{name}");
            assert_eq!(judge(name, "x", true), Err(Dropped::Secret), "{name} from the policy");
        }
        for value in [
            "ghp_abcdef",
            "github_pat_11AA",
            "sk-proj-123",
            "AKIAIOSFODNN7EXAMPLE",
            "xoxb-1-2",
            " ghp_x",
            "npm_abc",
            "eyJhbGciOiJIUzI1NiJ9.x.y",
            "-----BEGIN OPENSSH PRIVATE KEY-----",
            "http://user:hunter2@proxy.corp:3128",
        ] {
            assert_eq!(judge("LANG", value, false), Err(Dropped::Secret), "{value}");
        }
    }

    #[test]
    fn everything_else_from_the_caller_is_dropped() {
        for name in
            ["EDITOR", "FOO", "HTTP_PROXY", "http_proxy", "DISPLAY", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS"]
        {
            assert!(judge(name, "x", false).is_err(), "{name}");
        }
        // The policy may add ordinary variables (its proxy settings, for instance).
        assert_eq!(judge("HTTP_PROXY", "http://127.0.0.1:3128", true), Ok(()));
        for name in ["GIT_AUTHOR_NAME", "GIT_COMMITTER_EMAIL", "MONKEY", "KEYBOARD_LAYOUT"] {
            assert_eq!(judge(name, "x", true), Ok(()), "{name} is not a secret");
        }
    }

    #[test]
    fn malformed_names_and_values_are_dropped() {
        for (name, value) in [("", "x"), ("A=B", "x"), ("A\0B", "x"), ("PATH", "/bin\0/evil")] {
            assert_eq!(judge(name, value, false), Err(Dropped::NotAllowed), "{name:?}");
            assert_eq!(judge(name, value, true), Err(Dropped::NotAllowed), "{name:?}");
        }
    }

    #[test]
    fn policy_additions_win_over_the_caller() {
        let env = build([("LANG", "C")], [("LANG", "C.UTF-8")], "/w");
        assert_eq!(env["LANG"], "C.UTF-8");
    }

    /// Issue 16, item 5: the host's PATH (with directories under the supervisor's
    /// home) never reaches an envelope; the system's does, then what the run adds.
    #[test]
    fn path_is_the_systems_then_the_runs_additions() {
        let env =
            build([("PATH", "/home/me/.cargo/bin:/usr/bin")], [("PATH", "/opt/tools/bin:relative:/usr/bin")], "/w");
        assert_eq!(env["PATH"], format!("{SYSTEM_PATH}:/opt/tools/bin"));
        assert!(!env["PATH"].contains("/home"));
    }
}

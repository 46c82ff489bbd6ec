//! A run's network. Under an envelope the run has no network of its own: its proxies
//! (the gateway's, bridged in as `127.0.0.1:41080` for HTTP and `:41081` for SOCKS5)
//! are its only route out, and they allow what this allowlist holds, read once at the
//! run's start: a curated base, GitHub's domains, and the configuration's additions.
//! A run with its network off gets the same proxies with nothing allowed, so every
//! attempt is refused and recorded. A run without an envelope gets them on host
//! loopback ports instead, behind a credential of its own ([`loopback_proxies`]).

use std::collections::HashMap;

use cc_proto::gateway::v1 as gw;

use cc_config::EgressConfig;

/// The HTTP proxy's loopback port inside a run's envelopes.
pub const HTTP_PROXY_PORT: u16 = 41080;
/// The SOCKS5 proxy's.
pub const SOCKS_PORT: u16 = 41081;

/// The HTTP proxy's socket in the run's gateway directory.
pub const HTTP_PROXY_SOCKET: &str = "http.sock";
/// The SOCKS5 proxy's.
pub const SOCKS_SOCKET: &str = "socks.sock";

/// The HTTP proxy's socket as the runner's envelope shows it: sandboxd binds each
/// bridge's directory at `/run/cc/bridges/PORT`, in the runner's envelope too.
pub fn http_proxy_inside() -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/run/cc/bridges/{HTTP_PROXY_PORT}/{HTTP_PROXY_SOCKET}"))
}

/// The curated base: model providers' APIs, git hosting, the model catalog. (The
/// package-registry group ships empty: `[egress] registries` fills it.)
const BASE: &[(&str, &str)] = &[
    ("api.anthropic.com", "base:llm"),
    ("api.openai.com", "base:llm"),
    ("generativelanguage.googleapis.com", "base:llm"),
    ("api.mistral.ai", "base:llm"),
    ("api.groq.com", "base:llm"),
    ("api.deepseek.com", "base:llm"),
    ("openrouter.ai", "base:llm"),
    ("gitlab.com", "base:git"),
    ("bitbucket.org", "base:git"),
    ("codeberg.org", "base:git"),
    ("models.dev", "base:catalog"),
];

/// GitHub's domains (pushes and fetches of the run's own repositories go through the
/// git gateway, which holds the credentials; these carry no credential of the run's).
const GITHUB: &[&str] = &[
    "github.com",
    "api.github.com",
    "codeload.github.com",
    "uploads.github.com",
    "objects.githubusercontent.com",
    "raw.githubusercontent.com",
    "*.githubusercontent.com",
];

/// A workspace's own entries (`ccctl workspace egress`).
pub struct WorkspaceEntries<'a> {
    pub name: &'a str,
    pub entries: &'a [String],
}

/// The run's allowlist, each entry with its source, in the order `ccctl policy show`
/// prints it.
pub fn allowlist(config: &EgressConfig, workspace: &WorkspaceEntries<'_>) -> Vec<(String, String)> {
    let mut entries: Vec<(String, String)> = BASE.iter().map(|(e, s)| ((*e).to_owned(), (*s).to_owned())).collect();
    entries.extend(config.registries.iter().map(|e| (e.clone(), "base:registries ([egress] registries)".to_owned())));
    entries.extend(GITHUB.iter().map(|e| ((*e).to_owned(), "github".to_owned())));
    entries.extend(config.allow.iter().map(|e| (e.clone(), "config ([egress] allow)".to_owned())));
    entries.extend(workspace.entries.iter().map(|e| (e.clone(), format!("workspace:{}", workspace.name))));
    entries
}

/// What no run may reach: the gateway's own metadata list, and configured telemetry.
pub fn always_denied(config: &EgressConfig) -> Vec<(String, String)> {
    let mut entries: Vec<(String, String)> = cc_policy::egress::deny::METADATA_NAMES
        .iter()
        .chain(cc_policy::egress::deny::METADATA_ADDRESSES)
        .map(|e| ((*e).to_owned(), "cloud metadata (built in)".to_owned()))
        .collect();
    entries.extend(config.telemetry.iter().map(|t| (t.clone(), "config ([egress] telemetry)".to_owned())));
    entries
}

/// What the gateway is told of a run's network.
pub fn gateway_policy(network: bool, config: &EgressConfig, workspace: &WorkspaceEntries<'_>) -> gw::EgressPolicy {
    let entry = |(entry, source): (String, String)| gw::EgressEntry { entry, source };
    gw::EgressPolicy {
        network,
        allow: if network { allowlist(config, workspace).into_iter().map(entry).collect() } else { vec![] },
        deny: config.telemetry.iter().map(|t| entry((t.clone(), "config ([egress] telemetry)".to_owned()))).collect(),
        resolve: config
            .resolve
            .iter()
            .map(|(host, addresses)| gw::ResolveOverride { host: host.clone(), addresses: addresses.clone() })
            .collect(),
        loopback: None,
    }
}

/// The proxy variables every envelope of a run gets. Loopback is exempt: inside the
/// envelope it holds nothing but the run's own bridges (the git door among them),
/// which must not be sent through the proxy.
pub fn proxy_env(env: &mut HashMap<String, String>) {
    let http = format!("http://127.0.0.1:{HTTP_PROXY_PORT}");
    let socks = format!("socks5h://127.0.0.1:{SOCKS_PORT}");
    set_proxy_variables(env, &http, &socks, "127.0.0.1,localhost");
}

/// HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and NO_PROXY, in upper and lower case.
fn set_proxy_variables(env: &mut HashMap<String, String>, http: &str, socks: &str, no_proxy: &str) {
    for (name, value) in [("HTTP_PROXY", http), ("HTTPS_PROXY", http), ("ALL_PROXY", socks), ("NO_PROXY", no_proxy)] {
        env.insert(name.to_owned(), value.to_owned());
        env.insert(name.to_ascii_lowercase(), value.to_owned());
    }
}

/// The user name of every run's loopback proxy credential; the password is the run's.
pub const LOOPBACK_USER: &str = "cc-run";

/// For a run without an envelope: two free loopback ports for its proxies, and the
/// credential a client must present there. The ports are found by binding port 0 and
/// are free again when the gateway binds them; a port taken in between fails the
/// gateway's registration, which says so.
/// `model_door`: a third port, for the run's model door (0 without).
pub fn loopback_proxies(model_door: bool) -> std::io::Result<(gw::LoopbackProxies, u16)> {
    // All bound at once, so that they differ; all free again when they go.
    let probe = || std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0));
    let (http, socks) = (probe()?, probe()?);
    let model = model_door.then(probe).transpose()?;
    let (http_port, socks_port) = (http.local_addr()?.port(), socks.local_addr()?.port());
    let model_port = match &model {
        Some(m) => m.local_addr()?.port(),
        None => 0,
    };
    let password = cc_proto::secret::PeerSecret::generate().map_err(std::io::Error::other)?;
    let proxies = gw::LoopbackProxies {
        http_port: http_port.into(),
        socks_port: socks_port.into(),
        username: LOOPBACK_USER.to_owned(),
        password: password.expose().to_owned(),
    };
    Ok((proxies, model_port))
}

/// A free port of 127.0.0.1 for the model door of an agent on the host (a
/// claude-code-nosandbox run beside envelopes): free again when the gateway binds it.
pub fn loopback_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

/// The proxy variables of a run without an envelope: its loopback ports, with its
/// credential in the URLs (curl, git, pip and npm read it from there). Nothing is
/// exempt but the run's own model door: such a run's loopback is the host's.
/// `model_port`: the run's model door, the one port reached directly (0: none).
pub fn loopback_proxy_env(env: &mut HashMap<String, String>, proxies: &gw::LoopbackProxies, model_port: u16) {
    let credential = format!("{}:{}", proxies.username, proxies.password);
    let http = format!("http://{credential}@127.0.0.1:{}", proxies.http_port);
    let socks = format!("socks5h://{credential}@127.0.0.1:{}", proxies.socks_port);
    // Only the run's own model door is reached directly: every other loopback port
    // goes to the proxy, which refuses it.
    let direct = match model_port {
        0 => String::new(),
        port => format!("127.0.0.1:{port}"),
    };
    set_proxy_variables(env, &http, &socks, &direct);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_entry_parses_and_the_registries_ship_empty() {
        let config = EgressConfig::default();
        let none = WorkspaceEntries { name: "default", entries: &[] };
        for (entry, source) in allowlist(&config, &none).into_iter().chain(always_denied(&config)) {
            cc_policy::egress::allowlist::Entry::parse(&entry, &source).unwrap();
            assert!(!source.contains("registries"), "the registry group ships empty: {entry}");
        }
        let off = gateway_policy(false, &config, &none);
        assert!(off.allow.is_empty() && !off.network, "network off: nothing allowed");
        let mine = ["docs.example.test".to_owned()];
        let on = gateway_policy(true, &config, &WorkspaceEntries { name: "infra", entries: &mine });
        assert!(on.allow.iter().any(|e| e.entry == "docs.example.test" && e.source == "workspace:infra"));
    }

    #[test]
    fn a_run_without_an_envelope_gets_two_ports_and_its_own_credential() {
        let ((a, model), (b, none)) = (loopback_proxies(true).unwrap(), loopback_proxies(false).unwrap());
        assert!(model != 0 && none == 0);
        assert_ne!(a.http_port, a.socks_port);
        assert!(a.http_port > 0 && a.socks_port > 0);
        assert_ne!(a.password, b.password, "each run has its own credential");
        let mut env = HashMap::new();
        loopback_proxy_env(&mut env, &a, 0);
        let expected = format!("http://cc-run:{}@127.0.0.1:{}", a.password, a.http_port);
        assert_eq!(env["HTTPS_PROXY"], expected);
        assert_eq!(env["http_proxy"], expected);
        assert!(env["ALL_PROXY"].starts_with("socks5h://cc-run:"));
        assert_eq!(env["NO_PROXY"], "");
        // Its model door alone is reached directly.
        loopback_proxy_env(&mut env, &a, model);
        assert_eq!(env["no_proxy"], format!("127.0.0.1:{model}"));
    }
}

//! `[models.NAME]`: the model providers runs' agents reach through their model door.
//! One table is all a provider takes: the door (the gateway's) forwards to its
//! `base_url` with the real key from `key_file` (read by the broker, never by anything
//! in an envelope), so no egress entry, name override or network rule is needed.
//!
//! ```toml
//! [models.anthropic]
//! api = "anthropic"                     # the Messages API, key in x-api-key
//! base_url = "https://api.anthropic.com"
//! key_file = "anthropic.key"            # relative to the data directory; 0600
//!
//! [models.local]
//! api = "openai"                        # chat completions, key in Authorization: Bearer
//! base_url = "http://127.0.0.1:11434/v1"
//! key_file = "local.key"
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// The wire a provider speaks: where its key goes, which paths are model calls, and
/// how its answers report usage.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ModelApi {
    /// Anthropic's Messages API (`/v1/messages`), the key in `x-api-key`.
    Anthropic,
    /// OpenAI-compatible chat completions (`/chat/completions` under a base URL that
    /// ends in its version, `…/v1`), the key in `Authorization: Bearer`.
    Openai,
}

impl ModelApi {
    /// The variables an ACP agent is pointed at the door with, unless its table names
    /// others.
    pub fn default_env(self) -> (&'static str, &'static str) {
        match self {
            ModelApi::Anthropic => ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"),
            ModelApi::Openai => ("OPENAI_BASE_URL", "OPENAI_API_KEY"),
        }
    }
}

/// One provider.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ModelProvider {
    pub api: ModelApi,
    /// https, or http to a loopback address (a model served on this machine); no
    /// query or fragment.
    pub base_url: String,
    /// The provider's API key, one line, in a file only we may read; relative to the
    /// data directory. Read by cc-broker at each request, so a rotated key is used
    /// from the next one on.
    pub key_file: PathBuf,
    /// Trust roots (PEM) besides the system's, for a provider behind a private CA;
    /// relative to the data directory.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// The variable that gives an ACP agent the door's URL for this provider
    /// [default: ANTHROPIC_BASE_URL or OPENAI_BASE_URL, by api].
    #[serde(default)]
    pub base_url_env: Option<String>,
    /// The variable that gives an ACP agent the run's placeholder key
    /// [default: ANTHROPIC_API_KEY or OPENAI_API_KEY, by api].
    #[serde(default)]
    pub api_key_env: Option<String>,
}

impl ModelProvider {
    /// (base URL variable, key variable) for an ACP agent.
    pub fn env_names(&self) -> (&str, &str) {
        let (url, key) = self.api.default_env();
        (self.base_url_env.as_deref().unwrap_or(url), self.api_key_env.as_deref().unwrap_or(key))
    }
}

/// Every `[models.NAME]`, by name.
pub type ModelsConfig = BTreeMap<String, ModelProvider>;

/// A provider's name is a path segment of the door's URLs.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
}

/// What is wrong with the providers, in one line naming the table.
pub fn check(models: &ModelsConfig) -> Result<(), String> {
    let mut variables = BTreeMap::new();
    for (name, provider) in models {
        let table = format!("[models.{name}]");
        if !valid_name(name) {
            return Err(format!("{table}: a provider's name is lower-case letters, digits and '-', at most 64"));
        }
        check_base_url(&provider.base_url).map_err(|why| format!("{table} base_url {:?}: {why}", provider.base_url))?;
        if provider.key_file.as_os_str().is_empty() {
            return Err(format!("{table}: key_file must name the file that holds the provider's key"));
        }
        let (url_var, key_var) = provider.env_names();
        for var in [url_var, key_var] {
            let valid = !var.is_empty()
                && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !var.as_bytes()[0].is_ascii_digit();
            if !valid {
                return Err(format!("{table}: {var:?} is not an environment variable's name"));
            }
            if let Some(other) = variables.insert(var.to_owned(), name.clone()) {
                return Err(format!(
                    "{table}: {var} is also [models.{other}]'s; set base_url_env and api_key_env on one of them"
                ));
            }
        }
    }
    Ok(())
}

/// https anywhere, or http to a loopback address: the key must never cross a network
/// in the clear.
fn check_base_url(url: &str) -> Result<(), &'static str> {
    let (scheme, rest) = url.split_once("://").ok_or("is not an http(s) URL")?;
    if url.contains(['?', '#', ' ', '\\']) || url.chars().any(char::is_control) {
        return Err("must have no query, fragment, space or backslash");
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err("must name a host, and no user or password");
    }
    match scheme {
        "https" => Ok(()),
        "http" => {
            let host = authority.rsplit_once(':').map_or(authority, |(host, _)| host);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
            if loopback { Ok(()) } else { Err("http is only for a loopback address: use https") }
        }
        _ => Err("is not an http(s) URL"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(api: ModelApi, base_url: &str) -> ModelProvider {
        ModelProvider {
            api,
            base_url: base_url.into(),
            key_file: "k".into(),
            ca_file: None,
            base_url_env: None,
            api_key_env: None,
        }
    }

    #[test]
    fn base_urls_are_https_or_loopback_http() {
        for ok in [
            "https://api.anthropic.com",
            "https://openrouter.ai/api/v1",
            "http://127.0.0.1:11434/v1",
            "http://localhost:8080",
            "http://[::1]:9",
        ] {
            assert_eq!(check_base_url(ok), Ok(()), "{ok}");
        }
        for bad in [
            "api.anthropic.com",
            "http://api.example.com",
            "http://10.0.0.1/v1",
            "ftp://x",
            "https://",
            "https://u:p@host",
            "https://host/?q=1",
            "https://host/#f",
            "http://127.0.0.1.example.com",
        ] {
            assert!(check_base_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_and_variables_are_checked_and_never_shared() {
        let mut models = ModelsConfig::new();
        models.insert("anthropic".into(), provider(ModelApi::Anthropic, "https://api.anthropic.com"));
        models.insert("local".into(), provider(ModelApi::Openai, "http://127.0.0.1:9/v1"));
        assert_eq!(check(&models), Ok(()));
        models.insert("other".into(), provider(ModelApi::Openai, "https://api.openai.com/v1"));
        let err = check(&models).unwrap_err();
        assert!(err.contains("OPENAI_BASE_URL is also [models.local]'s"), "{err}");
        let other = models.get_mut("other").unwrap();
        other.base_url_env = Some("OTHER_BASE_URL".into());
        other.api_key_env = Some("OTHER_KEY".into());
        assert_eq!(check(&models), Ok(()));
        models.get_mut("other").unwrap().api_key_env = Some("1BAD".into());
        assert!(check(&models).unwrap_err().contains("not an environment variable"));
        let mut bad = ModelsConfig::new();
        bad.insert("Anthropic".into(), provider(ModelApi::Anthropic, "https://api.anthropic.com"));
        assert!(check(&bad).unwrap_err().starts_with("[models.Anthropic]: a provider's name"));
    }
}

//! A request on a run's model door, read as `/PROVIDER/PATH?QUERY`: which provider,
//! and whether PATH is one of its API's model calls. Anything else is refused before
//! a key is looked at: another host (an absolute-form target), CONNECT, another
//! path, or a path that could be read two ways (`..`, `%`, `//`).

use super::Api;

/// The longest request target the door reads.
pub const MAX_TARGET_BYTES: usize = 8192;

/// A model call: to whom, and what to append to the provider's base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCall<'a> {
    pub provider: &'a str,
    /// `/v1/messages`, `/chat/completions`, …: the path under the provider's base URL.
    pub path: &'a str,
    /// Passed on as it is (Claude Code sends `?beta=true`).
    pub query: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("the model door tunnels nothing: CONNECT is refused")]
    Connect,
    #[error("the model door serves only its own paths, never another host")]
    OtherHost,
    #[error("the request's path is not one the model door can read")]
    Unreadable,
    #[error("the model door serves /PROVIDER/…, and {0:?} is no provider of this run")]
    UnknownProvider(String),
    #[error("{method} {path} is not a model API call of this provider")]
    NotAModelCall { method: String, path: String },
}

/// The calls each API makes: (method, path, whether a last segment may follow, as in
/// `/v1/models/{id}`).
fn calls(api: Api) -> &'static [(&'static str, &'static str, bool)] {
    match api {
        Api::Anthropic => &[
            ("POST", "/v1/messages", false),
            ("POST", "/v1/messages/count_tokens", false),
            ("GET", "/v1/models", false),
            ("GET", "/v1/models", true),
        ],
        Api::Openai => &[("POST", "/chat/completions", false), ("GET", "/models", false), ("GET", "/models", true)],
    }
}

/// Splits `target` (the request line's target) into its provider and the call, and
/// checks the call is one of the provider's. `api_of` says which providers the run
/// has.
pub fn route<'a>(
    method: &str,
    target: &'a str,
    api_of: impl Fn(&str) -> Option<Api>,
) -> Result<(ModelCall<'a>, Api), RouteError> {
    if method.eq_ignore_ascii_case("CONNECT") {
        return Err(RouteError::Connect);
    }
    if !target.starts_with('/') {
        return Err(RouteError::OtherHost);
    }
    if target.len() > MAX_TARGET_BYTES
        || target.bytes().any(|b| b.is_ascii_control() || b == b' ' || b == b'#' || b == b'\\' || b >= 0x80)
    {
        return Err(RouteError::Unreadable);
    }
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    // One spelling per path: what the door checks is what the provider reads.
    if path.contains('%') || path.contains("//") || path.split('/').any(|s| s == "." || s == "..") {
        return Err(RouteError::Unreadable);
    }
    let rest = &path[1..];
    let (provider, call_path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let api = api_of(provider).ok_or_else(|| RouteError::UnknownProvider(provider.chars().take(64).collect()))?;
    let known = calls(api).iter().any(|(m, p, one_more)| {
        method == *m
            && match call_path.strip_prefix(p) {
                Some("") => !one_more,
                Some(tail) => *one_more && tail.starts_with('/') && tail.len() > 1 && !tail[1..].contains('/'),
                None => false,
            }
    });
    if !known {
        // Shown in a one-line refusal: nothing of the method but what a method may hold.
        let method = method.chars().filter(char::is_ascii_graphic).take(16).collect();
        return Err(RouteError::NotAModelCall { method, path: call_path.into() });
    }
    Ok((ModelCall { provider, path: call_path, query }, api))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apis(name: &str) -> Option<Api> {
        match name {
            "anthropic" => Some(Api::Anthropic),
            "local" => Some(Api::Openai),
            _ => None,
        }
    }

    #[test]
    fn model_calls_are_routed_to_their_provider() {
        let (call, api) = route("POST", "/anthropic/v1/messages?beta=true", apis).unwrap();
        assert_eq!(
            (call.provider, call.path, call.query, api),
            ("anthropic", "/v1/messages", Some("beta=true"), Api::Anthropic)
        );
        assert_eq!(route("POST", "/local/chat/completions", apis).unwrap().0.path, "/chat/completions");
        assert_eq!(route("GET", "/anthropic/v1/models/claude-x", apis).unwrap().0.path, "/v1/models/claude-x");
        assert_eq!(route("GET", "/local/models", apis).unwrap().0.path, "/models");
    }

    #[test]
    fn everything_else_is_refused_before_a_key_is_looked_at() {
        for (method, target, expected) in [
            ("CONNECT", "api.anthropic.com:443", RouteError::Connect),
            ("GET", "http://api.anthropic.com/v1/messages", RouteError::OtherHost),
            ("POST", "api.anthropic.com/v1/messages", RouteError::OtherHost),
            ("POST", "/anthropic/v1/../v1/messages", RouteError::Unreadable),
            ("POST", "/anthropic/v1/%6Dessages", RouteError::Unreadable),
            ("POST", "/anthropic//v1/messages", RouteError::Unreadable),
            ("POST", "/anthropic/v1/messages#x", RouteError::Unreadable),
            ("POST", "/anthropic/v1/mess\u{e9}ges", RouteError::Unreadable),
            ("POST", "/other/v1/messages", RouteError::UnknownProvider("other".into())),
            ("POST", "/", RouteError::UnknownProvider(String::new())),
        ] {
            assert_eq!(route(method, target, apis).unwrap_err(), expected, "{method} {target}");
        }
        for (method, target) in [
            ("GET", "/anthropic/v1/messages"),
            ("POST", "/anthropic/v1/messages/batches"),
            ("DELETE", "/anthropic/v1/models/x"),
            ("POST", "/anthropic/v1/files"),
            ("GET", "/anthropic/v1/models/a/b"),
            ("GET", "/anthropic/v1/models/"),
            ("POST", "/anthropic"),
            ("POST", "/local/v1/messages"),
            ("POST", "/local/chat/completionsX"),
            ("POST", "/anthropic/v1/messagesX"),
            ("PO\nST", "/anthropic/v1/messages"),
        ] {
            let refused = route(method, target, apis).unwrap_err();
            assert!(matches!(refused, RouteError::NotAModelCall { .. }), "{method} {target}");
            assert!(!refused.to_string().contains('\n'), "{refused}");
        }
    }
}

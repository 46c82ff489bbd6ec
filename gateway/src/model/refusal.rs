//! The door's own answers, in the shape its provider's clients already read, so that
//! an agent shows the person the message rather than "unexpected response". No answer
//! of the door's ever holds a key: its messages are made from what the door knows
//! about the request, never from what the broker or the provider said about the key.

use super::Api;

/// Why the door answered itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Not a model call (400/404/405).
    NotAModelCall,
    /// No key, or not this run's placeholder (401).
    Authentication,
    /// The run may make no more model requests (403): a budget.
    BudgetReached,
    /// The provider's key cannot be had (403: retrying does not help).
    NoKey,
    /// The provider could not be reached, or the broker (502).
    Unreachable,
    /// The request is larger than the door carries (413).
    TooLarge,
}

impl Kind {
    pub fn status(self) -> u16 {
        match self {
            Kind::NotAModelCall => 404,
            Kind::Authentication => 401,
            Kind::BudgetReached | Kind::NoKey => 403,
            Kind::Unreachable => 502,
            Kind::TooLarge => 413,
        }
    }

    /// Anthropic's `error.type` for it.
    fn anthropic_type(self) -> &'static str {
        match self {
            Kind::NotAModelCall => "not_found_error",
            Kind::Authentication => "authentication_error",
            Kind::BudgetReached | Kind::NoKey => "permission_error",
            Kind::Unreachable => "api_error",
            Kind::TooLarge => "request_too_large",
        }
    }

    /// OpenAI's `error.type` and `error.code`.
    fn openai_type(self) -> (&'static str, &'static str) {
        match self {
            Kind::NotAModelCall => ("invalid_request_error", "not_found"),
            Kind::Authentication => ("invalid_request_error", "invalid_api_key"),
            Kind::BudgetReached => ("insufficient_quota", "model_budget_reached"),
            Kind::NoKey => ("invalid_request_error", "no_model_key"),
            Kind::Unreachable => ("server_error", "provider_unreachable"),
            Kind::TooLarge => ("invalid_request_error", "request_too_large"),
        }
    }
}

/// The body of the door's answer: JSON in the provider's error shape, its message
/// prefixed so the person knows who said it.
pub fn body(api: Api, kind: Kind, message: &str) -> String {
    let message = format!("Control Center model door: {message}");
    let value = match api {
        Api::Anthropic => serde_json::json!({
            "type": "error",
            "error": { "type": kind.anthropic_type(), "message": message },
        }),
        Api::Openai => {
            let (kind_type, code) = kind.openai_type();
            serde_json::json!({ "error": { "message": message, "type": kind_type, "param": null, "code": code } })
        }
    };
    value.to_string()
}

/// Replaces every occurrence of `key` in a provider's error body (some echo part of a
/// key they refused), so that not even the provider's words carry it into the run.
pub fn scrub(body: &[u8], key: &str) -> Vec<u8> {
    if key.len() < 8 {
        return body.to_vec();
    }
    let mut out = Vec::with_capacity(body.len());
    let mut rest = body;
    // The whole key, and the prefixes and suffixes of it a provider shows ("sk-ab…yz").
    let needles: Vec<&[u8]> = vec![key.as_bytes(), &key.as_bytes()[..key.len() / 2], &key.as_bytes()[key.len() / 2..]];
    'outer: while !rest.is_empty() {
        for needle in &needles {
            if needle.len() >= 4 && rest.starts_with(needle) {
                out.extend_from_slice(b"[redacted]");
                rest = &rest[needle.len()..];
                continue 'outer;
            }
        }
        out.push(rest[0]);
        rest = &rest[1..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_in_each_providers_shape() {
        let a: serde_json::Value = serde_json::from_str(&body(Api::Anthropic, Kind::BudgetReached, "spent")).unwrap();
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "permission_error");
        assert_eq!(a["error"]["message"], "Control Center model door: spent");
        let o: serde_json::Value = serde_json::from_str(&body(Api::Openai, Kind::Authentication, "no")).unwrap();
        assert_eq!(o["error"]["code"], "invalid_api_key");
        assert_eq!(Kind::BudgetReached.status(), 403);
    }

    #[test]
    fn a_key_a_provider_echoes_is_scrubbed_whole_or_in_halves() {
        let key = "sk-live-0123456789abcdef";
        let echoed = format!("Incorrect API key provided: {key}. Also {} and {}.", &key[..12], &key[12..]);
        let scrubbed = String::from_utf8(scrub(echoed.as_bytes(), key)).unwrap();
        assert!(!scrubbed.contains("0123456789abcdef") && !scrubbed.contains("sk-live-0123"), "{scrubbed}");
        assert_eq!(scrub(b"no key here", key), b"no key here");
    }
}

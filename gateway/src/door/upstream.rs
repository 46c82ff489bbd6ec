//! The way out: GitHub's git host (a stand-in in tests), over HTTPS with rustls. The
//! token is added here and nowhere else; the client's own credentials, cookies and
//! hop-by-hop headers are never passed on.

use std::time::Duration;

use base64::Engine;
use http::{HeaderMap, HeaderValue, Method, header};

use crate::git::route::Route;

/// Request headers git sends that upstream needs.
const PASSED_REQUEST_HEADERS: &[header::HeaderName] =
    &[header::CONTENT_TYPE, header::CONTENT_ENCODING, header::ACCEPT, header::USER_AGENT];

pub struct Upstream {
    base: String,
    client: reqwest::Client,
}

impl Upstream {
    /// `base`: `https://github.com`, without a trailing slash.
    pub fn new(base: &str) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            // A redirect could carry the token to another host.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(30))
            // No overall timeout: a big push takes as long as it takes; the client (git)
            // and the run's end bound it.
            .build()?;
        Ok(Self { base: base.trim_end_matches('/').to_owned(), client })
    }

    /// Sends one request for `route` with `token` (none: anonymously) and git's own
    /// headers from `headers`; `accept_encoding` lets upstream compress the response
    /// (which passes through as it is).
    pub async fn send(
        &self,
        method: Method,
        route: &Route,
        headers: &HeaderMap,
        body: Option<reqwest::Body>,
        token: Option<&str>,
        accept_encoding: bool,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let url = format!("{}{}", self.base, route.upstream_path());
        let mut request = self.client.request(method, url);
        for name in PASSED_REQUEST_HEADERS {
            if let Some(value) = headers.get(name) {
                request = request.header(name, value);
            }
        }
        if let Some(value) = headers.get("git-protocol") {
            request = request.header("git-protocol", value);
        }
        if accept_encoding && let Some(value) = headers.get(header::ACCEPT_ENCODING) {
            request = request.header(header::ACCEPT_ENCODING, value);
        }
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, basic_auth(token));
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        request.send().await
    }
}

/// GitHub takes an installation token as the password of any user name.
fn basic_auth(token: &str) -> HeaderValue {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).unwrap_or(HeaderValue::from_static(""));
    value.set_sensitive(true);
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_goes_in_basic_auth_marked_sensitive() {
        let value = basic_auth("t0k");
        assert!(value.is_sensitive());
        let encoded = value.to_str().unwrap().strip_prefix("Basic ").unwrap();
        let decoded = base64::engine::general_purpose::STANDARD.decode(encoded).unwrap();
        assert_eq!(decoded, b"x-access-token:t0k");
        assert!(!format!("{value:?}").contains(encoded));
    }
}

//! The head of a request to a run's HTTP proxy: `CONNECT host:port` (a tunnel), or an
//! absolute-form `GET http://host[:port]/path` (plain HTTP, forwarded in origin-form).
//! httparse reads the request line and headers (hyper's own parser: no hand-written
//! HTTP); this module reads the target and bounds everything. Nothing is forwarded
//! before the head is complete and decided, so no body streams upstream while a
//! decision is pending.

/// The most of a proxy request's head that is read; a longer one is refused.
pub const MAX_HEAD_BYTES: usize = 16 << 10;
/// The most headers a proxy request may carry.
pub const MAX_HEADERS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `CONNECT host:port`: a tunnel, whatever flows in it.
    Connect { host: String, port: u16 },
    /// `METHOD http://host[:port]/path?query`.
    Absolute { method: String, host: String, port: u16, path: String },
}

impl Target {
    pub fn host(&self) -> &str {
        match self {
            Target::Connect { host, .. } | Target::Absolute { host, .. } => host,
        }
    }

    pub fn port(&self) -> u16 {
        match self {
            Target::Connect { port, .. } | Target::Absolute { port, .. } => *port,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRequest {
    pub target: Target,
    /// In order, names as sent; values are bytes httparse accepted (no CR, LF or NUL).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Bytes of the head, request line to the blank line; what follows is the body
    /// (plain HTTP) or the tunnel's first bytes (CONNECT).
    pub head_len: usize,
}

impl ProxyRequest {
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_slice())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("the request head is over {MAX_HEAD_BYTES} bytes")]
    TooLong,
    #[error("the request has more than {MAX_HEADERS} headers")]
    TooManyHeaders,
    #[error("the request head is malformed: {0}")]
    Malformed(String),
    #[error("only HTTP/1.0 and HTTP/1.1 are spoken here")]
    Version,
    #[error("{0:?} is not a proxy target: send CONNECT host:port, or an absolute http:// URL")]
    Target(String),
    #[error("{0}:// is not proxied as plain HTTP: use CONNECT for it")]
    Scheme(String),
}

fn shown(text: &str) -> String {
    text.chars().take(120).collect()
}

/// Reads a proxy request's head from the start of `buf`: `Ok(None)` while incomplete.
pub fn parse(buf: &[u8]) -> Result<Option<ProxyRequest>, RequestError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let head_len = match request.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => return Err(RequestError::TooLong),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(RequestError::TooManyHeaders),
        Err(e) => return Err(RequestError::Malformed(e.to_string())),
    };
    if head_len > MAX_HEAD_BYTES {
        return Err(RequestError::TooLong);
    }
    if !matches!(request.version, Some(0 | 1)) {
        return Err(RequestError::Version);
    }
    let method = request.method.unwrap_or_default();
    let path = request.path.unwrap_or_default();
    let target = if method == "CONNECT" {
        let (host, port) = authority(path, None).ok_or_else(|| RequestError::Target(shown(path)))?;
        Target::Connect { host, port }
    } else {
        let (scheme, rest) = path.split_once("://").ok_or_else(|| RequestError::Target(shown(path)))?;
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(RequestError::Scheme(shown(scheme)));
        }
        let (authority_text, path) = match rest.find(['/', '?']) {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        // Credentials in the URL would be sent on; a fragment never is.
        if authority_text.contains('@') || path.contains('#') {
            return Err(RequestError::Target(shown(request.path.unwrap_or_default())));
        }
        let (host, port) = authority(authority_text, Some(80)).ok_or_else(|| RequestError::Target(shown(path)))?;
        let path = if path.starts_with('?') { format!("/{path}") } else { path.to_owned() };
        Target::Absolute { method: method.to_owned(), host, port, path }
    };
    let headers = request.headers.iter().map(|h| (h.name.to_owned(), h.value.to_vec())).collect();
    Ok(Some(ProxyRequest { target, headers, head_len }))
}

/// `host:port`, `[v6]:port`, or (with `default_port`) a host alone. The host is
/// returned as written; the decision canonicalizes it.
fn authority(text: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    let port_of = |p: &str| p.parse::<u16>().ok().filter(|p| *p > 0);
    let (host, port) = if text.starts_with('[') {
        let close = text.find(']')?;
        let (host, rest) = text.split_at(close + 1);
        match rest.strip_prefix(':') {
            Some(port) => (host, port_of(port)?),
            None if rest.is_empty() => (host, default_port?),
            None => return None,
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, port_of(port)?),
            None => (text, default_port?),
        }
    };
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

/// The head of a refusal: `status` with the machine-readable reason header
/// `X-Cc-Egress-Denied: <code>` and one line of text.
pub fn refusal(status: u16, reason: &str, code: &str, message: &str) -> Vec<u8> {
    let line: String = message.chars().map(|c| if c.is_control() { ' ' } else { c }).take(500).collect();
    let body = format!("cc-gateway: {line}\n");
    format!(
        "HTTP/1.1 {status} {reason}\r\nX-Cc-Egress-Denied: {code}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> ProxyRequest {
        parse(text.as_bytes()).unwrap().unwrap()
    }

    #[test]
    fn connect_and_absolute_form_are_read() {
        let text = "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n\x16\x03";
        let r = ok(text);
        assert_eq!(r.target, Target::Connect { host: "api.example.test".into(), port: 443 });
        assert_eq!(&text.as_bytes()[r.head_len..], b"\x16\x03", "the tunnel's first bytes follow the head");
        let r = ok("CONNECT [::1]:8443 HTTP/1.1\r\n\r\n");
        assert_eq!(r.target, Target::Connect { host: "[::1]".into(), port: 8443 });
        let r = ok("GET http://Example.test/a/b?c=d HTTP/1.1\r\nHost: x\r\nUser-Agent: curl\r\n\r\n");
        assert_eq!(
            r.target,
            Target::Absolute { method: "GET".into(), host: "Example.test".into(), port: 80, path: "/a/b?c=d".into() }
        );
        assert_eq!(r.header("user-agent"), Some(&b"curl"[..]));
        let r = ok("POST http://example.test:8080 HTTP/1.0\r\n\r\n");
        assert_eq!(r.target.port(), 8080);
        assert!(matches!(r.target, Target::Absolute { ref path, .. } if path == "/"));
        let r = ok("GET http://example.test?q HTTP/1.1\r\n\r\n");
        assert!(matches!(r.target, Target::Absolute { ref path, .. } if path == "/?q"));
    }

    #[test]
    fn an_incomplete_head_waits_and_a_long_one_is_refused() {
        assert_eq!(parse(b"CONNECT example.test:443 HTTP/1.1\r\nHost: exa"), Ok(None));
        let long = format!("CONNECT example.test:443 HTTP/1.1\r\nX: {}", "a".repeat(MAX_HEAD_BYTES));
        assert_eq!(parse(long.as_bytes()), Err(RequestError::TooLong));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        let text = format!("CONNECT example.test:443 HTTP/1.1\r\n{many}\r\n");
        assert_eq!(parse(text.as_bytes()), Err(RequestError::TooManyHeaders));
    }

    #[test]
    fn smuggling_and_odd_targets_are_refused() {
        for text in [
            "CONNECT example.test:443\r\nevil.test:443 HTTP/1.1\r\n\r\n",
            "CONNECT example.test\0.evil:443 HTTP/1.1\r\n\r\n",
            "CONNECT example.test:443 HTTP/1.1\r\nX: a\rb\r\n\r\n",
            "CONNECT example.test:443 HTTP/1.1\r\nX: a\0b\r\n\r\n",
            "CONNECT example.test HTTP/1.1\r\n\r\n",
            "CONNECT example.test:0 HTTP/1.1\r\n\r\n",
            "CONNECT example.test:65536 HTTP/1.1\r\n\r\n",
            "CONNECT :443 HTTP/1.1\r\n\r\n",
            "CONNECT [::1 HTTP/1.1\r\n\r\n",
            "GET /relative HTTP/1.1\r\nHost: example.test\r\n\r\n",
            "GET https://example.test/ HTTP/1.1\r\n\r\n",
            "GET ftp://example.test/ HTTP/1.1\r\n\r\n",
            "GET http://user:pass@example.test/ HTTP/1.1\r\n\r\n",
            "GET http://example.test/#frag HTTP/1.1\r\n\r\n",
            "GET http://example.test/ HTTP/2.0\r\n\r\n",
        ] {
            let got = parse(text.as_bytes());
            assert!(got.is_err(), "{text:?}: {got:?}");
            assert!(!got.unwrap_err().to_string().contains('\n'));
        }
    }

    #[test]
    fn a_refusal_names_its_reason_in_a_header() {
        let head = String::from_utf8(refusal(403, "Forbidden", "not_on_allowlist", "evil.test:443 is not\r\nallowed"))
            .unwrap();
        assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\nX-Cc-Egress-Denied: not_on_allowlist\r\n"), "{head}");
        assert!(head.ends_with("\r\n\r\ncc-gateway: evil.test:443 is not  allowed\n"), "{head}");
    }
}

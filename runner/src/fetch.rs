//! `web_fetch`: one GET through the run's own egress proxy. The runner opens a tunnel
//! with CONNECT on the proxy's Unix socket (bound into its envelope beside the run's
//! other gateway sockets), speaks TLS inside it for https, and reads the body up to a
//! limit. The proxy decides the host exactly as for any connection of the run's
//! (allowlist, always-deny, gate, resolved addresses) and records it; the runner has
//! no other route out. Redirects are not followed: each hop is a new, decided fetch.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cc_proto::tools::v1::{WebFetchArgs, WebFetchFormat, WebFetchResult};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio_rustls::rustls;
use tonic::Status;

pub const DEFAULT_MAX_BYTES: u64 = 1 << 20;
/// The runner's answer travels in one gRPC message (4 MiB at most), and text made
/// from bytes that are not UTF-8 can grow by half: 2 MiB leaves room.
pub const MAX_MAX_BYTES: u64 = 2 << 20;
/// Element nesting past which HTML is returned as it came: htmd walks the tree
/// recursively, and a page of 100,000 nested `<div>`s would overflow the stack.
const MAX_NESTING: usize = 512;
/// The converter's own thread's stack: 64 times what [`MAX_NESTING`] needs, for the
/// elements the HTML parser adds by itself.
const CONVERT_STACK: usize = 64 << 20;
/// The whole fetch, from the proxy's socket to the body's last byte read.
const DEADLINE: Duration = Duration::from_secs(30);
/// A proxy's answer head is a status line and a few headers.
const MAX_PROXY_HEAD: usize = 8192;

/// What the request asks for, checked before anything is opened.
#[derive(Debug, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, as sent.
    pub path: String,
    pub max_bytes: u64,
    pub markdown: bool,
}

pub fn target(args: &WebFetchArgs) -> Result<Target, Status> {
    let bad = |why: String| Status::invalid_argument(why);
    let url = url::Url::parse(&args.url).map_err(|e| bad(format!("{:?} is not a URL: {e}", short(&args.url))))?;
    let https = match url.scheme() {
        "https" => true,
        "http" => false,
        other => return Err(bad(format!("web_fetch takes http and https URLs, not {other}:"))),
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("a URL with a user name or password is refused: the run holds no credential".into()));
    }
    let host = match url.host() {
        Some(url::Host::Domain(name)) => name.to_owned(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => format!("[{ip}]"),
        None => return Err(bad(format!("{:?} names no host", short(&args.url)))),
    };
    let port = url.port_or_known_default().unwrap_or(if https { 443 } else { 80 });
    let path = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    let max_bytes = match args.max_bytes {
        0 => DEFAULT_MAX_BYTES,
        n if n > MAX_MAX_BYTES => return Err(bad(format!("max_bytes {n} is over the most, {MAX_MAX_BYTES}"))),
        n => n,
    };
    let markdown = args.format != WebFetchFormat::Text as i32;
    Ok(Target { https, host, port, path, max_bytes, markdown })
}

fn short(text: &str) -> String {
    text.chars().take(200).collect()
}

/// Fetches `args.url` through the proxy at `proxy`.
pub async fn fetch(proxy: &Path, args: &WebFetchArgs) -> Result<WebFetchResult, Status> {
    let target = target(args)?;
    tokio::time::timeout(DEADLINE, fetch_target(proxy, &target))
        .await
        .map_err(|_| Status::deadline_exceeded(format!("{} did not answer within {DEADLINE:?}", target.host)))?
}

async fn fetch_target(proxy: &Path, target: &Target) -> Result<WebFetchResult, Status> {
    let unavailable = |e: std::io::Error| Status::unavailable(format!("the run's egress proxy cannot be reached: {e}"));
    let mut tunnel = UnixStream::connect(proxy).await.map_err(unavailable)?;
    let authority = format!("{}:{}", target.host, target.port);
    tunnel
        .write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .map_err(unavailable)?;
    proxy_answer(&mut tunnel, &target.host).await?;
    if target.https {
        let name = rustls::pki_types::ServerName::try_from(target.host.trim_matches(['[', ']']).to_owned())
            .map_err(|e| Status::invalid_argument(format!("{} is not a TLS server name: {e}", target.host)))?;
        let tls = tokio_rustls::TlsConnector::from(tls_config()?)
            .connect(name, tunnel)
            .await
            .map_err(|e| Status::unavailable(format!("TLS with {} failed: {e}", target.host)))?;
        get(tls, target).await
    } else {
        get(tunnel, target).await
    }
}

/// Reads the proxy's answer to CONNECT: 200, or its refusal as PERMISSION_DENIED with
/// the proxy's reason (`not_on_allowlist: …`).
async fn proxy_answer(tunnel: &mut UnixStream, host: &str) -> Result<(), Status> {
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    // Byte by byte: what follows the head is the tunnel's, and must not be read here.
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_PROXY_HEAD {
            return Err(Status::unavailable("the run's egress proxy sent an over-long answer"));
        }
        match tunnel.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return Err(Status::unavailable("the run's egress proxy closed the connection before answering")),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let status = text.split(' ').nth(1).unwrap_or("");
    if status == "200" {
        return Ok(());
    }
    let header = |name: &str| {
        text.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    let code = header("x-cc-egress-denied").unwrap_or_else(|| format!("status {status}"));
    // The refusal's body is its one line of reason; the proxy closes after it.
    let mut body = Vec::new();
    let _ = tunnel.take(1024).read_to_end(&mut body).await;
    let body = String::from_utf8_lossy(&body);
    let why = body.lines().next().unwrap_or("").trim_start_matches("cc-gateway: ").trim();
    let why = if why.is_empty() { String::new() } else { format!(": {why}") };
    Err(Status::permission_denied(format!("the run's egress proxy refused {host} ({code}){why}")))
}

fn tls_config() -> Result<Arc<rustls::ClientConfig>, Status> {
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    // ring, as reqwest in the broker and gateway already builds it: rustls now prefers
    // aws-lc-rs (post-quantum key exchange), whose build needs cmake on every machine.
    #[allow(deprecated)]
    let provider = rustls::crypto::ring::default_provider();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| Status::internal(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

async fn get<S>(stream: S, target: &Target) -> Result<WebFetchResult, Status>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let failed = |e: hyper::Error| Status::unavailable(format!("{} failed: {e}", target.host));
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(failed)?;
    let connection = tokio::spawn(connection);
    let default_port = if target.https { 443 } else { 80 };
    let host =
        if target.port == default_port { target.host.clone() } else { format!("{}:{}", target.host, target.port) };
    let request = hyper::Request::get(&target.path)
        .header("host", host)
        .header("user-agent", "cc-runner web_fetch")
        .header("accept", "text/markdown, text/html;q=0.9, text/plain;q=0.8, */*;q=0.1")
        .header("connection", "close")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| Status::invalid_argument(format!("cannot make the request: {e}")))?;
    let response = sender.send_request(request).await.map_err(failed)?;
    let status = response.status().as_u16();
    let header =
        |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned).unwrap_or_default();
    let (content_type, location) = (header("content-type"), header("location"));
    let mut body = response.into_body();
    let mut read = Vec::new();
    let mut truncated = false;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(failed)?;
        if let Some(data) = frame.data_ref() {
            let room = usize::try_from(target.max_bytes).unwrap_or(usize::MAX) - read.len();
            if data.len() > room {
                read.extend_from_slice(&data[..room]);
                truncated = true;
                break;
            }
            read.extend_from_slice(data);
        }
    }
    connection.abort();
    let (markdown, kind) = (target.markdown, content_type.clone());
    let (read, text) = tokio::task::spawn_blocking(move || {
        let text = render(&read, &kind, markdown);
        (read, text)
    })
    .await
    .map_err(|e| Status::internal(format!("rendering the page failed: {e}")))?;
    Ok(WebFetchResult { status: status.into(), text, content_type, bytes: read.len() as u64, truncated, location })
}

/// The body as the caller asked: Markdown from HTML, other text as it came, nothing
/// for a body that is not text.
pub fn render(body: &[u8], content_type: &str, markdown: bool) -> String {
    let kind = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let texty = kind.is_empty()
        || kind.starts_with("text/")
        || kind.ends_with("+xml")
        || kind.ends_with("+json")
        || ["application/json", "application/xml", "application/javascript", "application/xhtml+xml"]
            .contains(&kind.as_str());
    if !texty {
        return String::new();
    }
    let text = String::from_utf8_lossy(body).into_owned();
    if markdown && (kind == "text/html" || kind == "application/xhtml+xml") && nesting(&text) <= MAX_NESTING {
        let html = text.clone();
        let converted = std::thread::Builder::new()
            .name("web_fetch markdown".into())
            .stack_size(CONVERT_STACK)
            .spawn(move || htmd::convert(&html).ok())
            .ok()
            .and_then(|thread| thread.join().ok().flatten());
        return converted.unwrap_or(text);
    }
    text
}

/// How deep `html`'s elements nest, estimated on the high side: an end tag closes
/// only the element on top (the HTML parser ignores one that would close past an
/// element of another kind), void and self-closed elements open nothing, and the
/// contents of script, style and the like are skipped.
pub fn nesting(html: &str) -> usize {
    const VOID: &[&str] =
        &["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"];
    const RAW: &[&str] = &["script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes"];
    let lower = html.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let (mut open, mut deepest, mut at) = (Vec::<&str>::new(), 0, 0);
    while let Some(found) = lower[at..].find('<') {
        let start = at + found + 1;
        let closing = bytes.get(start) == Some(&b'/');
        let name_at = if closing { start + 1 } else { start };
        let name_len = lower[name_at..].bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'-').count();
        let name = &lower[name_at..name_at + name_len];
        let end = lower[name_at..].find('>').map_or(lower.len(), |e| name_at + e);
        at = (end + 1).min(lower.len());
        if name.is_empty() || !bytes[name_at].is_ascii_alphabetic() {
            continue;
        }
        if closing {
            if open.last() == Some(&name) {
                open.pop();
            }
        } else if RAW.contains(&name) {
            at = lower[at..].find(&format!("</{name}")).map_or(lower.len(), |e| at + e);
        } else if !VOID.contains(&name) && !lower[..end].ends_with('/') {
            open.push(name);
            deepest = deepest.max(open.len());
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str) -> WebFetchArgs {
        WebFetchArgs { url: url.into(), max_bytes: 0, format: 0 }
    }

    #[test]
    fn urls_are_checked_before_anything_opens() {
        let t = target(&args("https://Docs.Example.test/a/b?q=1#frag")).unwrap();
        assert_eq!(
            t,
            Target {
                https: true,
                host: "docs.example.test".into(),
                port: 443,
                path: "/a/b?q=1".into(),
                max_bytes: DEFAULT_MAX_BYTES,
                markdown: true
            }
        );
        assert_eq!(target(&args("http://[::1]:8080")).unwrap().host, "[::1]");
        assert_eq!(target(&args("http://0x7f.1/")).unwrap().host, "127.0.0.1", "the URL parser's own spelling");
        for bad in ["file:///etc/passwd", "ftp://x.test/", "http://u:p@x.test/", "not a url", "http://"] {
            assert_eq!(target(&args(bad)).unwrap_err().code(), tonic::Code::InvalidArgument, "{bad}");
        }
        let over = WebFetchArgs { max_bytes: MAX_MAX_BYTES + 1, ..args("http://x.test/") };
        assert_eq!(target(&over).unwrap_err().code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn html_becomes_markdown_and_binary_is_not_returned() {
        let html = b"<html><body><h1>Title</h1><p>Some <b>bold</b> text.</p></body></html>";
        let md = render(html, "text/html; charset=utf-8", true);
        assert!(md.contains("# Title") && md.contains("**bold**"), "{md}");
        assert_eq!(render(html, "text/html", false), String::from_utf8_lossy(html));
        assert_eq!(render(b"{\"a\":1}", "application/json", true), "{\"a\":1}");
        assert_eq!(render(b"\x89PNG", "image/png", true), "");
    }

    #[test]
    fn deep_nesting_is_returned_as_text_not_walked() {
        assert_eq!(nesting("<html><body><div><p>a<br>b</p><img src=x/></div></body></html>"), 4);
        assert_eq!(nesting("<script>if (a<b && c<d) {}</script><p>x</p>"), 1);
        // Stray end tags close nothing the parser would not: the estimate stays high.
        let sneaky = "<span><div></span>".repeat(400);
        assert!(nesting(&sneaky) >= 800, "{}", nesting(&sneaky));
        let deep = "<div>".repeat(100_000);
        assert!(nesting(&deep) > MAX_NESTING);
        assert_eq!(render(deep.as_bytes(), "text/html", true), deep, "as it came, and no crash");
        // Within the limit, converted on a thread of its own.
        let fine = format!("{}<b>deep</b>{}", "<div>".repeat(400), "</div>".repeat(400));
        assert!(render(fine.as_bytes(), "text/html", true).contains("**deep**"));
    }
}

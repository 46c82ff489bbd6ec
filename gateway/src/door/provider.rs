//! The model door's connections to providers: HTTP/1.1 over TCP, or over TLS
//! (rustls) trusting the system's roots and a provider's own `ca_file`.
//!
//! A connection here has no task of its own. The answer that uses it drives it from
//! its own poll ([`ProviderBody`]), so a streamed answer is read from the provider and
//! written to the agent by one task, with nothing handed between tasks per chunk. A
//! general client (reqwest's) runs each connection on a task of its own and passes the
//! body on through a channel one chunk deep: a wake-up each way per chunk, which held
//! the door's streaming to half a straight transfer.
//!
//! A connection the provider keeps alive waits in a small pool, undriven. When it is
//! taken it is polled once, so one the provider closed meanwhile is seen and dropped.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri, header};
use http_body_util::combinators::BoxBody;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

/// A request's body on its way to the provider.
pub type RequestBody = BoxBody<Bytes, std::io::Error>;

/// How long a provider may take to accept a connection and finish TLS.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a provider may stay silent: before its answer's head, or within its body.
/// The agent's own timeout and the run's end bound an answer otherwise.
const SILENCE_TIMEOUT: Duration = Duration::from_secs(600);
/// Each read from a provider: a streamed answer that comes faster than the agent reads
/// moves in pieces this large. In `cc-bench models`, 1 MiB streamed faster than 256 KiB
/// (0.64–0.70 of a straight transfer against 0.57–0.60) and no slower than 4 MiB.
const READ_BYTES: usize = 1 << 20;
/// How long a kept-alive connection waits for its next request: less than providers
/// keep one open, so that a request seldom meets a connection just closed.
const IDLE_FOR: Duration = Duration::from_secs(30);
/// Kept-alive connections per provider.
const IDLE_PER_ORIGIN: usize = 8;

/// The transport under HTTP: plain TCP or TLS over it.
trait Transport: AsyncRead + AsyncWrite + Send + Sync + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin> Transport for T {}

type Connection = http1::Connection<TokioIo<Box<dyn Transport>>, RequestBody>;

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("{0:?} is not an http or https URL with a host")]
    Url(String),
    #[error("cannot connect to {origin}: {source}")]
    Connect { origin: String, source: std::io::Error },
    #[error("{origin} did not accept a connection within {}s", CONNECT_TIMEOUT.as_secs())]
    ConnectTimeout { origin: String },
    #[error("{origin}'s certificate is not trusted ({detail})")]
    Certificate { origin: String, detail: String },
    #[error("TLS with {origin} failed: {source}")]
    Tls { origin: String, source: std::io::Error },
    #[error("the provider's ca_file: {0}")]
    CaFile(String),
    #[error("the HTTP exchange failed: {0}")]
    Http(#[from] hyper::Error),
    #[error("the provider was silent for {}s", SILENCE_TIMEOUT.as_secs())]
    Silent,
}

impl ProviderError {
    /// Whether the provider's certificate was refused: a private CA it needs named.
    pub fn is_certificate(&self) -> bool {
        matches!(self, ProviderError::Certificate { .. })
    }
}

/// Where a connection goes, and what it trusts: a connection is reused only for the
/// same.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Origin {
    https: bool,
    host: String,
    port: u16,
    ca_pem: Vec<u8>,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// A connection and its handle for requests, with a second handle on its socket
/// (a duplicate descriptor) to look at it while it is idle.
struct Link {
    sender: http1::SendRequest<RequestBody>,
    connection: Pin<Box<Connection>>,
    socket: std::net::TcpStream,
}

impl Link {
    /// Whether an idle connection can carry the next request: open, ready, and with
    /// nothing unasked-for waiting on it. Peeking asks the socket itself: the
    /// runtime learns of the provider's close only when its driver next turns.
    fn reusable(&mut self) -> bool {
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        if self.connection.as_mut().poll(&mut cx).is_ready() || !self.sender.is_ready() {
            return false;
        }
        // Nonblocking, as the connection's own descriptor (they share the file).
        matches!(self.socket.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

struct Idle {
    link: Link,
    since: Instant,
}

/// The door's connections, shared by every run: TLS settings by trust roots (reading
/// the system's roots is slow), and the kept-alive connections.
#[derive(Default)]
pub struct Providers {
    tls: Mutex<HashMap<Vec<u8>, Arc<rustls::ClientConfig>>>,
    idle: Mutex<HashMap<Origin, Vec<Idle>>>,
}

impl Providers {
    /// Sends `request` to `url` (the provider's base URL and the call's path and
    /// query), on a kept-alive connection or a new one. The answer's body drives the
    /// connection; read it to its end and the connection is kept for the next request.
    pub async fn send(
        self: &Arc<Self>,
        url: &str,
        ca_pem: &[u8],
        mut request: Request<RequestBody>,
    ) -> Result<Response<ProviderBody>, ProviderError> {
        let uri: Uri = url.parse().map_err(|_| ProviderError::Url(url.to_owned()))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(ProviderError::Url(url.to_owned())),
        };
        let (Some(authority), Some(host)) = (uri.authority(), uri.host()) else {
            return Err(ProviderError::Url(url.to_owned()));
        };
        let host_header = HeaderValue::from_str(authority.as_str()).map_err(|_| ProviderError::Url(url.to_owned()))?;
        let origin = Origin {
            https,
            host: host.trim_matches(['[', ']']).to_owned(),
            port: uri.port_u16().unwrap_or(if https { 443 } else { 80 }),
            ca_pem: ca_pem.to_vec(),
        };
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        *request.uri_mut() = path.parse().map_err(|_| ProviderError::Url(url.to_owned()))?;
        request.headers_mut().insert(header::HOST, host_header);

        let Link { mut sender, mut connection, socket } = match self.take(&origin) {
            Some(kept) => kept,
            None => self.connect(&origin).await?,
        };
        let mut head = std::pin::pin!(sender.send_request(request));
        let mut open = true;
        let answered = std::future::poll_fn(|cx| {
            if let Poll::Ready(result) = head.as_mut().poll(cx) {
                return Poll::Ready(result);
            }
            if open && let Poll::Ready(result) = connection.as_mut().poll(cx) {
                open = false;
                result?;
                // Closed before its answer: the request's future says why.
                return head.as_mut().poll(cx);
            }
            Poll::Pending
        });
        let response = tokio::time::timeout(SILENCE_TIMEOUT, answered).await.map_err(|_| ProviderError::Silent)??;
        let (parts, incoming) = response.into_parts();
        let body = ProviderBody {
            incoming,
            connection: open.then_some(connection),
            sender: Some(sender),
            home: Some((self.clone(), origin, socket)),
            heard: Instant::now(),
            silence: None,
        };
        Ok(Response::from_parts(parts, body))
    }

    /// A kept-alive connection to `origin` that is still open and ready.
    fn take(&self, origin: &Origin) -> Option<Link> {
        loop {
            let mut idle = {
                let mut pool = self.idle.lock().unwrap_or_else(|p| p.into_inner());
                pool.get_mut(origin)?.pop()?
            };
            if idle.since.elapsed() <= IDLE_FOR && idle.link.reusable() {
                return Some(idle.link);
            }
        }
    }

    fn keep(&self, origin: Origin, link: Link) {
        let mut pool = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let kept = pool.entry(origin).or_default();
        kept.retain(|idle| idle.since.elapsed() <= IDLE_FOR);
        if kept.len() < IDLE_PER_ORIGIN {
            kept.push(Idle { link, since: Instant::now() });
        }
    }

    async fn connect(&self, origin: &Origin) -> Result<Link, ProviderError> {
        let (transport, socket) = tokio::time::timeout(CONNECT_TIMEOUT, self.transport(origin))
            .await
            .map_err(|_| ProviderError::ConnectTimeout { origin: origin.to_string() })??;
        let (sender, connection) =
            http1::Builder::new().read_buf_exact_size(Some(READ_BYTES)).handshake(TokioIo::new(transport)).await?;
        Ok(Link { sender, connection: Box::pin(connection), socket })
    }

    /// The connection's transport, and a duplicate of its socket's descriptor.
    async fn transport(&self, origin: &Origin) -> Result<(Box<dyn Transport>, std::net::TcpStream), ProviderError> {
        // A ca_file that cannot be used is said before anything is opened.
        let tls = if origin.https { Some(self.tls_config(&origin.ca_pem)?) } else { None };
        let tcp = TcpStream::connect((origin.host.as_str(), origin.port))
            .await
            .map_err(|source| ProviderError::Connect { origin: origin.to_string(), source })?;
        // Events go as they come, not held for a full segment.
        let _ = tcp.set_nodelay(true);
        let socket = std::os::fd::AsFd::as_fd(&tcp)
            .try_clone_to_owned()
            .map(std::net::TcpStream::from)
            .map_err(|source| ProviderError::Connect { origin: origin.to_string(), source })?;
        let Some(tls) = tls else { return Ok((Box::new(tcp), socket)) };
        let name = rustls::pki_types::ServerName::try_from(origin.host.clone())
            .map_err(|_| ProviderError::Url(origin.host.clone()))?;
        let tls = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|source| tls_error(origin, source))?;
        Ok((Box::new(tls), socket))
    }

    fn tls_config(&self, ca_pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, ProviderError> {
        let mut configs = self.tls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(config) = configs.get(ca_pem) {
            return Ok(config.clone());
        }
        let config = Arc::new(tls_config(ca_pem)?);
        configs.insert(ca_pem.to_vec(), config.clone());
        Ok(config)
    }
}

/// TLS trusting the system's roots, as a person's own tools on the host would, and the
/// provider's own CA when it names one.
fn tls_config(ca_pem: &[u8]) -> Result<rustls::ClientConfig, ProviderError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    // A system root rustls cannot parse is skipped, as every client does.
    let (_, _) = roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if !ca_pem.is_empty() {
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            let cert = cert.map_err(|e| ProviderError::CaFile(e.to_string()))?;
            roots.add(cert).map_err(|e| ProviderError::CaFile(e.to_string()))?;
            added += 1;
        }
        if added == 0 {
            return Err(ProviderError::CaFile("it holds no PEM certificate".into()));
        }
    }
    // ring, as the runner's fetch and reqwest build it: aws-lc-rs needs cmake to build.
    #[allow(deprecated)]
    let provider = rustls::crypto::ring::default_provider();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| ProviderError::CaFile(format!("TLS set-up: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn tls_error(origin: &Origin, source: std::io::Error) -> ProviderError {
    let certificate = source
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .is_some_and(|e| matches!(e, rustls::Error::InvalidCertificate(_)));
    if certificate {
        ProviderError::Certificate { origin: origin.to_string(), detail: source.to_string() }
    } else {
        ProviderError::Tls { origin: origin.to_string(), source }
    }
}

/// A provider's answer body, which drives its connection as it is read. At its end
/// the connection goes back to the pool when the provider keeps it alive.
pub struct ProviderBody {
    incoming: Incoming,
    connection: Option<Pin<Box<Connection>>>,
    sender: Option<http1::SendRequest<RequestBody>>,
    /// Where the connection goes back to, with its socket's second handle.
    home: Option<(Arc<Providers>, Origin, std::net::TcpStream)>,
    /// When the provider last sent anything.
    heard: Instant,
    silence: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl ProviderBody {
    /// Lets the connection read and decode what has come.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(connection) = &mut self.connection
            && let Poll::Ready(result) = connection.as_mut().poll(cx)
        {
            // Closed: the body has what it will get, or its error.
            if let Err(e) = result {
                tracing::debug!(error = %e, "a provider's connection ended in an error");
            }
            self.connection = None;
        }
    }

    /// At the answer's end: the connection, once idle, is kept for the next request.
    fn release(&mut self, cx: &mut Context<'_>) {
        self.drive(cx);
        let (Some(connection), Some(sender), Some((providers, origin, socket))) =
            (self.connection.take(), self.sender.take(), self.home.take())
        else {
            return;
        };
        if sender.is_ready() {
            providers.keep(origin, Link { sender, connection, socket });
        }
    }

    /// Whether the provider has been silent too long; otherwise the timer is armed. It
    /// is moved on only when it fires, not on every piece heard.
    fn silent_too_long(&mut self, cx: &mut Context<'_>) -> bool {
        let heard = self.heard;
        let timer =
            self.silence.get_or_insert_with(|| Box::pin(tokio::time::sleep_until((heard + SILENCE_TIMEOUT).into())));
        while timer.as_mut().poll(cx).is_ready() {
            if heard.elapsed() >= SILENCE_TIMEOUT {
                return true;
            }
            timer.as_mut().reset((heard + SILENCE_TIMEOUT).into());
        }
        false
    }
}

impl Body for ProviderBody {
    type Data = Bytes;
    type Error = ProviderError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, ProviderError>>> {
        let this = &mut *self;
        this.drive(cx);
        match Pin::new(&mut this.incoming).poll_frame(cx) {
            Poll::Ready(None) => {
                this.release(cx);
                Poll::Ready(None)
            }
            Poll::Ready(Some(frame)) => {
                this.heard = Instant::now();
                Poll::Ready(Some(frame.map_err(ProviderError::from)))
            }
            Poll::Pending if this.silent_too_long(cx) => Poll::Ready(Some(Err(ProviderError::Silent))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::{BodyExt, Empty};

    use super::*;

    /// A provider on loopback that answers every request `hello` with a length, and
    /// counts the connections it accepts. `close_after_one`: it closes each connection
    /// after its first answer, without saying so in a header, when told to (the
    /// sender); it then says it has (the receiver).
    fn provider(close_after_one: bool) -> (u16, Arc<AtomicUsize>, Closing) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (closed_tx, closed) = std::sync::mpsc::channel();
        let (close, close_rx) = std::sync::mpsc::channel::<()>();
        let close_rx = Arc::new(Mutex::new(close_rx));
        let counted = accepted.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                counted.fetch_add(1, Ordering::SeqCst);
                let (closed_tx, close_rx) = (closed_tx.clone(), close_rx.clone());
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(&conn);
                    loop {
                        let mut length = 0usize;
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        loop {
                            line.clear();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                                break;
                            }
                            if let Some((name, value)) = line.split_once(':')
                                && name.eq_ignore_ascii_case("content-length")
                            {
                                length = value.trim().parse().unwrap();
                            }
                        }
                        let mut body = vec![0; length];
                        reader.read_exact(&mut body).unwrap();
                        (&conn).write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").unwrap();
                        if close_after_one {
                            close_rx.lock().unwrap().recv().unwrap();
                            conn.shutdown(std::net::Shutdown::Both).unwrap();
                            closed_tx.send(()).unwrap();
                            return;
                        }
                    }
                });
            }
        });
        (port, accepted, (close, closed))
    }

    type Closing = (std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>);

    fn kept(providers: &Providers) -> usize {
        providers.idle.lock().unwrap().values().map(Vec::len).sum()
    }

    async fn get(providers: &Arc<Providers>, port: u16) -> String {
        let request = Request::new(Empty::new().map_err(|never| match never {}).boxed());
        let url = format!("http://127.0.0.1:{port}/v1/models");
        let response = providers.send(&url, b"", request).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    /// The door's kept connections live on its one runtime, as here.
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn a_connection_the_provider_keeps_alive_serves_the_next_request() {
        let (port, accepted, _) = provider(false);
        let providers = Arc::new(Providers::default());
        let runtime = runtime();
        for _ in 0..3 {
            assert_eq!(runtime.block_on(get(&providers, port)), "hello");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "each request after the first reuses the connection");
        assert_eq!(kept(&providers), 1);
    }

    #[test]
    fn a_kept_connection_the_provider_closed_is_dropped_and_a_new_one_made() {
        let (port, accepted, (close, closed)) = provider(true);
        let providers = Arc::new(Providers::default());
        let runtime = runtime();
        assert_eq!(runtime.block_on(get(&providers, port)), "hello");
        assert_eq!(kept(&providers), 1, "the connection was kept, open as far as the door knew");
        close.send(()).unwrap();
        closed.recv().unwrap();
        assert_eq!(runtime.block_on(get(&providers, port)), "hello", "the closed connection was not used");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_url_that_is_not_http_is_refused_before_anything_is_opened() {
        let providers = Arc::new(Providers::default());
        let runtime = runtime();
        for url in ["ftp://127.0.0.1/v1", "/v1/messages", "http:///v1"] {
            let request = Request::new(Empty::new().map_err(|never| match never {}).boxed());
            let error = runtime.block_on(providers.send(url, b"", request)).err().unwrap();
            assert!(matches!(error, ProviderError::Url(_)), "{url}: {error}");
        }
        let request = Request::new(Empty::new().map_err(|never| match never {}).boxed());
        let error = runtime.block_on(providers.send("https://127.0.0.1:1/v1", b"not pem", request)).err().unwrap();
        assert!(matches!(error, ProviderError::CaFile(_)), "{error}");
    }
}

//! A run's egress proxies: HTTP (CONNECT and absolute-form) and SOCKS5 (CONNECT).
//! For each connection: read the request's head within a deadline, decide in the fixed
//! order of [`cc_policy::egress::decide`] (host, always-deny, allowlist), ask the gate
//! `access_network` once per host for the run, resolve once, check every address, dial
//! the checked addresses (never the name again), answer, then copy both ways with
//! tokio's `copy_bidirectional`. Nothing reaches upstream before the decision.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use cc_proto::common::v1::{Decision, EffectClass};
use cc_proto::supervisor::v1 as sv;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use super::loopback::Loopback;
use super::report::{Seen, What};
use super::splice;
use super::{RunDoor, Shared};
use crate::egress::{http_request, socks};
use cc_policy::egress::allowlist::{Allowlist, Entry};
use cc_policy::egress::decide::{Denial, EgressPolicy, codes};
use cc_policy::egress::deny::DenyList;
use cc_policy::egress::host::{Host, canonical};

/// How long a name may take to resolve, and an address to answer.
const RESOLVE: Duration = Duration::from_secs(5);
const DIAL: Duration = Duration::from_secs(10);

/// Each direction's buffer when a tunnel cannot splice: tokio's default 8 KiB held a
/// tunnel to a quarter of loopback's speed.
const TUNNEL_BUFFER: usize = 256 * 1024;

/// Codes beyond the decision's own.
const NETWORK_OFF: &str = "network_off";
const GATE_DENIED: &str = "gate_denied";
const UNREACHABLE: &str = "upstream_unreachable";
const BAD_REQUEST: &str = "bad_request";
const HANDSHAKE_TIMEOUT: &str = "handshake_timeout";
const TOO_MANY: &str = "too_many_connections";
const AUTH_REQUIRED: &str = "proxy_auth_required";
/// The host of a refusal whose request could not be read.
const UNREAD: &str = "(unreadable request)";
/// The host of a refusal of a loopback client without the run's credential.
const UNAUTHENTICATED: &str = "(unauthenticated)";

/// A run's network as the supervisor gave it, comparable (a run told again with the
/// same policy keeps its doors).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressConfig {
    pub network: bool,
    /// (entry, source)
    pub allow: Vec<(String, String)>,
    pub deny: Vec<(String, String)>,
    /// (host, addresses), like curl's --resolve.
    pub resolve: Vec<(String, Vec<String>)>,
    /// For a run without an envelope: the loopback ports its proxies also serve.
    pub loopback: Option<Loopback>,
}

/// A run's egress state: its policy, read once, and the gate's answers so far.
pub struct EgressRun {
    run_id: String,
    workspace: String,
    mode: i32,
    network: bool,
    policy: EgressPolicy,
    resolve: HashMap<Host, Vec<IpAddr>>,
    /// The gate's answer per host, for the run's life.
    decided: Mutex<HashMap<Host, Result<(), String>>>,
}

impl EgressRun {
    pub fn new(door: &RunDoor) -> Result<EgressRun, String> {
        let entries = |list: &[(String, String)]| -> Result<Vec<Entry>, String> {
            list.iter()
                .map(|(entry, source)| Entry::parse(entry, source).map_err(|e| format!("{source}: {e}")))
                .collect()
        };
        let egress = &door.egress;
        let allow = if egress.network { Allowlist { entries: entries(&egress.allow)? } } else { Allowlist::default() };
        let mut resolve = HashMap::new();
        for (host, addresses) in &egress.resolve {
            let host = canonical(host).map_err(|e| format!("resolve {host:?}: {e}"))?;
            let addresses = addresses
                .iter()
                .map(|a| a.parse::<IpAddr>().map_err(|_| format!("resolve {host}: {a:?} is not an address")))
                .collect::<Result<Vec<_>, _>>()?;
            resolve.insert(host, addresses);
        }
        Ok(EgressRun {
            run_id: door.run_id.clone(),
            workspace: door.workspace.clone(),
            mode: door.mode,
            network: egress.network,
            policy: EgressPolicy { deny: DenyList::new(entries(&egress.deny)?), allow },
            resolve,
            decided: Mutex::default(),
        })
    }

    fn denied(&self, shared: &Shared, host: &str, port: u16, rule: &'static str, reason: &str) {
        tracing::info!(run = %self.run_id, host = %host.escape_debug(), port, rule, reason, "egress denied");
        let what = What::Denied { rule, reason: reason.to_owned() };
        shared.reporter.report(Seen {
            run_id: self.run_id.clone(),
            host: host.to_owned(),
            port,
            what,
            forwarded: false,
        });
    }

    fn seen(&self, shared: &Shared, host: &Host, port: u16, what: What) {
        shared.reporter.report(Seen {
            run_id: self.run_id.clone(),
            host: host_word(host),
            port,
            what,
            forwarded: false,
        });
    }

    /// A connection past the run's cap: refused and recorded.
    pub fn refuse_too_many(&self, shared: &Shared) {
        let reason = format!("this run holds {} connections through its proxies already", super::MAX_TUNNELS);
        self.denied(shared, "(any)", 0, TOO_MANY, &reason);
    }

    /// Copies both ways until both sides are done, then records the bytes: counted as
    /// they pass, so a connection that ends in an error still counts what it carried.
    /// Spliced in the kernel ([`super::splice`]); copied through buffers only when no
    /// pipe can be had.
    async fn carry<S: Client>(&self, shared: &Shared, host: &Host, port: u16, client: S, upstream: &mut TcpStream) {
        client.widen();
        let carried = splice::Carried::default();
        let (sent, received) = match splice::both_ways(&client, &*upstream, &carried).await {
            Ok(()) => (carried.a_to_b.load(Ordering::Relaxed), carried.b_to_a.load(Ordering::Relaxed)),
            Err(e) => {
                tracing::debug!(run = %self.run_id, error = %e, "no pipe for splicing: copying through buffers");
                let mut client = Counted::new(client);
                let _ =
                    tokio::io::copy_bidirectional_with_sizes(&mut client, upstream, TUNNEL_BUFFER, TUNNEL_BUFFER).await;
                (client.read, client.written)
            }
        };
        self.seen(shared, host, port, What::Closed { sent, received });
    }

    /// The decision, then the dial: a connection to a checked address, or why not.
    async fn connect(&self, shared: &Shared, raw_host: &str, port: u16) -> Result<(Host, TcpStream), Denial> {
        if !self.network {
            return Err(denial(NETWORK_OFF, "this run's network is off (ccctl run start --network on)".into()));
        }
        let admitted = self.policy.admit(raw_host, port)?;
        self.ask_gate(shared, &admitted.host, port).await?;
        let resolved = match &admitted.host {
            Host::Ip(ip) => vec![*ip],
            Host::Name(name) => match self.resolve.get(&admitted.host) {
                Some(addresses) => addresses.clone(),
                None => resolve(name, port).await?,
            },
        };
        let dial = self.policy.check_addresses(&admitted, &resolved, &own_addresses())?;
        match tokio::time::timeout(DIAL, TcpStream::connect(&dial[..])).await {
            Ok(Ok(stream)) => {
                tracing::info!(run = %self.run_id, host = %admitted.host, port, rule = %admitted.rule, "egress allowed");
                self.seen(shared, &admitted.host, port, What::Opened);
                Ok((admitted.host, stream))
            }
            Ok(Err(e)) => Err(denial(UNREACHABLE, format!("{}:{port} cannot be reached: {e}", admitted.host))),
            Err(_) => Err(denial(UNREACHABLE, format!("{}:{port} did not answer within {DIAL:?}", admitted.host))),
        }
    }

    /// The gate's `access_network` for `host`, asked once per host for the run.
    async fn ask_gate(&self, shared: &Shared, host: &Host, port: u16) -> Result<(), Denial> {
        let known = self.decided.lock().ok().and_then(|d| d.get(host).cloned());
        let answer = match known {
            Some(answer) => answer,
            None => {
                let action = sv::Action {
                    effects: vec![EffectClass::AccessNetwork as i32],
                    scope: Some(sv::ActionScope { domains: vec![host_word(host)], ..Default::default() }),
                    mode: self.mode,
                    workspace_id: self.workspace.clone(),
                    run_id: self.run_id.clone(),
                    summary: format!("connect to {host}:{port}"),
                    ..Default::default()
                };
                let answer = match shared.peers.decide(action).await {
                    Ok(decided) if decided.decision == Decision::Allow as i32 => Ok(()),
                    Ok(decided) => Err(decided.reason),
                    // Not cached: the next connection asks again.
                    Err(e) => return Err(denial(GATE_DENIED, format!("the gate could not be asked: {e}"))),
                };
                if let Ok(mut decided) = self.decided.lock() {
                    decided.insert(host.clone(), answer.clone());
                }
                answer
            }
        };
        answer.map_err(|reason| denial(GATE_DENIED, format!("{host}: {reason}")))
    }
}

/// The gate's rules name domains as hosts: an IPv6 address without brackets.
fn host_word(host: &Host) -> String {
    match host {
        Host::Ip(ip) => ip.to_string(),
        Host::Name(name) => name.clone(),
    }
}

fn denial(code: &'static str, message: String) -> Denial {
    Denial { code, message }
}

/// One resolution; every address it gives is checked before any is dialled.
async fn resolve(name: &str, port: u16) -> Result<Vec<IpAddr>, Denial> {
    match tokio::time::timeout(RESOLVE, tokio::net::lookup_host((name, port))).await {
        Ok(Ok(addresses)) => {
            let mut ips: Vec<IpAddr> = addresses.map(|a| a.ip()).collect();
            ips.dedup();
            Ok(ips)
        }
        Ok(Err(e)) => Err(denial(codes::NO_ADDRESS, format!("{name} does not resolve: {e}"))),
        Err(_) => Err(denial(codes::NO_ADDRESS, format!("{name} did not resolve within {RESOLVE:?}"))),
    }
}

/// The host's own interface addresses, read for each decision (they change).
fn own_addresses() -> Vec<IpAddr> {
    let Ok(interfaces) = nix::ifaddrs::getifaddrs() else { return Vec::new() };
    interfaces
        .filter_map(|i| i.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect()
}

/// HTTP status for a denial's code.
fn status_of(code: &str) -> (u16, &'static str) {
    match code {
        codes::BAD_HOST => (400, "Bad Request"),
        codes::NO_ADDRESS | UNREACHABLE => (502, "Bad Gateway"),
        _ => (403, "Forbidden"),
    }
}

/// A connection past the run's cap: 503, and closed.
pub fn too_many(stream: UnixStream) {
    let head = http_request::refusal(503, "Service Unavailable", TOO_MANY, "this run holds too many connections");
    if let Ok(std) = stream.into_std() {
        let _ = std.set_nonblocking(false);
        let _ = std::io::Write::write_all(&mut &std, &head);
    }
}

/// A proxy's client: a Unix socket of the run's (bridged into its envelopes), or a
/// loopback TCP connection that presented the run's credential.
pub trait Client: tokio::io::AsyncRead + tokio::io::AsyncWrite + splice::Socket + Unpin + Send + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + splice::Socket + Unpin + Send + 'static> Client for T {}

async fn read_more<S: Client>(stream: &mut S, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut chunk = [0u8; 4096];
    let n = stream.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n > 0)
}

/// The HTTP proxy, one request per connection.
/// `auth`: the credential a loopback client must present; `None` on the run's socket.
pub async fn http<S: Client>(mut client: S, run: Arc<EgressRun>, shared: Arc<Shared>, auth: Option<Loopback>) {
    // Ok(None): the client went away without a byte.
    let head = async {
        let mut buf = Vec::new();
        loop {
            match http_request::parse(&buf) {
                Ok(Some(request)) => return Ok(Some((request, buf))),
                Ok(None) => {}
                Err(e) => return Err(e.to_string()),
            }
            match read_more(&mut client, &mut buf).await {
                Ok(true) => {}
                _ if buf.is_empty() => return Ok(None),
                _ => return Err("the client closed before its request was complete".into()),
            }
        }
    };
    let (request, buf) = match tokio::time::timeout(shared.handshake, head).await {
        Ok(Ok(Some(read))) => read,
        Ok(Ok(None)) => return,
        Ok(Err(why)) => {
            run.denied(&shared, UNREAD, 0, BAD_REQUEST, &why);
            let _ = client.write_all(&http_request::refusal(400, "Bad Request", BAD_REQUEST, &why)).await;
            return;
        }
        Err(_) => {
            let why = format!("no complete request within {:?}", shared.handshake);
            run.denied(&shared, UNREAD, 0, HANDSHAKE_TIMEOUT, &why);
            let _ = client.write_all(&http_request::refusal(408, "Request Timeout", HANDSHAKE_TIMEOUT, &why)).await;
            return;
        }
    };
    if let Some(auth) = &auth
        && !auth.admits_http(request.header("proxy-authorization"))
    {
        let why = "this proxy needs the run's credential (the run's HTTP_PROXY carries it)";
        // Not under the host asked for: whoever asked may not be the run at all, and
        // must not write destinations into its record.
        run.denied(&shared, UNAUTHENTICATED, 0, AUTH_REQUIRED, why);
        let mut answer = http_request::refusal(407, "Proxy Authentication Required", AUTH_REQUIRED, why);
        let at = answer.windows(2).position(|w| w == b"\r\n").map_or(0, |p| p + 2);
        answer.splice(at..at, b"Proxy-Authenticate: Basic realm=\"cc-run\"\r\n".iter().copied());
        let _ = client.write_all(&answer).await;
        return;
    }
    let target = &request.target;
    let (host, mut upstream) = match run.connect(&shared, target.host(), target.port()).await {
        Ok(connected) => connected,
        Err(d) => {
            run.denied(&shared, target.host(), target.port(), d.code, &d.message);
            let (status, words) = status_of(d.code);
            let _ = client.write_all(&http_request::refusal(status, words, d.code, &d.message)).await;
            return;
        }
    };
    let rest = &buf[request.head_len..];
    let sent = match target {
        http_request::Target::Connect { .. } => {
            let established = client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await;
            match established {
                Ok(()) => upstream.write_all(rest).await,
                Err(e) => Err(e),
            }
        }
        http_request::Target::Absolute { method, host, port, path } => upstream
            .write_all(&origin_form(&request, method, host, *port, path))
            .await
            .and(upstream.write_all(rest).await),
    };
    if sent.is_ok() {
        run.carry(&shared, &host, target.port(), client, &mut upstream).await;
    }
}

/// An absolute-form request as the origin expects it: the path alone, its own Host,
/// none of the proxy's headers, and one request per connection.
fn origin_form(request: &http_request::ProxyRequest, method: &str, host: &str, port: u16, path: &str) -> Vec<u8> {
    const DROPPED: &[&str] =
        &["host", "connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "upgrade"];
    let authority = if port == 80 { host.to_owned() } else { format!("{host}:{port}") };
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\n").into_bytes();
    for (name, value) in &request.headers {
        if !DROPPED.iter().any(|d| name.eq_ignore_ascii_case(d)) {
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n");
        }
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    head
}

/// The SOCKS5 proxy, CONNECT only: no authentication on the run's socket (it is the
/// run's alone), the run's credential on a loopback port.
/// `auth`: the credential a loopback client must present (RFC 1929); `None` on the
/// run's socket, where no authentication is offered.
pub async fn socks<S: Client>(mut client: S, run: Arc<EgressRun>, shared: Arc<Shared>, auth: Option<Loopback>) {
    // Ok(None): the client went away before asking anything; Err: the refusal's
    // (host, rule, reason).
    let handshake = async {
        let mut buf = Vec::new();
        let (greeting, used) = loop {
            match socks::parse_greeting(&buf) {
                Ok(Some(read)) => break read,
                Ok(None) if read_more(&mut client, &mut buf).await.unwrap_or(false) => {}
                Ok(None) => return Ok(None),
                Err(e) => return Err((UNREAD, BAD_REQUEST, e.to_string())),
            }
        };
        let method = if auth.is_some() { socks::USER_PASSWORD } else { socks::NO_AUTH };
        if !greeting.methods.contains(&method) {
            let _ = client.write_all(&[socks::VERSION, socks::NO_ACCEPTABLE_METHOD]).await;
            return Err(if auth.is_some() {
                let why = "this proxy needs the run's credential (user name and password)";
                (UNAUTHENTICATED, AUTH_REQUIRED, why.to_owned())
            } else {
                let why = "the client offers no method this proxy takes (no authentication)";
                (UNREAD, BAD_REQUEST, why.to_owned())
            });
        }
        if client.write_all(&[socks::VERSION, method]).await.is_err() {
            return Ok(None);
        }
        buf.drain(..used);
        if let Some(auth) = &auth {
            let (credentials, used) = loop {
                match socks::parse_credentials(&buf) {
                    Ok(Some(read)) => break read,
                    Ok(None) if read_more(&mut client, &mut buf).await.unwrap_or(false) => {}
                    Ok(None) => return Ok(None),
                    Err(e) => return Err((UNAUTHENTICATED, AUTH_REQUIRED, e.to_string())),
                }
            };
            let admitted = auth.admits(&credentials.user, &credentials.password);
            let _ = client.write_all(&[1, if admitted { 0 } else { 1 }]).await;
            if !admitted {
                let why = "the client presented another credential than the run's";
                return Err((UNAUTHENTICATED, AUTH_REQUIRED, why.to_owned()));
            }
            buf.drain(..used);
        }
        loop {
            match socks::parse_request(&buf) {
                Ok(Some((request, used))) => return Ok(Some((request, buf.split_off(used)))),
                Ok(None) if read_more(&mut client, &mut buf).await.unwrap_or(false) => {}
                Ok(None) => return Ok(None),
                Err(e) => {
                    let code = match e {
                        socks::SocksError::AddressType(_) => socks::reply::ADDRESS_TYPE_NOT_SUPPORTED,
                        _ => socks::reply::GENERAL_FAILURE,
                    };
                    let _ = client.write_all(&socks::reply(code, None)).await;
                    return Err((UNREAD, BAD_REQUEST, e.to_string()));
                }
            }
        }
    };
    let (request, rest) = match tokio::time::timeout(shared.handshake, handshake).await {
        Ok(Ok(Some(read))) => read,
        Ok(Ok(None)) => return,
        Ok(Err((host, rule, why))) => return run.denied(&shared, host, 0, rule, &why),
        Err(_) => {
            let why = format!("no complete request within {:?}", shared.handshake);
            return run.denied(&shared, UNREAD, 0, HANDSHAKE_TIMEOUT, &why);
        }
    };
    let host = match &request.address {
        socks::Address::Ip(ip) => Host::Ip(*ip).to_string(),
        socks::Address::Name(name) => name.clone(),
    };
    if request.command != socks::Command::Connect {
        let why = format!("SOCKS {:?} is not offered: only CONNECT", request.command);
        run.denied(&shared, &host, request.port, BAD_REQUEST, &why);
        let _ = client.write_all(&socks::reply(socks::reply::COMMAND_NOT_SUPPORTED, None)).await;
        return;
    }
    let (canonical, mut upstream) = match run.connect(&shared, &host, request.port).await {
        Ok(connected) => connected,
        Err(d) => {
            run.denied(&shared, &host, request.port, d.code, &d.message);
            let code = match d.code {
                codes::NO_ADDRESS | UNREACHABLE => socks::reply::HOST_UNREACHABLE,
                _ => socks::reply::NOT_ALLOWED,
            };
            let _ = client.write_all(&socks::reply(code, None)).await;
            return;
        }
    };
    let bound = upstream.local_addr().ok();
    if client.write_all(&socks::reply(socks::reply::SUCCEEDED, bound)).await.is_ok()
        && upstream.write_all(&rest).await.is_ok()
    {
        run.carry(&shared, &canonical, request.port, client, &mut upstream).await;
    }
}

/// The client's side of a tunnel, counting what passes: `read` from the run, `written`
/// to it.
struct Counted<S> {
    inner: S,
    read: u64,
    written: u64,
}

impl<S> Counted<S> {
    fn new(inner: S) -> Counted<S> {
        Counted { inner, read: 0, written: 0 }
    }
}

impl<S: Client> tokio::io::AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        self.read += (buf.filled().len() - before) as u64;
        polled
    }
}

impl<S: Client> tokio::io::AsyncWrite for Counted<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            self.written += n as u64;
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

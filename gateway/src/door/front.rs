//! One request on a run's git socket: which endpoint and repository, then a fetch
//! (streamed through with the run's read token), a push's ref advertisement, or a
//! push ([`super::push`]). Every refusal is one line of text, which git prints as
//! `remote: cc-gateway: …`.

use bytes::Bytes;
use futures::TryStreamExt;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, BodyStream, Full, StreamBody};
use hyper::body::{Frame, Incoming};

use super::{RunDoor, Shared};
use crate::git::route::{self, Endpoint, Route, RouteError, Service};
use crate::peers::PeerError;

pub type Body = BoxBody<Bytes, std::io::Error>;

/// The most of a ref advertisement the gateway holds (it is held only for a push's,
/// to revoke that write token as soon as it is read).
const MAX_ADVERTISEMENT_BYTES: usize = 64 << 20;

pub async fn handle(door: &RunDoor, shared: &Shared, request: Request<Incoming>) -> Response<Body> {
    let route = match route::route(request.method().as_str(), request.uri().path(), request.uri().query()) {
        Ok(route) => route,
        Err(e @ RouteError::DumbProtocol) => return refuse(StatusCode::FORBIDDEN, &e.to_string()),
        Err(e) => return refuse(StatusCode::NOT_FOUND, &e.to_string()),
    };
    let Some(repository) = door.repository(&route.repository) else {
        let message = format!(
            "{} is neither the origin of one of this run's checkouts nor linked to its workspace \
             (ccctl workspace link-repo WORKSPACE {}): nothing is fetched from or pushed to it",
            route.repository, route.repository
        );
        return refuse(StatusCode::FORBIDDEN, &message);
    };
    tracing::debug!(run = %door.run_id, repository = %route.repository, endpoint = ?route.endpoint, "request");
    match route.endpoint {
        Endpoint::Advertise(Service::UploadPack) | Endpoint::Rpc(Service::UploadPack) => {
            fetch(door, shared, &route, request).await
        }
        Endpoint::Advertise(Service::ReceivePack) => push_advertisement(door, shared, &route, request).await,
        Endpoint::Rpc(Service::ReceivePack) => super::push::push(door, shared, repository, &route, request).await,
    }
}

/// A fetch: both ways streamed, never held, with the run's read token. A run with no
/// credential fetches anonymously (public repositories still work).
async fn fetch(door: &RunDoor, shared: &Shared, route: &Route, request: Request<Incoming>) -> Response<Body> {
    let token = match shared.peers.read_token(&door.run_id).await {
        Ok(token) => Some(token),
        Err(PeerError::Refused { reason: Some(reason), .. }) if reason == cc_proto::reasons::NO_CREDENTIAL => None,
        Err(e) => return refuse(StatusCode::SERVICE_UNAVAILABLE, &format!("no read credential: {e}")),
    };
    let (parts, body) = request.into_parts();
    let body = (parts.method == Method::POST).then(|| reqwest::Body::wrap_stream(data_stream(body)));
    let sent = shared
        .upstream
        .send(parts.method, route, &parts.headers, body, token.as_ref().map(|t| t.secret.as_str()), true)
        .await;
    match sent {
        Ok(response) if response.status() == reqwest::StatusCode::OK => streamed(response),
        Ok(response) => upstream_refusal(response).await,
        Err(e) => refuse(StatusCode::BAD_GATEWAY, &format!("upstream cannot be reached: {}", without_url(&e))),
    }
}

/// A push's ref advertisement: GitHub serves it only to a token that may write, so
/// it gets a write token of its own, revoked as soon as the advertisement is read.
async fn push_advertisement(
    door: &RunDoor,
    shared: &Shared,
    route: &Route,
    request: Request<Incoming>,
) -> Response<Body> {
    let token = match shared.peers.write_token(&door.run_id, &route.repository).await {
        Ok(token) => token,
        Err(e) => return refuse(StatusCode::FORBIDDEN, &format!("no write credential for {}: {e}", route.repository)),
    };
    let sent = shared.upstream.send(Method::GET, route, request.headers(), None, Some(&token.secret), false).await;
    let answer = match sent {
        Ok(response) if response.status() == reqwest::StatusCode::OK => {
            let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
            match read_bounded(response, MAX_ADVERTISEMENT_BYTES).await {
                Ok(bytes) => {
                    let mut answer = Response::new(full(bytes));
                    if let Some(content_type) = content_type {
                        answer.headers_mut().insert(header::CONTENT_TYPE, content_type);
                    }
                    no_cache(answer)
                }
                Err(why) => refuse(StatusCode::BAD_GATEWAY, &why),
            }
        }
        Ok(response) => upstream_refusal(response).await,
        Err(e) => refuse(StatusCode::BAD_GATEWAY, &format!("upstream cannot be reached: {}", without_url(&e))),
    };
    shared.peers.revoke_write_token(&door.run_id, token).await;
    answer
}

/// The data of a request body as a stream, for forwarding without holding it.
pub fn data_stream(body: Incoming) -> impl futures::Stream<Item = Result<Bytes, hyper::Error>> + Send + 'static {
    BodyStream::new(body).try_filter_map(|frame| async move { Ok(frame.into_data().ok()) })
}

/// Upstream's 200 answer, passed on as it streams.
fn streamed(response: reqwest::Response) -> Response<Body> {
    let mut headers = http::HeaderMap::new();
    for name in [header::CONTENT_TYPE, header::CONTENT_ENCODING] {
        if let Some(value) = response.headers().get(&name) {
            headers.insert(name, value.clone());
        }
    }
    let stream = response.bytes_stream().map_ok(Frame::data).map_err(std::io::Error::other);
    let mut answer = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    *answer.headers_mut() = headers;
    no_cache(answer)
}

/// Reads at most `limit` bytes of upstream's body.
pub async fn read_bounded(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if out.len() + chunk.len() > limit {
                    return Err(format!("upstream's answer is over {} MiB", limit >> 20));
                }
                out.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(out),
            Err(e) => return Err(format!("upstream's answer was cut off: {}", without_url(&e))),
        }
    }
}

/// Upstream said no: its status and the first line of its words. A 401 becomes a 403,
/// so that git does not ask the agent for a password it does not have.
async fn upstream_refusal(response: reqwest::Response) -> Response<Body> {
    let status = response.status().as_u16();
    let text = read_bounded(response, 64 << 10).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let first = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let code = match StatusCode::from_u16(status) {
        Ok(StatusCode::UNAUTHORIZED) | Err(_) => StatusCode::FORBIDDEN,
        Ok(code) => code,
    };
    refuse(code, &format!("upstream answered HTTP {status}: {first}"))
}

/// reqwest's errors name the URL; ours never carries a token, but the message is kept
/// to what went wrong.
/// A request's failure, without the URL (which a query could make carry a secret), and
/// with its innermost cause: reqwest's own words are "error sending request", while
/// what a person can act on is at the chain's end ("invalid peer certificate:
/// UnknownIssuer", "Connection refused").
pub fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(at) = text.find(" for url (") {
        text.truncate(at);
    }
    let mut cause: Option<&dyn std::error::Error> = std::error::Error::source(e);
    let mut innermost = None;
    while let Some(c) = cause {
        innermost = Some(c);
        cause = c.source();
    }
    if let Some(innermost) = innermost {
        let innermost = innermost.to_string();
        if !innermost.is_empty() && !text.contains(&innermost) {
            text = format!("{text}: {innermost}");
        }
    }
    text
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

pub fn no_cache(mut response: Response<Body>) -> Response<Body> {
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// One line of text, which git shows the person as `remote: cc-gateway: …`.
pub fn refuse(status: StatusCode, message: &str) -> Response<Body> {
    let line = format!("cc-gateway: {}\n", crate::git::report::one_line(message));
    let mut response = Response::new(full(line));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    no_cache(response)
}

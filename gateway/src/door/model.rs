//! The run's model door (`model.sock`, bridged into its envelopes as
//! `127.0.0.1:41420`): the agent's model API calls, `/PROVIDER/…`, each forwarded to
//! the provider's base URL with the provider's real key in place of the run's
//! placeholder. The agent never holds the key: the broker swaps it for the
//! placeholder here, per request, and the placeholder works nowhere else.
//!
//! The request goes out on the door's own connection to the provider
//! ([`super::provider`]), and the answer streams back as it comes (server-sent events
//! pass chunk by chunk, [`super::answer`]); its usage is read on the way
//! ([`crate::model::usage`]) and reported to the supervisor,
//! which counts it against the run's budget. A refusal of the door's own is in the
//! provider's error shape ([`crate::model::refusal`]) and never holds a key; a
//! provider's error answer is passed on with the key scrubbed from it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::TryStreamExt;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::answer::{Answer, Reporting};
use super::front::data_stream;
use super::provider::{ProviderBody, RequestBody};
use super::segments::Segments;
use super::{RunDoor, Shared};
use crate::model::Api;
use crate::model::refusal::{self, Kind};
use crate::model::route::{self, RouteError};
use crate::model::usage::{Meter, Usage};
use crate::peers::PeerError;

/// The largest request the door carries: a long conversation with images.
pub const MAX_REQUEST_BYTES: u64 = 64 << 20;
/// The most of a provider's error answer held (to scrub the key from it).
const MAX_ERROR_BYTES: usize = 256 << 10;
/// Request headers never passed on: the agent's credentials (the door sets the
/// provider's), hop-by-hop headers, and anything naming another host or proxy.
/// `Content-Length` passes: the body streams through with the length it was sent with
/// (a provider need not take a chunked request).
const DROPPED_REQUEST_HEADERS: &[&str] = &[
    "host",
    "authorization",
    "x-api-key",
    "proxy-authorization",
    "proxy-connection",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "cookie",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
    // The door reads the answer's usage, so the answer must come uncompressed.
    "accept-encoding",
    "expect",
];

/// Answer headers not passed back: hop-by-hop, and cookies. `Content-Length` passes
/// with a streamed answer (its bytes pass unchanged), not with an error answer the
/// door scrubs.
const DROPPED_ANSWER_HEADERS: &[&str] =
    &["connection", "keep-alive", "transfer-encoding", "trailer", "upgrade", "set-cookie"];

/// One provider of a run, as the supervisor told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRoute {
    pub name: String,
    pub api: Api,
    /// Without a trailing slash.
    pub base_url: String,
    pub ca_pem: Vec<u8>,
}

/// What the door counts for its run: kept across a re-registration with the same
/// door, and given again by the supervisor after the gateway restarts.
#[derive(Debug, Default)]
pub struct Ledger {
    used: AtomicU64,
    refusal: Mutex<Option<String>>,
}

impl Ledger {
    pub fn new(used: u64, refusal: Option<String>) -> Ledger {
        Ledger { used: AtomicU64::new(used), refusal: Mutex::new(refusal) }
    }

    /// What the supervisor says now: its count never lowers ours (reports may be in
    /// flight), and its refusal, set or cleared, is the one in force.
    pub fn update(&self, used: u64, refusal: Option<String>) {
        self.used.fetch_max(used, Ordering::Relaxed);
        *self.refusal.lock().unwrap_or_else(|p| p.into_inner()) = refusal;
    }

    fn refusal(&self) -> Option<String> {
        self.refusal.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn refuse_from_now(&self, why: String) {
        *self.refusal.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }
}

/// Serves one connection to the run's model door (its socket, or for a run without
/// an envelope its loopback port: there the placeholder is the credential).
pub async fn serve<S>(stream: S, door: Arc<RunDoor>, ledger: Arc<Ledger>, shared: Arc<Shared>)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let header_timeout = shared.handshake;
    let service = hyper::service::service_fn(move |request| {
        let (door, ledger, shared) = (door.clone(), ledger.clone(), shared.clone());
        async move { Ok::<_, std::convert::Infallible>(handle(&door, &ledger, &shared, request).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// What the door reports of one request.
pub struct Report {
    pub provider: String,
    pub status: u16,
    pub usage: Usage,
    pub streamed: bool,
    pub first_byte: Duration,
    pub took: Duration,
    pub refused: Option<String>,
}

async fn handle(
    door: &Arc<RunDoor>,
    ledger: &Arc<Ledger>,
    shared: &Arc<Shared>,
    request: Request<Incoming>,
) -> Response<AnswerBody> {
    let arrived = Instant::now();
    let target = request.uri().to_string();
    let method = request.method().as_str().to_owned();
    let api_of = |name: &str| door.models.iter().find(|m| m.name == name).map(|m| m.api);
    let (call, api) = match route::route(&method, &target, api_of) {
        Ok(routed) => routed,
        Err(e) => {
            // With no provider to speak for, the shape is the first provider's.
            let api = door.models.first().map_or(Api::Anthropic, |m| m.api);
            let status = match e {
                RouteError::Connect => StatusCode::METHOD_NOT_ALLOWED,
                RouteError::OtherHost | RouteError::Unreadable => StatusCode::BAD_REQUEST,
                _ => StatusCode::NOT_FOUND,
            };
            // Claude Code's HEAD of its base URL (a reachability probe, answered 404
            // as the provider's own root would be) is no attempt at anything.
            if matches!(&e, RouteError::NotAModelCall { method, .. } if method == "HEAD") {
                tracing::debug!(run = %door.run_id, error = %e, "refused a probe on the model door");
            } else {
                tracing::warn!(run = %door.run_id, error = %e, "refused a request on the model door");
            }
            return answer(status, api, Kind::NotAModelCall, &e.to_string());
        }
    };
    let Some(provider) = door.models.iter().find(|m| m.name == call.provider).cloned() else {
        return answer(StatusCode::NOT_FOUND, api, Kind::NotAModelCall, "no such provider");
    };
    let refused = |kind: Kind, why: String| {
        report(
            shared,
            door,
            Report {
                provider: provider.name.clone(),
                status: 0,
                usage: Usage::default(),
                streamed: false,
                first_byte: arrived.elapsed(),
                took: arrived.elapsed(),
                refused: Some(why.clone()),
            },
            ledger,
        );
        answer(StatusCode::from_u16(kind.status()).unwrap_or(StatusCode::FORBIDDEN), api, kind, &why)
    };
    if let Some(why) = ledger.refusal() {
        return refused(Kind::BudgetReached, why);
    }
    let used = ledger.used.load(Ordering::Relaxed);
    if door.model_budget_tokens > 0 && used >= door.model_budget_tokens {
        let why = budget_message(door.model_budget_tokens, used);
        return refused(Kind::BudgetReached, why);
    }
    let Some(presented) = presented_key(request.headers()) else {
        return answer(
            StatusCode::UNAUTHORIZED,
            api,
            Kind::Authentication,
            "the request presents no key (x-api-key or Authorization: Bearer)",
        );
    };
    let too_large = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .is_some_and(|n| n > MAX_REQUEST_BYTES);
    if too_large {
        return answer(StatusCode::PAYLOAD_TOO_LARGE, api, Kind::TooLarge, "the request is over 64 MiB");
    }
    let key = match shared.peers.exchange_model_placeholder(&door.run_id, &provider.name, &presented).await {
        Ok(key) => key,
        Err(PeerError::Refused { message, .. }) if message.contains("placeholder") => {
            tracing::warn!(run = %door.run_id, provider = %provider.name, "refused a key that is not the run's placeholder");
            return answer(
                StatusCode::UNAUTHORIZED,
                api,
                Kind::Authentication,
                "the key presented is not this run's: only the run's own placeholder opens its model door",
            );
        }
        Err(PeerError::Refused { reason: Some(reason), message, .. }) if reason == cc_proto::reasons::NO_CREDENTIAL => {
            return refused(Kind::NoKey, format!("no API key for provider {}: {message}", provider.name));
        }
        Err(e) => return refused(Kind::Unreachable, format!("the key could not be had: {e}")),
    };
    let mut url = format!("{}{}", provider.base_url, call.path);
    if let Some(query) = call.query {
        url.push('?');
        url.push_str(query);
    }
    let (parts, body) = request.into_parts();
    let body: RequestBody = if parts.method == http::Method::POST {
        BodyExt::boxed(StreamBody::new(bounded(data_stream(body)).map_ok(Frame::data)))
    } else {
        Empty::new().map_err(|never| match never {}).boxed()
    };
    let mut upstream = Request::new(body);
    *upstream.method_mut() = parts.method.clone();
    *upstream.headers_mut() = passed_headers(&parts.headers);
    match api {
        Api::Anthropic => upstream.headers_mut().insert("x-api-key", sensitive(&key)),
        Api::Openai => upstream.headers_mut().insert(header::AUTHORIZATION, sensitive(&format!("Bearer {key}"))),
    };
    let response = match shared.providers.send(&url, &provider.ca_pem, upstream).await {
        Ok(response) => response,
        Err(e) => {
            let mut why = format!("provider {} cannot be reached: {e}", provider.name);
            if e.is_certificate() {
                why.push_str(&format!(
                    "; a provider whose certificate a private CA signed names that CA in [models.{}] ca_file",
                    provider.name
                ));
            }
            return refused(Kind::Unreachable, why);
        }
    };
    let status = response.status().as_u16();
    let streamed = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let mut headers = HeaderMap::new();
    for (name, value) in response.headers() {
        if !DROPPED_ANSWER_HEADERS.contains(&name.as_str()) {
            headers.append(name.clone(), value.clone());
        }
    }
    if !response.status().is_success() {
        // Held whole, bounded, to scrub the key a provider may echo.
        let text = read_bounded(response.into_body(), MAX_ERROR_BYTES).await;
        let scrubbed = refusal::scrub(&text, &key);
        report(
            shared,
            door,
            Report {
                provider: provider.name.clone(),
                status,
                usage: Usage::default(),
                streamed: false,
                first_byte: arrived.elapsed(),
                took: arrived.elapsed(),
                refused: None,
            },
            ledger,
        );
        headers.remove(header::CONTENT_LENGTH);
        let mut answer = Response::new(whole(scrubbed));
        *answer.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
        *answer.headers_mut() = headers;
        return answer;
    }
    let (_, upstream) = response.into_parts();
    let reporting = Reporting {
        shared: shared.clone(),
        door: door.clone(),
        ledger: ledger.clone(),
        provider: provider.name.clone(),
        status,
        streamed,
        arrived,
    };
    let body = Answer::new(upstream, Meter::new(api, streamed), reporting);
    let mut answer = Response::new(BodyExt::boxed(body));
    *answer.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    *answer.headers_mut() = headers;
    answer
}

/// A provider's error answer, whole; nothing when it is over `limit` bytes or breaks
/// off, since a cut could end inside an echoed key, past what scrubbing recognises.
async fn read_bounded(body: ProviderBody, limit: usize) -> Vec<u8> {
    http_body_util::Limited::new(body, limit).collect().await.map(|whole| whole.to_bytes().to_vec()).unwrap_or_default()
}

/// The request body, cut off past [`MAX_REQUEST_BYTES`] (a body without a length).
fn bounded(
    body: impl futures::Stream<Item = Result<Bytes, hyper::Error>> + Send + 'static,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let mut seen = 0u64;
    body.map_err(std::io::Error::other).and_then(move |chunk| {
        seen += chunk.len() as u64;
        let over = seen > MAX_REQUEST_BYTES;
        async move { if over { Err(std::io::Error::other("the request is over 64 MiB")) } else { Ok(chunk) } }
    })
}

/// The key the request presents: `x-api-key`, or `Authorization: Bearer`.
fn presented_key(headers: &HeaderMap) -> Option<String> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(key.trim().to_owned());
    }
    let auth = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = auth.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| key.trim().to_owned())
}

fn passed_headers(headers: &HeaderMap) -> HeaderMap {
    let mut passed = HeaderMap::new();
    for (name, value) in headers {
        if !DROPPED_REQUEST_HEADERS.contains(&name.as_str()) {
            passed.append(HeaderName::clone(name), value.clone());
        }
    }
    passed
}

fn sensitive(value: &str) -> HeaderValue {
    let mut value = HeaderValue::from_str(value).unwrap_or(HeaderValue::from_static(""));
    value.set_sensitive(true);
    value
}

pub fn budget_message(budget: u64, used: u64) -> String {
    format!(
        "this run's model budget of {budget} tokens is spent ({used} used); a person can start a new run \
         with a larger one (ccctl run start --model-budget-tokens N)"
    )
}

/// An answer's body: the provider's frames as they come, or one whole.
type AnswerBody = BoxBody<Segments, std::io::Error>;

fn whole(bytes: impl Into<Bytes>) -> AnswerBody {
    Full::new(Segments::from(bytes.into())).map_err(|never| match never {}).boxed()
}

fn answer(status: StatusCode, api: Api, kind: Kind, message: &str) -> Response<AnswerBody> {
    let mut response = Response::new(whole(refusal::body(api, kind, message)));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Sends the request's record to the supervisor in the background, counts its tokens
/// against the run, and takes the supervisor's refusal (a workspace's daily budget)
/// for the run's next requests.
pub fn report(shared: &Arc<Shared>, door: &RunDoor, report: Report, ledger: &Arc<Ledger>) {
    let total = report.usage.total();
    ledger.used.fetch_add(total, Ordering::Relaxed);
    let request = cc_proto::supervisor::v1::RecordModelUsageRequest {
        run_id: door.run_id.clone(),
        provider: report.provider,
        model: report.usage.model.clone().unwrap_or_default(),
        status: report.status.into(),
        input_tokens: report.usage.input_tokens,
        output_tokens: report.usage.output_tokens,
        cache_creation_input_tokens: report.usage.cache_creation_input_tokens,
        cache_read_input_tokens: report.usage.cache_read_input_tokens,
        streamed: report.streamed,
        first_byte_ms: millis(report.first_byte),
        duration_ms: millis(report.took),
        refused: report.refused.unwrap_or_default(),
    };
    let (shared, ledger) = (shared.clone(), ledger.clone());
    tokio::spawn(async move {
        match shared.peers.record_model_usage(request).await {
            Ok(refusal) if !refusal.is_empty() => ledger.refuse_from_now(refusal),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot report a model request to the supervisor"),
        }
    });
}

fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_credentials_and_hop_headers_never_pass() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("x-api-key", "cc-placeholder-1"),
            ("authorization", "Bearer cc-placeholder-1"),
            ("host", "127.0.0.1:41420"),
            ("accept-encoding", "gzip"),
            ("cookie", "a=b"),
            ("anthropic-version", "2023-06-01"),
            ("content-type", "application/json"),
        ] {
            headers.insert(HeaderName::from_static(name), HeaderValue::from_static(value));
        }
        let passed = passed_headers(&headers);
        let names: Vec<&str> = passed.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["anthropic-version", "content-type"]);
        assert_eq!(presented_key(&headers).as_deref(), Some("cc-placeholder-1"));
        headers.remove("x-api-key");
        assert_eq!(presented_key(&headers).as_deref(), Some("cc-placeholder-1"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(presented_key(&headers), None);
    }
}

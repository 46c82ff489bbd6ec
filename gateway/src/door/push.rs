//! A push (`POST …/git-receive-pack`), decided ref by ref:
//!
//! 1. read the ref-update commands as they stream, never the pack ([`parse_head`]);
//! 2. ask the gate about each ref: repository, ref, force (from the run's worktrees),
//!    delete;
//! 3. forward the allowed commands, then the pack as it streams, with a write token
//!    minted for this push and revoked once upstream has answered;
//! 4. answer with git's own report-status: upstream's statuses for what went, ours
//!    (`ng <ref> Control Center policy: …`) for what did not, and upstream's progress
//!    (a pre-receive hook's words) passed on unchanged.

use bytes::Bytes;
use cc_proto::common::v1::{Decision, EffectClass};
use cc_proto::supervisor::v1 as sv;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::front::{self, Body};
use super::{Repository, RunDoor, Shared};
use crate::git::plan::{Plan, Verdict};
use crate::git::report::{self, Answer, RefStatus, Report};
use crate::git::request::{MAX_HEAD_BYTES, RefUpdate, RequestHead, UpdateKind, parse_head};
use crate::git::route::Route;

/// The most of upstream's answer to a push that is held: its report and progress.
const MAX_RESULT_BYTES: usize = 16 << 20;

const RESULT_TYPE: &str = "application/x-git-receive-pack-result";

/// How long the run's checkouts may take to tell a fast-forward from a force push.
const HISTORY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

pub async fn push(
    door: &RunDoor,
    shared: &Shared,
    repository: &Repository,
    route: &Route,
    request: Request<Incoming>,
) -> Response<Body> {
    let (parts, mut body) = request.into_parts();
    if parts.headers.get(header::CONTENT_ENCODING).is_some_and(|v| v != "identity") {
        // git never compresses a push body; a compressed one could hide its commands.
        return front::refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, "a compressed push body is not accepted");
    }

    // 1. The commands, as they arrive; what follows them is the pack.
    let mut buf = Vec::new();
    let (head, at) = loop {
        match parse_head(&buf) {
            Ok(Some(parsed)) => break parsed,
            Ok(None) => {}
            Err(e) => return front::refuse(StatusCode::BAD_REQUEST, &format!("a malformed push: {e}")),
        }
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
            Some(Err(e)) => return front::refuse(StatusCode::BAD_REQUEST, &format!("the push was cut off: {e}")),
            None => {
                return front::refuse(StatusCode::BAD_REQUEST, "the push ended before its commands were complete");
            }
        }
        if buf.len() > MAX_HEAD_BYTES + (1 << 16) {
            return front::refuse(StatusCode::BAD_REQUEST, "a push's commands are over 4 MiB");
        }
    };
    // git's probe (one flush-pkt) only checks that the endpoint answers.
    if head.is_probe() {
        return result(Bytes::new());
    }
    let answer = Answer::for_capabilities(&head.capabilities);

    // 2. The gate, ref by ref.
    let mut verdicts = Vec::with_capacity(head.commands.len());
    for update in &head.commands {
        verdicts.push(decide(door, shared, repository, update).await);
    }
    let plan = Plan::new(&head, &verdicts);

    // 3. Upstream, only with what is allowed.
    let forwarded = plan.forwarded(&head);
    let mut progress = Vec::new();
    let upstream = if forwarded.is_empty() {
        // Let the client finish sending what nobody will read, so that it reads our answer.
        while let Some(Ok(_)) = body.frame().await {}
        None
    } else {
        let first = [head.encode(&forwarded), buf.split_off(at)].concat();
        Some(match forward(door, shared, route, &parts.headers, first, body, answer).await {
            Ok((report, said)) => {
                progress = said;
                report
            }
            Err(why) => {
                Report { unpack: Ok(()), refs: forwarded.iter().map(|c| RefStatus::rejected(&c.name, &why)).collect() }
            }
        })
    };

    // 4. The answer, in the client's order.
    let reply = plan.answer(&head, upstream.as_ref());
    log_outcome(door, repository, &head, &reply);
    let mut out = Vec::new();
    if answer.side_band && !progress.is_empty() {
        report::band(&mut out, 2, &progress);
    }
    out.extend_from_slice(&reply.encode(answer));
    result(out.into())
}

/// The gate's verdict on one ref. An ask the approvers did not answer, and a gate that
/// cannot be asked, are refusals.
async fn decide(door: &RunDoor, shared: &Shared, repository: &Repository, update: &RefUpdate) -> Verdict {
    let kind = update.kind();
    let force = kind == UpdateKind::Update && {
        // The object stores are the agent's: one that never answers (a FIFO where a
        // pack index belongs) makes the update a force push, not a stuck gateway.
        let (dirs, old, new) = (door.git_dirs.clone(), update.old.clone(), update.new.clone());
        let walk = tokio::task::spawn_blocking(move || crate::history::is_fast_forward(&dirs, &old, &new));
        !matches!(tokio::time::timeout(HISTORY_DEADLINE, walk).await, Ok(Ok(true)))
    };
    let short = update.name.strip_prefix("refs/heads/").unwrap_or(&update.name);
    let what = match kind {
        UpdateKind::Create => "create",
        UpdateKind::Delete => "delete",
        UpdateKind::Update if force => "force-update",
        UpdateKind::Update => "update",
    };
    let action = sv::Action {
        effects: vec![EffectClass::PushRemote as i32],
        scope: Some(sv::ActionScope {
            repository_name: repository.gate_name.clone(),
            refs: vec![short.to_owned()],
            default_branch: repository.default_branch.clone().unwrap_or_default(),
            force,
            delete: kind == UpdateKind::Delete,
            ..Default::default()
        }),
        mode: door.mode,
        workspace_id: door.workspace.clone(),
        run_id: door.run_id.clone(),
        summary: format!("git push: {what} {} on {}", update.name, repository.name),
        ..Default::default()
    };
    match shared.peers.decide(action).await {
        Ok(decided) if decided.decision == Decision::Allow as i32 => Verdict::Allow,
        Ok(decided) => Verdict::Refuse(decided.reason),
        Err(e) => Verdict::Refuse(format!("the gate could not be asked: {e}")),
    }
}

/// Sends the allowed commands and the pack upstream with a one-push write token and
/// returns upstream's report and its progress text; the token is revoked whatever
/// happened. An error is the reason every forwarded ref is refused.
async fn forward(
    door: &RunDoor,
    shared: &Shared,
    route: &Route,
    headers: &http::HeaderMap,
    first: Vec<u8>,
    rest: Incoming,
    answer: Answer,
) -> Result<(Report, Vec<u8>), String> {
    let token = shared
        .peers
        .write_token(&door.run_id, &route.repository)
        .await
        .map_err(|e| format!("no write credential for {}: {e}", route.repository))?;
    let first = futures::stream::once(async move { Ok::<_, hyper::Error>(Bytes::from(first)) });
    let stream = futures::StreamExt::chain(first, front::data_stream(rest));
    let sent = shared
        .upstream
        .send(Method::POST, route, headers, Some(reqwest::Body::wrap_stream(stream)), Some(&token.secret), false)
        .await;
    let outcome = match sent {
        Ok(response) if response.status() == reqwest::StatusCode::OK => {
            front::read_bounded(response, MAX_RESULT_BYTES).await.and_then(|body| {
                let (report_bytes, progress) =
                    report::demultiplex(&body, answer.side_band).map_err(|e| format!("upstream: {e}"))?;
                let report = report::parse(&report_bytes).map_err(|e| format!("upstream: {e}"))?;
                Ok((report, progress))
            })
        }
        Ok(response) => {
            let status = response.status().as_u16();
            let text = front::read_bounded(response, 64 << 10).await.unwrap_or_default();
            let text = String::from_utf8_lossy(&text);
            Err(format!("upstream answered HTTP {status}: {}", text.lines().next().unwrap_or("").trim()))
        }
        Err(e) => Err(format!("upstream cannot be reached: {}", front::without_url(&e))),
    };
    shared.peers.revoke_write_token(&door.run_id, token).await;
    outcome
}

fn log_outcome(door: &RunDoor, repository: &Repository, head: &RequestHead, reply: &Report) {
    for (update, status) in head.commands.iter().zip(&reply.refs) {
        match status {
            RefStatus::Ok { .. } => {
                tracing::info!(run = %door.run_id, repository = %repository.name, r#ref = %update.name, "pushed")
            }
            RefStatus::Rejected { reason, .. } => {
                tracing::info!(run = %door.run_id, repository = %repository.name, r#ref = %update.name, reason = %reason, "push refused")
            }
        }
    }
}

fn result(body: Bytes) -> Response<Body> {
    let mut response = Response::new(front::full(body));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(RESULT_TYPE));
    front::no_cache(response)
}

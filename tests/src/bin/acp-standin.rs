//! A stand-in ACP agent for the acp adapter's tests, written with the crate's agent
//! side. Each prompt is a script, one step per line, and every step's outcome comes
//! back as the agent's message text, so that a test reads what the client allowed:
//!
//! - `say TEXT`: a message chunk;
//! - `read PATH` / `write PATH TEXT`: `fs/read_text_file` / `fs/write_text_file`;
//! - `direct-write PATH`: the agent's own write, with no request (the envelope's to stop);
//! - `permission KIND INPUT`: `session/request_permission` for a tool call of KIND
//!   (execute, edit, read, fetch, other) whose raw input is INPUT (JSON);
//! - `terminal LIMIT COMMAND`: `terminal/create` (`bash -c COMMAND`, output limit
//!   LIMIT bytes, 0 for none), then wait, output and release;
//! - `kill COMMAND`: a terminal killed as soon as it exists, then waited for;
//! - `connect ADDR`: a TCP connection of the agent's own, with no proxy;
//! - `getenv NAME`: the variable as the agent's process has it;
//! - `model-call`: a Messages API request to `$ANTHROPIC_BASE_URL` with
//!   `$ANTHROPIC_API_KEY`, as an agent's SDK makes it, answered with the HTTP status
//!   and the model's first text (`200 ok`) or the error's message;
//! - `wait SECONDS`: a thought ("waiting", at once) and a pause, for a test that acts
//!   on an agent in the middle of a prompt; `session/cancel` ends it, and the prompt
//!   answers `cancelled`;
//! - `deaf SECONDS`: the same pause, which nothing ends;
//! - `fail MESSAGE`: the prompt is answered with a JSON-RPC error (the agent lives on);
//! - `exit CODE`: the process exits mid-prompt.
//!
//! And attacks on the client (issue 36), each answered with what came of it:
//!
//! - `permissions COUNT`: COUNT `session/request_permission`s for `ls`, 32 at a time;
//! - `updates COUNT`: COUNT message chunks;
//! - `long-updates COUNT MIB`: COUNT message chunks of MIB MiB each;
//! - `raw-no-newline MIB`: MIB MiB on stdout with no newline (the connection breaks);
//! - `raw-nested DEPTH` / `raw-invalid-utf8`: one line that is not a message JSON-RPC
//!   can read, written straight to stdout;
//! - `keep-terminal`: a terminal (`sleep 60`) created and kept, its id the outcome;
//! - `terminal-output ID` / `terminal-kill ID` / `terminal-release ID`: asked of the
//!   terminal ID, which another run may own.
//!
//! And for `cc-bench adapters`: `time-reads COUNT PATH`, COUNT `fs/read_text_file`s of
//! PATH one after another, answered with their median and p90 in microseconds.

use agent_client_protocol::v1::schema::{
    AgentCapabilities, ContentBlock, ContentChunk, CreateTerminalRequest, InitializeRequest, InitializeResponse,
    KillTerminalRequest, NewSessionRequest, NewSessionResponse, PermissionOption, PermissionOptionKind, PromptRequest,
    PromptResponse, ReadTextFileRequest, ReleaseTerminalRequest, RequestPermissionOutcome, RequestPermissionRequest,
    SessionId, SessionNotification, SessionUpdate, StopReason, TerminalOutputRequest, TextContent, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind, WaitForTerminalExitRequest, WriteTextFileRequest,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Stdio};

/// Told of each `session/cancel`.
static CANCELLED: std::sync::LazyLock<tokio::sync::Notify> = std::sync::LazyLock::new(tokio::sync::Notify::new);
static WAS_CANCELLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[tokio::main(flavor = "current_thread")]
async fn main() -> agent_client_protocol::Result<()> {
    Agent
        .v1()
        .name("acp-standin")
        .on_receive_request(
            async move |init: InitializeRequest, responder: Responder<InitializeResponse>, _cx| {
                responder.respond(
                    InitializeResponse::new(init.protocol_version).agent_capabilities(AgentCapabilities::new()),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_new: NewSessionRequest, responder: Responder<NewSessionResponse>, _cx| {
                responder.respond(NewSessionResponse::new(SessionId::new(format!("standin-{}", std::process::id()))))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |_cancel: agent_client_protocol::v1::schema::CancelNotification, _cx| {
                WAS_CANCELLED.store(true, std::sync::atomic::Ordering::SeqCst);
                CANCELLED.notify_waiters();
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |prompt: PromptRequest, responder: Responder<PromptResponse>, cx: ConnectionTo<Client>| {
                // The steps ask the client and wait for its answers: never in the
                // dispatch loop, which must stay free to deliver them.
                let connection = cx.clone();
                cx.spawn(async move {
                    let script: String = prompt
                        .prompt
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text(t) => Some(t.text.clone()),
                            _ => None,
                        })
                        .collect();
                    WAS_CANCELLED.store(false, std::sync::atomic::Ordering::SeqCst);
                    for line in script.lines().filter(|l| !l.trim().is_empty()) {
                        if let Some(why) = line.strip_prefix("fail ") {
                            return responder.respond_with_error(agent_client_protocol::Error::new(-32000, why));
                        }
                        let outcome = step(&connection, &prompt.session_id, line).await;
                        say(&connection, &prompt.session_id, &format!("{line} => {outcome}\n"))?;
                        if WAS_CANCELLED.load(std::sync::atomic::Ordering::SeqCst) {
                            return responder.respond(PromptResponse::new(StopReason::Cancelled));
                        }
                    }
                    responder.respond(PromptResponse::new(StopReason::EndTurn))
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_to(Stdio::new())
        .await
}

fn say(cx: &ConnectionTo<Client>, session: &SessionId, text: &str) -> agent_client_protocol::Result<()> {
    let chunk = ContentChunk::new(ContentBlock::Text(TextContent::new(text)));
    cx.send_notification(SessionNotification::new(session.clone(), SessionUpdate::AgentMessageChunk(chunk)))
}

fn word(result: Result<String, agent_client_protocol::Error>) -> String {
    match result {
        Ok(text) => format!("ok {text}"),
        Err(e) => format!("refused {}", e.message),
    }
}

async fn step(cx: &ConnectionTo<Client>, session: &SessionId, line: &str) -> String {
    let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
    let sid = session.clone();
    match verb {
        "say" => format!("ok {rest}"),
        "read" => word(
            cx.send_request(ReadTextFileRequest::new(sid, rest))
                .block_task()
                .await
                .map(|r| r.content.escape_debug().to_string()),
        ),
        "write" => {
            let (path, text) = rest.split_once(' ').unwrap_or((rest, ""));
            word(cx.send_request(WriteTextFileRequest::new(sid, path, text)).block_task().await.map(|_| String::new()))
        }
        "direct-write" => match std::fs::write(rest, "written by the agent itself\n") {
            Ok(()) => "ok written".into(),
            Err(e) => format!("refused {e}"),
        },
        "permission" => {
            let (kind, input) = rest.split_once(' ').unwrap_or((rest, "{}"));
            let kind = match kind {
                "execute" => ToolKind::Execute,
                "edit" => ToolKind::Edit,
                "read" => ToolKind::Read,
                "fetch" => ToolKind::Fetch,
                _ => ToolKind::Other,
            };
            let raw: serde_json::Value = serde_json::from_str(input).unwrap_or_default();
            let mut fields = ToolCallUpdateFields::new().kind(kind).title(line.to_owned()).raw_input(raw.clone());
            if let Some(path) = raw.get("path").and_then(serde_json::Value::as_str) {
                fields = fields.locations(vec![agent_client_protocol::v1::schema::ToolCallLocation::new(path)]);
            }
            let options = vec![
                PermissionOption::new("yes", "Allow once", PermissionOptionKind::AllowOnce),
                PermissionOption::new("always", "Allow always", PermissionOptionKind::AllowAlways),
                PermissionOption::new("no", "Reject", PermissionOptionKind::RejectOnce),
            ];
            let asked = RequestPermissionRequest::new(sid, ToolCallUpdate::new("call-1", fields), options);
            word(cx.send_request(asked).block_task().await.map(|r| match r.outcome {
                RequestPermissionOutcome::Selected(s) => s.option_id.to_string(),
                RequestPermissionOutcome::Cancelled => "cancelled".into(),
                _ => "unknown".into(),
            }))
        }
        "terminal" | "kill" => {
            let (limit, command) =
                if verb == "kill" { ("0", rest) } else { rest.split_once(' ').unwrap_or((rest, "")) };
            let mut create = CreateTerminalRequest::new(sid.clone(), "bash").args(vec!["-c".into(), command.into()]);
            if let Ok(limit @ 1..) = limit.parse::<u64>() {
                create = create.output_byte_limit(limit);
            }
            let id = match cx.send_request(create).block_task().await {
                Ok(created) => created.terminal_id,
                Err(e) => return format!("refused {}", e.message),
            };
            if verb == "kill"
                && let Err(e) = cx.send_request(KillTerminalRequest::new(sid.clone(), id.clone())).block_task().await
            {
                return format!("kill failed {}", e.message);
            }
            let exit = cx.send_request(WaitForTerminalExitRequest::new(sid.clone(), id.clone())).block_task().await;
            let output = cx.send_request(TerminalOutputRequest::new(sid.clone(), id.clone())).block_task().await;
            let _ = cx.send_request(ReleaseTerminalRequest::new(sid, id)).block_task().await;
            match (exit, output) {
                (Ok(exit), Ok(output)) => format!(
                    "ok exit={:?} signal={:?} truncated={} bytes={} output={:?}",
                    exit.exit_status.exit_code,
                    exit.exit_status.signal,
                    output.truncated,
                    output.output.len(),
                    output.output.chars().take(200).collect::<String>()
                ),
                (Err(e), _) | (_, Err(e)) => format!("refused {}", e.message),
            }
        }
        "connect" => match std::net::TcpStream::connect_timeout(
            &rest.parse().unwrap_or(std::net::SocketAddr::from(([127, 0, 0, 1], 9))),
            std::time::Duration::from_secs(5),
        ) {
            Ok(_) => "ok connected".into(),
            Err(e) => format!("refused {e}"),
        },
        "getenv" => std::env::var(rest).unwrap_or_else(|_| "unset".into()),
        "model-call" => model_call(),
        "wait" | "deaf" => {
            // Listening for the cancel before anything can prompt it: one sent
            // between the thought and the wait would otherwise be missed.
            let cancelled = CANCELLED.notified();
            tokio::pin!(cancelled);
            cancelled.as_mut().enable();
            let thought = ContentChunk::new(ContentBlock::Text(TextContent::new("waiting")));
            let _ = cx.send_notification(SessionNotification::new(sid, SessionUpdate::AgentThoughtChunk(thought)));
            let pause = tokio::time::sleep(std::time::Duration::from_secs(rest.parse().unwrap_or(30)));
            if verb == "deaf" {
                pause.await;
                return "waited".into();
            }
            tokio::select! {
                () = pause => "waited".into(),
                () = cancelled => "cancelled".into(),
            }
        }
        "exit" => std::process::exit(rest.parse().unwrap_or(3)),
        "permissions" => permissions(cx, &sid, rest.parse().unwrap_or(1)).await,
        "time-reads" => {
            let (count, path) = rest.split_once(' ').unwrap_or((rest, ""));
            let mut took = Vec::new();
            for _ in 0..count.parse().unwrap_or(1) {
                let t = std::time::Instant::now();
                if let Err(e) = cx.send_request(ReadTextFileRequest::new(sid.clone(), path)).block_task().await {
                    return format!("refused {}", e.message);
                }
                took.push(t.elapsed().as_micros());
            }
            took.sort_unstable();
            let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
            format!("ok median_us={} p90_us={}", at(0.5), at(0.9))
        }
        "updates" | "long-updates" => {
            let mut words = rest.split_whitespace().map(|w| w.parse::<usize>().unwrap_or(1));
            let count = words.next().unwrap_or(1);
            let text = if verb == "updates" { "u".to_owned() } else { "z".repeat(words.next().unwrap_or(1) << 20) };
            for _ in 0..count {
                if say(cx, &sid, &text).is_err() {
                    return "refused the connection ended".into();
                }
            }
            format!("ok {count} sent")
        }
        "raw-no-newline" | "raw-nested" | "raw-invalid-utf8" => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let written = match verb {
                "raw-no-newline" => {
                    let mib = vec![b'x'; 1 << 20];
                    (0..rest.parse().unwrap_or(1)).try_for_each(|_| out.write_all(&mib))
                }
                "raw-nested" => {
                    let depth = rest.parse().unwrap_or(1);
                    out.write_all(format!("{}{}\n", "[".repeat(depth), "]".repeat(depth)).as_bytes())
                }
                _ => out.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":\"\xff\xfe\"}\n"),
            };
            match written.and_then(|()| out.flush()) {
                Ok(()) => "ok written".into(),
                Err(e) => format!("refused {e}"),
            }
        }
        "keep-terminal" => {
            let create = CreateTerminalRequest::new(sid, "sleep").args(vec!["60".into()]);
            word(cx.send_request(create).block_task().await.map(|c| c.terminal_id.to_string()))
        }
        "terminal-output" => {
            word(cx.send_request(TerminalOutputRequest::new(sid, rest.to_owned())).block_task().await.map(|o| o.output))
        }
        "terminal-kill" => word(
            cx.send_request(KillTerminalRequest::new(sid, rest.to_owned())).block_task().await.map(|_| String::new()),
        ),
        "terminal-release" => word(
            cx.send_request(ReleaseTerminalRequest::new(sid, rest.to_owned()))
                .block_task()
                .await
                .map(|_| String::new()),
        ),
        other => format!("unknown step {other}"),
    }
}

/// `count` permission requests, 32 in flight at a time (the client's own bound).
async fn permissions(cx: &ConnectionTo<Client>, sid: &SessionId, count: usize) -> String {
    let (mut allowed, mut refused) = (0, 0);
    let ask = |i: usize| {
        let fields = ToolCallUpdateFields::new()
            .kind(ToolKind::Execute)
            .title(format!("ls {i}"))
            .raw_input(serde_json::json!({ "command": "ls" }));
        let options = vec![
            PermissionOption::new("yes", "Allow once", PermissionOptionKind::AllowOnce),
            PermissionOption::new("no", "Reject", PermissionOptionKind::RejectOnce),
        ];
        let asked =
            RequestPermissionRequest::new(sid.clone(), ToolCallUpdate::new(format!("call-{i}"), fields), options);
        cx.send_request(asked).block_task()
    };
    let mut next = 0;
    while next < count {
        let batch: Vec<_> = (next..count.min(next + 32)).map(ask).collect();
        next += batch.len();
        for answer in futures::future::join_all(batch).await {
            match answer.map(|r| r.outcome) {
                Ok(RequestPermissionOutcome::Selected(s)) if s.option_id.to_string() == "yes" => allowed += 1,
                _ => refused += 1,
            }
        }
    }
    format!("ok {allowed} allowed {refused} refused")
}

/// One `POST /v1/messages` to the base URL the agent was given, over plain HTTP/1.1
/// (the door is on the envelope's loopback): `STATUS TEXT`.
fn model_call() -> String {
    use std::io::{Read, Write};
    let (Ok(base), Ok(key)) = (std::env::var("ANTHROPIC_BASE_URL"), std::env::var("ANTHROPIC_API_KEY")) else {
        return "unset ANTHROPIC_BASE_URL or ANTHROPIC_API_KEY".into();
    };
    let Some(rest) = base.strip_prefix("http://") else { return format!("not http: {base}") };
    let (authority, prefix) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let body = r#"{"model":"claude-scripted","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;
    let request = format!(
        "POST /{prefix}/v1/messages HTTP/1.1\r\nHost: {authority}\r\nx-api-key: {key}\r\nanthropic-version: 2023-06-01\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = match std::net::TcpStream::connect(authority) {
        Ok(s) => s,
        Err(e) => return format!("refused {e}"),
    };
    let mut answer = String::new();
    if stream.write_all(request.as_bytes()).is_err() || stream.read_to_string(&mut answer).is_err() {
        return "the door hung up".into();
    }
    let status = answer.split(' ').nth(1).unwrap_or("?").to_owned();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let value: serde_json::Value = serde_json::from_str(body.trim()).unwrap_or_default();
    let said = value.pointer("/content/0/text").or_else(|| value.pointer("/error/message"));
    format!("{status} {}", said.and_then(|v| v.as_str()).unwrap_or(body).replace('\n', " "))
}

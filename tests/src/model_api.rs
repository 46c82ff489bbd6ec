//! A scripted stand-in for the Anthropic Messages API (the real one is unreachable
//! here), for driving the real `claude` CLI. It speaks the real wire format: `POST
//! /v1/messages` answered as server-sent events (`message_start`, `content_block_*`
//! with `text_delta` or `input_json_delta`, `message_delta`, `message_stop`), or as one
//! JSON message when the request does not stream.
//!
//! The script is the model's turns. Which turn a request is for is read from the
//! request itself (the assistant messages it already holds), so the CLI's retries and
//! side requests (a title, a quota check: requests without tools) never shift it.
//! Every request is kept for the test to read what the CLI sent back (tool results).
//!
//! Like the real provider it checks the key: once [`ModelApi::require_key`] is set, a
//! request whose `x-api-key` is anything else gets a 401 in Anthropic's error shape.
//! What each request presented is kept too, so a test can show which key arrived.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// Every message and tool call gets an id of its own: the CLI merges the lines of
/// messages that share one.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn fresh_id(prefix: &str) -> String {
    format!("{prefix}_{:06}_{}", NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed), std::process::id())
}

/// One block of a model's turn.
#[derive(Debug, Clone)]
pub enum Block {
    Text(String),
    /// A tool call: its name and input.
    Tool(String, Value),
}

pub fn text(t: &str) -> Block {
    Block::Text(t.to_owned())
}

pub fn tool(name: &str, input: Value) -> Block {
    Block::Tool(name.to_owned(), input)
}

pub struct ModelApi {
    pub port: u16,
    requests: Arc<Mutex<Vec<Value>>>,
    turns: Arc<Mutex<Vec<Vec<Block>>>>,
    keys: Arc<Keys>,
}

/// The key the provider accepts, and every key presented to it.
#[derive(Default)]
struct Keys {
    required: Mutex<Option<String>>,
    presented: Mutex<Vec<String>>,
}

impl ModelApi {
    /// Serves `turns` on a loopback port; past the last turn the model says "done".
    pub fn start(turns: Vec<Vec<Block>>) -> ModelApi {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let turns = Arc::new(Mutex::new(turns));
        let keys = Arc::new(Keys::default());
        let (kept, script, checked) = (requests.clone(), turns.clone(), keys.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (kept, script, checked) = (kept.clone(), script.clone(), checked.clone());
                std::thread::spawn(move || serve(conn, &kept, &script, &checked));
            }
        });
        ModelApi { port, requests, turns, keys }
    }

    /// From now on, only `key` is accepted (in `x-api-key`).
    pub fn require_key(&self, key: &str) {
        *self.keys.required.lock().unwrap() = Some(key.to_owned());
    }

    /// Every key presented so far (`x-api-key`, or a bearer token), in order.
    pub fn keys_presented(&self) -> Vec<String> {
        self.keys.presented.lock().unwrap().clone()
    }

    /// Scripts the model anew (for turns that name paths known only later).
    pub fn set_turns(&self, turns: Vec<Vec<Block>>) {
        *self.turns.lock().unwrap() = turns;
    }

    /// The bodies of every `/v1/messages` request with tools (the agent's own turns).
    pub fn turns(&self) -> Vec<Value> {
        let all = self.requests.lock().unwrap().clone();
        all.into_iter().filter(|b| b.get("tools").is_some()).collect()
    }

    /// The tool results the CLI sent back, in order: (content, is_error).
    pub fn tool_results(&self) -> Vec<(String, bool)> {
        let mut seen = Vec::new();
        let Some(last) = self.turns().pop() else { return seen };
        for message in last["messages"].as_array().into_iter().flatten() {
            for block in message["content"].as_array().into_iter().flatten() {
                if block["type"] == "tool_result" {
                    let content = match &block["content"] {
                        Value::String(s) => s.clone(),
                        Value::Array(parts) => {
                            parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n")
                        }
                        _ => String::new(),
                    };
                    seen.push((content, block["is_error"].as_bool().unwrap_or(false)));
                }
            }
        }
        seen
    }
}

fn serve(conn: TcpStream, kept: &Mutex<Vec<Value>>, turns: &Mutex<Vec<Vec<Block>>>, keys: &Keys) {
    let mut reader = BufReader::new(&conn);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        let mut key = String::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
            if let Some((name, value)) = header.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("x-api-key") {
                    key = value.to_owned();
                } else if name.eq_ignore_ascii_case("authorization") && key.is_empty() {
                    key = value.strip_prefix("Bearer ").unwrap_or(value).to_owned();
                }
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let path = request_line.split(' ').nth(1).unwrap_or("/").to_owned();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let mut out = &conn;
        keys.presented.lock().unwrap().push(key.clone());
        if keys.required.lock().unwrap().as_ref().is_some_and(|required| *required != key) {
            let answer =
                json!({ "type": "error", "error": { "type": "authentication_error", "message": "invalid x-api-key" } })
                    .to_string();
            let _ = write!(
                out,
                "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
                answer.len()
            );
            continue;
        }
        if !path.starts_with("/v1/messages") || path.starts_with("/v1/messages/count_tokens") {
            let answer = json!({ "input_tokens": 10 }).to_string();
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
                answer.len()
            );
            continue;
        }
        kept.lock().unwrap().push(body.clone());
        let blocks = if body.get("tools").is_some() {
            let done = body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
            turns.lock().unwrap().get(done).cloned().unwrap_or_else(|| vec![text("done")])
        } else {
            vec![text("ok")]
        };
        if body["stream"] == true {
            let events = stream(&blocks);
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n{events}"
            );
            return;
        }
        let answer = message(&blocks).to_string();
        let _ = write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
    }
}

fn stop_reason(blocks: &[Block]) -> &'static str {
    if blocks.iter().any(|b| matches!(b, Block::Tool(..))) { "tool_use" } else { "end_turn" }
}

fn usage() -> Value {
    json!({ "input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0 })
}

fn content(blocks: &[Block]) -> Vec<Value> {
    blocks
        .iter()
        .map(|b| match b {
            Block::Text(t) => json!({ "type": "text", "text": t }),
            Block::Tool(name, input) => {
                json!({ "type": "tool_use", "id": fresh_id("toolu"), "name": name, "input": input })
            }
        })
        .collect()
}

fn message(blocks: &[Block]) -> Value {
    json!({
        "id": fresh_id("msg"), "type": "message", "role": "assistant", "model": "claude-scripted",
        "content": content(blocks), "stop_reason": stop_reason(blocks), "stop_sequence": null, "usage": usage(),
    })
}

/// The turn as the streaming API sends it.
fn stream(blocks: &[Block]) -> String {
    let mut out = String::new();
    let mut event = |name: &str, data: Value| out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    let mut start = message(blocks);
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    event("message_start", json!({ "type": "message_start", "message": start }));
    for (index, block) in content(blocks).into_iter().enumerate() {
        match block["type"].as_str() {
            Some("text") => {
                event(
                    "content_block_start",
                    json!({ "type": "content_block_start", "index": index, "content_block": { "type": "text", "text": "" } }),
                );
                event(
                    "content_block_delta",
                    json!({ "type": "content_block_delta", "index": index, "delta": { "type": "text_delta", "text": block["text"] } }),
                );
            }
            _ => {
                let mut opened = block.clone();
                opened["input"] = json!({});
                event(
                    "content_block_start",
                    json!({ "type": "content_block_start", "index": index, "content_block": opened }),
                );
                let partial = block["input"].to_string();
                event(
                    "content_block_delta",
                    json!({ "type": "content_block_delta", "index": index, "delta": { "type": "input_json_delta", "partial_json": partial } }),
                );
            }
        }
        event("content_block_stop", json!({ "type": "content_block_stop", "index": index }));
    }
    event(
        "message_delta",
        json!({ "type": "message_delta", "delta": { "stop_reason": stop_reason(blocks), "stop_sequence": null }, "usage": { "output_tokens": 5 } }),
    );
    event("message_stop", json!({ "type": "message_stop" }));
    out
}

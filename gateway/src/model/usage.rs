//! The usage a provider's answer reports, read as the answer streams past, never
//! holding more of it than one event (server-sent events) or a bounded whole body
//! (JSON). Anthropic reports `usage` in `message_start` and, cumulatively, in
//! `message_delta`; an OpenAI-compatible provider in its answer's `usage` (streamed:
//! in the last chunk, when the client asked for it).
//!
//! What it reads is the provider's word: the door counts what the provider says it
//! will bill. An answer that reports nothing counts nothing.

use std::sync::LazyLock;

use memchr::memmem::Finder;
use serde_json::Value;

use super::Api;

/// What a data line must name to be parsed, per API: every other line (the text
/// deltas, nearly all of a long answer) is passed over after one search each.
static ANTHROPIC_NAMES: LazyLock<[Finder<'static>; 2]> =
    LazyLock::new(|| [Finder::new(b"message_start"), Finder::new(b"message_delta")]);
static OPENAI_NAMES: LazyLock<[Finder<'static>; 2]> = LazyLock::new(|| [Finder::new(b"usage"), Finder::new(b"model")]);

/// Anthropic's events that never carry usage: nearly all of a long answer is
/// `content_block_delta`. Each event is named on its `event:` line, and its data's
/// `type` is the same name, so a data line under one of these names is not searched.
const EVENTS_WITHOUT_USAGE: &[&[u8]] =
    &[b"content_block_delta", b"content_block_start", b"content_block_stop", b"ping", b"message_stop"];

/// The longest server-sent-event line read; longer lines (a huge text delta) are
/// passed over, since usage is never in them.
const MAX_LINE_BYTES: usize = 256 * 1024;
/// The most of a JSON answer held to read its usage.
const MAX_JSON_BYTES: usize = 8 << 20;

/// Tokens, as the provider reported them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    pub model: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// What counts against a budget: every token the provider bills.
    pub fn total(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_creation_input_tokens)
            .saturating_add(self.cache_read_input_tokens)
    }

    /// Reads one `usage` object (and the model, where the object beside it names one).
    /// Anthropic's later numbers are cumulative, so each one read replaces the last.
    fn read(&mut self, api: Api, usage: &Value) {
        let number = |key: &str| usage.get(key).and_then(Value::as_u64);
        match api {
            Api::Anthropic => {
                for (key, slot) in [
                    ("input_tokens", &mut self.input_tokens),
                    ("output_tokens", &mut self.output_tokens),
                    ("cache_creation_input_tokens", &mut self.cache_creation_input_tokens),
                    ("cache_read_input_tokens", &mut self.cache_read_input_tokens),
                ] {
                    if let Some(n) = number(key) {
                        *slot = n;
                    }
                }
            }
            Api::Openai => {
                let cached = usage.pointer("/prompt_tokens_details/cached_tokens").and_then(Value::as_u64).unwrap_or(0);
                if let Some(prompt) = number("prompt_tokens") {
                    self.input_tokens = prompt.saturating_sub(cached);
                    self.cache_read_input_tokens = cached.min(prompt);
                }
                if let Some(completion) = number("completion_tokens") {
                    self.output_tokens = completion;
                }
            }
        }
    }

    fn read_model(&mut self, object: &Value) {
        if self.model.is_none()
            && let Some(model) = object.get("model").and_then(Value::as_str)
        {
            self.model = Some(model.chars().take(128).collect());
        }
    }
}

/// Reads an answer's usage from its bytes, as they pass.
pub struct Meter {
    api: Api,
    streamed: bool,
    held: Vec<u8>,
    /// Passing over a line longer than [`MAX_LINE_BYTES`] until its end.
    skipping: bool,
    /// The current event was named as one of [`EVENTS_WITHOUT_USAGE`].
    event_without_usage: bool,
    usage: Usage,
}

impl Meter {
    /// `streamed`: the answer is `text/event-stream`.
    pub fn new(api: Api, streamed: bool) -> Meter {
        Meter { api, streamed, held: Vec::new(), skipping: false, event_without_usage: false, usage: Usage::default() }
    }

    pub fn feed(&mut self, mut chunk: &[u8]) {
        if !self.streamed {
            if self.held.len() + chunk.len() <= MAX_JSON_BYTES {
                self.held.extend_from_slice(chunk);
            } else {
                self.skipping = true;
            }
            return;
        }
        // Whole lines are read where they lie in the chunk; only a line cut by the
        // chunk's end is copied, to be finished by the next.
        while let Some(end) = memchr::memchr(b'\n', chunk) {
            let line = &chunk[..end];
            if self.held.is_empty() {
                // The same limit as a held line's, so that chunking never changes what is read.
                if !self.skipping && line.len() <= MAX_LINE_BYTES {
                    self.line(line);
                }
            } else if !self.skipping && self.held.len() + end <= MAX_LINE_BYTES {
                self.held.extend_from_slice(line);
                let whole = std::mem::take(&mut self.held);
                self.line(&whole);
                self.held = whole;
            }
            self.held.clear();
            self.skipping = false;
            chunk = &chunk[end + 1..];
        }
        if self.skipping || self.held.len() + chunk.len() > MAX_LINE_BYTES {
            self.held.clear();
            self.skipping = true;
        } else {
            self.held.extend_from_slice(chunk);
        }
    }

    /// The usage read, once the answer has ended.
    pub fn finish(mut self) -> Usage {
        if self.streamed {
            let line = std::mem::take(&mut self.held);
            if !self.skipping {
                self.line(&line);
            }
        } else if !self.skipping
            && let Ok(answer) = serde_json::from_slice::<Value>(&self.held)
        {
            self.usage.read_model(&answer);
            if let Some(usage) = answer.get("usage") {
                self.usage.read(self.api, usage);
            }
        }
        self.usage
    }

    /// One line of server-sent events: only `data:` lines hold JSON, and only those
    /// that name usage are parsed (the text deltas, nearly all of a stream, are not).
    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            // An event ends at a blank line.
            self.event_without_usage = false;
            return;
        }
        if let Some(name) = line.strip_prefix(b"event:") {
            self.event_without_usage = self.api == Api::Anthropic && EVENTS_WITHOUT_USAGE.contains(&name.trim_ascii());
            return;
        }
        let Some(data) = line.strip_prefix(b"data:") else { return };
        if self.event_without_usage {
            return;
        }
        let names = match self.api {
            Api::Anthropic => &*ANTHROPIC_NAMES,
            Api::Openai => &*OPENAI_NAMES,
        };
        if !names.iter().any(|name| name.find(data).is_some()) {
            return;
        }
        let Ok(event) = serde_json::from_slice::<Value>(data.trim_ascii()) else { return };
        match self.api {
            Api::Anthropic => match event.get("type").and_then(Value::as_str) {
                Some("message_start") => {
                    if let Some(message) = event.get("message") {
                        self.usage.read_model(message);
                        if let Some(usage) = message.get("usage") {
                            self.usage.read(Api::Anthropic, usage);
                        }
                    }
                }
                Some("message_delta") => {
                    if let Some(usage) = event.get("usage") {
                        self.usage.read(Api::Anthropic, usage);
                    }
                }
                _ => {}
            },
            Api::Openai => {
                self.usage.read_model(&event);
                if let Some(usage) = event.get("usage").filter(|u| u.is_object()) {
                    self.usage.read(Api::Openai, usage);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metered(api: Api, streamed: bool, body: &str, chunk: usize) -> Usage {
        let mut meter = Meter::new(api, streamed);
        for piece in body.as_bytes().chunks(chunk) {
            meter.feed(piece);
        }
        meter.finish()
    }

    const ANTHROPIC_SSE: &str = "event: message_start\n\
        data: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1,\"cache_creation_input_tokens\":7,\"cache_read_input_tokens\":100}}}\n\n\
        event: content_block_delta\n\
        data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"usage: {\\\"output_tokens\\\": 999}\"}}\n\n\
        event: message_delta\n\
        data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n\
        event: message_stop\r\n\
        data: {\"type\":\"message_stop\"}\r\n\r\n";

    #[test]
    fn anthropic_streams_are_read_in_any_chunking() {
        let expected = Usage {
            model: Some("claude-x".into()),
            input_tokens: 25,
            output_tokens: 15,
            cache_creation_input_tokens: 7,
            cache_read_input_tokens: 100,
        };
        for chunk in [1, 2, 7, 64, 4096] {
            assert_eq!(metered(Api::Anthropic, true, ANTHROPIC_SSE, chunk), expected, "chunks of {chunk}");
        }
        assert_eq!(expected.total(), 147);
    }

    #[test]
    fn an_anthropic_event_named_as_one_without_usage_is_not_searched() {
        // The name is the provider's word for its data's type, as with every field.
        let misnamed = "event: content_block_delta\n\
            data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":99}}\n\n\
            data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n";
        for chunk in [1, 5, 4096] {
            assert_eq!(metered(Api::Anthropic, true, misnamed, chunk).output_tokens, 7, "chunks of {chunk}");
        }
        // The name ends with its event: the next event's data is read.
        let renamed = "event: ping\ndata: {}\n\nevent: message_delta\n\
            data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}\n\n";
        assert_eq!(metered(Api::Anthropic, true, renamed, 3).output_tokens, 3);
    }

    #[test]
    fn json_answers_and_openai_usage_are_read() {
        let anthropic = r#"{"id":"m","model":"claude-y","usage":{"input_tokens":3,"output_tokens":4}}"#;
        let u = metered(Api::Anthropic, false, anthropic, 5);
        assert_eq!((u.model.as_deref(), u.input_tokens, u.output_tokens), (Some("claude-y"), 3, 4));
        let openai = r#"{"model":"gpt-z","usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}"#;
        let u = metered(Api::Openai, false, openai, 3);
        assert_eq!((u.input_tokens, u.cache_read_input_tokens, u.output_tokens, u.total()), (6, 4, 5, 15));
        let stream = "data: {\"model\":\"gpt-z\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n\
                      data: {\"model\":\"gpt-z\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n\
                      data: [DONE]\n\n";
        let u = metered(Api::Openai, true, stream, 4);
        assert_eq!((u.model.as_deref(), u.input_tokens, u.output_tokens), (Some("gpt-z"), 9, 2));
    }

    #[test]
    fn hostile_answers_cost_bounded_memory_and_count_nothing_false() {
        // A line longer than the limit is passed over whole, and the next one read.
        let long = format!(
            "data: {{\"type\":\"message_delta\",\"usage\":{{\"output_tokens\":5}},\"pad\":\"{}\"}}\n",
            "x".repeat(MAX_LINE_BYTES)
        );
        let body = format!("{long}data: {{\"type\":\"message_delta\",\"usage\":{{\"output_tokens\":6}}}}\n");
        let mut meter = Meter::new(Api::Anthropic, true);
        for piece in body.as_bytes().chunks(1000) {
            meter.feed(piece);
            assert!(meter.held.len() <= MAX_LINE_BYTES);
        }
        assert_eq!(meter.finish().output_tokens, 6);
        for junk in [
            "",
            "data:",
            "data: {",
            "data: [1,2]",
            "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-1}}",
            "\u{0}\u{0}",
        ] {
            assert_eq!(metered(Api::Anthropic, true, junk, 3), Usage::default(), "{junk:?}");
            assert_eq!(metered(Api::Openai, false, junk, 3), Usage::default(), "{junk:?}");
        }
        let huge = metered(Api::Anthropic, false, &" ".repeat(MAX_JSON_BYTES + 1), 1 << 20);
        assert_eq!(huge, Usage::default());
    }
}

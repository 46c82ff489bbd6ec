//! The adapters' readers: the agent's output, hostile input, read into its steps here,
//! in the run's own process, and nowhere that holds another run (DESIGN.md §2, trust
//! rule 8). The supervisor relays the bytes unread and records the typed steps.
//!
//! A new adapter whose agent writes a stream is a module here, with its tests, and a
//! line in [`Reader::for_adapter`].

pub mod acp;
pub mod claude_code;

use cc_proto::common::v1::Adapter;
use cc_proto::runner::v1::parse_agent_output_request::Input;
use cc_proto::runner::v1::{ParseAgentOutputRequest, ParseAgentOutputResponse, parse_agent_output_response::Output};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

/// The steps read, waiting for the supervisor to take them: when it does not, reading
/// the agent's output waits, and so does the agent.
const STEPS_HELD: usize = 64;

pub type Steps = ReceiverStream<Result<ParseAgentOutputResponse, Status>>;

/// `ParseAgentOutput`: the adapter first, then the output's chunks, read as they come.
pub async fn parse(mut input: Streaming<ParseAgentOutputRequest>) -> Result<Steps, Status> {
    let adapter = match input.message().await? {
        Some(ParseAgentOutputRequest { input: Some(Input::Adapter(value)) }) => Adapter::from_wire(value)
            .ok_or_else(|| Status::invalid_argument(format!("adapter {value} is not one this runner knows")))?,
        _ => return Err(Status::invalid_argument("the first message names the adapter whose output follows")),
    };
    let mut reader = Reader::for_adapter(adapter).ok_or_else(|| {
        Status::invalid_argument(format!("adapter {} writes no output for the runner to read", adapter.name()))
    })?;
    let (steps, held) = mpsc::channel(STEPS_HELD);
    tokio::spawn(async move {
        loop {
            let (read, ended) = match input.message().await {
                Ok(Some(ParseAgentOutputRequest { input: Some(Input::Stdout(chunk)) })) => (reader.feed(&chunk), false),
                Ok(Some(_)) => {
                    let refusal = Status::invalid_argument("after the first message, only the agent's output");
                    let _ = steps.send(Err(refusal)).await;
                    return;
                }
                Ok(None) => (reader.finish(), true),
                // The supervisor went away: there is no one to tell.
                Err(_) => return,
            };
            for step in read {
                if steps.send(Ok(step)).await.is_err() {
                    return;
                }
            }
            if ended {
                return;
            }
        }
    });
    Ok(ReceiverStream::new(held))
}

/// A line of the agent's output longer than this is dropped, and said so: one message
/// of Claude Code's, a tool result with a whole file in it, fits well within.
pub const MAX_LINE_BYTES: usize = 8 << 20;

/// An adapter's reading of one prompt's output, a whole line at a time.
pub trait StepReader: Send {
    /// The steps in `line`, and notes on what of it was not read.
    fn line(&mut self, line: &str) -> Vec<Output>;
}

/// One prompt's output, read line by line. What is held is at most one line, so an
/// agent that writes a gigabyte with no newline costs [`MAX_LINE_BYTES`], not a gigabyte.
pub struct Reader {
    steps: Box<dyn StepReader>,
    pending: Vec<u8>,
    /// The rest of an overlong line is skipped up to its newline.
    skipping: bool,
}

impl Reader {
    /// The reader for `adapter`'s output; `None` for an adapter whose agent writes no
    /// stream to read here.
    pub fn for_adapter(adapter: Adapter) -> Option<Self> {
        let steps: Box<dyn StepReader> = match adapter {
            Adapter::ClaudeCode | Adapter::ClaudeCodeNosandbox => Box::<claude_code::Session>::default(),
            Adapter::Unspecified | Adapter::Harness | Adapter::Acp => return None,
        };
        Some(Self { steps, pending: Vec::new(), skipping: false })
    }

    /// The steps in `chunk` and the lines before it it completes, in order.
    pub fn feed(&mut self, mut chunk: &[u8]) -> Vec<ParseAgentOutputResponse> {
        let mut out = Vec::new();
        while let Some(end) = chunk.iter().position(|b| *b == b'\n') {
            let (line, rest) = chunk.split_at(end + 1);
            chunk = rest;
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            if self.pending.len() + line.len() > MAX_LINE_BYTES {
                self.pending.clear();
                out.push(dropped());
                continue;
            }
            self.hold(line);
            let line = std::mem::take(&mut self.pending);
            out.extend(self.read(&line));
        }
        if self.skipping {
            return out;
        }
        if self.pending.len() + chunk.len() > MAX_LINE_BYTES {
            self.pending = Vec::new();
            self.skipping = true;
            out.push(dropped());
        } else {
            self.hold(chunk);
        }
        out
    }

    /// Keeps `bytes` of a line, growing by doubling but never past a line's bound.
    fn hold(&mut self, bytes: &[u8]) {
        let needed = self.pending.len() + bytes.len();
        if needed > self.pending.capacity() {
            let grown = needed.max(self.pending.capacity() * 2).min(MAX_LINE_BYTES);
            self.pending.reserve_exact(grown - self.pending.len());
        }
        self.pending.extend_from_slice(bytes);
    }

    /// The last line, if the output ended without a newline.
    pub fn finish(&mut self) -> Vec<ParseAgentOutputResponse> {
        if self.skipping || self.pending.is_empty() {
            return vec![];
        }
        let line = std::mem::take(&mut self.pending);
        self.read(&line)
    }

    /// One whole line's steps; bytes that are not UTF-8 are read as U+FFFD.
    fn read(&mut self, line: &[u8]) -> Vec<ParseAgentOutputResponse> {
        let steps = self.steps.line(&String::from_utf8_lossy(line));
        steps.into_iter().map(|output| ParseAgentOutputResponse { output: Some(output) }).collect()
    }
}

fn dropped() -> ParseAgentOutputResponse {
    let why = format!("a line of the agent's output over {MAX_LINE_BYTES} bytes was dropped");
    ParseAgentOutputResponse { output: Some(Output::Dropped(why)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &[u8] = br#"{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}"#;

    fn kinds(out: &[ParseAgentOutputResponse]) -> Vec<&'static str> {
        out.iter()
            .map(|o| match &o.output {
                Some(Output::Event(_)) => "event",
                Some(Output::Dropped(_)) => "dropped",
                None => "none",
            })
            .collect()
    }

    #[test]
    fn lines_split_anywhere_are_read_whole_and_in_order() {
        let mut stream = TEXT.to_vec();
        stream.push(b'\n');
        stream.extend_from_slice(TEXT);
        stream.push(b'\n');
        for split in 0..stream.len() {
            let mut reader = Reader::for_adapter(Adapter::ClaudeCode).unwrap();
            let mut out = reader.feed(&stream[..split]);
            out.extend(reader.feed(&stream[split..]));
            out.extend(reader.finish());
            assert_eq!(kinds(&out), ["event", "event"], "split at {split}");
        }
        // The last line without its newline is still read.
        let mut reader = Reader::for_adapter(Adapter::ClaudeCode).unwrap();
        assert!(reader.feed(TEXT).is_empty());
        assert_eq!(kinds(&reader.finish()), ["event"]);
    }

    #[test]
    fn an_overlong_line_is_dropped_once_and_holds_no_more_than_a_line() {
        let mut reader = Reader::for_adapter(Adapter::ClaudeCode).unwrap();
        let mib = vec![b'x'; 1 << 20];
        let mut out = Vec::new();
        // 64 MiB with no newline: one note, and the reader holds nothing of it.
        for _ in 0..64 {
            out.extend(reader.feed(&mib));
            assert!(reader.pending.capacity() <= MAX_LINE_BYTES);
        }
        assert_eq!(kinds(&out), ["dropped"]);
        // Its end, and the next line whole.
        let mut next = b"tail\n".to_vec();
        next.extend_from_slice(TEXT);
        next.push(b'\n');
        assert_eq!(kinds(&reader.feed(&next)), ["event"]);
        assert!(reader.finish().is_empty());
        // An overlong line that ends within the chunk that makes it overlong.
        let mut reader = Reader::for_adapter(Adapter::ClaudeCode).unwrap();
        let mut line = vec![b'y'; MAX_LINE_BYTES + 1];
        line.push(b'\n');
        line.extend_from_slice(TEXT);
        line.push(b'\n');
        assert_eq!(kinds(&reader.feed(&line)), ["dropped", "event"]);
    }

    #[test]
    fn bytes_that_are_not_utf8_are_read_as_replacement_characters() {
        let mut reader = Reader::for_adapter(Adapter::ClaudeCode).unwrap();
        let line =
            b"{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"a\xff\xfeb\"}]}}\n";
        let out = reader.feed(line);
        let Some(Output::Event(event)) = &out[0].output else { panic!("{out:?}") };
        let Some(cc_proto::runner::v1::agent_event::Step::Text(text)) = &event.step else { panic!("{event:?}") };
        assert_eq!(text.text, "a\u{fffd}\u{fffd}b");
    }

    #[test]
    fn only_an_adapter_with_a_stream_has_a_reader() {
        assert!(Reader::for_adapter(Adapter::ClaudeCodeNosandbox).is_some());
        for adapter in [Adapter::Unspecified, Adapter::Harness, Adapter::Acp] {
            assert!(Reader::for_adapter(adapter).is_none());
        }
    }
}

//! A client of one hosted terminal over gRPC, for the tests and the benchmarks: what
//! `ccctl terminal attach` does, without a local terminal.

use std::time::Duration;

use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::attach_terminal_request::Input;
use cc_proto::supervisor::v1::attach_terminal_response::Event;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use cc_client::Client;

/// One attach: input goes out on `input`, output accumulates in `seen`.
pub struct Attached {
    pub attached: pb::TerminalAttached,
    input: mpsc::Sender<pb::AttachTerminalRequest>,
    output: tonic::Streaming<pb::AttachTerminalResponse>,
    /// Every output byte so far (the replay first).
    pub seen: Vec<u8>,
    pub exit: Option<pb::TerminalExit>,
    /// The refusal that ended the attach, if one did.
    pub refused: Option<tonic::Status>,
}

/// Attaches to `name`, and reads the `attached` message.
pub async fn attach(client: &mut Client, name: &str) -> Result<Attached, tonic::Status> {
    let (input, input_rx) = mpsc::channel(64);
    let start = pb::AttachTerminalStart { name: name.to_owned(), size: None };
    input.send(pb::AttachTerminalRequest { input: Some(Input::Start(start)) }).await.expect("queue the start");
    let mut output = client.terminals.attach_terminal(ReceiverStream::new(input_rx)).await?.into_inner();
    let attached = match output.next().await {
        Some(Ok(pb::AttachTerminalResponse { event: Some(Event::Attached(a)) })) => a,
        Some(Err(status)) => return Err(status),
        other => panic!("an attach starts with `attached`, not {other:?}"),
    };
    Ok(Attached { attached, input, output, seen: vec![], exit: None, refused: None })
}

impl Attached {
    pub async fn send(&self, input: Input) {
        let _ = self.input.send(pb::AttachTerminalRequest { input: Some(input) }).await;
    }

    /// Types `text`.
    pub async fn type_text(&self, text: &str) {
        self.send(Input::Data(text.as_bytes().to_vec())).await;
    }

    /// Reads one message; false once the attach has ended.
    pub async fn read_one(&mut self) -> bool {
        match self.output.next().await {
            Some(Ok(pb::AttachTerminalResponse { event: Some(Event::Data(bytes)) })) => {
                self.seen.extend_from_slice(&bytes);
                true
            }
            Some(Ok(pb::AttachTerminalResponse { event: Some(Event::Exit(exit)) })) => {
                self.exit = Some(exit);
                false
            }
            Some(Ok(_)) => true,
            Some(Err(status)) => {
                self.refused = Some(status);
                false
            }
            None => false,
        }
    }

    /// Reads until the output so far contains `needle` (after `from`), or panics after
    /// `limit` saying what was seen.
    pub async fn read_until(&mut self, needle: &str, from: usize, limit: Duration) -> usize {
        let found = |seen: &[u8]| {
            let tail = &seen[from.min(seen.len())..];
            tail.windows(needle.len()).position(|w| w == needle.as_bytes()).map(|at| from + at)
        };
        let reading = async {
            loop {
                if let Some(at) = found(&self.seen) {
                    return Some(at);
                }
                if !self.read_one().await {
                    return found(&self.seen);
                }
            }
        };
        match tokio::time::timeout(limit, reading).await {
            Ok(Some(at)) => at,
            _ => panic!(
                "{needle:?} not in the terminal's output within {limit:?}; exit {:?}, refused {:?}; seen:\n{}",
                self.exit,
                self.refused,
                String::from_utf8_lossy(&self.seen[self.seen.len().saturating_sub(4096)..])
            ),
        }
    }

    /// Reads to the end of the attach (the exit, or a refusal), for at most `limit`.
    pub async fn read_to_end(&mut self, limit: Duration) {
        let reading = async { while self.read_one().await {} };
        tokio::time::timeout(limit, reading).await.expect("the attach ends in time");
    }
}

/// A terminal of `backend` (with its conversation) running `command`.
pub async fn create(
    client: &mut Client,
    backend: pb::TerminalBackend,
    conversation: &str,
    command: &[&str],
) -> Result<pb::Terminal, tonic::Status> {
    let request = pb::CreateTerminalRequest {
        backend: backend as i32,
        conversation_id: conversation.to_owned(),
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        size: Some(pb::TerminalSize { columns: 100, rows: 30 }),
        ..Default::default()
    };
    Ok(client.terminals.create_terminal(request).await?.into_inner().terminal.expect("the terminal"))
}

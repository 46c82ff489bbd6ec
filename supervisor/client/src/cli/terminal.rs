//! `ccctl terminal new|attach|list|rm`: terminals the supervisor hosts.
//!
//! `attach` puts the local terminal in raw mode, so that every key (Ctrl-C included)
//! goes to the remote command, forwards SIGWINCH as resizes, and detaches on `~.`
//! typed at the start of a line, as ssh does (`~~` sends one `~`). The local terminal
//! is restored however attach ends: a guard's drop, on every path out.

use std::io::Write;

use anyhow::{Context, anyhow};
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::attach_terminal_request::Input;
use cc_proto::supervisor::v1::attach_terminal_response::Event;
use cc_proto::supervisor::v1::terminals_client::TerminalsClient;
use clap::Subcommand;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::{ExitWith, render, rpc_error};

#[derive(Subcommand)]
pub enum TerminalAction {
    /// Start a terminal and print its name (host: a login shell on this host,
    /// unsandboxed; native: a shell in the conversation's envelope)
    New {
        /// host (default), native or microvm
        #[arg(long, default_value = "host", value_parser = ["host", "native", "microvm"])]
        backend: String,
        /// The conversation (required for native)
        #[arg(long)]
        conversation: Option<String>,
        /// The working directory (host only)
        #[arg(long)]
        cwd: Option<String>,
        /// NAME=VALUE added to its environment (repeat for several)
        #[arg(long = "env", value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// native: the run's network (through its egress proxy)
        #[arg(long, default_value = "off", value_parser = ["on", "off"])]
        network: String,
        /// microvm: open it in this running rig (which outlives it) rather than a rig of its own
        #[arg(long)]
        rig: Option<String>,
        /// Attach at once
        #[arg(long)]
        attach: bool,
        /// The command [default: a login shell]
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Attach to a terminal (detach with `~.` at the start of a line)
    Attach { name: String },
    /// List the terminals
    List,
    /// End a terminal's command and forget the terminal
    Rm { name: String },
}

pub async fn terminal(mut client: TerminalsClient<Channel>, action: TerminalAction, json: bool) -> anyhow::Result<()> {
    match action {
        TerminalAction::New { backend, conversation, cwd, env, network, rig, attach: then_attach, command } => {
            let env = env
                .iter()
                .map(|pair| {
                    pair.split_once('=')
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .ok_or_else(|| anyhow!("--env {pair:?} is not NAME=VALUE"))
                })
                .collect::<anyhow::Result<_>>()?;
            let backend = super::words::terminal_backend(&backend);
            let request = pb::CreateTerminalRequest {
                backend: backend as i32,
                conversation_id: conversation.unwrap_or_default(),
                cwd: cwd.unwrap_or_default(),
                command,
                env,
                size: local_size(),
                network: network == "on",
                rig: rig.unwrap_or_default(),
            };
            let terminal =
                client.create_terminal(request).await.map_err(rpc_error)?.into_inner().terminal.unwrap_or_default();
            if then_attach {
                return attach(client, terminal.name).await;
            }
            render::terminals(std::slice::from_ref(&terminal), json, true);
        }
        TerminalAction::Attach { name } => attach(client, name).await?,
        TerminalAction::List => {
            let list = client.list_terminals(pb::ListTerminalsRequest {}).await.map_err(rpc_error)?.into_inner();
            render::terminals(&list.terminals, json, false);
        }
        TerminalAction::Rm { name } => {
            client.delete_terminal(pb::DeleteTerminalRequest { name: name.clone() }).await.map_err(rpc_error)?;
            if json {
                println!("{}", serde_json::json!({ "deleted": name }));
            } else {
                println!("deleted {name}");
            }
        }
    }
    Ok(())
}

/// The local terminal's size, when stdout is one.
fn local_size() -> Option<pb::TerminalSize> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    crossterm::terminal::size()
        .ok()
        .map(|(columns, rows)| pb::TerminalSize { columns: columns.into(), rows: rows.into() })
}

/// Raw mode while it lives.
struct RawMode;

impl RawMode {
    fn enter() -> anyhow::Result<Option<RawMode>> {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            return Ok(None);
        }
        crossterm::terminal::enable_raw_mode().context("cannot put the terminal in raw mode")?;
        Ok(Some(RawMode))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// What a typed chunk means once the `~.` escape is looked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Typed {
    /// Bytes to send.
    Send(Vec<u8>),
    /// `~.` at the start of a line: detach (bytes before it are sent first).
    Detach(Vec<u8>),
}

/// ssh's escape: `~` right after a newline (or first of all) is held until the next
/// byte; `.` then detaches, `~` sends one `~`, anything else sends both.
#[derive(Debug)]
pub struct EscapeScanner {
    at_line_start: bool,
    holding_tilde: bool,
}

impl Default for EscapeScanner {
    fn default() -> Self {
        EscapeScanner { at_line_start: true, holding_tilde: false }
    }
}

impl EscapeScanner {
    pub fn scan(&mut self, chunk: &[u8]) -> Typed {
        let mut out = Vec::with_capacity(chunk.len() + 1);
        for &byte in chunk {
            if self.holding_tilde {
                self.holding_tilde = false;
                match byte {
                    b'.' => return Typed::Detach(out),
                    b'~' => {
                        out.push(b'~');
                        self.at_line_start = false;
                        continue;
                    }
                    _ => out.push(b'~'),
                }
            } else if self.at_line_start && byte == b'~' {
                self.holding_tilde = true;
                continue;
            }
            out.push(byte);
            self.at_line_start = byte == b'\r' || byte == b'\n';
        }
        Typed::Send(out)
    }
}

/// Attaches this terminal to `name` until the command exits (ccctl exits with its
/// status) or the person detaches.
async fn attach(mut client: TerminalsClient<Channel>, name: String) -> anyhow::Result<()> {
    let (inputs, input_rx) = mpsc::channel::<pb::AttachTerminalRequest>(16);
    let start = pb::AttachTerminalStart { name: name.clone(), size: local_size() };
    inputs.send(pb::AttachTerminalRequest { input: Some(Input::Start(start)) }).await?;
    let mut output = client.attach_terminal(ReceiverStream::new(input_rx)).await.map_err(rpc_error)?.into_inner();

    // What is typed goes out through a queue of its own, so that a remote command that
    // reads nothing never stops this loop from seeing `~.`, a resize or a signal.
    let (outgoing, mut to_send) = mpsc::unbounded_channel::<pb::AttachTerminalRequest>();
    let forwarder = {
        let inputs = inputs.clone();
        tokio::spawn(async move {
            while let Some(request) = to_send.recv().await {
                if inputs.send(request).await.is_err() {
                    return;
                }
            }
        })
    };
    let raw = RawMode::enter()?;
    // Keys are read on a thread of their own: a read of the terminal blocks.
    let (keys_tx, mut keys) = mpsc::channel::<Vec<u8>>(16);
    std::thread::spawn(move || {
        use std::io::Read;
        let mut stdin = std::io::stdin().lock();
        let mut buffer = [0u8; 4096];
        while let Ok(n) = stdin.read(&mut buffer) {
            if n == 0 || keys_tx.blocking_send(buffer[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut resized = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())?;
    let mut terminated = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut hung_up = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut scanner = EscapeScanner::default();
    let mut stdout = std::io::stdout().lock();
    let mut keys_open = true;
    let ending = loop {
        tokio::select! {
            message = output.next() => match message {
                Some(Ok(pb::AttachTerminalResponse { event: Some(event) })) => match event {
                    Event::Attached(attached) => {
                        let _ = write!(stdout, "{}\r\n", render::one_line(&attached.banner));
                        let _ = stdout.flush();
                    }
                    Event::Data(bytes) => {
                        let _ = stdout.write_all(&bytes);
                        let _ = stdout.flush();
                    }
                    Event::Exit(exit) => break Ending::Exited(exit),
                },
                Some(Ok(_)) => {}
                Some(Err(status)) => break Ending::Failed(rpc_error(status)),
                None => break Ending::Failed(anyhow!("the supervisor ended the attach without the command's exit")),
            },
            key = keys.recv(), if keys_open => match key {
                Some(chunk) => {
                    let (send, detach) = match scanner.scan(&chunk) {
                        Typed::Send(bytes) => (bytes, false),
                        Typed::Detach(bytes) => (bytes, true),
                    };
                    if !send.is_empty() {
                        let _ = outgoing.send(pb::AttachTerminalRequest { input: Some(Input::Data(send)) });
                    }
                    if detach {
                        break Ending::Detached;
                    }
                }
                // The end of our input: the terminal goes on; its output is still shown.
                None => keys_open = false,
            },
            _ = resized.recv() => {
                if let Some(size) = local_size() {
                    let _ = outgoing.send(pb::AttachTerminalRequest { input: Some(Input::Resize(size)) });
                }
            }
            // Ended from outside: detach, and restore the terminal on the way out.
            _ = terminated.recv() => break Ending::Detached,
            _ = hung_up.recv() => break Ending::Detached,
        }
    };
    drop(raw);
    forwarder.abort();
    match ending {
        Ending::Detached => {
            eprintln!("\r\nccctl: detached from {name}; `ccctl terminal attach {name}` to return");
            Ok(())
        }
        Ending::Exited(exit) => {
            let code = match (exit.code, exit.signal) {
                (Some(code), _) => code.clamp(0, 255) as u8,
                (None, Some(signal)) => (128i64 + i64::from(signal)).clamp(0, 255) as u8,
                (None, None) => 1,
            };
            let how = match (exit.code, exit.signal) {
                (Some(code), _) => format!("exited with code {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                (None, None) => "ended".to_owned(),
            };
            let why = if exit.reason.is_empty() { String::new() } else { format!(" ({})", exit.reason) };
            Err(ExitWith::error(code, &format!("{name}: the command {how}{why}")))
        }
        Ending::Failed(e) => Err(e),
    }
}

enum Ending {
    Detached,
    Exited(pb::TerminalExit),
    Failed(anyhow::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tilde_dot_at_a_line_start_detaches() {
        let mut s = EscapeScanner::default();
        assert_eq!(s.scan(b"~."), Typed::Detach(vec![]));
        let mut s = EscapeScanner::default();
        assert_eq!(s.scan(b"ls\r~."), Typed::Detach(b"ls\r".to_vec()));
        let mut s = EscapeScanner::default();
        assert_eq!(s.scan(b"echo a~."), Typed::Send(b"echo a~.".to_vec()));
    }

    #[test]
    fn the_escape_spans_chunks_and_tilde_tilde_sends_one() {
        let mut s = EscapeScanner::default();
        assert_eq!(s.scan(b"\n~"), Typed::Send(b"\n".to_vec()));
        assert_eq!(s.scan(b"."), Typed::Detach(vec![]));
        let mut s = EscapeScanner::default();
        assert_eq!(s.scan(b"~~."), Typed::Send(b"~.".to_vec()));
        let mut s = EscapeScanner::default();
        assert_eq!(s.scan(b"~x"), Typed::Send(b"~x".to_vec()));
        assert_eq!(s.scan(b"~."), Typed::Send(b"~.".to_vec()), "not at a line start any more");
        assert_eq!(s.scan(b"\r~."), Typed::Detach(b"\r".to_vec()));
    }
}

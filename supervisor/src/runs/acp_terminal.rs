//! An ACP agent's terminals: the commands it starts with `terminal/create`, judged by
//! the gate and run in the run's harness_bash envelope as `ccctl tool bash` is, whose
//! output it then reads, waits for, kills and releases by id.
//!
//! A terminal is a live command, not a call: it may run up to the longest timeout a
//! bash call may ask for, and its output is not capped by killing it; only its last
//! bytes are kept, as much as the agent asked for and never more than the bash
//! output cap.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cc_proto::runner::v1::{TerminalExit, TerminalOutput};
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::call_tool_response::Event as ToolEvent;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_stream::StreamExt;

use super::acp::{self, OutputTail};
use super::acp_link::run_error;
use super::tools::ToolCalls;
use crate::ids::RunId;

/// Terminals a run's agent holds at once (released ones do not count).
pub const MAX_TERMINALS: usize = 16;

/// Why a terminal request was refused, as the agent hears it.
type Error = String;

/// The terminals of one agent, by id.
pub struct Terminals {
    by_id: Mutex<HashMap<String, Arc<Terminal>>>,
    next_id: AtomicU64,
    /// One per terminal held, taken before the gate is asked: a request waiting on an
    /// approver holds its place, so no number of them gets past [`MAX_TERMINALS`].
    slots: Arc<Semaphore>,
}

struct Terminal {
    output: Mutex<OutputTail>,
    exit: watch::Sender<Option<TerminalExit>>,
    reader: Mutex<Option<tokio::task::AbortHandle>>,
    slot: Mutex<Option<OwnedSemaphorePermit>>,
}

impl Default for Terminals {
    fn default() -> Self {
        Terminals {
            by_id: Mutex::default(),
            next_id: AtomicU64::new(0),
            slots: Arc::new(Semaphore::new(MAX_TERMINALS)),
        }
    }
}

impl Terminals {
    fn get(&self, id: &str) -> Result<Arc<Terminal>, Error> {
        let terminals = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        terminals.get(id).cloned().ok_or_else(|| format!("no terminal {id:?}"))
    }

    /// Starts `command_line` (the gate first), keeping at most `output_byte_limit` of
    /// its output, and gives it an id. The line was made by the run's runner from the
    /// agent's `terminal/create`; the gate judges it as any bash command line.
    pub async fn create(
        &self,
        tools: &ToolCalls,
        run_id: &RunId,
        command_line: String,
        output_byte_limit: Option<u64>,
    ) -> Result<String, Error> {
        let line = command_line;
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            return Err(format!("Control Center: at most {MAX_TERMINALS} terminals at once; release one"));
        };
        let mut events = tools.terminal_command(run_id, line).await.map_err(run_error)?;
        let most = usize::try_from(tools.runs.config().bash_output_cap_bytes).unwrap_or(usize::MAX);
        // Under an envelope our init reports a command killed by a signal as a shell does.
        let enveloped = tools.runs.env.enveloped;
        let terminal = Arc::new(Terminal {
            output: Mutex::new(OutputTail::new(output_byte_limit, most)),
            exit: watch::channel(None).0,
            reader: Mutex::new(None),
            slot: Mutex::new(Some(slot)),
        });
        let reading = terminal.clone();
        let reader = tokio::spawn(async move {
            let mut status = TerminalExit::default();
            while let Some(event) = events.next().await {
                match event {
                    Ok(pb::CallToolResponse { event: Some(ToolEvent::Stdout(b) | ToolEvent::Stderr(b)) }) => {
                        reading.output.lock().unwrap_or_else(|p| p.into_inner()).push(&b);
                    }
                    Ok(pb::CallToolResponse { event: Some(ToolEvent::Exit(e)) }) => {
                        let (code, signal) = acp::exit_of(e.code, e.signal, enveloped);
                        status = TerminalExit {
                            exit_code: code.and_then(|c| u32::try_from(c).ok()),
                            signal: signal.map(signal_name),
                        };
                    }
                    Ok(_) => {}
                    Err(s) => {
                        let note = format!("\ncc: the terminal's command was lost: {}\n", s.message());
                        reading.output.lock().unwrap_or_else(|p| p.into_inner()).push(note.as_bytes());
                        status = killed();
                    }
                }
            }
            reading.exit.send_replace(Some(status));
        });
        *terminal.reader.lock().unwrap_or_else(|p| p.into_inner()) = Some(reader.abort_handle());
        let id = format!("term-{}", self.next_id.fetch_add(1, Ordering::Relaxed) + 1);
        self.by_id.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), terminal);
        Ok(id)
    }

    pub fn output(&self, id: &str) -> Result<TerminalOutput, Error> {
        let terminal = self.get(id)?;
        let output = terminal.output.lock().unwrap_or_else(|p| p.into_inner());
        let exit = terminal.exit.borrow().clone();
        Ok(TerminalOutput { text: output.text(), truncated: output.truncated(), exit })
    }

    /// Waits for the command's end, which its timeout (bash's) bounds.
    pub async fn wait_for_exit(&self, id: &str) -> Result<TerminalExit, Error> {
        let mut exit = self.get(id)?.exit.subscribe();
        let status = exit.wait_for(Option::is_some).await.map_err(|_| "the terminal was released".to_owned())?.clone();
        Ok(status.unwrap_or_default())
    }

    /// Kills the command: dropping its launch's stream makes sandboxd kill it.
    pub fn kill(&self, id: &str) -> Result<(), Error> {
        let terminal = self.get(id)?;
        if let Some(reader) = terminal.reader.lock().unwrap_or_else(|p| p.into_inner()).take() {
            reader.abort();
        }
        terminal.exit.send_if_modified(|exit| exit.is_none().then(|| *exit = Some(killed())).is_some());
        Ok(())
    }

    /// Kills the command and forgets the terminal; its place is free at once, even
    /// while a wait on it is still being answered.
    pub fn release(&self, id: &str) -> Result<(), Error> {
        self.kill(id)?;
        if let Some(terminal) = self.by_id.lock().unwrap_or_else(|p| p.into_inner()).remove(id) {
            terminal.slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
        Ok(())
    }

    /// Every terminal released: the agent is gone, and its commands go with it.
    pub fn release_all(&self) {
        let ids: Vec<String> = self.by_id.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        for id in ids {
            let _ = self.release(&id);
        }
    }
}

fn killed() -> TerminalExit {
    TerminalExit { exit_code: None, signal: Some("SIGKILL".to_owned()) }
}

fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal).map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_owned())
}

//! cc-hook: Claude Code's PreToolUse hook (see `cc_runner::hook`).
//! `cc-hook [--agent http://127.0.0.1:PORT | --agent unix:PATH] [--deadline-ms N]`
#![forbid(unsafe_code)]

use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use cc_proto::agent::v1::DecideToolUseRequest;
use cc_proto::agent::v1::agent_gate_client::AgentGateClient;
use cc_proto::common::v1::Decision;
use cc_runner::hook::{self, Address, BLOCK};

/// The bridge of the run's agent socket inside its envelopes.
const DEFAULT_AGENT: &str = "http://127.0.0.1:41419";
/// Claude Code's default hook timeout is 60 s: answer well before it.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(50);

fn block(why: &str) -> ExitCode {
    eprintln!("{}", hook::blocked(why));
    ExitCode::from(BLOCK)
}

struct Options {
    agent: Address,
    deadline: Duration,
}

fn options() -> Result<Options, String> {
    let mut agent = DEFAULT_AGENT.parse::<Address>()?;
    let mut deadline = DEFAULT_DEADLINE;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--agent" => agent = value()?.parse()?,
            "--deadline-ms" => {
                let ms: u64 = value()?.parse().map_err(|_| "--deadline-ms takes milliseconds".to_owned())?;
                deadline = Duration::from_millis(ms.clamp(1, 3_600_000));
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Options { agent, deadline })
}

async fn ask(agent: Address, tool_use: cc_proto::agent::v1::ToolUse) -> Result<(bool, String), String> {
    let channel = match &agent {
        Address::Tcp(url) => tonic::transport::Endpoint::from_shared(url.clone())
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| format!("cannot reach the run's agent socket at {url}: {e}"))?,
        Address::Unix(path) => cc_proto::client::connect(path).await.map_err(|e| e.to_string())?,
    };
    let mut gate = AgentGateClient::new(channel);
    let answer = gate
        .decide_tool_use(DecideToolUseRequest { tool_use: Some(tool_use) })
        .await
        .map_err(|status| format!("the run's gate did not answer: {}", status.message()))?
        .into_inner();
    Ok((answer.decision == Decision::Allow as i32, answer.reason))
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(o) => o,
        Err(e) => return block(&format!("cc-hook: {e}")),
    };
    // The deadline holds whatever hangs below (stdin, the runtime, the socket): this
    // thread answers deny and ends the process in time.
    let deadline = options.deadline;
    std::thread::spawn(move || {
        std::thread::sleep(deadline);
        eprintln!("{}", hook::blocked(&format!("no decision within {} ms", deadline.as_millis())));
        std::process::exit(i32::from(BLOCK));
    });
    let mut input = Vec::new();
    let limit = hook::MAX_INPUT_BYTES as u64 + 1;
    if let Err(e) = std::io::stdin().take(limit).read_to_end(&mut input) {
        return block(&format!("cannot read the hook's input: {e}"));
    }
    let tool_use = match hook::tool_use(&input) {
        Ok(t) => t,
        Err(e) => return block(&e.to_string()),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => return block(&format!("cannot start: {e}")),
    };
    match runtime.block_on(ask(options.agent, tool_use)) {
        Ok((allowed, reason)) => {
            println!("{}", hook::answer(allowed, &reason));
            ExitCode::SUCCESS
        }
        Err(e) => block(&e),
    }
}

//! cc-hook: Claude Code's PreToolUse hook (see `cc_runner::hook`).
//! `cc-hook [--agent http://127.0.0.1:PORT | --agent unix:PATH] [--deadline-ms N] [--api-key]`
//!
//! With `--api-key` it is Claude Code's `apiKeyHelper` instead: it prints the run's
//! model placeholder, which the broker mints and the run's model door alone accepts.
#![forbid(unsafe_code)]

use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use cc_proto::agent::v1::DecideToolUseRequest;
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
    api_key: bool,
}

fn options() -> Result<Options, String> {
    let mut agent = DEFAULT_AGENT.parse::<Address>()?;
    let mut deadline = DEFAULT_DEADLINE;
    let mut api_key = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--agent" => agent = value()?.parse()?,
            "--deadline-ms" => {
                let ms: u64 = value()?.parse().map_err(|_| "--deadline-ms takes milliseconds".to_owned())?;
                deadline = Duration::from_millis(ms.clamp(1, 3_600_000));
            }
            "--api-key" => api_key = true,
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Options { agent, deadline, api_key })
}

async fn ask(agent: Address, tool_use: cc_proto::agent::v1::ToolUse) -> Result<(bool, String), String> {
    let mut gate = hook::agent_client(&agent).await?;
    let answer = gate
        .decide_tool_use(DecideToolUseRequest { tool_use: Some(tool_use) })
        .await
        .map_err(|status| format!("the run's gate did not answer: {}", status.message()))?
        .into_inner();
    Ok((answer.decision == Decision::Allow as i32, answer.reason))
}

/// `--api-key`: the run's model placeholder on stdout (the key Claude Code presents
/// to its model door, worth nothing elsewhere), or exit 1 with why on stderr.
fn print_api_key(options: Options) -> ExitCode {
    let fetch = async {
        let mut gate = hook::agent_client(&options.agent).await?;
        let call = gate.get_model_placeholder(cc_proto::agent::v1::GetModelPlaceholderRequest {});
        match tokio::time::timeout(options.deadline, call).await {
            Ok(Ok(r)) => Ok(r.into_inner().placeholder),
            Ok(Err(status)) => Err(status.message().to_owned()),
            Err(_) => Err(format!("no answer within {} ms", options.deadline.as_millis())),
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    match runtime.map_err(|e| e.to_string()).and_then(|r| r.block_on(fetch)) {
        Ok(key) => {
            println!("{key}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cc-hook: cannot get the run's model key: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(o) => o,
        Err(e) => return block(&format!("cc-hook: {e}")),
    };
    if options.api_key {
        return print_api_key(options);
    }
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

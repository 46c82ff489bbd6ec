//! A push front door over stdin and stdout, for `git push --receive-pack=…`: it runs the
//! real `git receive-pack` behind it, reads each push's head with the gateway's own
//! code, refuses the refs named in `CC_GATE_REFUSE` (comma-separated; a trailing `*`
//! matches a prefix) and answers with the gateway's report-status.
//!
//! This is the wire code against real git without HTTP; `tests/push_wire.rs` drives
//! it. The gateway's per-run socket is built on the same functions.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use cc_gateway::git::pktline::{self, Packet};
use cc_gateway::git::plan::{Plan, Verdict};
use cc_gateway::git::report::{self, Answer};
use cc_gateway::git::request::parse_head;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stdio_gate: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn refused(name: &str) -> bool {
    let patterns = std::env::var("CC_GATE_REFUSE").unwrap_or_default();
    patterns.split(',').filter(|p| !p.is_empty()).any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == p,
    })
}

fn run() -> Result<(), String> {
    let repo = std::env::args().next_back().ok_or("no repository given")?;
    let mut child = Command::new("git")
        .args(["receive-pack", &repo])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run git receive-pack: {e}"))?;
    let mut child_in = child.stdin.take().ok_or("no stdin")?;
    let mut child_out = child.stdout.take().ok_or("no stdout")?;
    let mut stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();

    // The ref advertisement passes through as it is, up to its flush.
    let advertisement = read_until_flush(&mut child_out)?;
    stdout.write_all(&advertisement).map_err(|e| e.to_string())?;
    stdout.flush().map_err(|e| e.to_string())?;

    // The push's head, read as it arrives; whatever follows it is the pack.
    let mut buf = Vec::new();
    let (head, at) = loop {
        if let Some(parsed) = parse_head(&buf).map_err(|e| e.to_string())? {
            break parsed;
        }
        let mut chunk = [0u8; 8192];
        let n = stdin.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the client closed before its push was complete".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if head.is_probe() {
        child_in.write_all(b"0000").map_err(|e| e.to_string())?;
        drop(child_in);
        child.wait().map_err(|e| e.to_string())?;
        return Ok(());
    }
    let verdicts: Vec<Verdict> = head
        .commands
        .iter()
        .map(|c| {
            if refused(&c.name) { Verdict::Refuse(format!("pushes to {} are denied", c.name)) } else { Verdict::Allow }
        })
        .collect();
    let plan = Plan::new(&head, &verdicts);
    let answer = Answer::for_capabilities(&head.capabilities);
    let forwarded = plan.forwarded(&head);
    let pack_start = buf[at..].to_vec();

    let upstream = if forwarded.is_empty() {
        // Nothing goes upstream: the pack is read and dropped so the client can finish.
        child_in.write_all(b"0000").map_err(|e| e.to_string())?;
        drop(child_in);
        child.wait().map_err(|e| e.to_string())?;
        std::io::copy(&mut stdin, &mut std::io::sink()).map_err(|e| e.to_string())?;
        None
    } else {
        child_in.write_all(&head.encode(&forwarded)).map_err(|e| e.to_string())?;
        child_in.write_all(&pack_start).map_err(|e| e.to_string())?;
        // The rest of the pack streams through; it is never held here.
        let pump = std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin(), &mut child_in);
        });
        let mut body = Vec::new();
        child_out.read_to_end(&mut body).map_err(|e| e.to_string())?;
        child.wait().map_err(|e| e.to_string())?;
        drop(pump);
        let (report_bytes, progress) = report::demultiplex(&body, answer.side_band).map_err(|e| e.to_string())?;
        if !progress.is_empty() {
            let mut out = Vec::new();
            report::band(&mut out, 2, &progress);
            stdout.write_all(&out).map_err(|e| e.to_string())?;
        }
        Some(report::parse(&report_bytes).map_err(|e| e.to_string())?)
    };
    let reply = plan.answer(&head, upstream.as_ref());
    stdout.write_all(&reply.encode(answer)).map_err(|e| e.to_string())?;
    stdout.flush().map_err(|e| e.to_string())
}

/// Reads pkt-lines up to and including a flush.
fn read_until_flush(from: &mut impl Read) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    let mut at = 0;
    loop {
        while let Some((packet, used)) = pktline::decode(&buf[at..]).map_err(|e| e.to_string())? {
            at += used;
            if packet == Packet::Flush {
                return Ok(buf);
            }
        }
        let mut chunk = [0u8; 4096];
        let n = from.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("receive-pack closed before its advertisement ended".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

//! The model door's cost (issue 38's targets), side by side in one run against one
//! scripted provider on loopback that answers in server-sent events:
//!
//! * the latency to the answer's first byte, through a run's door (its socket, the
//!   placeholder swapped for the key by the broker on each request) vs straight to the
//!   provider with the key: the door adds under 1 ms (median);
//! * a long answer's throughput (256 MiB of events) through the door vs straight: at
//!   least 0.9×. The provider frames it in chunks, one per write, as providers do over
//!   HTTP/1.1; the same answer close-delimited (which the door's HTTP client hands on
//!   8 KiB at a time) is printed beside it.
//!
//! Rounds alternate between the sides so that neither gets the warmer machine.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::runs::{ccctl, path_str};
use crate::scale::{bytes, rounds};
use crate::summary;
use crate::{report, start, stats};

const KEY: &str = "sk-bench-provider";
const FIRST_BYTES: usize = 300;
const WARM_UP: usize = 30;
const STREAM_BYTES: u64 = 256 << 20;
const STREAM_ROUNDS: usize = 5;

/// The provider: `POST /v1/messages` answered as events; a request whose body names
/// `"stream_bytes"` gets that many bytes of text deltas before the answer's end. Any
/// key but its own is a 401.
fn provider() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || answer(conn));
        }
    });
    Ok(port)
}

fn answer(conn: TcpStream) {
    let _ = conn.set_nodelay(true);
    let mut reader = BufReader::new(&conn);
    let (mut length, mut key) = (0usize, String::new());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    loop {
        let mut header = String::new();
        match reader.read_line(&mut header) {
            Ok(0) | Err(_) => return,
            Ok(_) if header == "\r\n" => break,
            Ok(_) => {}
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            } else if name.eq_ignore_ascii_case("x-api-key") {
                key = value.trim().to_owned();
            }
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let mut out = &conn;
    if key != KEY {
        let _ = out.write_all(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
    }
    let text = String::from_utf8_lossy(&body);
    let stream_bytes: u64 = text
        .split("\"stream_bytes\":")
        .nth(1)
        .and_then(|r| r.split(['}', ',']).next()?.trim().parse().ok())
        .unwrap_or(0);
    // A real provider frames a stream in chunks, one per write; `"close_delimited":true`
    // asks for the older framing, a body that ends when the connection does.
    let chunked = !text.contains("\"close_delimited\":true");
    let frame = |data: &str| if chunked { format!("{:x}\r\n{data}\r\n", data.len()) } else { data.to_owned() };
    let head = if chunked {
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    } else {
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    };
    let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"bench\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n";
    if out.write_all(format!("{head}{}", frame(start)).as_bytes()).is_err() {
        return;
    }
    // Text deltas of about 1 KiB each, written 64 KiB at a time.
    let delta = format!(
        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{}\"}}}}\n\n",
        "x".repeat(900)
    );
    let events = delta.repeat(64);
    let block = frame(&events);
    // Counted without the framing, which the door writes its own way: every answer
    // carries at least `stream_bytes` of events, whichever way it is framed.
    let mut left = stream_bytes;
    while left > 0 {
        if out.write_all(block.as_bytes()).is_err() {
            return;
        }
        left = left.saturating_sub(events.len() as u64);
    }
    let tail = "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5}}\n\n\
                event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let end = if chunked { "0\r\n\r\n" } else { "" };
    let _ = out.write_all(format!("{}{end}", frame(tail)).as_bytes());
}

/// One request on `stream`: the time to the answer's first byte, and the bytes read
/// to its end.
fn request(
    mut stream: impl Read + Write,
    path: &str,
    key: &str,
    stream_bytes: u64,
    framing: Framing,
) -> anyhow::Result<(Duration, u64)> {
    let t = Instant::now();
    let close_delimited = framing == Framing::CloseDelimited;
    let body = format!(
        "{{\"model\":\"bench\",\"max_tokens\":8,\"stream\":true,\"stream_bytes\":{stream_bytes},\"close_delimited\":{close_delimited}}}"
    );
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: provider\r\nx-api-key: {key}\r\nanthropic-version: 2023-06-01\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    let mut buf = vec![0u8; 1 << 20];
    let first = stream.read(&mut buf)?;
    let first_byte = t.elapsed();
    if first == 0 {
        bail!("the answer was empty");
    }
    if !buf.starts_with(b"HTTP/1.1 200") {
        bail!("the answer was {}", String::from_utf8_lossy(&buf[..first.min(200)]));
    }
    let mut total = first as u64;
    loop {
        match stream.read(&mut buf)? {
            0 => return Ok((first_byte, total)),
            n => total += n as u64,
        }
    }
}

pub fn run() -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("cc-bench-models-").tempdir()?;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))?;
    let root = std::fs::canonicalize(tmp.path())?;
    let port = provider()?;
    let repo = crate::runs::demo_repo(&root.join("repo"))?;
    let data = root.join("d0");
    std::fs::create_dir_all(&data)?;
    let key = data.join("bench.key");
    std::fs::write(&key, format!("{KEY}\n"))?;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
    std::fs::write(
        data.join("config.toml"),
        format!(
            "[models.bench]\napi = \"anthropic\"\nbase_url = \"http://127.0.0.1:{port}\"\nkey_file = \"bench.key\"\n"
        ),
    )?;
    let (_supervisor, _) = start(&root, 0)?;
    ccctl(&data, &["repo", "add", path_str(&repo)?, "--name", "demo"])?;
    let conversation = ccctl(&data, &["conversation", "new", "--repo", "demo", "--worktree-backend", "copy"])?;
    let run = ccctl(&data, &["run", "start", "--conversation", conversation.trim()])?.trim().to_owned();
    let dir = data.join("gateway/runs").join(&run);
    let door = dir.join("model.sock");
    let hook = crate::sibling("cc-hook")?;
    let placeholder = std::process::Command::new(hook)
        .arg("--agent")
        .arg(format!("unix:{}", dir.join("agent.sock").display()))
        .arg("--api-key")
        .output()
        .context("cc-hook --api-key")?;
    if !placeholder.status.success() {
        bail!("no placeholder for the run: {}", String::from_utf8_lossy(&placeholder.stderr));
    }
    let placeholder = String::from_utf8_lossy(&placeholder.stdout).trim().to_owned();
    let through = || request(UnixStream::connect(&door)?, "/bench/v1/messages", &placeholder, 0, Framing::Chunked);
    let straight = || {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nodelay(true)?;
        request(stream, "/v1/messages", KEY, 0, Framing::Chunked)
    };

    let (mut door_times, mut direct_times) =
        (Vec::with_capacity(rounds(FIRST_BYTES)), Vec::with_capacity(rounds(FIRST_BYTES)));
    for round in 0..rounds(WARM_UP) + rounds(FIRST_BYTES) {
        let (d, _) = through()?;
        let (s, _) = straight()?;
        if round >= rounds(WARM_UP) {
            door_times.push(d);
            direct_times.push(s);
        }
    }
    let (d, s) = (stats(door_times), stats(direct_times));
    report("first byte through the model door", &d, s.median + Duration::from_millis(1));
    report("first byte straight to the provider", &s, s.median);
    let added = d.median.saturating_sub(s.median);
    println!("first-byte latency added by the door: {:.0} µs (median), target < 1000 µs", added.as_secs_f64() * 1e6);
    summary::row(
        "models",
        "the model door's latency to first byte",
        &format!("straight to the same provider {}", summary::time(s.median)),
        "< 1 ms added",
        format!("{} added", summary::time(added)),
        Some(added < Duration::from_millis(1)),
    );

    let ratio = stream_ratio(&door, &placeholder, port, Framing::Chunked)?;
    summary::row(
        "models",
        "256 MiB of server-sent events through the door",
        &format!("straight, {:.0} MiB/s", ratio.straight_mib_s),
        "≥ 0.9×",
        summary::times(ratio.ratio),
        Some(ratio.ratio >= 0.9),
    );
    stream_ratio(&door, &placeholder, port, Framing::CloseDelimited)?;
    // What the door counted: every request's usage, as the run reports it.
    let show = ccctl(&data, &["--json", "run", "show", &run])?;
    let shown: serde_json::Value = serde_json::from_str(&show)?;
    let requests = shown["model"]["per_model"][0]["requests"].as_u64().unwrap_or(0);
    println!(
        "requests the run's usage counts: {requests} of {}",
        rounds(WARM_UP) + rounds(FIRST_BYTES) + 2 * rounds(STREAM_ROUNDS)
    );
    Ok(())
}

/// How a streamed answer's body is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// In chunks, one per write: how a provider streams over HTTP/1.1.
    Chunked,
    /// Ended by the connection's close: older servers' way, which the door's HTTP
    /// client hands on 8 KiB at a time.
    CloseDelimited,
}

struct StreamRatio {
    straight_mib_s: f64,
    ratio: f64,
}

/// A long answer through the door against straight, in alternating rounds; prints the
/// figures.
fn stream_ratio(door: &Path, placeholder: &str, port: u16, framing: Framing) -> anyhow::Result<StreamRatio> {
    let (mut door_times, mut direct_times) = (Vec::new(), Vec::new());
    for _ in 0..rounds(STREAM_ROUNDS) {
        let t = Instant::now();
        let (_, through) =
            request(UnixStream::connect(door)?, "/bench/v1/messages", placeholder, bytes(STREAM_BYTES), framing)?;
        door_times.push(t.elapsed());
        let t = Instant::now();
        let straight = TcpStream::connect(("127.0.0.1", port))?;
        let (_, direct_bytes) = request(straight, "/v1/messages", KEY, bytes(STREAM_BYTES), framing)?;
        direct_times.push(t.elapsed());
        if through < bytes(STREAM_BYTES) || direct_bytes < bytes(STREAM_BYTES) {
            bail!("a stream was cut short: {through} through the door, {direct_bytes} straight");
        }
    }
    let (d, s) = (stats(door_times), stats(direct_times));
    let speed = |t: Duration| bytes(STREAM_BYTES) as f64 / t.as_secs_f64() / (1 << 20) as f64;
    let ratio = s.median.as_secs_f64() / d.median.as_secs_f64();
    let what = match framing {
        Framing::Chunked => "256 MiB of events through the door",
        Framing::CloseDelimited => "the same, close-delimited",
    };
    println!(
        "{what:<40} {:>7.0} MiB/s  direct {:>7.0} MiB/s  ratio {ratio:.3} of direct{}",
        speed(d.median),
        speed(s.median),
        if framing == Framing::Chunked { " (target ≥ 0.9)" } else { "" }
    );
    Ok(StreamRatio { straight_mib_s: speed(s.median), ratio })
}

//! The egress proxy's cost (issue 21's targets), side by side in one run against one
//! loopback server:
//!
//! * 1 GiB through a run's CONNECT tunnel vs the same GET straight over loopback: at
//!   least 0.9× direct. Measured twice: from the bench on the run's proxy socket (the
//!   proxy alone, as the envelope's bridge reaches it), and with curl inside the run's
//!   envelope (bridge and proxy) vs curl on the host;
//! * the same transfer through srt's HTTP proxy, when a command that starts it is given;
//! * the connect latency the proxy adds: from connecting to `200 Connection
//!   Established`, vs a plain TCP connect to the server: under 200 µs (median).
//!
//! Rounds alternate between the sides so that neither gets the warmer machine.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::runs::{ccctl, path_str};
use crate::scale::{bytes, rounds};
use crate::summary;
use crate::{report, start, stats};

const GIB: u64 = 1 << 30;
const BIG_ROUNDS: usize = 5;
const CONNECTS: usize = 500;
const WARM_UP: usize = 50;
/// The name the run may reach; `[egress.resolve]` points it at loopback.
const NAME: &str = "upstream.bench.test";

/// A loopback HTTP server: `GET /<n>` answers `n` bytes, then closes.
fn server() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || serve(conn));
        }
    });
    Ok(port)
}

fn serve(conn: TcpStream) {
    let mut reader = BufReader::new(&conn);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let size: u64 = line.split(' ').nth(1).and_then(|p| p.trim_start_matches('/').parse().ok()).unwrap_or(0);
    loop {
        let mut header = String::new();
        match reader.read_line(&mut header) {
            Ok(0) | Err(_) => return,
            Ok(_) if header == "\r\n" => break,
            Ok(_) => {}
        }
    }
    let mut out = &conn;
    if out
        .write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n").as_bytes())
        .is_err()
    {
        return;
    }
    let chunk = vec![0x5au8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        if out.write_all(&chunk[..n]).is_err() {
            return;
        }
        left -= n as u64;
    }
}

/// GETs `/<size>` on `stream` and reads to the end; the bytes read.
fn get(mut stream: impl Read + Write, size: u64) -> anyhow::Result<u64> {
    stream.write_all(format!("GET /{size} HTTP/1.1\r\nHost: {NAME}\r\n\r\n").as_bytes())?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        match stream.read(&mut buf)? {
            0 => return Ok(total),
            n => total += n as u64,
        }
    }
}

/// Opens a tunnel through the run's proxy socket: connected once the proxy says 200.
fn tunnel(socket: &Path, port: u16) -> anyhow::Result<UnixStream> {
    let mut stream = UnixStream::connect(socket)?;
    stream.write_all(format!("CONNECT {NAME}:{port} HTTP/1.1\r\nHost: {NAME}:{port}\r\n\r\n").as_bytes())?;
    let mut head = Vec::with_capacity(64);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            bail!("the proxy closed the tunnel before answering");
        }
        head.push(byte[0]);
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        bail!("the proxy refused the tunnel: {}", String::from_utf8_lossy(&head).lines().next().unwrap_or(""));
    }
    Ok(stream)
}

fn timed(f: impl FnOnce() -> anyhow::Result<u64>) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let bytes = f()?;
    let elapsed = t.elapsed();
    if bytes < crate::scale::bytes(GIB) {
        bail!("only {bytes} bytes arrived");
    }
    Ok(elapsed)
}

/// curl's `time_total` for 1 GiB from the host, straight or through a proxy. (curl's
/// `--unix-socket` bypasses a proxy, so ours is reached from the host by the bench.)
fn curl_host(port: u16, proxy: Option<&str>) -> anyhow::Result<Duration> {
    let mut curl = Command::new("curl");
    curl.args(["-sS", "-o", "/dev/null", "-w", "%{time_total} %{size_download}\n", "-m", "120"]);
    if let Some(proxy) = proxy {
        curl.args(["-p", "-x", proxy]);
    }
    let out = curl.arg(format!("http://127.0.0.1:{port}/{}", bytes(GIB))).output()?;
    parse_curl(&String::from_utf8_lossy(&out.stdout))
}

fn parse_curl(out: &str) -> anyhow::Result<Duration> {
    let mut words = out.split_whitespace();
    let seconds: f64 = words.next().and_then(|s| s.parse().ok()).context(format!("curl printed {out:?}"))?;
    let size: u64 = words.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let gib = bytes(GIB);
    if size < gib {
        bail!("curl fetched {size} bytes of {gib}");
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Prints and records `what`'s speed against the straight transfer; `judged`: whether
/// the 0.9× target is ours to meet (not srt's).
fn throughput(what: &str, through: Vec<Duration>, direct: Vec<Duration>, judged: bool) {
    let (t, d) = (stats(through), stats(direct));
    let speed = |s: Duration| bytes(GIB) as f64 / s.as_secs_f64() / (1 << 20) as f64;
    println!(
        "{what:<40} {:>7.0} MiB/s  direct {:>7.0} MiB/s  ratio {:.3} of direct (target ≥ 0.9)",
        speed(t.median),
        speed(d.median),
        d.median.as_secs_f64() / t.median.as_secs_f64()
    );
    let ratio = d.median.as_secs_f64() / t.median.as_secs_f64();
    summary::row(
        "egress",
        what,
        &format!("a straight loopback transfer, {:.0} MiB/s", speed(d.median)),
        if judged { "≥ 0.9×" } else { "" },
        summary::times(ratio),
        judged.then_some(ratio >= 0.9),
    );
}

/// `srt`: a command that starts srt's HTTP proxy and prints `port=N` (bench/srt-proxy.mjs).
pub fn run(srt: Option<String>) -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("cc-bench-egress-").tempdir()?;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))?;
    let root = std::fs::canonicalize(tmp.path())?;
    let port = server()?;
    let repo = crate::runs::demo_repo(&root.join("repo"))?;

    // The rule that lets the gate allow network access, and the name's resolution.
    let rules = root.join("rules.toml");
    std::fs::write(&rules, "[[rule]]\neffect = \"access_network\"\ndecision = \"allow\"\n")?;
    std::fs::set_permissions(&rules, std::fs::Permissions::from_mode(0o644))?;
    let data = root.join("d0");
    std::fs::create_dir_all(&data)?;
    std::fs::write(
        data.join("config.toml"),
        format!(
            "[gate]\nrules = \"{}\"\n\n[egress]\nallow = [\"{NAME}\", \"127.0.0.1:{port}\"]\n\n\
             [egress.resolve]\n\"{NAME}\" = [\"127.0.0.1\"]\n",
            rules.display()
        ),
    )?;
    let (_supervisor, _) = start(&root, 0)?;
    ccctl(&data, &["repo", "add", path_str(&repo)?, "--name", "demo"])?;
    let conversation = ccctl(&data, &["conversation", "new", "--repo", "demo", "--worktree-backend", "copy"])?;
    let run =
        ccctl(&data, &["run", "start", "--conversation", conversation.trim(), "--network", "on"])?.trim().to_owned();
    let socket = data.join("gateway/runs").join(&run).join("http.sock");

    // The proxy alone: the bench on the run's socket vs straight to the server.
    let (mut through, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..rounds(BIG_ROUNDS) {
        through.push(timed(|| get(tunnel(&socket, port)?, bytes(GIB)))?);
        direct.push(timed(|| get(TcpStream::connect(("127.0.0.1", port))?, bytes(GIB)))?);
    }
    throughput("1 GiB through the proxy socket", through, direct, true);

    // From inside the envelope: curl through the bridge and the proxy, vs on the host.
    let (mut through, mut direct) = (Vec::new(), Vec::new());
    let gib = bytes(GIB);
    let inside =
        format!("curl -sS -p -o /dev/null -w '%{{time_total}} %{{size_download}}\\n' http://{NAME}:{port}/{gib}");
    for _ in 0..rounds(BIG_ROUNDS) {
        through.push(parse_curl(&ccctl(&data, &["tool", &run, "bash", "--timeout", "120", "--", &inside])?)?);
        direct.push(curl_host(port, None)?);
    }
    throughput("1 GiB by curl in the envelope (CONNECT)", through, direct, true);

    if let Some(srt) = srt.filter(|s| !s.is_empty()) {
        let (mut proxy, srt_port) = start_srt_proxy(&srt)?;
        let srt_proxy = format!("http://127.0.0.1:{srt_port}");
        let (mut through, mut direct) = (Vec::new(), Vec::new());
        for _ in 0..rounds(BIG_ROUNDS) {
            through.push(curl_host(port, Some(&srt_proxy))?);
            direct.push(curl_host(port, None)?);
        }
        let _ = proxy.kill();
        let _ = proxy.wait();
        throughput("1 GiB by curl through srt's proxy", through, direct, false);
    } else {
        println!("srt's proxy: skipped (bench/run.sh installs srt and passes its proxy starter)");
    }

    // The connect latency the proxy adds (the gate's answer is cached after the first).
    let (mut through, mut direct) = (Vec::with_capacity(rounds(CONNECTS)), Vec::with_capacity(rounds(CONNECTS)));
    for round in 0..rounds(WARM_UP) + rounds(CONNECTS) {
        let t = Instant::now();
        let tunnelled = tunnel(&socket, port)?;
        let tunnel_time = t.elapsed();
        let t = Instant::now();
        let plain = TcpStream::connect(("127.0.0.1", port))?;
        let plain_time = t.elapsed();
        drop((tunnelled, plain));
        if round >= rounds(WARM_UP) {
            through.push(tunnel_time);
            direct.push(plain_time);
        }
    }
    let (t, d) = (stats(through), stats(direct));
    report("connect through the proxy (to 200)", &t, d.median + Duration::from_micros(200));
    report("TCP connect straight to the server", &d, d.median);
    let added = t.median.saturating_sub(d.median);
    println!("connect latency added by the proxy: {:.0} µs (median), target < 200 µs", added.as_secs_f64() * 1e6);
    summary::row(
        "egress",
        "connect latency the proxy adds",
        &format!("a plain TCP connect {}", summary::time(d.median)),
        "< 200 µs",
        summary::time(added),
        Some(added < Duration::from_micros(200)),
    );
    Ok(())
}

/// Starts srt's proxy with `command` (run by sh, which `exec`s it so that the kill
/// reaches the proxy) and reads the port it prints.
fn start_srt_proxy(command: &str) -> anyhow::Result<(std::process::Child, u16)> {
    let mut child = Command::new("sh")
        .args(["-c", &format!("exec {command}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().context("srt's proxy has no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let port = loop {
        let Some(line) = lines.next() else { bail!("srt's proxy exited without printing port=N") };
        if let Some(port) = line?.strip_prefix("port=") {
            break port.trim().parse().context("srt's proxy printed a bad port")?;
        }
    };
    Ok((child, port))
}

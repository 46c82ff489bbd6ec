//! Hosted terminals (issue 23), side by side in one run against a local pseudo-terminal
//! that this process opens itself (the floor: the kernel's pty and line discipline):
//!
//! * keystroke echo round trip: one byte typed into a terminal running `cat`, until the
//!   line discipline's echo of it comes back, through the supervisor over gRPC; target
//!   under 2 ms;
//! * throughput of `cat` of a 64 MiB text file on the terminal (default termios, so the
//!   kernel turns each newline into CRLF, as any terminal does), through the supervisor
//!   with one attached client, against `cat` on the local pty; target at least 0.5×;
//! * the supervisor's resident memory after it.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::attach_terminal_request::Input;
use cc_tests::terminal::{Attached, attach, create};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::scale::rounds;
use crate::summary;
use crate::{report, start, stats};

const WARM_UP: usize = 50;
const ECHOES: usize = 1000;
const FILE_MIB: usize = 64;

/// A local pty running `program`, as the floor.
fn local(program: &str, args: &[&str]) -> anyhow::Result<(pty_process::Pty, tokio::process::Child)> {
    let (pty, pts) = pty_process::open()?;
    pty.resize(pty_process::Size::new(30, 100))?;
    let child = pty_process::Command::new(program).args(args).kill_on_drop(true).spawn(pts)?;
    Ok((pty, child))
}

async fn local_echoes() -> anyhow::Result<Vec<Duration>> {
    let (mut pty, _child) = local("/bin/cat", &[])?;
    let mut byte = [0u8; 64];
    let mut samples = Vec::with_capacity(rounds(ECHOES));
    for i in 0..rounds(WARM_UP) + rounds(ECHOES) {
        let t = Instant::now();
        pty.write_all(b"a").await?;
        let n = pty.read(&mut byte).await?;
        if n == 0 {
            bail!("the local pty closed");
        }
        if i >= rounds(WARM_UP) {
            samples.push(t.elapsed());
        }
        if i % 60 == 59 {
            // A newline now and then, so that the line stays short; `cat` then
            // writes the line back too: read until both have come.
            pty.write_all(b"\n").await?;
            // The echo of the newline (CR LF) and cat's line (60 bytes, CR LF).
            let mut seen = 0;
            while seen < 64 {
                seen += pty.read(&mut byte).await?;
            }
        }
    }
    Ok(samples)
}

async fn read_more(t: &mut Attached) -> anyhow::Result<()> {
    if !t.read_one().await {
        bail!("the terminal ended: {:?} {:?}", t.exit, t.refused);
    }
    Ok(())
}

async fn hosted_echoes(t: &mut Attached) -> anyhow::Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(rounds(ECHOES));
    for i in 0..rounds(WARM_UP) + rounds(ECHOES) {
        let had = t.seen.len();
        let time = Instant::now();
        t.send(Input::Data(b"a".to_vec())).await;
        while t.seen.len() == had {
            read_more(t).await?;
        }
        if i >= rounds(WARM_UP) {
            samples.push(time.elapsed());
        }
        if i % 60 == 59 {
            let had = t.seen.len();
            t.send(Input::Data(b"\n".to_vec())).await;
            while t.seen.len() < had + 64 {
                read_more(t).await?;
            }
        }
        t.seen.clear();
    }
    Ok(samples)
}

async fn local_cat(file: &str) -> anyhow::Result<(Duration, u64)> {
    let t = Instant::now();
    let (mut pty, _child) = local("/bin/cat", &[file])?;
    let mut buffer = vec![0u8; 64 << 10];
    let mut total = 0u64;
    loop {
        match pty.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n as u64,
        }
    }
    Ok((t.elapsed(), total))
}

async fn hosted_cat(client: &mut cc_client::Client, file: &str) -> anyhow::Result<(Duration, u64)> {
    // The command waits for the attach: output with no client attached rolls through
    // the scrollback and would be lost to the count.
    let line = format!("read go; exec cat '{file}'");
    let terminal = create(client, pb::TerminalBackend::Host, "", &["/bin/sh", "-c", &line]).await?;
    let mut attached = attach(client, &terminal.name).await?;
    let t = Instant::now();
    attached.type_text("go\n").await;
    // The echo of "go" (CR LF) is not cat's.
    let mut total = 0u64.wrapping_sub(4);
    loop {
        let had = attached.seen.len();
        let more = attached.read_one().await;
        total = total.wrapping_add((attached.seen.len() - had) as u64);
        attached.seen.clear();
        if !more {
            break;
        }
    }
    if attached.exit.as_ref().and_then(|e| e.code) != Some(0) {
        bail!("cat on the terminal did not exit 0: {:?} {:?}", attached.exit, attached.refused);
    }
    Ok((t.elapsed(), total))
}

pub fn run() -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("cc-bench-").tempdir()?;
    let (running, _) = start(tmp.path(), 0)?;
    let socket = tmp.path().join("d0/sock/api.sock");
    let file = tmp.path().join("text");
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&file)?);
        let line = b"the quick brown fox jumps over the lazy dog 0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ\n";
        for _ in 0..(FILE_MIB << 20) / line.len() {
            out.write_all(line)?;
        }
    }
    let file = file.to_str().context("a UTF-8 temporary path")?.to_owned();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async {
        let mut client = cc_client::connect(&socket).await?;
        let terminal = create(&mut client, pb::TerminalBackend::Host, "", &["/bin/cat"]).await?;
        let mut attached = attach(&mut client, &terminal.name).await?;
        let hosted = stats(hosted_echoes(&mut attached).await?);
        let floor = stats(local_echoes().await?);
        report("terminal: keystroke echo through the supervisor", &hosted, Duration::from_millis(2));
        summary::row_under(
            "terminals",
            "keystroke echo",
            &format!("a local pty {}", summary::time(floor.median)),
            Duration::from_millis(2),
            hosted.median,
        );
        report("terminal: keystroke echo on a local pty (floor)", &floor, Duration::from_millis(2));
        client.terminals.delete_terminal(pb::DeleteTerminalRequest { name: terminal.name }).await?;

        let mut cats = Vec::new();
        for _ in 0..3 {
            let (local_time, local_bytes) = local_cat(&file).await?;
            let (hosted_time, hosted_bytes) = hosted_cat(&mut client, &file).await?;
            cats.push((local_time, local_bytes, hosted_time, hosted_bytes));
        }
        let mut ratios = Vec::new();
        for (local_time, local_bytes, hosted_time, hosted_bytes) in &cats {
            if local_bytes != hosted_bytes {
                bail!("cat through the supervisor gave {hosted_bytes} bytes, on a local pty {local_bytes}");
            }
            let rate = |bytes: u64, time: &Duration| bytes as f64 / time.as_secs_f64() / (1 << 20) as f64;
            let (local_rate, hosted_rate) = (rate(*local_bytes, local_time), rate(*hosted_bytes, hosted_time));
            println!(
                "terminal: cat of {FILE_MIB} MiB: local pty {local_rate:>7.1} MiB/s ({local_bytes} B), through the supervisor \
                 {hosted_rate:>7.1} MiB/s ({hosted_bytes} B); ratio {:.2} (target ≥ 0.5)",
                hosted_rate / local_rate
            );
            ratios.push(hosted_rate / local_rate);
        }
        ratios.sort_by(f64::total_cmp);
        let median = ratios.get(ratios.len() / 2).copied().unwrap_or_default();
        summary::row(
            "terminals",
            &format!("`cat` of {FILE_MIB} MiB"),
            "a local pty",
            "≥ 0.5×",
            summary::times(median),
            Some(median >= 0.5),
        );
        anyhow::Ok(())
    })?;
    let rss = crate::vm_rss_kib(&std::path::PathBuf::from(format!("/proc/{}", running.pid())));
    println!("terminal: supervisor resident after the runs: {} KiB", rss.unwrap_or(0));
    drop(running);
    Ok(())
}

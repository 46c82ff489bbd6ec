//! The gate: command classification throughput on the policy corpus (one thread), and
//! the gate's round trip over the supervisor's socket.

use std::time::{Duration, Instant};

use cc_policy::Mode;
use cc_policy::command::check;
use cc_proto::common::v1 as common;
use cc_proto::supervisor::v1 as pb;

use crate::corpus::corpus;
use crate::scale::rounds;
use crate::summary;
use crate::{report, start, stats};

pub fn run() -> anyhow::Result<()> {
    classification();
    round_trip()
}

fn classification() {
    let lines = corpus();
    for line in &lines {
        check(line, Mode::Chat);
    }
    const ROUNDS: usize = 40;
    let rounds = rounds(ROUNDS);
    let mut samples = Vec::with_capacity(lines.len() * rounds * Mode::ALL.len());
    let started = Instant::now();
    for _ in 0..rounds {
        for mode in Mode::ALL {
            for line in &lines {
                let t = Instant::now();
                std::hint::black_box(check(std::hint::black_box(line), mode));
                samples.push(t.elapsed());
            }
        }
    }
    let elapsed = started.elapsed();
    let per_second = samples.len() as f64 / elapsed.as_secs_f64();
    let s = stats(samples.clone());
    let max = samples.iter().max().copied().unwrap_or_default();
    println!(
        "command classification ({} lines x {} modes x {rounds}, one thread): {per_second:.0} lines/s (target >= 100000, ratio {:.2}); median {:.1} us, p99 {:.1} us (target < 50, ratio {:.2}), max {:.1} us",
        lines.len(),
        Mode::ALL.len(),
        per_second / 100_000.0,
        s.median.as_secs_f64() * 1e6,
        s.p99.as_secs_f64() * 1e6,
        s.p99.as_secs_f64() * 1e6 / 50.0,
        max.as_secs_f64() * 1e6,
    );
    let p99_us = s.p99.as_secs_f64() * 1e6;
    summary::row(
        "gate",
        "command classification, one thread",
        "",
        "≥ 100,000 lines/s, p99 < 50 µs",
        format!("{per_second:.0} lines/s, p99 {p99_us:.1} µs"),
        Some(per_second >= 100_000.0 && p99_us < 50.0),
    );
}

fn round_trip() -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("cc-bench-gate-").tempdir()?;
    let (_running, _) = start(tmp.path(), 0)?;
    // The anchor for the audit trail's cost: the same supervisor without it.
    std::fs::create_dir_all(tmp.path().join("d1"))?;
    std::fs::write(tmp.path().join("d1/config.toml"), "[audit]\nenabled = false\n")?;
    let (_unaudited, _) = start(tmp.path(), 1)?;
    let socket = tmp.path().join("d0/sock/api.sock");
    let anchor = tmp.path().join("d1/sock/api.sock");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (checks, decides, unaudited) = runtime.block_on(async {
        let mut gate = cc_client::connect_gate(&socket).await?;
        let mut plain = cc_client::connect_gate(&anchor).await?;
        let mut checks = Vec::new();
        for i in 0..rounds(200) + rounds(2_000) {
            let request = pb::CheckCommandRequest {
                command_line: "cd src && git diff HEAD~1 | grep -n TODO".into(),
                mode: common::Mode::Plan as i32,
                workspace_id: String::new(),
            };
            let t = Instant::now();
            gate.check_command(request).await?;
            if i >= rounds(200) {
                checks.push(t.elapsed());
            }
        }
        // Interleaved, so that both see the same machine.
        let (mut decides, mut unaudited) = (Vec::new(), Vec::new());
        for round in 0..1 + rounds(10) {
            for (client, times) in [(&mut gate, &mut decides), (&mut plain, &mut unaudited)] {
                for _ in 0..rounds(200) {
                    let t = Instant::now();
                    client.decide_action(pb::DecideActionRequest { action: Some(allowed()) }).await?;
                    if round > 0 {
                        times.push(t.elapsed());
                    }
                }
            }
        }
        anyhow::Ok((checks, decides, unaudited))
    })?;
    let checks = stats(checks);
    report("gate CheckCommand round trip", &checks, Duration::from_millis(1));
    let (audited, anchor) = (stats(decides), stats(unaudited));
    report("gate DecideAction round trip (allow, event and audit record)", &audited, Duration::from_millis(1));
    report("gate DecideAction round trip, no audit trail (anchor)", &anchor, Duration::from_millis(1));
    println!(
        "audit trail's cost on DecideAction: median {:.3} ms against {:.3} ms, ratio {:.3} (target < 1.10)",
        audited.median.as_secs_f64() * 1e3,
        anchor.median.as_secs_f64() * 1e3,
        audited.median.as_secs_f64() / anchor.median.as_secs_f64(),
    );
    summary::row(
        "gate",
        "`CheckCommand` / `DecideAction` round trip",
        "",
        "< 1 ms",
        format!("{} / {}", summary::time(checks.median), summary::time(audited.median)),
        Some(checks.median.max(audited.median) < Duration::from_millis(1)),
    );
    let cost = audited.median.as_secs_f64() / anchor.median.as_secs_f64();
    summary::row(
        "gate",
        "the audit trail's cost on `DecideAction`",
        &format!("the same without it, {}", summary::time(anchor.median)),
        "< 1.10×",
        summary::times(cost),
        Some(cost < 1.10),
    );
    Ok(())
}

fn allowed() -> pb::Action {
    pb::Action {
        effects: vec![common::EffectClass::RunCommand as i32],
        tool: "bash".into(),
        command_line: "cargo test --workspace".into(),
        run_id: "bench".into(),
        ..Default::default()
    }
}

//! What a run's cgroup costs a launch (issue 18's target: under 0.5 ms more for a warm
//! launch): `true` through sandboxd's Launch for a run registered with a cgroup and one
//! without, interleaved, each cold (its envelope made for it) and warm (made ahead
//! when the launch before it ended, as an agent's calls are seconds apart).

use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use anyhow::{Context, bail};
use cc_host::cgroup::{Enforcement, Limits};
use cc_proto::common::v1::EnvelopeKind;
use cc_proto::sandboxd::v1 as pb;

use crate::sandbox::{run_true, sandboxd_client, start_sandboxd};
use crate::scale::rounds;
use crate::summary;
use crate::{report, stats};

const ROUNDS: usize = 60;
const LIMITS: Limits = Limits { pids_max: 1024, memory_max_bytes: 2 << 30, cpu_weight: 100, cpu_max_percent: 0 };

pub fn run() -> anyhow::Result<()> {
    let enforcement = Enforcement::set_up(&format!("bench-{}", std::process::id()));
    if let Enforcement::RlimitsOnly { why } = &enforcement {
        println!("cgroup launch cost: skipped, no cgroup here ({why})");
        return Ok(());
    }
    let tmp = tempfile::Builder::new().prefix("cc-bench-limits-").tempdir()?;
    let work = std::fs::canonicalize(tmp.path())?.join("conversations/c/repos/demo");
    std::fs::create_dir_all(&work)?;
    let status = std::process::Command::new("git").args(["init", "-q"]).arg(&work).status().context("git init")?;
    if !status.success() {
        bail!("git init failed in {}", work.display());
    }
    let cgroup = enforcement.create_run("bench-cg", &LIMITS)?.context("a cgroup")?;
    let (mut child, socket, secret) = start_sandboxd(tmp.path())?;
    let policy = |run_id: &str, procs: Vec<Vec<u8>>| pb::RunPolicy {
        run_id: run_id.into(),
        work_dir: work.as_os_str().as_bytes().to_vec(),
        limits: Some(pb::EnvelopeLimits { cgroup_procs: procs, tmp_size_bytes: 512 << 20, open_files_max: 4096 }),
        ..Default::default()
    };
    // How many of the run's hierarchies a launch joins (all, unless told): to see what
    // each migration costs.
    let joined = std::env::var("CC_BENCH_CGROUP_FILES").ok().and_then(|n| n.parse().ok()).unwrap_or(usize::MAX);
    let procs: Vec<Vec<u8>> =
        cgroup.procs_files().iter().take(joined).map(|p| p.as_os_str().as_bytes().to_vec()).collect();
    let (with, without) = (policy("bench-cg", procs), policy("bench-plain", vec![]));
    let launch = |run_id: &str| pb::LaunchRequest {
        run_id: run_id.into(),
        kind: EnvelopeKind::HarnessBash as i32,
        argv: vec![b"/bin/true".to_vec()],
        timeout_seconds: 30,
        host: None,
        ..Default::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let samples = runtime.block_on(async {
        let mut client = sandboxd_client(&socket, &secret).await?;
        let mut samples: [Vec<Duration>; 4] = Default::default();
        for round in 0..rounds(ROUNDS) + 5 {
            for (i, (policy, run_id)) in [(&with, "bench-cg"), (&without, "bench-plain")].into_iter().enumerate() {
                // Registered again: the envelope made ahead is thrown away, so the next
                // launch is cold; the one after it is served by an envelope made ahead.
                client.register_run(pb::RegisterRunRequest { policy: Some(policy.clone()) }).await?;
                let (_, cold) = run_true(&mut client, launch(run_id)).await?;
                // An agent's think time, so the next envelope is made before the call.
                tokio::time::sleep(Duration::from_millis(30)).await;
                let (_, warm) = run_true(&mut client, launch(run_id)).await?;
                if round >= 5 {
                    samples[i * 2].push(cold);
                    samples[i * 2 + 1].push(warm);
                }
            }
        }
        anyhow::Ok(samples)
    })?;
    let _ = child.kill();
    let _ = child.wait();
    let counted = cgroup.counters();
    cgroup.remove();
    enforcement.tear_down();
    let [cold_cg, warm_cg, cold, warm] = samples.map(stats);
    report("`true`, warm, run with a cgroup", &warm_cg, Duration::from_millis(5));
    report("`true`, warm, run without", &warm, Duration::from_millis(5));
    report("`true`, cold, run with a cgroup", &cold_cg, Duration::from_millis(5));
    report("`true`, cold, run without", &cold, Duration::from_millis(5));
    let added = |a: &crate::Stats, b: &crate::Stats| (a.median.as_secs_f64() - b.median.as_secs_f64()) * 1000.0;
    println!(
        "the cgroup adds {:.3} ms to a warm launch's median (target under 0.5 ms) and {:.3} ms to a cold one's; {}",
        added(&warm_cg, &warm),
        added(&cold_cg, &cold),
        enforcement.line()
    );
    let warm_added = added(&warm_cg, &warm);
    summary::row(
        "limits",
        "a cgroup's cost on a warm launch",
        "the same launch without one",
        "< 0.5 ms added",
        format!("{warm_added:.3} ms (cold: {:.3} ms)", added(&cold_cg, &cold)),
        Some(warm_added < 0.5),
    );
    println!(
        "(the run's cgroup counted {} OOM kills and {} refused forks: none expected)",
        counted.oom_kills, counted.pids_refused
    );
    Ok(())
}

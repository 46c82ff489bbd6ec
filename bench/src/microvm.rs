//! The microVM backend (issue 23), side by side in one run: boot to the guest agent's
//! first answer (target under 1 s), `exec true` in a running VM through its agent
//! (target under 5 ms) against spawning `/bin/true` on the host, and QEMU's resident
//! memory. The guest image is `deploy/microvm/build-image`'s, beside the binaries.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use cc_proto::vmagent::v1 as pb;
use cc_proto::vmagent::v1::exec_request::Input;
use cc_proto::vmagent::v1::exec_response::Event;
use cc_sandboxd::microvm::{Layout, Programs, Share, Vm};
use tokio_stream::StreamExt;

use crate::scale::rounds;
use crate::summary;
use crate::{report, sibling, stats};

const BOOTS: usize = 5;
const EXECS: usize = 200;

fn programs() -> anyhow::Result<(Programs, bool)> {
    let facts = cc_host::microvm::gather(&PathBuf::new(), true);
    let vsock = match facts.vsock {
        cc_host::microvm::Vsock::VhostUser(path) => path,
        _ => bail!("no vhost-device-vsock (cargo install vhost-device-vsock --root /usr/local)"),
    };
    let virtiofsd = facts.virtiofsd.context("no virtiofsd (qemu-system-common)")?;
    let programs = Programs {
        qemu: "qemu-system-x86_64".into(),
        vhost_device_vsock: vsock,
        virtiofsd,
        unshare: "unshare".into(),
        user: None,
    };
    Ok((programs, facts.accel == cc_host::microvm::Accel::Kvm))
}

async fn exec_true(vm: &Vm) -> anyhow::Result<Duration> {
    let start = pb::ExecStart { argv: vec![b"/bin/true".to_vec()], ..Default::default() };
    let t = Instant::now();
    let mut events = vm.exec(tokio_stream::iter([pb::ExecRequest { input: Some(Input::Start(start)) }])).await?;
    while let Some(event) = events.next().await {
        if let Some(Event::Exit(exit)) = event?.event {
            if exit.code != Some(0) {
                bail!("true exited {exit:?}");
            }
            return Ok(t.elapsed());
        }
    }
    bail!("no exit")
}

pub fn run() -> anyhow::Result<()> {
    let image = sibling("cc-sandboxd")?.with_file_name("microvm");
    if !image.join("agent").is_file() {
        bail!("no guest image with its agent in {} (deploy/microvm/build-image)", image.display());
    }
    let (programs, kvm) = programs()?;
    let tmp = tempfile::Builder::new().prefix("cc-bench-").tempdir()?;
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async {
        let layout = |n: usize| Layout {
            image: image.clone(),
            dir: tmp.path().join(format!("vm{n}")),
            memory_mib: 256,
            cpus: 1,
            kvm,
            tsc_khz: cc_sandboxd::microvm::host_tsc_khz(),
            shares: vec![Share {
                tag: "work".into(),
                source: work.clone(),
                guest_path: "/work".into(),
                read_only: false,
            }],
            bridges: vec![],
        };
        let mut boots = Vec::new();
        let mut last = None;
        for n in 0..rounds(BOOTS) {
            let t = Instant::now();
            let vm = Vm::boot(layout(n), &programs, Duration::from_secs(60)).await?;
            boots.push(t.elapsed());
            if let Some(previous) = last.replace(vm) {
                let previous: Vm = previous;
                previous.stop().await;
            }
        }
        let vm = last.context("a VM")?;
        let accel = if kvm { "kvm" } else { "tcg, emulated" };
        let boots = stats(boots);
        report(&format!("microvm: boot to agent-ready ({accel})"), &boots, Duration::from_secs(1));
        summary::row_under(
            "microvm",
            &format!("boot to the guest agent's first answer ({accel})"),
            "",
            Duration::from_secs(1),
            boots.median,
        );
        let mut execs = Vec::new();
        for i in 0..rounds(EXECS) + 20 {
            let elapsed = exec_true(&vm).await?;
            if i >= 20 {
                execs.push(elapsed);
            }
        }
        let execs = stats(execs);
        report("microvm: exec true in a running VM (agent)", &execs, Duration::from_millis(5));
        let mut host = Vec::new();
        for _ in 0..rounds(EXECS) {
            let t = Instant::now();
            tokio::process::Command::new("/bin/true").status().await?;
            host.push(t.elapsed());
        }
        let host = stats(host);
        report("host: spawn of /bin/true (the floor)", &host, Duration::from_millis(5));
        summary::row_under(
            "microvm",
            &format!("`exec true` in a running VM ({accel})"),
            &format!("the host's own spawn {}", summary::time(host.median)),
            Duration::from_millis(5),
            execs.median,
        );
        let qemu = vm.qemu_pid().context("QEMU's pid")?;
        let rss = crate::vm_rss_kib(&PathBuf::from(format!("/proc/{qemu}")));
        println!("microvm: QEMU resident with a 256 MiB guest: {} KiB", rss.unwrap_or(0));
        vm.stop().await;
        anyhow::Ok(())
    })
}

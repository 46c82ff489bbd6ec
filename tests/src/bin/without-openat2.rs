//! Runs a command with `openat2` answered ENOSYS for it and everything it starts, as
//! systemd's filter for `RestrictSUIDSGID=` answers it (seccomp cannot look inside
//! `struct open_how`, so systemd refuses the whole call), and as kernels before 5.6
//! do. CI runs the envelope suite under it once, so that every launch, every bind by
//! descriptor and every runner file tool goes through cc-host's walk
//! (`host/src/resolve.rs`) instead of the kernel's resolution.
//!
//! `without-openat2 COMMAND [ARG…]`. The filter is the kernel's own (a seccomp
//! program, inherited across fork and exec); like the shipped unit's
//! `NoNewPrivileges=yes`, installing it sets no_new_privs. The command sees
//! `CC_TEST_OPENAT2_FILTERED=1`, so that the suite checks the probe said so.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;

use anyhow::{Context, bail};
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else { bail!("usage: without-openat2 COMMAND [ARG…]") };
    let arch: TargetArch =
        std::env::consts::ARCH.try_into().context("this architecture has no seccomp support here")?;
    let rules = BTreeMap::from([(libc::SYS_openat2, vec![])]);
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::ENOSYS as u32), arch)
        .context("cannot build the filter")?;
    let program_bpf: BpfProgram = filter.try_into().context("cannot compile the filter")?;
    seccompiler::apply_filter(&program_bpf).context("cannot install the filter")?;
    let error = std::process::Command::new(&program).args(args).env("CC_TEST_OPENAT2_FILTERED", "1").exec();
    Err(error).with_context(|| format!("cannot run {}", program.to_string_lossy()))
}

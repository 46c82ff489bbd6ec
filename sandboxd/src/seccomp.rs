//! The seccomp filter our init installs before it runs the workload (inherited by
//! everything the workload starts). It refuses what would undo the envelope: new
//! namespaces, the mount API, setns/pivot_root, ptrace, io_uring, AF_UNIX sockets
//! (host services), keyrings, bpf, TIOCSTI. Everything else is allowed: the envelope's
//! binds, not the filter, decide what a process may touch.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

/// Refused outright.
const DENIED: &[i64] = &[
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_userfaultfd,
    libc::SYS_perf_event_open,
    libc::SYS_open_by_handle_at,
    libc::SYS_kexec_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
];

/// `clone` flags that create namespaces.
const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("unsupported architecture {0}")]
    Arch(String),
    #[error("cannot build the filter: {0}")]
    Build(#[from] seccompiler::BackendError),
    #[error("cannot compile the filter: {0}")]
    Compile(#[from] seccompiler::Error),
}

fn arch() -> Result<TargetArch, SeccompError> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|_| SeccompError::Arch(std::env::consts::ARCH.into()))
}

fn flag_set(arg: u8, flag: u64) -> Result<SeccompRule, SeccompError> {
    Ok(SeccompRule::new(vec![SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(flag),
        flag,
    )?])?)
}

fn equals(arg: u8, value: u64) -> Result<SeccompRule, SeccompError> {
    Ok(SeccompRule::new(vec![SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)?])?)
}

/// Refuses every syscall number with the x32 bit (0x40000000) set: seccompiler's
/// programs check the architecture but not the x32 ABI, under which every number
/// above would be reachable again on a kernel built with it.
fn x32_program() -> BpfProgram {
    use seccompiler::sock_filter;
    // BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JGE|BPF_K, BPF_RET|BPF_K (linux/filter.h).
    const LD_W_ABS: u16 = 0x20;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    vec![
        sock_filter { code: LD_W_ABS, jt: 0, jf: 0, k: 0 },
        sock_filter { code: JGE_K, jt: 0, jf: 1, k: 0x4000_0000 },
        sock_filter { code: RET_K, jt: 0, jf: 0, k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32 },
        sock_filter { code: RET_K, jt: 0, jf: 0, k: libc::SECCOMP_RET_ALLOW },
    ]
}

/// The programs, in the order they are installed: the x32 guard, the EPERM list, then
/// `clone3` answered with ENOSYS (its flags live in memory a filter cannot read; libc
/// falls back to `clone`, whose flags the EPERM list checks). `allow_unix`: our own
/// bridge process, which must connect to the run's sockets, keeps AF_UNIX.
pub fn programs_for(allow_unix: bool) -> Result<Vec<BpfProgram>, SeccompError> {
    let arch = arch()?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|&nr| (nr, vec![])).collect();
    rules.insert(libc::SYS_pidfd_getfd, vec![]);
    rules.insert(libc::SYS_clone, NAMESPACE_FLAGS.iter().map(|&f| flag_set(0, f)).collect::<Result<_, _>>()?);
    // AF_UNIX reaches host services by path; AF_VSOCK reaches the host or hypervisor
    // whatever the network namespace.
    let mut families = vec![equals(0, libc::AF_VSOCK as u64)?];
    if !allow_unix {
        families.push(equals(0, libc::AF_UNIX as u64)?);
    }
    rules.insert(libc::SYS_socket, families);
    // The ioctl constants' type differs between targets (u32 or u64).
    #[allow(clippy::unnecessary_cast)]
    let (tiocsti, tioclinux) = (libc::TIOCSTI as u64, libc::TIOCLINUX as u64);
    rules.insert(libc::SYS_ioctl, vec![equals(1, tiocsti)?, equals(1, tioclinux)?]);
    let eperm = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)?;
    let clone3 = SeccompFilter::new(
        [(libc::SYS_clone3, vec![])].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )?;
    Ok(vec![x32_program(), eperm.try_into()?, clone3.try_into()?])
}

/// The workload's programs.
pub fn programs() -> Result<Vec<BpfProgram>, SeccompError> {
    programs_for(false)
}

/// Installs the programs on this thread (and so on every process it starts). Needs
/// `no_new_privs`, which the init sets first.
pub fn install(allow_unix: bool) -> Result<(), SeccompError> {
    for program in programs_for(allow_unix)? {
        seccompiler::apply_filter(&program)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_filter_compiles_for_this_architecture() {
        let programs = super::programs().unwrap();
        assert_eq!(programs.len(), 3);
        assert!(programs.iter().all(|p| !p.is_empty()));
    }
}

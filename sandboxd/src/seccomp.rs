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

/// The two programs, in the order they are installed: the EPERM list, then `clone3`
/// answered with ENOSYS (its flags live in memory a filter cannot read; libc falls
/// back to `clone`, whose flags the first program checks).
pub fn programs() -> Result<Vec<BpfProgram>, SeccompError> {
    let arch = arch()?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|&nr| (nr, vec![])).collect();
    rules.insert(libc::SYS_clone, NAMESPACE_FLAGS.iter().map(|&f| flag_set(0, f)).collect::<Result<_, _>>()?);
    rules.insert(libc::SYS_socket, vec![equals(0, libc::AF_UNIX as u64)?]);
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
    Ok(vec![eperm.try_into()?, clone3.try_into()?])
}

/// Installs both programs on this thread (and so on every process it starts). Needs
/// `no_new_privs`, which the init sets first.
pub fn install() -> Result<(), SeccompError> {
    for program in programs()? {
        seccompiler::apply_filter(&program)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_filter_compiles_for_this_architecture() {
        let programs = super::programs().unwrap();
        assert_eq!(programs.len(), 2);
        assert!(programs.iter().all(|p| !p.is_empty()));
    }
}

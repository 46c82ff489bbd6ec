//! The seccomp filter our init installs before it runs the workload (inherited by
//! everything the workload starts). It refuses what would undo the envelope: new
//! namespaces, the mount API, setns/pivot_root, ptrace, io_uring, AF_UNIX sockets
//! (host services) and AF_UNIX datagram pairs, keyrings, bpf, TIOCSTI. Everything else is allowed: the envelope's
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

/// `socketpair(AF_UNIX, SOCK_DGRAM | SOCK_SEQPACKET, …)`, whatever flags are or'ed
/// into the type (`SOCK_CLOEXEC`, `SOCK_NONBLOCK` lie above its low four bits).
fn unix_datagram_pairs() -> Result<Vec<SeccompRule>, SeccompError> {
    [libc::SOCK_DGRAM, libc::SOCK_SEQPACKET]
        .into_iter()
        .map(|kind| {
            Ok(SeccompRule::new(vec![
                SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, libc::AF_UNIX as u64)?,
                SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(0xf), kind as u64)?,
            ])?)
        })
        .collect()
}

fn equals(arg: u8, value: u64) -> Result<SeccompRule, SeccompError> {
    Ok(SeccompRule::new(vec![SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)?])?)
}

/// The `AUDIT_ARCH_*` value the kernel reports for this architecture.
fn audit_arch(arch: TargetArch) -> u32 {
    match arch {
        TargetArch::x86_64 => 0xC000_003E,
        TargetArch::aarch64 => 0xC000_00B7,
        TargetArch::riscv64 => 0xC000_00F3,
    }
}

/// Runs before seccompiler's program, for the two answers it cannot give: every
/// syscall number with the x32 bit (0x40000000) set is refused (seccompiler checks
/// the architecture but not the x32 ABI, under which every number it denies would be
/// reachable again), and `clone3` is answered ENOSYS (its flags live in memory a
/// filter cannot read; libc falls back to `clone`, whose flags the rules check). For
/// another architecture it jumps straight to seccompiler's own architecture check.
fn prefix(arch: TargetArch) -> BpfProgram {
    use seccompiler::sock_filter;
    // linux/filter.h and linux/seccomp.h: seccomp_data.nr is at 0, .arch at 4.
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        op(LD_W_ABS, 0, 0, 4),
        op(JEQ_K, 0, 5, audit_arch(arch)),
        op(LD_W_ABS, 0, 0, 0),
        op(JGE_K, 0, 1, 0x4000_0000),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        op(JEQ_K, 0, 1, libc::SYS_clone3 as u32),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]
}

/// The program installed: [`prefix`], then the EPERM list. One program rather than
/// three, because each `seccomp()` call is a JIT compile of its own on every launch
/// (only an envelope with bridges adds a second, [`unix_denial`]). `allow_unix`: our init while it starts the bridges, which must connect to
/// the run's sockets, and the runner, which serves its own, keep AF_UNIX.
pub fn program_for(allow_unix: bool) -> Result<BpfProgram, SeccompError> {
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
    // A datagram or seqpacket pair can `sendto` any socket bound by path, which is
    // AF_UNIX by another door; stream pairs cannot, and libuv and others use them for
    // a child's stdio, so they stay.
    rules.insert(libc::SYS_socketpair, unix_datagram_pairs()?);
    // The ioctl constants' type differs between targets (u32 or u64).
    #[allow(clippy::unnecessary_cast)]
    let (tiocsti, tioclinux) = (libc::TIOCSTI as u64, libc::TIOCLINUX as u64);
    rules.insert(libc::SYS_ioctl, vec![equals(1, tiocsti)?, equals(1, tioclinux)?]);
    let eperm = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)?;
    let mut program = prefix(arch);
    program.extend(BpfProgram::try_from(eperm)?);
    Ok(program)
}

/// The layer installed over [`program_for`]`(true)` once the bridges, which keep
/// AF_UNIX, have started: together the two refuse what [`program`] refuses. Small, as
/// its JIT compile is paid on every launch with bridges.
pub fn unix_denial() -> Result<BpfProgram, SeccompError> {
    let arch = arch()?;
    let rules = BTreeMap::from([(libc::SYS_socket, vec![equals(0, libc::AF_UNIX as u64)?])]);
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)?;
    // No prefix: the layer below already refuses the x32 ABI and answers clone3.
    Ok(BpfProgram::try_from(filter)?)
}

/// The workload's program.
pub fn program() -> Result<BpfProgram, SeccompError> {
    program_for(false)
}

/// Installs the program on this thread (and so on every process it starts). Needs
/// `no_new_privs`, which the init sets first.
pub fn install(allow_unix: bool) -> Result<(), SeccompError> {
    seccompiler::apply_filter(&program_for(allow_unix)?)?;
    Ok(())
}

/// Adds [`unix_denial`] to this thread's filters (and so to every process it starts).
pub fn install_unix_denial() -> Result<(), SeccompError> {
    seccompiler::apply_filter(&unix_denial()?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_filter_compiles_for_this_architecture() {
        let program = super::program().unwrap();
        // The prefix, then seccompiler's program, within the kernel's limit.
        assert!(program.len() > super::prefix(super::arch().unwrap()).len() && program.len() <= 4096);
    }

    /// The bridges' case: a thread started between the layers keeps AF_UNIX, the
    /// thread that goes on to start the command loses it. Filters bind threads, so the
    /// test's own thread carries them and the test process is otherwise untouched.
    #[test]
    fn the_unix_layer_binds_the_installing_thread_and_not_the_bridges() {
        use std::os::unix::net::UnixDatagram;
        std::thread::spawn(|| {
            nix::sys::prctl::set_no_new_privs().unwrap();
            super::install(true).unwrap();
            assert!(UnixDatagram::unbound().is_ok(), "the first layer keeps AF_UNIX");
            let (go, wait) = std::sync::mpsc::channel::<()>();
            let bridge = std::thread::spawn(move || {
                wait.recv().unwrap();
                UnixDatagram::unbound().map(|_| ()).map_err(|e| e.raw_os_error())
            });
            super::install_unix_denial().unwrap();
            assert_eq!(UnixDatagram::unbound().map(|_| ()).map_err(|e| e.raw_os_error()), Err(Some(libc::EPERM)));
            go.send(()).unwrap();
            assert_eq!(bridge.join().unwrap(), Ok(()), "a bridge thread keeps AF_UNIX");
            // And what the installing thread starts afterwards inherits both layers.
            let later = std::thread::spawn(|| UnixDatagram::unbound().map(|_| ()).map_err(|e| e.raw_os_error()));
            assert_eq!(later.join().unwrap(), Err(Some(libc::EPERM)));
        })
        .join()
        .unwrap();
    }

    /// socketpair's refusal reaches datagram and seqpacket pairs in every flag
    /// spelling, and leaves stream pairs alone. On a thread of its own, as above.
    #[test]
    fn unix_datagram_pairs_are_refused_and_stream_pairs_kept() {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        std::thread::spawn(|| {
            nix::sys::prctl::set_no_new_privs().unwrap();
            super::install(true).unwrap();
            let pair = |kind, flags| socketpair(AddressFamily::Unix, kind, None, flags).map(|_| ());
            for flags in [SockFlag::empty(), SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK] {
                assert_eq!(pair(SockType::Datagram, flags), Err(nix::Error::EPERM));
                assert_eq!(pair(SockType::SeqPacket, flags), Err(nix::Error::EPERM));
                assert_eq!(pair(SockType::Stream, flags), Ok(()));
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_prefix_jumps_stay_inside_it() {
        let prefix = super::prefix(super::arch().unwrap());
        for (at, op) in prefix.iter().enumerate() {
            // A jump lands at most one past the prefix: the start of seccompiler's program.
            assert!(at + 1 + usize::from(op.jt.max(op.jf)) <= prefix.len(), "instruction {at}");
        }
        // A foreign architecture skips to seccompiler's own check.
        assert_eq!(2 + usize::from(prefix[1].jf), prefix.len());
    }
}

//! A child that must not outlive the process that started it (a microVM's QEMU and its
//! device daemons): the kernel kills it when its parent dies, however the parent dies,
//! SIGKILL included.
#![allow(unsafe_code)]

/// Makes the child of `command` receive SIGKILL when the thread that forked it exits
/// (`PR_SET_PDEATHSIG`). Spawn from a long-lived thread (a runtime's worker, not a
/// blocking-pool thread that may be retired).
#[cfg(target_os = "linux")]
pub fn die_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let hook = || -> std::io::Result<()> {
        // SAFETY: prctl(2) is async-signal-safe; its arguments are plain integers.
        let set = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
        if set != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec, where only
    // async-signal-safe calls are allowed: it allocates nothing and calls prctl(2) only
    // (`last_os_error` reads errno).
    unsafe {
        command.pre_exec(hook);
    }
}

/// Elsewhere there is no such thing; the caller's own cleanup is all there is.
#[cfg(not(target_os = "linux"))]
pub fn die_with_parent(_command: &mut std::process::Command) {}

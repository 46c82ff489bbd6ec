//! Joining a cgroup between fork and exec: the one place this crate calls into the
//! child of a fork. A process moved after it started could fork first, and what it
//! forked would stay outside; joined before exec, everything it ever starts is inside.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;

/// Makes the child of `command` write "0" (itself) into each of `procs`, the
/// `cgroup.procs` files of its run's cgroups, opened by us beforehand. The kernel checks
/// the permission against the credentials that opened each file, so a child that has
/// already dropped to the service user may still join. A failed write fails the spawn.
pub fn join_on_exec(command: &mut std::process::Command, procs: Vec<OwnedFd>) {
    if procs.is_empty() {
        return;
    }
    let hook = move || -> std::io::Result<()> {
        for file in &procs {
            // SAFETY: write(2) is async-signal-safe; the descriptor was opened before the
            // fork and is owned by this closure; the buffer is a static one-byte slice.
            let written = unsafe { libc::write(file.as_raw_fd(), b"0".as_ptr().cast(), 1) };
            if written != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec, where only
    // async-signal-safe calls are allowed: it allocates nothing, takes no lock, and
    // calls write(2) only (`last_os_error` reads errno).
    unsafe {
        command.pre_exec(hook);
    }
}

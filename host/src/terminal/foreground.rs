//! Signalling a terminal's foreground process group through its master, by the
//! kernel's own reference to the group (`TIOCSIG`): never by a group number read
//! first, which could name another process's group by the time it is signalled (the
//! old group gone, its number reused), outside the terminal's envelope.
#![allow(unsafe_code)]

use std::os::fd::AsFd;

use nix::sys::signal::Signal;

/// Sends `signal` to the foreground process group of the terminal whose master is
/// `master`. Fails (ENOTTY, EINVAL) when the terminal has no foreground group.
#[cfg(target_os = "linux")]
pub fn signal_foreground(master: impl AsFd, signal: Signal) -> nix::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: TIOCSIG takes its argument by value (the signal number), not a pointer;
    // the descriptor is borrowed for the call and stays open through it.
    let result = unsafe { libc::ioctl(master.as_fd().as_raw_fd(), libc::TIOCSIG, signal as libc::c_int) };
    if result == -1 { Err(nix::Error::last()) } else { Ok(()) }
}

/// Elsewhere: the group number, then the group (macOS has no TIOCSIG).
#[cfg(not(target_os = "linux"))]
pub fn signal_foreground(master: impl AsFd, signal: Signal) -> nix::Result<()> {
    let group = nix::unistd::tcgetpgrp(master)?;
    if group.as_raw() <= 0 {
        return Err(nix::Error::ESRCH);
    }
    nix::sys::signal::killpg(group, signal)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_plain_file_is_not_a_terminal() {
        let file = tempfile::tempfile().unwrap();
        assert_eq!(signal_foreground(&file, Signal::SIGINT), Err(nix::Error::ENOTTY));
    }
}

//! Process hardening every helper applies to itself before it reads a request.
//!
//! * `PR_SET_DUMPABLE=0`: a same-uid process can neither ptrace us nor read our
//!   memory through `/proc/<pid>/mem`, so the peer secrets stay ours;
//! * all capabilities dropped (every set, the bounding set when we may) and
//!   `no_new_privs`, for every helper except `cc-sandboxd`, which alone needs
//!   privileges to build envelopes.
//!
//! Linux only. On macOS there are no capabilities, no `no_new_privs` and no
//! dumpable flag: [`harden`] does nothing there, and the README names what that
//! leaves open (a same-uid process may attach to a helper that is not signed with the
//! hardened runtime).

use crate::common::v1::Hardening;

#[cfg(target_os = "linux")]
pub use caps::Capability;

/// Elsewhere there are no Linux capabilities; the type exists so that each helper's
/// policy is written once.
#[cfg(not(target_os = "linux"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapabilityPolicy {
    /// Drop every capability and set `no_new_privs`.
    DropAll,
    /// Keep only these (sandboxd: what launching as another user needs), drop the rest
    /// from every set including the bounding set, and set `no_new_privs`.
    KeepOnly(&'static [Capability]),
}

#[derive(Debug, thiserror::Error)]
pub enum HardeningError {
    #[error("cannot make the process non-dumpable: {0}")]
    Dumpable(nix::Error),
    #[cfg(target_os = "linux")]
    #[error("cannot drop capabilities ({set}): {source}")]
    Capabilities { set: &'static str, source: caps::errors::CapsError },
    #[error("cannot set no_new_privs: {0}")]
    NoNewPrivs(nix::Error),
}

#[cfg(not(target_os = "linux"))]
pub fn harden(_policy: CapabilityPolicy) -> Result<(), HardeningError> {
    Ok(())
}

#[cfg(target_os = "linux")]
pub fn harden(policy: CapabilityPolicy) -> Result<(), HardeningError> {
    use caps::CapSet;
    nix::sys::prctl::set_dumpable(false).map_err(HardeningError::Dumpable)?;
    let keep: caps::CapsHashSet = match policy {
        CapabilityPolicy::DropAll => Default::default(),
        CapabilityPolicy::KeepOnly(list) => list.iter().copied().collect(),
    };
    let caps_err = |set| move |source| HardeningError::Capabilities { set, source };
    // The bounding set can only shrink while we still hold CAP_SETPCAP, so it goes first.
    if caps::has_cap(None, CapSet::Effective, caps::Capability::CAP_SETPCAP).unwrap_or(false) {
        for cap in caps::all() {
            if !keep.contains(&cap) {
                caps::drop(None, CapSet::Bounding, cap).map_err(caps_err("bounding"))?;
            }
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(caps_err("ambient"))?;
    caps::clear(None, CapSet::Inheritable).map_err(caps_err("inheritable"))?;
    // What we keep is what we have and asked for: never more than we were given.
    let permitted = caps::read(None, CapSet::Permitted).map_err(caps_err("permitted"))?;
    let kept: caps::CapsHashSet = permitted.intersection(&keep).copied().collect();
    caps::set(None, CapSet::Effective, &kept).map_err(caps_err("effective"))?;
    caps::set(None, CapSet::Permitted, &kept).map_err(caps_err("permitted"))?;
    nix::sys::prctl::set_no_new_privs().map_err(HardeningError::NoNewPrivs)?;
    Ok(())
}

/// What the kernel says about this process now.
#[cfg(not(target_os = "linux"))]
pub fn report() -> Hardening {
    Hardening { dumpable: true, no_new_privs: false, cap_effective: "none on this system".to_owned() }
}

/// What the kernel says about this process now.
#[cfg(target_os = "linux")]
pub fn report() -> Hardening {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    Hardening {
        dumpable: nix::sys::prctl::get_dumpable().unwrap_or(true),
        no_new_privs: nix::sys::prctl::get_no_new_privs().unwrap_or(false),
        cap_effective: status_field(&status, "CapEff").unwrap_or("unknown").to_owned(),
    }
}

/// One field of a `/proc/<pid>/status` file.
pub fn status_field<'a>(status: &'a str, field: &str) -> Option<&'a str> {
    status.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name == field).then(|| value.trim())
    })
}

/// Closes every descriptor above stderr that this process inherited. A process that
/// starts others calls it first thing, before it opens anything of its own (all of
/// which is close-on-exec): a descriptor its parent leaked without close-on-exec would
/// otherwise pass to every helper and, through them, towards agent code.
pub fn close_inherited_descriptors() {
    #[cfg(target_os = "linux")]
    const OPEN: &str = "/proc/self/fd";
    #[cfg(not(target_os = "linux"))]
    const OPEN: &str = "/dev/fd";
    // The listing's own descriptor is among them; it is closed by the time they are.
    let inherited: Vec<i32> = match std::fs::read_dir(OPEN) {
        Ok(entries) => entries.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect(),
        Err(_) => return,
    };
    for fd in inherited.into_iter().filter(|fd| *fd > 2) {
        let _ = nix::unistd::close(fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_status_fields() {
        let status = "Name:\tcc-broker\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\n";
        assert_eq!(status_field(status, "CapEff"), Some("0000000000000000"));
        assert_eq!(status_field(status, "NoNewPrivs"), Some("1"));
        assert_eq!(status_field(status, "Cap"), None);
    }
}

//! Envelopes made in advance: when a launch of a run ends, the next envelope of the
//! same run and kind is set up at once (namespaces, mounts, our init with its seccomp
//! filter and bridges) and waits for its command on its init's stdin. The next launch
//! then only writes its argv, instead of waiting for bubblewrap: an agent's tool calls
//! come seconds apart, and setting up the envelope is most of a launch's time.
//!
//! Nothing is shared between launches: each one still gets an envelope of its own,
//! used once. What is made early is checked late. A launch computes its envelope as it
//! would without this ([`WarmKey`]: bubblewrap's options, our init's, and the identity
//! of every path bound); a waiting envelope serves it only when all of it is the same,
//! otherwise it is thrown away and the launch starts its own. A code-execution vector
//! that appeared since (a new nested repository), a root swapped for another directory,
//! a policy registered again: each makes the waiting envelope unusable.
//!
//! It is made once the launch before it has ended, not while that launch's workload can
//! still act on the roots it binds. Other launches of the run may be running, as they
//! may be while a cold launch is made: in their envelopes every path bound here is a
//! mount point, which they can neither rename nor remove.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tokio::process::Child;

use crate::bwrap::BwrapCommand;
use crate::runs::kill_group;
use crate::spawn::{Started, write_arguments};

/// What makes two envelopes the same.
#[derive(Debug, PartialEq, Eq)]
pub struct WarmKey {
    options: Vec<OsString>,
    init: Vec<OsString>,
    /// Who it runs as (sandboxd as root launches as the owner of the run's files).
    user: Option<cc_host::ServiceUser>,
    /// Device and inode, as the host sees them now, of everything the options mount:
    /// the descriptors of every path inside the roots (what a launch binds), then every
    /// other absolute path among bubblewrap's options (the system view, the masks over
    /// secrets, our init's binary, the bridges' sockets). When a path something is
    /// mounted on is unlinked or renamed over in another mount namespace (the person's
    /// `git config` renames a new .git/config over the old), the kernel detaches that
    /// mount in the waiting envelope: the new inode is what tells. Zeros where nothing
    /// is.
    identities: Vec<(u64, u64)>,
}

impl WarmKey {
    /// `bound`: the descriptors of `envelope.bound`, opened for this launch. The paths
    /// inside the roots are the agent's and are never looked up by path here: the
    /// descriptors say what they are.
    pub fn new(envelope: &BwrapCommand, user: Option<cc_host::ServiceUser>, bound: &[OwnedFd]) -> Self {
        use std::os::unix::ffi::OsStrExt;
        let mut identities: Vec<(u64, u64)> =
            bound.iter().map(|fd| crate::beneath::identity(fd).unwrap_or((0, 0))).collect();
        identities.extend(
            envelope
                .options
                .iter()
                .filter(|a| a.as_bytes().first() == Some(&b'/'))
                .filter(|a| !envelope.bound.iter().any(|b| b.as_os_str() == *a))
                .map(|path| std::fs::symlink_metadata(Path::new(path)).map(|m| (m.dev(), m.ino())).unwrap_or((0, 0))),
        );
        Self { options: envelope.options.clone(), init: envelope.init.clone(), user, identities }
    }
}

/// An envelope waiting for its command. Dropped unused, it is killed.
pub struct Warm {
    key: WarmKey,
    /// `None` once handed to a launch or found dead (and reaped: its group id may
    /// then belong to someone else, and is never signalled).
    started: Option<Started>,
}

impl Warm {
    pub fn new(key: WarmKey, started: Started) -> Self {
        Self { key, started: Some(started) }
    }

    /// The envelope, if it is the one `key` describes and still waits; otherwise it
    /// is killed here (or found dead, and reaped).
    pub fn serving(mut self, key: &WarmKey) -> Option<Ready> {
        let started = self.started.as_mut()?;
        match started.child.try_wait() {
            Ok(None) if self.key == *key => self.started.take().map(Ready),
            Ok(None) => None,
            // It ended on its own (its setup failed, or it was killed): its group id
            // may belong to someone else by now.
            Ok(Some(_)) | Err(_) => {
                self.started = None;
                None
            }
        }
    }
}

/// A waiting envelope chosen for a launch. Dropped before [`Ready::hand_off`], bubblewrap
/// is killed (kill_on_drop) and our init with it (`--die-with-parent`).
pub struct Ready(Started);

impl Ready {
    /// bubblewrap's process group.
    pub fn group(&self) -> u32 {
        self.0.group
    }

    /// Gives the envelope its command; the caller owns the process from here on.
    pub fn hand_off(self, argv: &[OsString]) -> (Child, u32) {
        let Started { child, group, command_pipe } = self.0;
        // Our init reads to the end, which comes when this is written. Without a pipe
        // (never: Command::Later makes one) it reads nothing and ends, and so the launch.
        if let Some(pipe) = command_pipe {
            write_arguments(pipe, argv);
        }
        (child, group)
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        if let Some(started) = self.started.take() {
            kill_group(started.group);
            // kill_on_drop reaps bubblewrap in the background.
            drop(started);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(bound: &Path) -> BwrapCommand {
        BwrapCommand {
            options: ["--ro-bind", &bound.to_string_lossy(), &bound.to_string_lossy(), "--setenv", "HOME", "/tmp"]
                .map(OsString::from)
                .to_vec(),
            init: vec!["/run/cc/init".into()],
            command: vec!["true".into()],
            bound: vec![],
        }
    }

    #[test]
    fn a_path_replaced_or_another_user_makes_another_envelope() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::write(&config, "old").unwrap();
        let key = WarmKey::new(&envelope(&config), None, &[]);
        assert_eq!(key, WarmKey::new(&envelope(&config), None, &[]), "nothing changed");
        // The command is not part of it; who runs it is.
        let mut other_command = envelope(&config);
        other_command.command = vec!["false".into()];
        assert_eq!(key, WarmKey::new(&other_command, None, &[]));
        assert_ne!(key, WarmKey::new(&envelope(&config), Some(cc_host::ServiceUser::NOBODY), &[]));
        // Written in place: the same file, and the mount on it holds.
        std::fs::write(&config, "in place").unwrap();
        assert_eq!(key, WarmKey::new(&envelope(&config), None, &[]));
        // Renamed over, as git does: the mount on the old one is gone in other namespaces.
        std::fs::write(dir.path().join("config.lock"), "new").unwrap();
        std::fs::rename(dir.path().join("config.lock"), &config).unwrap();
        assert_ne!(key, WarmKey::new(&envelope(&config), None, &[]));
        // Gone altogether.
        let before = WarmKey::new(&envelope(&config), None, &[]);
        std::fs::remove_file(&config).unwrap();
        assert_ne!(before, WarmKey::new(&envelope(&config), None, &[]));
    }
}

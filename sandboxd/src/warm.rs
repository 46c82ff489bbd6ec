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
//! It is made only once the launch before it has ended, so that no process of the
//! run's launches of that kind is alive while its mounts are made (the window a
//! workload would need to swap a directory for a link under bubblewrap's binds).

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin};

use crate::bwrap::BwrapCommand;
use crate::launch::{kill_group, nul_separated};
use crate::spawn::Started;

/// What makes two envelopes the same.
#[derive(Debug, PartialEq, Eq)]
pub struct WarmKey {
    options: Vec<OsString>,
    init: Vec<OsString>,
    /// Device and inode of every path bound, in order; zeros where none is.
    identities: Vec<(u64, u64)>,
}

impl WarmKey {
    pub fn new<'a>(envelope: &BwrapCommand, bound: impl IntoIterator<Item = &'a Path>) -> Self {
        let identities = bound
            .into_iter()
            .map(|path| std::fs::symlink_metadata(path).map(|m| (m.dev(), m.ino())).unwrap_or((0, 0)))
            .collect();
        Self { options: envelope.options.clone(), init: envelope.init.clone(), identities }
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

    /// Whether this envelope is the one `key` describes and is still waiting.
    pub fn serves(&mut self, key: &WarmKey) -> bool {
        let Some(started) = self.started.as_mut() else { return false };
        match started.child.try_wait() {
            Ok(None) => self.key == *key,
            // It ended on its own (its setup failed, or it was killed): reaped now.
            Ok(Some(_)) | Err(_) => {
                self.started = None;
                false
            }
        }
    }

    /// Gives the envelope its command; the caller owns the process from here on.
    pub fn hand_off(mut self, argv: &[OsString]) -> Option<(Child, u32)> {
        let Started { child, group, command_pipe } = self.started.take()?;
        let mut pipe: ChildStdin = command_pipe?;
        let bytes = nul_separated(argv);
        // Our init reads to the end, so the pipe closes when this is written; a command
        // longer than a pipe holds is written while it reads.
        tokio::spawn(async move {
            let _ = pipe.write_all(&bytes).await;
        });
        Some((child, group))
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

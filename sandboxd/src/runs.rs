//! The runs sandboxd knows: each one's policy as the supervisor registered it, the
//! process groups of its live launches (killed when it is unregistered), and the
//! envelope made ahead for its next launch of each kind.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::bwrap::Kind;
use crate::error::LaunchError;
use crate::policy::RunPolicy;
use crate::warm::Warm;

#[derive(Default)]
pub struct Runs {
    inner: Mutex<HashMap<String, RunEntry>>,
}

struct RunEntry {
    policy: Arc<RunPolicy>,
    /// Process-group leaders of the run's live launches.
    groups: HashSet<u32>,
    /// The envelope for the run's next launch of each kind ([`crate::warm`]), once
    /// it is made: a launch that comes while it is being made waits for it.
    warm: HashMap<Kind, oneshot::Receiver<Warm>>,
}

impl Runs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunEntry>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers or replaces a run's policy; its live processes keep running, the
    /// envelopes made for the policy it replaces are killed unused.
    pub fn register(&self, policy: RunPolicy) {
        let mut runs = self.lock();
        let groups = runs.remove(&policy.run_id).map(|e| e.groups).unwrap_or_default();
        runs.insert(policy.run_id.clone(), RunEntry { policy: Arc::new(policy), groups, warm: HashMap::new() });
    }

    pub fn policy(&self, run_id: &str) -> Option<Arc<RunPolicy>> {
        self.lock().get(run_id).map(|e| e.policy.clone())
    }

    /// Kills every live process of the run and forgets it; `None` for an unknown run.
    /// The count is of launches: a waiting envelope is killed too, but ran nothing.
    pub fn unregister(&self, run_id: &str) -> Option<u32> {
        let entry = self.lock().remove(run_id)?;
        for group in &entry.groups {
            kill_group(*group);
        }
        Some(entry.groups.len() as u32)
    }

    pub(crate) fn take_warm(&self, run_id: &str, kind: Kind) -> Option<oneshot::Receiver<Warm>> {
        self.lock().get_mut(run_id)?.warm.remove(&kind)
    }

    /// Where the envelope for the run's next launch of `kind` will be sent. Dropped
    /// (and what is sent through it killed) if the run no longer has `policy`, when
    /// it is registered again or ends, and when a newer one replaces it.
    pub(crate) fn expect_warm(&self, run_id: &str, policy: &Arc<RunPolicy>, kind: Kind) -> oneshot::Sender<Warm> {
        let (sender, receiver) = oneshot::channel();
        if let Some(entry) = self.lock().get_mut(run_id).filter(|e| Arc::ptr_eq(&e.policy, policy)) {
            entry.warm.insert(kind, receiver);
        }
        sender
    }

    /// Counts `group` as one of the run's launches; kills it when the run is gone.
    pub(crate) fn add_or_refuse(&self, run_id: &str, group: u32) -> Result<(), LaunchError> {
        if let Some(e) = self.lock().get_mut(run_id) {
            e.groups.insert(group);
            return Ok(());
        }
        kill_group(group);
        Err(LaunchError::RunEnded(run_id.to_owned()))
    }

    pub(crate) fn remove(&self, run_id: &str, group: u32) {
        if let Some(e) = self.lock().get_mut(run_id) {
            e.groups.remove(&group);
        }
    }
}

pub(crate) fn kill_group(group: u32) {
    // killpg(0) and killpg(1) would reach sandboxd's own group and every process.
    if group <= 1 {
        return;
    }
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(group as i32), nix::sys::signal::Signal::SIGKILL);
}

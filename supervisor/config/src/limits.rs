//! A run's resource limits: the configured defaults, a start's overrides, and their
//! bounds. The cgroup that enforces them is `cc_host::cgroup`'s.

use cc_host::cgroup;
use cc_proto::supervisor::v1 as pb;

use crate::LimitsConfig;

const MIB: u64 = 1 << 20;

/// The limits in force for one run, every one set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    pub pids_max: u64,
    pub memory_max_bytes: u64,
    pub cpu_weight: u32,
    pub cpu_max_percent: u32,
    pub tmp_size_bytes: u64,
    pub open_files_max: u64,
}

impl RunLimits {
    pub fn from_config(c: &LimitsConfig) -> Self {
        Self {
            pids_max: c.pids_max,
            memory_max_bytes: c.memory_max_mb.saturating_mul(MIB),
            cpu_weight: c.cpu_weight,
            cpu_max_percent: c.cpu_max_percent,
            tmp_size_bytes: c.tmp_size_mb.saturating_mul(MIB),
            open_files_max: c.open_files_max,
        }
    }

    /// These limits with a start's overrides, checked.
    pub fn overridden(self, by: Option<&pb::RunLimits>) -> Result<Self, crate::Invalid> {
        let Some(by) = by else { return Ok(self) };
        let limits = Self {
            pids_max: by.pids_max.unwrap_or(self.pids_max),
            memory_max_bytes: by.memory_max_bytes.unwrap_or(self.memory_max_bytes),
            cpu_weight: by.cpu_weight.unwrap_or(self.cpu_weight),
            cpu_max_percent: by.cpu_max_percent.unwrap_or(self.cpu_max_percent),
            tmp_size_bytes: by.tmp_size_bytes.unwrap_or(self.tmp_size_bytes),
            open_files_max: by.open_files_max.unwrap_or(self.open_files_max),
        };
        check(&limits)?;
        Ok(limits)
    }

    pub fn cgroup(&self) -> cgroup::Limits {
        cgroup::Limits {
            pids_max: self.pids_max,
            memory_max_bytes: self.memory_max_bytes,
            cpu_weight: self.cpu_weight,
            cpu_max_percent: self.cpu_max_percent,
        }
    }

    pub fn to_proto(self) -> pb::RunLimits {
        pb::RunLimits {
            pids_max: Some(self.pids_max),
            memory_max_bytes: Some(self.memory_max_bytes),
            cpu_weight: Some(self.cpu_weight),
            cpu_max_percent: Some(self.cpu_max_percent),
            tmp_size_bytes: Some(self.tmp_size_bytes),
            open_files_max: Some(self.open_files_max),
        }
    }
}

/// Limits under which a run cannot even start its runner are refused, not applied.
pub fn check(l: &RunLimits) -> Result<(), crate::Invalid> {
    why_unusable(l).map_err(crate::Invalid)
}

fn why_unusable(l: &RunLimits) -> Result<(), String> {
    if l.pids_max < 32 {
        return Err(format!("pids_max {} is below 32, too few for the run's runner and a shell", l.pids_max));
    }
    if l.memory_max_bytes < 64 * MIB {
        return Err(format!("memory_max {} MiB is below 64 MiB", l.memory_max_bytes / MIB));
    }
    if !(1..=10_000).contains(&l.cpu_weight) {
        return Err(format!("cpu_weight {} is outside 1–10000", l.cpu_weight));
    }
    if l.cpu_max_percent > 100_000 {
        return Err(format!("cpu_max_percent {} is more than 1000 CPUs", l.cpu_max_percent));
    }
    if l.tmp_size_bytes < MIB {
        return Err("tmp_size is below 1 MiB".into());
    }
    if !(64..=1 << 20).contains(&l.open_files_max) {
        return Err(format!("open_files_max {} is outside 64–1048576", l.open_files_max));
    }
    Ok(())
}

/// What a launch's end says when the run hit a limit during it: the clear message for
/// the command's output, and the limit's name for the `limit_reached` event.
pub fn reached(before: cgroup::Counters, after: cgroup::Counters, limits: &RunLimits) -> Vec<(&'static str, String)> {
    let mut reached = Vec::new();
    if after.oom_kills > before.oom_kills {
        reached.push((
            "memory",
            format!(
                "the run reached its memory limit ({} MiB): the kernel's OOM killer ended {} of its processes",
                limits.memory_max_bytes / MIB,
                after.oom_kills - before.oom_kills
            ),
        ));
    }
    if after.pids_refused > before.pids_refused {
        reached.push((
            "pids",
            format!(
                "the run reached its process limit ({}): {} process creations were refused",
                limits.pids_max,
                after.pids_refused - before.pids_refused
            ),
        ));
    }
    reached
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_only_what_they_set_and_are_checked() {
        let base = RunLimits::from_config(&LimitsConfig::default());
        assert_eq!(base.memory_max_bytes, 2048 * MIB);
        let by = pb::RunLimits { pids_max: Some(100), ..Default::default() };
        let l = base.overridden(Some(&by)).unwrap();
        assert_eq!((l.pids_max, l.memory_max_bytes), (100, base.memory_max_bytes));
        let too_few = pb::RunLimits { pids_max: Some(3), ..Default::default() };
        assert!(base.overridden(Some(&too_few)).unwrap_err().0.contains("pids_max 3"));
        let no_memory = pb::RunLimits { memory_max_bytes: Some(1), ..Default::default() };
        assert!(base.overridden(Some(&no_memory)).unwrap_err().0.contains("memory_max"));
        assert_eq!(base.overridden(None).unwrap(), base);
    }

    #[test]
    fn a_limit_reached_is_named_with_its_value() {
        let l = RunLimits::from_config(&LimitsConfig::default());
        let before = cgroup::Counters { oom_kills: 1, pids_refused: 0 };
        assert!(reached(before, before, &l).is_empty());
        let after = cgroup::Counters { oom_kills: 2, pids_refused: 7 };
        let r = reached(before, after, &l);
        assert_eq!(r[0].0, "memory");
        assert!(r[0].1.contains("2048 MiB") && r[0].1.contains("ended 1 of"), "{}", r[0].1);
        assert_eq!(r[1].0, "pids");
        assert!(r[1].1.contains("(1024)") && r[1].1.contains("7 process creations"), "{}", r[1].1);
    }
}

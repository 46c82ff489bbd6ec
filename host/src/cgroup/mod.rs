//! Per-run resource limits with cgroups, v2 or v1, whichever holds the controllers.
//!
//! Each run gets a cgroup of its own, made by the supervisor at run start: its runner
//! and every launch join it between fork and exec ([`join::join_on_exec`]), so
//! whatever they start is inside. It bounds processes (`pids.max`), memory with swap
//! (`memory.max` + `memory.swap.max`, or v1's `memory.limit_in_bytes` +
//! `memory.memsw.limit_in_bytes`) and CPU (weight, and an optional quota).
//!
//! * v2: the supervisor's own cgroup must be delegated to it (systemd `Delegate=yes`).
//!   It moves itself into `<own>/supervisor`, enables the controllers, and makes each
//!   run's cgroup under `<own>/runs`.
//! * v1: under our cgroup in each of the `pids`, `memory` and `cpu` hierarchies, in
//!   `cc-<instance>/<run>`, where the instance names this data dir: several
//!   supervisors can share one parent.
//!
//! There is no silent fallback: when neither works, [`Enforcement::RlimitsOnly`] says
//! why, and the supervisor prints it on its startup line.

pub mod join;
pub mod parse;

use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a run may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Processes and threads at once.
    pub pids_max: u64,
    /// Memory, swap included.
    pub memory_max_bytes: u64,
    /// 1–10000; 100 is an even share with everything else.
    pub cpu_weight: u32,
    /// Percent of one CPU (200: two CPUs); 0: no cap.
    pub cpu_max_percent: u32,
}

/// The controllers a run's cgroup uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    Pids,
    Memory,
    Cpu,
    Cpuacct,
}

impl Controller {
    const ALL: [Controller; 4] = [Controller::Pids, Controller::Memory, Controller::Cpu, Controller::Cpuacct];

    pub fn name(self) -> &'static str {
        match self {
            Controller::Pids => "pids",
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Cpuacct => "cpuacct",
        }
    }
}

/// How run limits are enforced on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enforcement {
    /// Runs are made under this directory, which has every controller enabled.
    Cgroup2 { runs: PathBuf },
    /// Runs are made under one directory per v1 controller (`cpu` and `cpuacct` may be
    /// absent; `pids` and `memory` never are).
    Cgroup1 { bases: Vec<(Controller, PathBuf)> },
    /// No cgroup: only the rlimits and the /tmp size our init and bubblewrap set.
    RlimitsOnly { why: String },
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cannot make the run's cgroup {path}: {source}")]
    Create { path: PathBuf, source: std::io::Error },
    #[error("cannot set {path} to {value}: {source}")]
    Write { path: PathBuf, value: String, source: std::io::Error },
}

impl Enforcement {
    /// `limits=cgroup2`, `limits=cgroup1 (pids, memory, cpu)`, `limits=rlimits-only (why)`.
    pub fn line(&self) -> String {
        format!("limits={}", self.describe())
    }

    /// As `run show` and the probe say it: without the `limits=`.
    pub fn describe(&self) -> String {
        match self {
            Enforcement::Cgroup2 { .. } => "cgroup2".into(),
            Enforcement::Cgroup1 { bases } => {
                let names: Vec<&str> = bases.iter().map(|(c, _)| c.name()).collect();
                format!("cgroup1 ({})", names.join(", "))
            }
            Enforcement::RlimitsOnly { why } => format!("rlimits-only ({why})"),
        }
    }

    /// Finds where this process may make run cgroups, and prepares it. `instance`
    /// names this supervisor's data dir (v1 only).
    pub fn set_up(instance: &str) -> Enforcement {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        Self::set_up_from(&read("/proc/self/cgroup"), &read("/proc/self/mountinfo"), instance)
    }

    /// [`Enforcement::set_up`] from the given `/proc/self/cgroup` and mountinfo.
    pub fn set_up_from(proc_self_cgroup: &str, mountinfo: &str, instance: &str) -> Enforcement {
        let memberships = parse::memberships(proc_self_cgroup);
        let mounts = parse::cgroup_mounts(mountinfo);
        let ours = |controller: Controller| {
            let membership = memberships.iter().find(|m| m.controllers.iter().any(|c| c == controller.name()))?;
            let mount = mounts.iter().find(|m| !m.v2 && m.controllers.iter().any(|c| c == controller.name()))?;
            parse::directory(mount, &membership.path)
        };
        // v1 wherever the v1 hierarchies hold pids and memory (a hybrid host's unified
        // hierarchy then holds no controller).
        if let (Some(_), Some(_)) = (ours(Controller::Pids), ours(Controller::Memory)) {
            let mut bases = Vec::new();
            for controller in Controller::ALL {
                let Some(dir) = ours(controller) else { continue };
                let base = dir.join(format!("cc-{instance}"));
                if let Err(e) = std::fs::create_dir_all(&base) {
                    return Enforcement::RlimitsOnly {
                        why: format!(
                            "cannot make {}: {e}{}",
                            base.display(),
                            v1_hint(&e, nix::unistd::geteuid().is_root())
                        ),
                    };
                }
                bases.push((controller, base));
            }
            return Enforcement::Cgroup1 { bases };
        }
        let unified = memberships.iter().find(|m| m.controllers.is_empty());
        let mount = mounts.iter().find(|m| m.v2);
        match (unified, mount) {
            (Some(membership), Some(mount)) => match parse::directory(mount, &membership.path) {
                Some(own) => set_up_v2(&own),
                None => Enforcement::RlimitsOnly { why: "our cgroup v2 is outside the mounted hierarchy".into() },
            },
            _ => Enforcement::RlimitsOnly { why: "no cgroup hierarchy with the pids and memory controllers".into() },
        }
    }

    /// Makes the cgroup of run `run_id` with `limits`; `None` without cgroups.
    pub fn create_run(&self, run_id: &str, limits: &Limits) -> Result<Option<RunCgroup>, CgroupError> {
        let dirs: Vec<(Option<Controller>, PathBuf)> = match self {
            Enforcement::RlimitsOnly { .. } => return Ok(None),
            Enforcement::Cgroup2 { runs } => vec![(None, runs.join(run_id))],
            Enforcement::Cgroup1 { bases } => bases.iter().map(|(c, base)| (Some(*c), base.join(run_id))).collect(),
        };
        let run = RunCgroup { dirs };
        for (_, dir) in &run.dirs {
            match std::fs::create_dir(dir) {
                Ok(()) => {}
                // Left by a run of the same id that a crash did not let us remove.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => return Err(CgroupError::Create { path: dir.clone(), source }),
            }
        }
        if let Err(e) = run.apply(limits) {
            run.remove();
            return Err(e);
        }
        Ok(Some(run))
    }

    /// Removes our v1 directories once no run is left (at a clean stop): a host where
    /// many data dirs came and went keeps no empty cgroup of each. The v2 ones are our
    /// delegated cgroup's own, and stay.
    pub fn tear_down(&self) {
        if let Enforcement::Cgroup1 { bases } = self {
            for (_, base) in bases {
                let _ = std::fs::remove_dir(base);
            }
        }
    }

    /// Kills and removes every run cgroup left under ours (a supervisor killed with
    /// SIGKILL cannot remove its own). Called at start, before any run exists.
    pub fn sweep(&self) -> usize {
        let bases: Vec<&Path> = match self {
            Enforcement::RlimitsOnly { .. } => return 0,
            Enforcement::Cgroup2 { runs } => vec![runs],
            Enforcement::Cgroup1 { bases } => bases.iter().map(|(_, b)| b.as_path()).collect(),
        };
        let mut swept = 0;
        for base in bases {
            let Ok(entries) = std::fs::read_dir(base) else { continue };
            for entry in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
                RunCgroup { dirs: vec![(None, entry.path())] }.remove();
                swept += 1;
            }
        }
        swept
    }
}

/// v2 with delegation: we move into a leaf of our own cgroup, so that the controllers
/// can be enabled for its children (no process may sit in a cgroup that distributes
/// them), then make `runs` with them enabled too.
fn set_up_v2(own: &Path) -> Enforcement {
    // Restarted in the same cgroup (systemd), we are already in our leaf.
    let own = if own.ends_with("supervisor") { own.parent().unwrap_or(own) } else { own };
    let available = std::fs::read_to_string(own.join("cgroup.controllers")).unwrap_or_default();
    let missing: Vec<&str> =
        ["pids", "memory", "cpu"].into_iter().filter(|c| !available.split_whitespace().any(|a| a == *c)).collect();
    if !missing.is_empty() {
        return Enforcement::RlimitsOnly {
            why: format!("cgroup v2 {} lacks the {} controller(s)", own.display(), missing.join(", ")),
        };
    }
    let leaf = own.join("supervisor");
    let runs = own.join("runs");
    let steps = || -> Result<(), String> {
        let fail = |what: &str, path: &Path, e: std::io::Error| format!("cannot {what} {}: {e}", path.display());
        std::fs::create_dir_all(&leaf).map_err(|e| fail("make", &leaf, e))?;
        let procs = leaf.join("cgroup.procs");
        std::fs::write(&procs, std::process::id().to_string()).map_err(|e| fail("move us into", &procs, e))?;
        let enable = "+pids +memory +cpu";
        std::fs::write(own.join("cgroup.subtree_control"), enable)
            .map_err(|e| fail("enable controllers in", own, e))?;
        std::fs::create_dir_all(&runs).map_err(|e| fail("make", &runs, e))?;
        std::fs::write(runs.join("cgroup.subtree_control"), enable).map_err(|e| fail("enable controllers in", &runs, e))
    };
    match steps() {
        Ok(()) => Enforcement::Cgroup2 { runs },
        Err(why) => Enforcement::RlimitsOnly { why: format!("{why}; delegate the cgroup (systemd: Delegate=yes)") },
    }
}

/// A run's cgroup: one directory (v2), or one per v1 controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCgroup {
    /// `None`: the v2 directory, which has every controller.
    dirs: Vec<(Option<Controller>, PathBuf)>,
}

/// Events counted since the run's cgroup was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Processes the OOM killer ended.
    pub oom_kills: u64,
    /// Forks refused at `pids.max`.
    pub pids_refused: u64,
}

/// What the run uses now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub memory_bytes: u64,
    pub pids: u64,
    pub cpu_usec: u64,
}

impl RunCgroup {
    fn dir(&self, controller: Controller) -> Option<&Path> {
        self.dirs.iter().find(|(c, _)| c.is_none_or(|c| c == controller)).map(|(_, d)| d.as_path())
    }

    fn v2(&self) -> bool {
        self.dirs.iter().any(|(c, _)| c.is_none())
    }

    /// The `cgroup.procs` files a process writes itself into to join the run.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|(_, d)| d.join("cgroup.procs")).collect()
    }

    /// Opens [`RunCgroup::procs_files`] for [`join::join_on_exec`].
    pub fn open_procs(&self) -> std::io::Result<Vec<std::os::fd::OwnedFd>> {
        open_procs(&self.procs_files())
    }

    fn apply(&self, limits: &Limits) -> Result<(), CgroupError> {
        for (controller, file, value) in writes(self.v2(), limits) {
            let Some(dir) = self.dir(controller) else { continue };
            let path = dir.join(file);
            // Swap accounting is optional in the kernel: without it there is no swap
            // limit to set, and memory.max alone is the bound.
            if (file.contains("swap") || file.contains("memsw")) && !path.exists() {
                continue;
            }
            std::fs::write(&path, &value).map_err(|source| CgroupError::Write { path, value, source })?;
        }
        Ok(())
    }

    pub fn counters(&self) -> Counters {
        let read = |c: Controller, file: &str| self.dir(c).and_then(|d| std::fs::read_to_string(d.join(file)).ok());
        let oom_file = if self.v2() { "memory.events" } else { "memory.oom_control" };
        Counters {
            oom_kills: read(Controller::Memory, oom_file).and_then(|t| parse::keyed(&t, "oom_kill")).unwrap_or(0),
            pids_refused: read(Controller::Pids, "pids.events").and_then(|t| parse::keyed(&t, "max")).unwrap_or(0),
        }
    }

    pub fn usage(&self) -> Usage {
        let read = |c: Controller, file: &str| self.dir(c).and_then(|d| std::fs::read_to_string(d.join(file)).ok());
        let number = |c, file| read(c, file).and_then(|t| parse::number(&t)).unwrap_or(0);
        if self.v2() {
            Usage {
                memory_bytes: number(Controller::Memory, "memory.current"),
                pids: number(Controller::Pids, "pids.current"),
                cpu_usec: read(Controller::Cpu, "cpu.stat").and_then(|t| parse::keyed(&t, "usage_usec")).unwrap_or(0),
            }
        } else {
            Usage {
                memory_bytes: number(Controller::Memory, "memory.usage_in_bytes"),
                pids: number(Controller::Pids, "pids.current"),
                cpu_usec: number(Controller::Cpuacct, "cpuacct.usage") / 1000,
            }
        }
    }

    /// Kills whatever is still in the run's cgroup and removes it, trying for up to a
    /// second while killed processes are reaped; what remains is swept at the next
    /// start. Blocking: call it off the async threads.
    pub fn remove(&self) {
        for attempt in 0..100 {
            let mut left = false;
            for (_, dir) in &self.dirs {
                if !dir.exists() {
                    continue;
                }
                kill_all(dir);
                left |= std::fs::remove_dir(dir).is_err() && dir.exists();
            }
            if !left {
                return;
            }
            if attempt < 99 {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Opens `cgroup.procs` files to write into (sandboxd checks each with
/// [`parse::is_procs_file`] first).
pub fn open_procs(files: &[PathBuf]) -> std::io::Result<Vec<std::os::fd::OwnedFd>> {
    files
        .iter()
        .map(|file| std::fs::OpenOptions::new().write(true).open(file).map(std::os::fd::OwnedFd::from))
        .collect()
}

/// SIGKILL to every process in `dir` (v2's `cgroup.kill` where there is one).
fn kill_all(dir: &Path) {
    if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()).filter(|p| *p > 1) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

/// The files that set `limits`, in order, with the controller whose directory holds
/// each: v2 names (`v2`) or v1 names.
pub fn writes(v2: bool, limits: &Limits) -> Vec<(Controller, &'static str, String)> {
    const PERIOD_US: u64 = 100_000;
    let quota = (limits.cpu_max_percent > 0).then(|| u64::from(limits.cpu_max_percent) * PERIOD_US / 100);
    let (pids, memory) = (limits.pids_max.to_string(), limits.memory_max_bytes.to_string());
    if v2 {
        vec![
            (Controller::Pids, "pids.max", pids),
            (Controller::Memory, "memory.max", memory),
            (Controller::Memory, "memory.swap.max", "0".into()),
            (Controller::Cpu, "cpu.weight", limits.cpu_weight.clamp(1, 10_000).to_string()),
            (
                Controller::Cpu,
                "cpu.max",
                quota.map_or_else(|| format!("max {PERIOD_US}"), |q| format!("{q} {PERIOD_US}")),
            ),
        ]
    } else {
        // cpu.shares: 1024 is v1's even share, as 100 is v2's weight.
        let shares = (u64::from(limits.cpu_weight.clamp(1, 10_000)) * 1024 / 100).max(2);
        vec![
            (Controller::Pids, "pids.max", pids),
            // The memory limit first: memsw may never be below it.
            (Controller::Memory, "memory.limit_in_bytes", memory.clone()),
            (Controller::Memory, "memory.memsw.limit_in_bytes", memory),
            (Controller::Cpu, "cpu.shares", shares.to_string()),
            (Controller::Cpu, "cpu.cfs_period_us", PERIOD_US.to_string()),
            (Controller::Cpu, "cpu.cfs_quota_us", quota.map_or_else(|| "-1".to_owned(), |q| q.to_string())),
        ]
    }
}

/// What to do about a v1 run cgroup that could not be made: the fix depends on why
/// (a root that is refused has nothing to gain from "run as root").
fn v1_hint(e: &std::io::Error, root: bool) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EROFS) => {
            "; the hierarchy is mounted read-only here, as a container without cgroup delegation mounts it"
        }
        Some(libc::EACCES | libc::EPERM) if !root => "; run as root or delegate it",
        Some(libc::EACCES | libc::EPERM) => "; the cgroup is not delegated to this service",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { pids_max: 512, memory_max_bytes: 1 << 30, cpu_weight: 50, cpu_max_percent: 150 };

    #[test]
    fn v2_writes_name_v2_files() {
        let w = writes(true, &LIMITS);
        let find = |f: &str| w.iter().find(|(_, file, _)| *file == f).map(|(_, _, v)| v.as_str());
        assert_eq!(find("pids.max"), Some("512"));
        assert_eq!(find("memory.max"), Some("1073741824"));
        assert_eq!(find("memory.swap.max"), Some("0"), "swap counts: none beyond memory.max");
        assert_eq!(find("cpu.weight"), Some("50"));
        assert_eq!(find("cpu.max"), Some("150000 100000"));
        let uncapped = writes(true, &Limits { cpu_max_percent: 0, ..LIMITS });
        assert!(uncapped.iter().any(|(_, f, v)| *f == "cpu.max" && v == "max 100000"));
    }

    #[test]
    fn v1_writes_set_the_memory_limit_before_memsw() {
        let w = writes(false, &LIMITS);
        let at = |f: &str| w.iter().position(|(_, file, _)| *file == f).unwrap();
        assert!(at("memory.limit_in_bytes") < at("memory.memsw.limit_in_bytes"));
        assert_eq!(w[at("cpu.shares")].2, "512");
        assert_eq!(w[at("cpu.cfs_quota_us")].2, "150000");
        let uncapped = writes(false, &Limits { cpu_max_percent: 0, ..LIMITS });
        assert_eq!(uncapped[at("cpu.cfs_quota_us")].2, "-1");
        assert!(w.iter().all(|(c, f, _)| f.starts_with(c.name())), "each file lives in its controller's directory");
    }

    #[test]
    fn a_v1_refusal_names_the_fix_for_who_was_refused() {
        let err = |n| std::io::Error::from_raw_os_error(n);
        assert!(v1_hint(&err(libc::EROFS), true).contains("mounted read-only"));
        assert_eq!(v1_hint(&err(libc::EACCES), false), "; run as root or delegate it");
        assert!(!v1_hint(&err(libc::EACCES), true).contains("root"));
        assert!(!v1_hint(&err(libc::EPERM), true).contains("root"));
        assert_eq!(v1_hint(&err(libc::ENOSPC), true), "");
    }

    #[test]
    fn the_line_says_how_limits_apply() {
        let none = Enforcement::set_up_from("", "", "x");
        assert_eq!(none.line(), "limits=rlimits-only (no cgroup hierarchy with the pids and memory controllers)");
        let v2_without_controllers =
            Enforcement::set_up_from("0::/\n", "41 31 0:38 / /nonexistent/cgroup rw - cgroup2 cgroup2 rw\n", "x");
        assert!(
            v2_without_controllers
                .line()
                .starts_with("limits=rlimits-only (cgroup v2 /nonexistent/cgroup lacks the pids")
        );
    }

    #[test]
    fn v1_runs_are_made_under_our_instance_with_their_limits() {
        let root = tempfile::tempdir().unwrap();
        let mut info = String::new();
        for (i, c) in ["pids", "memory", "cpu"].iter().enumerate() {
            let point = root.path().join(c);
            std::fs::create_dir(&point).unwrap();
            info.push_str(&format!("{i} 1 0:{i} / {} rw - cgroup cgroup rw,{c}\n", point.display()));
        }
        let e = Enforcement::set_up_from("3:pids:/\n2:memory:/\n1:cpu:/\n", &info, "abc");
        assert_eq!(e.line(), "limits=cgroup1 (pids, memory, cpu)");
        let run = e.create_run("r1", &LIMITS).unwrap().unwrap();
        let read = |p: &str| std::fs::read_to_string(root.path().join(p)).unwrap();
        assert_eq!(read("pids/cc-abc/r1/pids.max"), "512");
        assert_eq!(read("memory/cc-abc/r1/memory.limit_in_bytes"), "1073741824");
        assert!(
            !root.path().join("memory/cc-abc/r1/memory.memsw.limit_in_bytes").exists(),
            "no swap accounting: skipped"
        );
        assert_eq!(read("cpu/cc-abc/r1/cpu.shares"), "512");
        assert_eq!(run.procs_files().len(), 3);
        assert!(run.procs_files()[0].ends_with("pids/cc-abc/r1/cgroup.procs"));
    }
}

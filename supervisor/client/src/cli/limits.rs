//! `--pids-max`, `--memory-max` and the other per-run limit overrides of `run start`
//! and `exec`, and how `run show` prints a run's limits and use.

use cc_proto::supervisor::v1 as pb;
use clap::Args;
use serde_json::json;

/// Overrides of the configured `[runs.limits]`, for this run only.
#[derive(Args, Debug, Default)]
pub struct LimitArgs {
    /// Processes and threads the run may have at once
    #[arg(long, value_name = "N")]
    pids_max: Option<u64>,
    /// Memory the run may use, swap included (e.g. 512M, 2G; binary units)
    #[arg(long, value_name = "SIZE", value_parser = size)]
    memory_max: Option<u64>,
    /// CPU weight, 1–10000 (100 is an even share)
    #[arg(long, value_name = "N")]
    cpu_weight: Option<u32>,
    /// CPU cap in percent of one CPU (200: two CPUs; 0: none)
    #[arg(long, value_name = "PERCENT")]
    cpu_max_percent: Option<u32>,
    /// Size of each envelope's /tmp (e.g. 256M)
    #[arg(long, value_name = "SIZE", value_parser = size)]
    tmp_size: Option<u64>,
    /// Open files per process
    #[arg(long, value_name = "N")]
    open_files_max: Option<u64>,
}

impl LimitArgs {
    /// `None` when no override is given: the run gets the configured limits.
    pub fn to_proto(&self) -> Option<pb::RunLimits> {
        let limits = pb::RunLimits {
            pids_max: self.pids_max,
            memory_max_bytes: self.memory_max,
            cpu_weight: self.cpu_weight,
            cpu_max_percent: self.cpu_max_percent,
            tmp_size_bytes: self.tmp_size,
            open_files_max: self.open_files_max,
        };
        (limits != pb::RunLimits::default()).then_some(limits)
    }
}

/// A size with an optional binary unit: `512M` is 512 MiB.
fn size(text: &str) -> Result<u64, String> {
    parse_size::Config::new().with_binary().parse_size(text).map_err(|e| format!("{text:?} is not a size ({e})"))
}

pub fn resources_json(r: Option<&pb::RunResources>) -> serde_json::Value {
    let Some(r) = r else { return serde_json::Value::Null };
    let l = r.limits.unwrap_or_default();
    json!({
        "enforcement": r.enforcement,
        "limits": {
            "pids_max": l.pids_max, "memory_max_bytes": l.memory_max_bytes, "cpu_weight": l.cpu_weight,
            "cpu_max_percent": l.cpu_max_percent, "tmp_size_bytes": l.tmp_size_bytes, "open_files_max": l.open_files_max,
        },
        "memory_bytes": r.memory_bytes,
        "pids": r.pids,
        "cpu_usec": r.cpu_usec,
    })
}

/// `limits cgroup1 (pids, memory, cpu): memory 12.3 MiB of 2048 MiB, pids 4 of 1024, cpu 0.52 s`.
pub fn resources_line(r: &pb::RunResources) -> String {
    const MIB: f64 = (1 << 20) as f64;
    let l = r.limits.unwrap_or_default();
    format!(
        "limits {}: memory {:.1} MiB of {} MiB, pids {} of {}, cpu {:.2} s",
        r.enforcement,
        r.memory_bytes as f64 / MIB,
        l.memory_max_bytes.unwrap_or(0) >> 20,
        r.pids,
        l.pids_max.unwrap_or(0),
        r.cpu_usec as f64 / 1e6
    )
}

/// A byte count for people: `512 B`, `1.5 KiB`, `3.0 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_as_people_write_them() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(bytes(u64::MAX), "16384.0 PiB");
    }

    #[test]
    fn sizes_are_binary() {
        assert_eq!(size("512M"), Ok(512 << 20));
        assert_eq!(size("2G"), Ok(2 << 30));
        assert_eq!(size("4096"), Ok(4096));
        assert!(size("lots").unwrap_err().contains("\"lots\" is not a size"));
    }

    #[test]
    fn no_override_is_none() {
        assert_eq!(LimitArgs::default().to_proto(), None);
        let one = LimitArgs { pids_max: Some(64), ..Default::default() };
        assert_eq!(one.to_proto().unwrap().pids_max, Some(64));
    }
}

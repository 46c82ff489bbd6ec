//! `--quick`: every benchmark for a few rounds and a little data, so that CI proves
//! each one still runs to its end without spending minutes on figures a noisy CI
//! machine could not judge anyway. The full run is the default.

use std::sync::atomic::{AtomicBool, Ordering};

static QUICK: AtomicBool = AtomicBool::new(false);

/// Takes `--quick` out of the arguments, wherever it is; true when it was there.
pub fn take_quick_flag(args: &mut Vec<String>) -> bool {
    let before = args.len();
    args.retain(|a| a != "--quick");
    let quick = args.len() != before;
    QUICK.store(quick, Ordering::Relaxed);
    quick
}

pub fn quick() -> bool {
    QUICK.load(Ordering::Relaxed)
}

/// How many times to do what a full run does `full` times: a fiftieth of it quick,
/// but at least three (a median of something), and never more than `full`.
pub fn rounds(full: usize) -> usize {
    if quick() { (full / 50).max(3).min(full) } else { full }
}

/// How many bytes to move where a full run moves `full`: a 256th quick, at least 1 MiB.
pub fn bytes(full: u64) -> u64 {
    if quick() { (full / 256).max(1 << 20).min(full) } else { full }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_is_taken_wherever_it_is_and_scales_rounds_and_bytes() {
        let mut args: Vec<String> = ["all", "--quick", "--srt", "x"].map(String::from).into();
        assert!(take_quick_flag(&mut args));
        assert_eq!(args, ["all", "--srt", "x"]);
        assert_eq!((rounds(2_000), rounds(40), rounds(2), rounds(0)), (40, 3, 2, 0));
        assert_eq!((bytes(1 << 30), bytes(100), bytes(100_000_000)), (4 << 20, 100, 1 << 20));
        let mut full: Vec<String> = ["egress"].map(String::from).into();
        assert!(!take_quick_flag(&mut full));
        assert_eq!((rounds(2_000), bytes(1 << 30)), (2_000, 1 << 30));
    }
}

//! What the supervisor's hosted terminals and sandboxd's terminal launches agree on.

use nix::sys::signal::Signal;

mod foreground;
pub use foreground::signal_foreground;

/// The largest terminal, in columns or rows.
pub const MAX_CELLS: u32 = 1000;

/// The signals a client may send to a terminal's foreground job: the keyboard's
/// (interrupt, quit, suspend), which the kernel delivers to the foreground group by its
/// own reference (`TIOCSIG` takes no other). Ending a terminal is deleting it.
pub fn signal(number: i32) -> Option<Signal> {
    let signal = Signal::try_from(number).ok()?;
    [Signal::SIGINT, Signal::SIGQUIT, Signal::SIGTSTP].contains(&signal).then_some(signal)
}

/// `columns` × `rows` as `(columns, rows)` when each is 1–[`MAX_CELLS`].
pub fn cells(columns: u32, rows: u32) -> Result<(u16, u16), String> {
    let one = |n: u32, what: &str| {
        u16::try_from(n)
            .ok()
            .filter(|&n| n >= 1 && u32::from(n) <= MAX_CELLS)
            .ok_or_else(|| format!("a terminal has 1 to {MAX_CELLS} {what}, not {n}"))
    };
    Ok((one(columns, "columns")?, one(rows, "rows")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked() {
        assert_eq!(cells(80, 24), Ok((80, 24)));
        assert_eq!(cells(1000, 1), Ok((1000, 1)));
        for (columns, rows) in [(0, 24), (80, 0), (1001, 24), (80, 70_000), (u32::MAX, 1)] {
            assert!(cells(columns, rows).unwrap_err().contains("a terminal has 1 to 1000"));
        }
    }

    #[test]
    fn only_keyboard_and_ending_signals_pass() {
        assert_eq!(signal(2), Some(Signal::SIGINT));
        assert_eq!(signal(3), Some(Signal::SIGQUIT));
        assert_eq!(signal(20), Some(Signal::SIGTSTP));
        for refused in [0, -1, 1, 5, 9, 11, 14, 15, 19, 28, 64, i32::MAX] {
            assert_eq!(signal(refused), None, "{refused}");
        }
    }
}

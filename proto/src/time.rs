//! The API's times are `google.protobuf.Timestamp`s; the store and the event log keep
//! milliseconds since the Unix epoch. These convert between the two. A call's timings
//! (`LaunchTimings`, `BashTimings`) are whole microseconds.

pub use prost_types::Timestamp;

/// The timestamp of a time in milliseconds since the Unix epoch.
pub fn timestamp(unix_ms: i64) -> Timestamp {
    Timestamp { seconds: unix_ms.div_euclid(1000), nanos: (unix_ms.rem_euclid(1000) * 1_000_000) as i32 }
}

/// `Some` timestamp of a time that may be unset (0 or absent in the store).
pub fn optional_timestamp(unix_ms: Option<i64>) -> Option<Timestamp> {
    unix_ms.filter(|ms| *ms != 0).map(timestamp)
}

/// Milliseconds since the Unix epoch of a timestamp; 0 when unset.
pub fn unix_ms(timestamp: Option<&Timestamp>) -> i64 {
    timestamp.map_or(0, |t| t.seconds.saturating_mul(1000).saturating_add(i64::from(t.nanos) / 1_000_000))
}

/// A duration in whole microseconds, as a call's timings carry it (saturating).
pub fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_survive_the_round_trip() {
        for ms in [0, 1, 999, 1000, 1_780_000_000_123, -1, -1001] {
            assert_eq!(unix_ms(Some(&timestamp(ms))), ms, "{ms}");
        }
        assert_eq!(unix_ms(None), 0);
        assert_eq!(optional_timestamp(Some(0)), None);
    }
}

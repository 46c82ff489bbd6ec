//! When to start a helper again after it exits: pure, so it is tested without processes.

use std::time::Duration;

use cc_config::RestartPolicy;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStart {
    After(Duration),
    /// The budget of restarts in a row is spent: the helper is reported failed.
    GiveUp,
}

/// Exponential backoff that starts over after a healthy run.
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: RestartPolicy,
    failures_in_a_row: u32,
}

impl Backoff {
    pub fn new(policy: RestartPolicy) -> Self {
        Self { policy, failures_in_a_row: 0 }
    }

    /// The helper exited after running for `ran_for` (zero when it never came up).
    pub fn on_exit(&mut self, ran_for: Duration) -> NextStart {
        if ran_for >= self.policy.healthy_after() {
            self.failures_in_a_row = 0;
        }
        self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
        if self.failures_in_a_row > self.policy.budget {
            return NextStart::GiveUp;
        }
        let doublings = (self.failures_in_a_row - 1).min(32);
        let delay = self.policy.initial_backoff().saturating_mul(1u32 << doublings.min(31));
        NextStart::After(delay.min(self.policy.max_backoff()))
    }

    /// A person asked for a restart: start over.
    pub fn reset(&mut self) {
        self.failures_in_a_row = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(budget: u32) -> RestartPolicy {
        RestartPolicy {
            initial_backoff_ms: 100,
            max_backoff_ms: 30_000,
            healthy_after_ms: 60_000,
            budget,
            ..Default::default()
        }
    }

    #[test]
    fn doubles_to_the_cap_then_gives_up() {
        let mut b = Backoff::new(policy(12));
        let delays: Vec<_> = (0..12)
            .map(|_| match b.on_exit(Duration::ZERO) {
                NextStart::After(d) => d.as_millis(),
                NextStart::GiveUp => 0,
            })
            .collect();
        assert_eq!(delays, [100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000, 30000]);
        assert_eq!(b.on_exit(Duration::ZERO), NextStart::GiveUp);
    }

    #[test]
    fn a_healthy_minute_starts_over() {
        let mut b = Backoff::new(policy(10));
        for _ in 0..5 {
            b.on_exit(Duration::from_secs(1));
        }
        assert_eq!(b.on_exit(Duration::from_secs(61)), NextStart::After(Duration::from_millis(100)));
    }

    #[test]
    fn reset_starts_over() {
        let mut b = Backoff::new(policy(1));
        assert!(matches!(b.on_exit(Duration::ZERO), NextStart::After(_)));
        assert_eq!(b.on_exit(Duration::ZERO), NextStart::GiveUp);
        b.reset();
        assert_eq!(b.on_exit(Duration::ZERO), NextStart::After(Duration::from_millis(100)));
    }

    #[test]
    fn huge_counts_do_not_overflow() {
        let mut b = Backoff::new(policy(u32::MAX));
        for _ in 0..100 {
            assert!(matches!(b.on_exit(Duration::ZERO), NextStart::After(d) if d <= Duration::from_secs(30)));
        }
    }
}

//! Revoking a run's credentials, in three steps so that no database handle is held
//! across a network call: take the secrets, revoke them, record what happened. A revoke
//! that fails is never hidden: it is recorded with its error and retried with backoff,
//! and each outcome is returned for the caller to turn into an event.

use std::time::{Duration, SystemTime};

use crate::credentials::{Provider, ProviderError};
use crate::leases::{Lease, LeaseError, LeaseStore};
use crate::secret::Secret;

/// The first retry waits this long, doubling up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(300);

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Revoked {
        lease: i64,
    },
    /// The provider cannot revoke (static tokens); the lease says so.
    CannotRevoke {
        lease: i64,
    },
    Failed {
        lease: i64,
        error: String,
        attempts: u32,
        retry_in: Duration,
    },
}

/// How long to wait before attempt `attempts + 1`.
pub fn backoff(attempts: u32) -> Duration {
    FIRST_BACKOFF.saturating_mul(1u32.checked_shl(attempts.min(20)).unwrap_or(u32::MAX)).min(MAX_BACKOFF)
}

/// The secrets of the leases still to revoke.
pub fn take(store: &LeaseStore, leases: &[Lease]) -> Result<Vec<(i64, Secret)>, LeaseError> {
    let mut out = Vec::new();
    for lease in leases.iter().filter(|l| l.revoked_at.is_none()) {
        if let Some(secret) = store.secret(lease.id)? {
            out.push((lease.id, secret));
        }
    }
    Ok(out)
}

pub async fn revoke_all(provider: &Provider, secrets: Vec<(i64, Secret)>) -> Vec<(i64, Result<bool, ProviderError>)> {
    let mut results = Vec::with_capacity(secrets.len());
    for (id, secret) in secrets {
        results.push((id, provider.revoke(&secret).await));
    }
    results
}

pub fn record(
    store: &LeaseStore,
    results: Vec<(i64, Result<bool, ProviderError>)>,
    now: SystemTime,
) -> Result<Vec<Outcome>, LeaseError> {
    let mut outcomes = Vec::with_capacity(results.len());
    for (lease, result) in results {
        outcomes.push(match result {
            Ok(true) => {
                store.mark_revoked(lease, now, None)?;
                Outcome::Revoked { lease }
            }
            Ok(false) => {
                store.mark_revoked(lease, now, Some("the static provider cannot revoke; the token stays valid"))?;
                Outcome::CannotRevoke { lease }
            }
            Err(e) => {
                let error = e.to_string();
                let retry_in = backoff(store.revoke_attempts(lease)?);
                let attempts = store.mark_revoke_failed(lease, &error, now + retry_in)?;
                Outcome::Failed { lease, error, attempts, retry_in }
            }
        });
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_a_ceiling() {
        assert_eq!(backoff(0), Duration::from_secs(1));
        assert_eq!(backoff(1), Duration::from_secs(2));
        assert_eq!(backoff(5), Duration::from_secs(32));
        assert_eq!(backoff(9), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}

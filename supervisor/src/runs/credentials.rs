//! A run's credentials. The broker issues the run's read credential when the run
//! starts and revokes everything of the run when it ends. A broker that (re)starts is
//! told the live runs, so it revokes the credentials of runs that ended while it was
//! down or before the supervisor crashed, and each live run is registered with it
//! again. Nothing here ever sees a secret: the broker lists leases, not tokens.

use cc_proto::broker::v1 as bk;
use cc_proto::common::v1::CredentialLease;
use serde_json::json;

use super::{LiveRun, RunError, RunManager};
use crate::helpers::HelperKind;
use crate::ids::RunId;
use crate::registry::ConversationRecord;

/// `OWNER/NAME` (lower case) of a GitHub remote URL, in any of git's spellings.
pub fn github_repository_of(url: &str) -> Option<String> {
    let rest =
        ["https://github.com/", "http://github.com/", "ssh://git@github.com/", "git://github.com/", "git@github.com:"]
            .iter()
            .find_map(|prefix| url.strip_prefix(prefix))?;
    let rest = rest.trim_end_matches('/');
    let rest = rest.strip_suffix(".git").unwrap_or(rest);
    crate::names::github_repository(rest).ok()
}

/// The GitHub repositories a run's read credential covers: the `origin` of each of
/// the conversation's checkouts on GitHub, and the workspace's linked repositories.
pub fn github_repositories(record: &ConversationRecord, linked: &[String]) -> Vec<String> {
    let mut repositories: Vec<String> = record
        .repos
        .iter()
        .filter_map(|r| {
            let repo = git2::Repository::open(&r.source_path).ok()?;
            let remote = repo.find_remote("origin").ok()?;
            let url = remote.url().ok()?.to_owned();
            github_repository_of(&url)
        })
        .chain(linked.iter().cloned())
        .collect();
    repositories.sort();
    repositories.dedup();
    repositories
}

/// What the broker is told of a run: its id and its GitHub repositories (runs have
/// no deadline yet).
fn register_request(run: &LiveRun) -> bk::RegisterRunRequest {
    bk::RegisterRunRequest {
        run_id: run.record.id.clone(),
        github_repositories: run.github_repositories.clone(),
        deadline: None,
    }
}

impl RunManager {
    /// Asks the broker for the run's read credential. A broker that is down or a
    /// provider that refuses does not stop the run (it only cannot reach GitHub
    /// through the gateway); the event says why.
    pub(super) async fn register_credentials(&self, live: &LiveRun) {
        let subject = format!("run:{}", live.record.id);
        let channels = &self.env.channels;
        let registered = async {
            let mut broker = channels.broker().await?;
            let call = broker.register_run(register_request(live));
            channels.within(HelperKind::Broker, "RegisterRun", call).await
        };
        match registered.await {
            Ok(response) => {
                let r = response.into_inner();
                let payload =
                    json!({ "leases": r.leases.len(), "repositories": live.github_repositories, "note": r.note });
                self.env.events.record("credentials_issued", &subject, payload);
            }
            Err(status) => {
                let payload = json!({ "error": status.message() });
                self.env.events.record("credentials_unavailable", &subject, payload);
            }
        }
    }

    /// Revokes everything of an ended run. If the broker cannot be reached, the run's
    /// credentials are revoked when the broker is next told the live runs.
    pub(super) async fn end_credentials(&self, run_id: &str) {
        let subject = format!("run:{run_id}");
        let channels = &self.env.channels;
        let ended = async {
            let mut broker = channels.broker().await?;
            let call = broker.end_run(bk::EndRunRequest { run_id: run_id.to_owned() });
            channels.within(HelperKind::Broker, "EndRun", call).await
        };
        match ended.await {
            Ok(response) => {
                self.record_revocations("credentials_revoked", &subject, &response.into_inner().revocations)
            }
            Err(status) => {
                let payload = json!({ "error": status.message(), "then": "revoked when the broker is next synced" });
                self.env.events.record("credentials_revoke_pending", &subject, payload);
            }
        }
    }

    /// A broker process started: it revokes what belongs to no live run, and every
    /// live run is registered with it again.
    pub(super) async fn sync_broker(&self, pid: u32) {
        let live: Vec<std::sync::Arc<LiveRun>> = self.lock().values().cloned().collect();
        let channels = &self.env.channels;
        let synced = async {
            let mut broker = channels.broker_at(pid).await?;
            let ids = live.iter().map(|r| r.record.id.clone()).collect();
            let call = broker.sync_runs(bk::SyncRunsRequest { live_run_ids: ids });
            channels.within(HelperKind::Broker, "SyncRuns", call).await
        };
        match synced.await {
            Ok(response) => {
                let revocations = response.into_inner().revocations;
                if !revocations.is_empty() {
                    self.record_revocations("credentials_synced", "helper:broker", &revocations);
                }
            }
            Err(status) => {
                tracing::warn!(error = %status.message(), "cannot tell the broker the live runs");
            }
        }
        for run in live {
            let register = async {
                let mut broker = channels.broker_at(pid).await?;
                let call = broker.register_run(register_request(&run));
                channels.within(HelperKind::Broker, "RegisterRun", call).await
            };
            if let Err(status) = register.await {
                tracing::warn!(run = %run.record.id, error = %status.message(), "cannot register the run with the broker again");
            }
        }
    }

    fn record_revocations(&self, kind: &str, subject: &str, revocations: &[bk::Revocation]) {
        use bk::RevocationOutcome as O;
        let count = |o: O| revocations.iter().filter(|r| r.outcome == o as i32).count();
        let failures: Vec<serde_json::Value> = revocations
            .iter()
            .filter(|r| r.outcome == O::Failed as i32)
            .map(|r| json!({ "lease": r.lease_id, "run": r.run_id, "error": r.error, "attempts": r.attempts }))
            .collect();
        let payload = json!({
            "revoked": count(O::Revoked),
            "cannot_revoke": count(O::CannotRevoke),
            "failed": failures,
        });
        self.env.events.record(kind, subject, payload);
    }

    /// The leases of a run, live or ended, from the broker.
    pub async fn credentials(&self, id: &RunId) -> Result<Vec<CredentialLease>, RunError> {
        self.record(id)?;
        let channels = &self.env.channels;
        let mut broker = channels.broker().await?;
        let call = broker.list_leases(bk::ListLeasesRequest { run_id: id.as_str().to_owned() });
        Ok(channels.within(HelperKind::Broker, "ListLeases", call).await?.into_inner().leases)
    }
}

#[cfg(test)]
mod tests {
    use super::github_repository_of;

    #[test]
    fn github_remotes_are_read_in_every_spelling() {
        for url in [
            "https://github.com/Octo/Project.git",
            "https://github.com/octo/project",
            "git@github.com:octo/project.git",
            "ssh://git@github.com/octo/project.git",
            "git://github.com/octo/project/",
        ] {
            assert_eq!(github_repository_of(url).as_deref(), Some("octo/project"), "{url}");
        }
        for url in ["https://gitlab.com/o/r.git", "/srv/git/r.git", "https://github.com/o", "https://github.com/o/r/x"]
        {
            assert_eq!(github_repository_of(url), None, "{url}");
        }
    }
}

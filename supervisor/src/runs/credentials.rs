//! A run's credentials. The broker issues the run's read credential when the run
//! starts and revokes everything of the run when it ends. A broker that (re)starts is
//! told the live runs, so it revokes the credentials of runs that ended while it was
//! down or before the supervisor crashed, and each live run is registered with it
//! again. Nothing here ever sees a secret: the broker lists leases, not tokens.

use cc_proto::broker::v1 as bk;
use cc_proto::common::v1::CredentialLease;
use serde_json::json;

use super::gitconfig::GITHUB_SPELLINGS;

use super::git_gateway::GitHubRepo;
use super::{LiveRun, RunError, RunManager};
use crate::helpers::HelperKind;
use crate::ids::RunId;
use crate::registry::ConversationRecord;

/// `OWNER/NAME` (lower case) of a GitHub remote URL, in any of git's spellings (the
/// ones the run's git config sends to the gateway).
pub fn github_repository_of(url: &str) -> Option<String> {
    let rest = GITHUB_SPELLINGS.iter().find_map(|prefix| url.strip_prefix(prefix))?;
    let rest = rest.trim_end_matches('/');
    let rest = rest.strip_suffix(".git").unwrap_or(rest);
    crate::names::github_repository(rest).ok()
}

/// The GitHub repositories a run's read credential covers and its git may reach: the
/// `origin` of each of the conversation's checkouts on GitHub (with the checkout's
/// name for the gate, and origin's default branch when the checkout knows it), and
/// the workspace's linked repositories.
pub fn github_repositories(record: &ConversationRecord, linked: &[String]) -> Vec<GitHubRepo> {
    let mut repositories: Vec<GitHubRepo> = record
        .repos
        .iter()
        .filter_map(|r| {
            let repo = git2::Repository::open(&r.source_path).ok()?;
            let remote = repo.find_remote("origin").ok()?;
            let name = github_repository_of(remote.url().ok()?)?;
            let default_branch = repo
                .find_reference("refs/remotes/origin/HEAD")
                .ok()
                .and_then(|head| head.symbolic_target().ok().flatten().map(str::to_owned))
                .and_then(|target| target.strip_prefix("refs/remotes/origin/").map(str::to_owned));
            Some(GitHubRepo { name, gate_name: r.name.clone(), default_branch })
        })
        .collect();
    for name in linked {
        if !repositories.iter().any(|r| &r.name == name) {
            repositories.push(GitHubRepo { name: name.clone(), gate_name: name.clone(), default_branch: None });
        }
    }
    repositories.sort_by(|a, b| a.name.cmp(&b.name));
    repositories.dedup_by(|a, b| a.name == b.name);
    repositories
}

/// What the broker is told of a run: its id and its GitHub repositories (runs have
/// no deadline yet).
fn register_request(run: &LiveRun) -> bk::RegisterRunRequest {
    bk::RegisterRunRequest {
        run_id: run.record.id.clone(),
        github_repositories: run.github_repositories.iter().map(|r| r.name.clone()).collect(),
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
                let names: Vec<&str> = live.github_repositories.iter().map(|r| r.name.as_str()).collect();
                let payload = json!({ "leases": r.leases.len(), "repositories": names, "note": r.note });
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
            // A run that ended while it was registered again must not keep what this
            // issued it: its own end may have reached the broker first.
            if !self.lock().contains_key(&run.run_id) {
                self.end_credentials(&run.record.id).await;
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

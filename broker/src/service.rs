//! The broker's RPCs: register a run (issue its read credential), end a run and sync
//! the live runs (revoke), list a run's leases: the supervisor's. The token-serving
//! ones: the run's read token (the gateway and the supervisor), a one-push write token
//! and its revocation (the gateway). The peer secret says who asks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use cc_proto::auth::require_peer;
use cc_proto::broker::v1 as pb;
use cc_proto::broker::v1::broker_server::{Broker, BrokerServer};
use cc_proto::common::v1::CredentialLease;
use cc_proto::hardening::CapabilityPolicy;
use cc_proto::helper::{HelperContext, HelperSpec, MAX_MESSAGE_BYTES};
use tonic::{Request, Response, Status};

use crate::credentials::{Provider, Scope};
use crate::leases::{Kind, Lease, LeaseStore, NewLease};
use crate::model_key::{ModelKeyError, ModelKeys};
use crate::revoke::{self, Outcome};
use crate::secret::Secret;

pub const SPEC: HelperSpec = HelperSpec { name: "broker", capabilities: CapabilityPolicy::DropAll };

/// Failed revokes are looked at this often.
const RETRY_EVERY: Duration = Duration::from_secs(1);

struct State {
    store: Mutex<LeaseStore>,
    provider: Option<Provider>,
    model_keys: ModelKeys,
    retrier: OnceLock<()>,
}

pub struct BrokerService {
    context: HelperContext,
    state: Arc<State>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Leases(#[from] crate::leases::LeaseError),
    #[error(transparent)]
    ModelKeys(#[from] crate::model_key::ModelKeyError),
    #[error("cannot make {path}: {source}")]
    Dir { path: String, source: std::io::Error },
}

/// The broker's database: `$DATA/broker/leases.db`, in a directory only we can enter.
fn leases_path(context: &HelperContext) -> Result<PathBuf, StartError> {
    let dir = context.bootstrap.data_dir.join("broker");
    let made = |source| StartError::Dir { path: dir.display().to_string(), source };
    std::fs::create_dir_all(&dir).map_err(made)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(made)?;
    Ok(dir.join("leases.db"))
}

pub fn service(context: &HelperContext) -> Result<BrokerServer<BrokerService>, StartError> {
    Ok(BrokerServer::new(broker(context)?).max_decoding_message_size(MAX_MESSAGE_BYTES))
}

/// The broker's service itself, for [`service`] and for tests that call its methods
/// as a given peer.
pub fn broker(context: &HelperContext) -> Result<BrokerService, StartError> {
    let config = context.bootstrap.options.get("credentials").map(String::as_str);
    let provider = crate::config::provider(config, &context.bootstrap.data_dir)?;
    match &provider {
        None => tracing::info!("no credential provider is configured: runs get no credentials"),
        Some(p) if !p.can_revoke() => tracing::warn!(
            provider = p.name(),
            "this provider cannot revoke: its tokens stay valid after a run ends (development only)"
        ),
        Some(p) => tracing::info!(provider = p.name(), "credential provider"),
    }
    let model_keys = context.bootstrap.options.get("model_keys").map(String::as_str);
    let model_keys = ModelKeys::from_option(model_keys, &context.bootstrap.data_dir)?;
    let store = LeaseStore::open(&leases_path(context)?)?;
    let state = Arc::new(State { store: Mutex::new(store), provider, model_keys, retrier: OnceLock::new() });
    Ok(BrokerService { context: context.clone(), state })
}

/// A refusal the door and the prompt tell apart: the run's model key is missing.
fn no_model_key(message: String, run: &str) -> Status {
    cc_proto::reasons::refusal(
        tonic::Code::FailedPrecondition,
        message,
        cc_proto::reasons::NO_CREDENTIAL,
        &[("run_id", run.to_owned())],
    )
}

/// Equal bytes, compared without stopping at the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn only_the_supervisor<T>(request: &Request<T>) -> Result<(), Status> {
    require_peer(request, &["supervisor"])
}

fn stamp(t: SystemTime) -> cc_proto::time::Timestamp {
    cc_proto::time::timestamp(cc_proto::helper::unix_ms(t))
}

fn internal(e: impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
}

fn lease_message(l: Lease) -> CredentialLease {
    CredentialLease {
        lease_id: l.id,
        run_id: l.run,
        provider: l.provider,
        kind: l.kind.as_str().to_owned(),
        repositories: l.repositories,
        permissions: l.permissions.into_iter().map(|(k, v)| format!("{k}:{v}")).collect(),
        issue_time: Some(stamp(l.issued_at)),
        expire_time: l.expires_at.map(stamp),
        revoke_time: l.revoked_at.map(stamp),
        revoke_attempts: l.revoke_attempts,
        revoke_note: l.revoke_error.unwrap_or_default(),
    }
}

fn revocation(run_of: &BTreeMap<i64, String>, outcome: Outcome) -> pb::Revocation {
    use pb::RevocationOutcome as O;
    let (lease_id, outcome, error, attempts) = match outcome {
        Outcome::Revoked { lease } => (lease, O::Revoked, String::new(), 0),
        Outcome::CannotRevoke { lease } => (lease, O::CannotRevoke, String::new(), 0),
        Outcome::Failed { lease, error, attempts, .. } => (lease, O::Failed, error, attempts),
    };
    pb::Revocation {
        lease_id,
        run_id: run_of.get(&lease_id).cloned().unwrap_or_default(),
        outcome: outcome as i32,
        error,
        attempts,
    }
}

impl State {
    /// The run's live read lease and its token.
    fn read_lease(&self, run: &str) -> Result<(Lease, crate::secret::Secret), Status> {
        let store = self.store()?;
        let lease = store
            .of_run(run)
            .map_err(internal)?
            .into_iter()
            .find(|l| l.kind == Kind::Read && l.revoked_at.is_none())
            .ok_or_else(|| {
                cc_proto::reasons::refusal(
                    tonic::Code::FailedPrecondition,
                    format!("run {run} holds no live credential"),
                    cc_proto::reasons::NO_CREDENTIAL,
                    &[("run_id", run.to_owned())],
                )
            })?;
        let secret = store
            .secret(lease.id)
            .map_err(internal)?
            .ok_or_else(|| Status::failed_precondition(format!("run {run}'s credential has no token on record")))?;
        Ok((lease, secret))
    }

    fn store(&self) -> Result<std::sync::MutexGuard<'_, LeaseStore>, Status> {
        self.store.lock().map_err(|_| Status::internal("the lease database is unusable after an earlier failure"))
    }

    /// Revokes `leases`, recording each outcome; no database lock is held while the
    /// provider is called. A model placeholder is revoked here, by the record alone.
    async fn revoke(&self, leases: Vec<Lease>) -> Result<Vec<pb::Revocation>, Status> {
        let run_of: BTreeMap<i64, String> = leases.iter().map(|l| (l.id, l.run.clone())).collect();
        let (placeholders, leases): (Vec<Lease>, Vec<Lease>) =
            leases.into_iter().partition(|l| l.kind == Kind::ModelPlaceholder);
        let mut revoked = Vec::new();
        if !placeholders.is_empty() {
            let store = self.store()?;
            for lease in placeholders.iter().filter(|l| l.revoked_at.is_none()) {
                store.mark_revoked(lease.id, SystemTime::now(), None).map_err(internal)?;
                revoked.push(revocation(&run_of, Outcome::Revoked { lease: lease.id }));
            }
        }
        let Some(provider) = &self.provider else {
            return Ok(revoked);
        };
        let secrets = revoke::take(&*self.store()?, &leases).map_err(internal)?;
        let results = revoke::revoke_all(provider, secrets).await;
        let outcomes = revoke::record(&*self.store()?, results, SystemTime::now()).map_err(internal)?;
        for o in &outcomes {
            if let Outcome::Failed { lease, error, attempts, retry_in } = o {
                tracing::warn!(lease, attempts, retry_in_ms = retry_in.as_millis() as u64, error = %error, "a revoke failed; retrying");
            }
        }
        revoked.extend(outcomes.into_iter().map(|o| revocation(&run_of, o)));
        Ok(revoked)
    }

    /// The run's live placeholder, minted on the first ask. Looked up and minted
    /// under one lock, so two asks at once get the same one.
    fn placeholder(&self, run: &str) -> Result<Secret, Status> {
        if self.model_keys.is_empty() {
            return Err(no_model_key(ModelKeyError::NotConfigured.to_string(), run));
        }
        let store = self.store()?;
        let live = store
            .of_run(run)
            .map_err(internal)?
            .into_iter()
            .find(|l| l.kind == Kind::ModelPlaceholder && l.revoked_at.is_none());
        if let Some(lease) = live {
            return store
                .secret(lease.id)
                .map_err(internal)?
                .ok_or_else(|| internal("a placeholder without its value"));
        }
        let placeholder = crate::model_key::mint_placeholder().map_err(internal)?;
        let lease = NewLease {
            run: run.to_owned(),
            provider: "models".into(),
            kind: Kind::ModelPlaceholder,
            repositories: vec![],
            permissions: vec![],
            issued_at: SystemTime::now(),
            expires_at: None,
        };
        let id = store.insert(&lease, &placeholder).map_err(internal)?;
        tracing::info!(run, lease = id, "minted the run's model placeholder");
        Ok(placeholder)
    }

    /// Whether `presented` is the run's live placeholder (compared in constant time).
    fn is_placeholder_of(&self, run: &str, presented: &str) -> Result<bool, Status> {
        let store = self.store()?;
        for lease in store.of_run(run).map_err(internal)? {
            if lease.kind != Kind::ModelPlaceholder || lease.revoked_at.is_some() {
                continue;
            }
            if let Some(secret) = store.secret(lease.id).map_err(internal)? {
                return Ok(constant_time_eq(secret.expose().as_bytes(), presented.as_bytes()));
            }
        }
        Ok(false)
    }

    /// Retries failed revokes for as long as the broker runs; started on first use,
    /// inside the runtime.
    fn ensure_retrier(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        self.retrier.get_or_init(|| {
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(RETRY_EVERY).await;
                    let Some(state) = weak.upgrade() else { return };
                    let due = match state.store() {
                        Ok(store) => store.due(SystemTime::now()).unwrap_or_default(),
                        Err(_) => return,
                    };
                    if !due.is_empty() {
                        let _ = state.revoke(due).await;
                    }
                }
            });
        });
    }
}

#[tonic::async_trait]
impl Broker for BrokerService {
    async fn get_status(
        &self,
        _request: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        Ok(Response::new(pb::GetStatusResponse { status: Some(self.context.status()) }))
    }

    async fn register_run(
        &self,
        request: Request<pb::RegisterRunRequest>,
    ) -> Result<Response<pb::RegisterRunResponse>, Status> {
        only_the_supervisor(&request)?;
        self.state.ensure_retrier();
        let r = request.into_inner();
        let existing = self.state.store()?.of_run(&r.run_id).map_err(internal)?;
        let listed = |leases: Vec<Lease>, note: &str| {
            Ok(Response::new(pb::RegisterRunResponse {
                leases: leases.into_iter().map(lease_message).collect(),
                note: note.to_owned(),
            }))
        };
        if existing.iter().any(|l| l.kind == Kind::Read && l.revoked_at.is_none()) {
            return listed(existing, "");
        }
        let Some(provider) = &self.state.provider else {
            return listed(existing, "no credential provider is configured ([credentials] in config.toml)");
        };
        if r.github_repositories.is_empty() {
            return listed(existing, "the run names no GitHub repository: no credential was issued");
        }
        let deadline =
            r.deadline.map(|t| SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(t.seconds).unwrap_or(0)));
        let scope = Scope::read(r.github_repositories.clone());
        let issued = provider
            .issue(&scope, deadline)
            .await
            .map_err(|e| Status::failed_precondition(format!("cannot issue the run's read credential: {e}")))?;
        let lease = NewLease {
            run: r.run_id.clone(),
            provider: provider.name().to_owned(),
            kind: Kind::Read,
            repositories: scope.repositories,
            permissions: scope.permissions,
            issued_at: SystemTime::now(),
            expires_at: issued.expires_at,
        };
        let store = self.state.store()?;
        store.insert(&lease, &issued.secret).map_err(internal)?;
        listed(store.of_run(&r.run_id).map_err(internal)?, "")
    }

    async fn end_run(&self, request: Request<pb::EndRunRequest>) -> Result<Response<pb::EndRunResponse>, Status> {
        only_the_supervisor(&request)?;
        self.state.ensure_retrier();
        let run = request.into_inner().run_id;
        let live: Vec<Lease> = self
            .state
            .store()?
            .of_run(&run)
            .map_err(internal)?
            .into_iter()
            .filter(|l| l.revoked_at.is_none())
            .collect();
        Ok(Response::new(pb::EndRunResponse { revocations: self.state.revoke(live).await? }))
    }

    async fn sync_runs(&self, request: Request<pb::SyncRunsRequest>) -> Result<Response<pb::SyncRunsResponse>, Status> {
        only_the_supervisor(&request)?;
        self.state.ensure_retrier();
        let live = request.into_inner().live_run_ids;
        let orphans = self.state.store()?.orphaned(&live).map_err(internal)?;
        Ok(Response::new(pb::SyncRunsResponse { revocations: self.state.revoke(orphans).await? }))
    }

    async fn list_leases(
        &self,
        request: Request<pb::ListLeasesRequest>,
    ) -> Result<Response<pb::ListLeasesResponse>, Status> {
        only_the_supervisor(&request)?;
        let run = request.into_inner().run_id;
        let leases = self.state.store()?.of_run(&run).map_err(internal)?;
        Ok(Response::new(pb::ListLeasesResponse { leases: leases.into_iter().map(lease_message).collect() }))
    }

    async fn get_read_token(
        &self,
        request: Request<pb::GetReadTokenRequest>,
    ) -> Result<Response<pb::GetReadTokenResponse>, Status> {
        require_peer(&request, &["gateway", "supervisor"])?;
        let (lease, secret) = self.state.read_lease(&request.into_inner().run_id)?;
        Ok(Response::new(pb::GetReadTokenResponse {
            token: secret.expose().to_owned(),
            lease_id: lease.id,
            expire_time: lease.expires_at.map(stamp),
        }))
    }

    async fn get_model_placeholder(
        &self,
        request: Request<pb::GetModelPlaceholderRequest>,
    ) -> Result<Response<pb::GetModelPlaceholderResponse>, Status> {
        require_peer(&request, &["gateway", "supervisor"])?;
        let run = request.into_inner().run_id;
        let placeholder = self.state.placeholder(&run)?;
        Ok(Response::new(pb::GetModelPlaceholderResponse { placeholder: placeholder.expose().to_owned() }))
    }

    async fn exchange_model_placeholder(
        &self,
        request: Request<pb::ExchangeModelPlaceholderRequest>,
    ) -> Result<Response<pb::ExchangeModelPlaceholderResponse>, Status> {
        require_peer(&request, &["gateway"])?;
        let r = request.into_inner();
        if !self.state.is_placeholder_of(&r.run_id, &r.placeholder)? {
            return Err(Status::permission_denied(format!(
                "the key presented is not run {}'s live model placeholder",
                r.run_id
            )));
        }
        let state = self.state.clone();
        let provider = r.provider.clone();
        let key = tokio::task::spawn_blocking(move || state.model_keys.read(&provider))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| no_model_key(e.to_string(), &r.run_id))?;
        Ok(Response::new(pb::ExchangeModelPlaceholderResponse { api_key: key.expose().to_owned() }))
    }

    async fn issue_write_token(
        &self,
        request: Request<pb::IssueWriteTokenRequest>,
    ) -> Result<Response<pb::IssueWriteTokenResponse>, Status> {
        // Pushes are the gateway's, tracker writes the supervisor's: neither may ask for
        // the other's kind of token.
        let issues = request.get_ref().access == pb::WriteAccess::Issues as i32;
        require_peer(&request, if issues { &["supervisor"] } else { &["gateway"] })?;
        self.state.ensure_retrier();
        let r = request.into_inner();
        let (read, _) = self.state.read_lease(&r.run_id)?;
        let repository = r.repository.to_ascii_lowercase();
        if !read.repositories.iter().any(|known| known.eq_ignore_ascii_case(&repository)) {
            return Err(Status::permission_denied(format!(
                "{repository} is not a repository of run {} (it has {})",
                r.run_id,
                read.repositories.join(", ")
            )));
        }
        let Some(provider) = &self.state.provider else {
            return Err(Status::failed_precondition("no credential provider is configured"));
        };
        // Never past the read token's own expiry, which is capped at the run's deadline.
        let scope = if issues { Scope::issues(repository) } else { Scope::write(repository) };
        let issued = provider
            .issue(&scope, read.expires_at)
            .await
            .map_err(|e| Status::failed_precondition(format!("cannot issue a write token: {e}")))?;
        let lease = NewLease {
            run: r.run_id.clone(),
            provider: provider.name().to_owned(),
            kind: Kind::Write,
            repositories: scope.repositories,
            permissions: scope.permissions,
            issued_at: SystemTime::now(),
            expires_at: issued.expires_at,
        };
        let lease_id = self.state.store()?.insert(&lease, &issued.secret).map_err(internal)?;
        let what = if issues { "one tracker write" } else { "one push" };
        tracing::info!(run = %r.run_id, lease = lease_id, what, "issued a write token");
        Ok(Response::new(pb::IssueWriteTokenResponse {
            token: issued.secret.expose().to_owned(),
            lease_id,
            expire_time: issued.expires_at.map(stamp),
        }))
    }

    async fn revoke_write_token(
        &self,
        request: Request<pb::RevokeWriteTokenRequest>,
    ) -> Result<Response<pb::RevokeWriteTokenResponse>, Status> {
        require_peer(&request, &["gateway", "supervisor"])?;
        self.state.ensure_retrier();
        let r = request.into_inner();
        let lease = self
            .state
            .store()?
            .of_run(&r.run_id)
            .map_err(internal)?
            .into_iter()
            .find(|l| l.id == r.lease_id && l.kind == Kind::Write)
            .ok_or_else(|| Status::not_found(format!("run {} has no write lease {}", r.run_id, r.lease_id)))?;
        if lease.revoked_at.is_some() {
            let done = pb::Revocation {
                lease_id: lease.id,
                run_id: r.run_id,
                outcome: pb::RevocationOutcome::Revoked as i32,
                ..Default::default()
            };
            return Ok(Response::new(pb::RevokeWriteTokenResponse { revocation: Some(done) }));
        }
        let revocation = self.state.revoke(vec![lease]).await?.into_iter().next();
        Ok(Response::new(pb::RevokeWriteTokenResponse { revocation }))
    }
}

//! A run's model door, as the supervisor sets it up and keeps its books. The door is
//! the gateway's (`model.sock` in the run's gateway directory, bridged into its
//! envelopes as `127.0.0.1:41420`); its providers are `[models.NAME]`, read once at
//! the run's start. The agent is pointed at `http://127.0.0.1:41420/NAME` and holds
//! only the run's placeholder, which the broker mints and the door alone accepts.
//!
//! Each request the door forwards is reported here: a `model_usage` event with its
//! metadata (never its content), the run's tokens per model in `state.db`, and the
//! run's and its workspace's budgets, whose refusal goes back to the door.

use std::path::Path;

use cc_config::{ModelApi, ModelsConfig};
use cc_proto::broker::v1 as bk;
use cc_proto::gateway::v1 as gw;
use cc_proto::supervisor::v1 as sv;
use cc_store::model_usage::ModelTokens;
use serde_json::json;

use super::{LiveRun, RunError, RunManager};
use crate::helpers::HelperKind;
use crate::ids::RunId;

/// Where the model door is bridged inside the run's envelopes: `127.0.0.1:41420`.
pub const MODEL_PORT: u16 = 41420;
/// The door's socket in the run's gateway directory.
pub const MODEL_SOCKET: &str = "model.sock";

/// The door's URL for provider `name`, at `port` on the envelope's (or, for a run
/// without one, the host's) loopback.
pub fn door_url(port: u16, name: &str) -> String {
    format!("http://127.0.0.1:{port}/{name}")
}

/// The providers as the gateway takes them, each `ca_file` read now (relative to the
/// data directory).
pub fn gateway_models(models: &ModelsConfig, data_root: &Path) -> Result<Vec<gw::ModelProvider>, String> {
    models
        .iter()
        .map(|(name, provider)| {
            let ca_pem = match &provider.ca_file {
                Some(file) => {
                    let path = data_root.join(file);
                    std::fs::read(&path)
                        .map_err(|e| format!("[models.{name}] ca_file {} cannot be read: {e}", path.display()))?
                }
                None => Vec::new(),
            };
            let api = match provider.api {
                ModelApi::Anthropic => gw::ModelApi::Anthropic,
                ModelApi::Openai => gw::ModelApi::Openai,
            };
            Ok(gw::ModelProvider { name: name.clone(), api: api as i32, base_url: provider.base_url.clone(), ca_pem })
        })
        .collect()
}

/// The variables that point an ACP agent at the door: each provider's base URL and
/// key variables, the key being the run's placeholder.
pub fn agent_env(models: &ModelsConfig, port: u16, placeholder: &str) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for (name, provider) in models {
        let (url_var, key_var) = provider.env_names();
        env.push((url_var.to_owned(), door_url(port, name)));
        env.push((key_var.to_owned(), placeholder.to_owned()));
    }
    env
}

/// Today, UTC, as the usage rows name days.
fn today() -> String {
    let days = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() / 86_400);
    civil_date(days as i64)
}

/// `YYYY-MM-DD` of a day counted from 1970-01-01 (Howard Hinnant's civil_from_days).
fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

impl RunManager {
    /// The run's placeholder, from the broker (minted on the first ask).
    pub(super) async fn model_placeholder(&self, run_id: &str) -> Result<String, RunError> {
        let channels = &self.env.channels;
        let mut broker = channels.broker().await?;
        let call = broker.get_model_placeholder(bk::GetModelPlaceholderRequest { run_id: run_id.to_owned() });
        Ok(channels.within(HelperKind::Broker, "GetModelPlaceholder", call).await?.into_inner().placeholder)
    }

    /// The run's tokens per model, for GetRun.
    pub fn model_usage(&self, run_id: &str) -> Vec<sv::ModelUsage> {
        let rows = self.env.store.model_usage(run_id).unwrap_or_else(|e| {
            tracing::warn!(run = run_id, error = %e, "cannot read the run's model usage");
            Vec::new()
        });
        rows.into_iter()
            .map(|r| sv::ModelUsage {
                provider: r.provider,
                model: r.model,
                requests: r.requests,
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                cache_creation_input_tokens: r.cache_creation_input_tokens,
                cache_read_input_tokens: r.cache_read_input_tokens,
            })
            .collect()
    }

    /// Tokens the run has used so far, over every model.
    pub(super) fn model_tokens_used(&self, run_id: &str) -> u64 {
        let rows = self.env.store.model_usage(run_id).unwrap_or_default();
        rows.iter().fold(0u64, |sum, r| sum.saturating_add(r.total()))
    }

    /// One request through a run's door: recorded, counted, and checked against the
    /// run's budget and its workspace's for today. The answer is the refusal the door
    /// gives the run's next requests, or empty.
    pub async fn record_model_usage(&self, r: sv::RecordModelUsageRequest) -> Result<String, RunError> {
        let run_id = RunId::from_wire(r.run_id.as_str());
        let Some(live) = self.lock().get(&run_id).cloned() else {
            // A run that ended meanwhile: nothing of it can ask again.
            return Ok(String::new());
        };
        let cut = |s: &str, most: usize| s.chars().filter(|c| !c.is_control()).take(most).collect::<String>();
        let tokens = ModelTokens {
            provider: cut(&r.provider, 64),
            model: if r.model.is_empty() { "(unnamed)".to_owned() } else { cut(&r.model, 128) },
            requests: 1,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            cache_creation_input_tokens: r.cache_creation_input_tokens,
            cache_read_input_tokens: r.cache_read_input_tokens,
        };
        let subject = format!("run:{}", live.record.id);
        self.env.events.record(
            "model_usage",
            &subject,
            json!({
                "provider": tokens.provider,
                "model": tokens.model,
                "status": r.status,
                "streamed": r.streamed,
                "input_tokens": tokens.input_tokens,
                "output_tokens": tokens.output_tokens,
                "cache_creation_input_tokens": tokens.cache_creation_input_tokens,
                "cache_read_input_tokens": tokens.cache_read_input_tokens,
                "first_byte_ms": r.first_byte_ms,
                "duration_ms": r.duration_ms,
                "refused": cut(&r.refused, 512),
            }),
        );
        let (store, workspace, day) = (self.env.store.clone(), live.record.workspace.clone(), today());
        let id = live.record.id.clone();
        let counted = tokio::task::spawn_blocking(move || {
            if tokens.total() > 0 || r.refused.is_empty() {
                store.add_model_usage(&id, &workspace, &day, &tokens)?;
            }
            store.workspace_model_tokens(&workspace, &day)
        })
        .await
        .map_err(|e| RunError::Internal(e.to_string()))?
        .map_err(|e| RunError::Internal(format!("cannot count the run's model tokens: {e}")))?;
        let used = self.model_tokens_used(&live.record.id);
        let refusal = self.budget_refusal(&live, used, counted);
        if let Some(why) = &refusal
            && live.set_model_refusal(why)
        {
            self.env.events.record(
                "model_budget_reached",
                &subject,
                json!({ "reason": why, "run_tokens": used, "workspace_tokens_today": counted }),
            );
        }
        Ok(refusal.unwrap_or_default())
    }

    /// Why the run may make no more model requests, if it may not. The run's own
    /// budget the door also holds it to by itself, with the count it keeps; the
    /// workspace's only the supervisor can count.
    fn budget_refusal(&self, live: &LiveRun, used: u64, workspace_today: u64) -> Option<String> {
        if live.model_budget_tokens > 0 && used >= live.model_budget_tokens {
            return Some(format!(
                "the run's model budget of {} tokens is spent ({used} used)",
                live.model_budget_tokens
            ));
        }
        let daily = self.config().workspace_model_budget_tokens_per_day;
        (daily > 0 && workspace_today >= daily).then(|| {
            format!(
                "workspace {}'s model budget of {daily} tokens a day is spent ({workspace_today} used today, UTC); \
                 it starts again at midnight UTC, or a person can raise \
                 [runs] workspace_model_budget_tokens_per_day",
                live.record.workspace
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_civil_dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(20_429), "2025-12-07");
        assert_eq!(civil_date(11_016), "2000-02-29");
        assert_eq!(civil_date(-1), "1969-12-31");
    }

    #[test]
    fn an_acp_agent_is_pointed_at_the_door_with_the_placeholder_only() {
        let models = ModelsConfig::from([(
            "local".to_owned(),
            cc_config::ModelProvider {
                api: ModelApi::Openai,
                base_url: "http://127.0.0.1:9/v1".into(),
                key_file: "local.key".into(),
                ca_file: None,
                base_url_env: None,
                api_key_env: None,
            },
        )]);
        let env = agent_env(&models, MODEL_PORT, "cc-placeholder-x");
        assert_eq!(
            env,
            [
                ("OPENAI_BASE_URL".to_owned(), "http://127.0.0.1:41420/local".to_owned()),
                ("OPENAI_API_KEY".to_owned(), "cc-placeholder-x".to_owned())
            ]
        );
    }
}

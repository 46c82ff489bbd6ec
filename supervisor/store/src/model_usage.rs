//! What runs' model requests cost, as their model doors read it from the providers'
//! answers: one row per run, provider, model and UTC day, so that a run's tokens per
//! model and a workspace's tokens today are each one query. Rows per run are bounded
//! by the models it names; a door names the model from the provider's answer, cut to
//! 128 characters, and past [`MODELS_PER_RUN`] a run's other models are summed under
//! [`OTHER_MODELS`].

use rusqlite::params;

use crate::store::{Store, StoreError};

pub const MODELS_PER_RUN: i64 = 32;
pub const OTHER_MODELS: &str = "(other models)";

/// Tokens one run used with one model, or one request's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelTokens {
    pub provider: String,
    pub model: String,
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

impl ModelTokens {
    /// Every token the provider bills: what a budget counts.
    pub fn total(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_creation_input_tokens)
            .saturating_add(self.cache_read_input_tokens)
    }
}

impl Store {
    /// Adds one request's tokens to its run's row for `day` (`YYYY-MM-DD`, UTC).
    pub fn add_model_usage(&self, run: &str, workspace: &str, day: &str, add: &ModelTokens) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        let known: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM model_usage WHERE run = ?1 AND provider = ?2 AND model = ?3)",
            params![run, add.provider, add.model],
            |r| r.get(0),
        )?;
        let models: i64 = tx.query_row(
            "SELECT COUNT(DISTINCT provider || '/' || model) FROM model_usage WHERE run = ?1",
            [run],
            |r| r.get(0),
        )?;
        let model = if known || models < MODELS_PER_RUN { add.model.as_str() } else { OTHER_MODELS };
        tx.execute(
            "INSERT INTO model_usage (run, workspace, provider, model, day, requests, input_tokens, output_tokens,
                                      cache_creation_input_tokens, cache_read_input_tokens)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
             ON CONFLICT (run, provider, model, day) DO UPDATE SET
                requests = requests + excluded.requests,
                input_tokens = input_tokens + excluded.input_tokens,
                output_tokens = output_tokens + excluded.output_tokens,
                cache_creation_input_tokens = cache_creation_input_tokens + excluded.cache_creation_input_tokens,
                cache_read_input_tokens = cache_read_input_tokens + excluded.cache_read_input_tokens",
            params![
                run,
                workspace,
                add.provider,
                model,
                day,
                clamp(add.requests),
                clamp(add.input_tokens),
                clamp(add.output_tokens),
                clamp(add.cache_creation_input_tokens),
                clamp(add.cache_read_input_tokens)
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// The run's tokens per model, over every day, the most first.
    pub fn model_usage(&self, run: &str) -> Result<Vec<ModelTokens>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT provider, model, SUM(requests), SUM(input_tokens), SUM(output_tokens),
                    SUM(cache_creation_input_tokens), SUM(cache_read_input_tokens)
             FROM model_usage WHERE run = ?1 GROUP BY provider, model
             ORDER BY SUM(input_tokens + output_tokens + cache_creation_input_tokens + cache_read_input_tokens) DESC,
                      provider, model",
        )?;
        let rows = stmt.query_map([run], |r| {
            let n = |i: usize| r.get::<_, i64>(i).map(|v| u64::try_from(v).unwrap_or(0));
            Ok(ModelTokens {
                provider: r.get(0)?,
                model: r.get(1)?,
                requests: n(2)?,
                input_tokens: n(3)?,
                output_tokens: n(4)?,
                cache_creation_input_tokens: n(5)?,
                cache_read_input_tokens: n(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every token the workspace's runs used on `day`.
    pub fn workspace_model_tokens(&self, workspace: &str, day: &str) -> Result<u64, StoreError> {
        let conn = self.conn()?;
        let total: i64 = conn.query_row(
            "SELECT COALESCE(SUM(input_tokens + output_tokens + cache_creation_input_tokens + cache_read_input_tokens), 0)
             FROM model_usage WHERE workspace = ?1 AND day = ?2",
            params![workspace, day],
            |r| r.get(0),
        )?;
        Ok(u64::try_from(total).unwrap_or(0))
    }
}

/// The most one request's count may add: a provider's word (a self-hosted one may say
/// anything) must not overflow a sum.
const MAX_PER_REQUEST: u64 = 1 << 40;

fn clamp(n: u64) -> i64 {
    n.min(MAX_PER_REQUEST) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(model: &str, input: u64, output: u64) -> ModelTokens {
        ModelTokens {
            provider: "anthropic".into(),
            model: model.into(),
            requests: 1,
            input_tokens: input,
            output_tokens: output,
            ..Default::default()
        }
    }

    #[test]
    fn usage_adds_up_per_model_and_per_workspace_day() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        store.add_model_usage("r1", "w", "2026-12-07", &tokens("claude-x", 10, 5)).unwrap();
        store.add_model_usage("r1", "w", "2026-12-07", &tokens("claude-x", 1, u64::MAX)).unwrap();
        store.add_model_usage("r1", "w", "2026-12-08", &tokens("claude-y", 2, 2)).unwrap();
        store.add_model_usage("r2", "w", "2026-12-07", &tokens("claude-x", 100, 0)).unwrap();
        store.add_model_usage("r3", "other", "2026-12-07", &tokens("claude-x", 1000, 0)).unwrap();
        let r1 = store.model_usage("r1").unwrap();
        assert_eq!(r1.len(), 2);
        assert_eq!((r1[0].model.as_str(), r1[0].requests, r1[0].input_tokens), ("claude-x", 2, 11));
        assert_eq!(store.workspace_model_tokens("w", "2026-12-08").unwrap(), 4);
        assert_eq!(store.workspace_model_tokens("nobody", "2026-12-07").unwrap(), 0);
    }

    #[test]
    fn a_run_naming_endless_models_adds_bounded_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        for i in 0..100 {
            store.add_model_usage("r1", "w", "2026-12-07", &tokens(&format!("m{i}"), 1, 1)).unwrap();
        }
        let rows = store.model_usage("r1").unwrap();
        assert_eq!(rows.len() as i64, MODELS_PER_RUN + 1);
        let other = rows.iter().find(|r| r.model == OTHER_MODELS).unwrap();
        assert_eq!(other.requests, 100 - MODELS_PER_RUN as u64);
    }
}

//! The model door's pure parts: which requests are model API calls of which provider
//! ([`route`]), the errors it answers itself in each provider's own shape
//! ([`refusal`]), and the usage its answers report ([`usage`]). The door itself, which
//! serves them, is `door::model`.

pub mod refusal;
pub mod route;
pub mod usage;

/// The wire a provider speaks (`cc.gateway.v1.ModelApi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Anthropic's Messages API: the key in `x-api-key`.
    Anthropic,
    /// OpenAI-compatible chat completions: the key in `Authorization: Bearer`.
    Openai,
}

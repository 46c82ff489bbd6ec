//! A run's model requests through its model door, as `ccctl run show` prints them:
//! tokens per model, and the run's budget.

use cc_proto::supervisor::v1 as pb;
use serde_json::json;

pub fn usage_json(r: &pb::Run) -> serde_json::Value {
    json!({
        "budget_tokens": r.model_budget_tokens,
        "per_model": r.model_usage.iter().map(|u| json!({
            "provider": u.provider, "model": u.model, "requests": u.requests,
            "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
            "cache_creation_input_tokens": u.cache_creation_input_tokens,
            "cache_read_input_tokens": u.cache_read_input_tokens,
        })).collect::<Vec<_>>(),
    })
}

fn total(u: &pb::ModelUsage) -> u64 {
    u.input_tokens
        .saturating_add(u.output_tokens)
        .saturating_add(u.cache_creation_input_tokens)
        .saturating_add(u.cache_read_input_tokens)
}

/// One line for the budget, then one per model; nothing for a run that has neither
/// (a harness run, or one whose agent has made no request).
pub fn print_usage(r: &pb::Run) {
    if r.model_usage.is_empty() && r.model_budget_tokens == 0 {
        return;
    }
    let used = r.model_usage.iter().fold(0u64, |sum, u| sum.saturating_add(total(u)));
    let budget = match r.model_budget_tokens {
        0 => "no budget".to_owned(),
        b => format!("budget {b}"),
    };
    // (A run with no request has a budget here.)
    if r.model_usage.is_empty() {
        println!("model: no request yet ({budget})");
        return;
    }
    println!("model: {used} tokens ({budget}); per model:");
    for u in &r.model_usage {
        println!(
            "  {}/{}  {} request{}  {} in  {} out  {} cache write  {} cache read",
            u.provider,
            u.model,
            u.requests,
            if u.requests == 1 { "" } else { "s" },
            u.input_tokens,
            u.output_tokens,
            u.cache_creation_input_tokens,
            u.cache_read_input_tokens
        );
    }
}

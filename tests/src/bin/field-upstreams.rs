//! The field test's upstreams (tests/field/run), run inside its container beside the
//! installed service: the tests' scripted model (`cc_tests::model_api`, the Messages
//! API's real wire format) for the real `claude` CLI, and the tests' git host
//! (`cc_tests::git_host`: real `git http-backend` over smart HTTP) serving
//! `octo/project`, which accepts one token. With `--model-key` the model accepts that
//! key only, as a provider does.
//!
//!   field-upstreams --model-script TURNS.json --git-root DIR --token TOKEN [--model-key KEY]
//!
//! TURNS.json is the model's turns: `[[{"text": "…"}, {"tool": "Bash", "input": {…}}], …]`.
//! Prints one line, `model=PORT git=URL upstream=BARE`, then serves until killed.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use cc_tests::git_host::{Access, GitHost};
use cc_tests::model_api::{Block, ModelApi, text, tool};
use serde_json::Value;

struct Args {
    model_script: PathBuf,
    git_root: PathBuf,
    token: String,
    /// The one key the model accepts, as a provider would.
    model_key: Option<String>,
}

fn parse_args() -> anyhow::Result<Args> {
    let (mut model_script, mut git_root, mut token, mut model_key) = (None, None, None, None);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--model-script" => model_script = Some(PathBuf::from(value)),
            "--git-root" => git_root = Some(PathBuf::from(value)),
            "--token" => token = Some(value),
            "--model-key" => model_key = Some(value),
            _ => bail!(
                "unknown flag {flag}; usage: field-upstreams --model-script FILE --git-root DIR --token TOKEN [--model-key KEY]"
            ),
        }
    }
    Ok(Args {
        model_script: model_script.context("--model-script is required")?,
        git_root: git_root.context("--git-root is required")?,
        token: token.context("--token is required")?,
        model_key,
    })
}

/// `[[{"text": …} | {"tool": NAME, "input": {…}}]]` as the model's turns.
fn turns(script: &Value) -> anyhow::Result<Vec<Vec<Block>>> {
    let turns = script.as_array().context("the model script is not a list of turns")?;
    turns
        .iter()
        .map(|turn| {
            let blocks = turn.as_array().context("a turn is not a list of blocks")?;
            blocks
                .iter()
                .map(|block| match (block["text"].as_str(), block["tool"].as_str()) {
                    (Some(words), None) => Ok(text(words)),
                    (None, Some(name)) => Ok(tool(name, block["input"].clone())),
                    _ => bail!("a block is neither {{\"text\"}} nor {{\"tool\", \"input\"}}: {block}"),
                })
                .collect()
        })
        .collect()
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let script = std::fs::read_to_string(&args.model_script)
        .with_context(|| format!("cannot read {}", args.model_script.display()))?;
    let script: Value = serde_json::from_str(&script).context("the model script is not JSON")?;
    let model = ModelApi::start(turns(&script)?);
    if let Some(key) = &args.model_key {
        model.require_key(key);
    }

    let token = args.token;
    let authorize =
        Arc::new(move |given: &str, repository: &str, _: Access| given == token && repository == "octo/project");
    let host = GitHost::start(&args.git_root.join("upstream"), authorize);
    let (upstream, _) = host.create("octo/project", &args.git_root.join("seed"));
    println!("model={} git={} upstream={}", model.port, host.base(), upstream.display());
    loop {
        std::thread::park();
    }
}

//! Following a provisioning stream: a progress bar on a terminal for big trees,
//! warnings on stderr, and the conversation at the end.

use std::io::IsTerminal;

use anyhow::anyhow;
use cc_proto::supervisor::v1 as pb;
use cc_proto::supervisor::v1::create_conversation_response::Update;
use indicatif::{ProgressBar, ProgressStyle};
use tokio_stream::StreamExt;

use super::render::one_line;
use super::rpc_error;

/// Trees smaller than this finish before a bar is worth drawing.
const BAR_FROM_FILES: u64 = 2_000;

pub async fn follow(mut stream: tonic::Streaming<pb::CreateConversationResponse>) -> anyhow::Result<pb::Conversation> {
    let terminal = std::io::stderr().is_terminal();
    let mut bar: Option<ProgressBar> = None;
    while let Some(update) = stream.next().await {
        match update.map_err(rpc_error)?.update {
            Some(Update::Planned(p)) => {
                if let Some(old) = bar.take() {
                    old.finish_and_clear();
                }
                if terminal && p.files >= BAR_FROM_FILES {
                    let b = ProgressBar::new(p.files);
                    b.set_style(
                        ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} files ({per_sec}, {eta})")
                            .unwrap_or_else(|_| ProgressStyle::default_bar())
                            .progress_chars("=> "),
                    );
                    b.set_message(one_line(&p.repository_name));
                    bar = Some(b);
                }
            }
            Some(Update::Progress(p)) => {
                if let Some(b) = &bar {
                    b.set_position(p.files_done);
                }
            }
            Some(Update::Warning(text)) => {
                let line = format!("ccctl: warning: {}", one_line(&text));
                match &bar {
                    Some(b) => b.println(line),
                    None => eprintln!("{line}"),
                }
            }
            Some(Update::Conversation(conversation)) => {
                if let Some(b) = bar.take() {
                    b.finish_and_clear();
                }
                return Ok(conversation);
            }
            None => {}
        }
    }
    Err(anyhow!("the supervisor ended the provisioning stream without an answer"))
}

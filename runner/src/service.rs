//! The runner's RPC edge: a call in, the tool's logic, a [`ToolResult`] or a `Status`
//! out. Confinement refusals are `PERMISSION_DENIED` with reason `CONFINEMENT_REFUSED`
//! (and a message starting `refused: `), so the supervisor tells them from a tool that
//! simply failed.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cc_proto::reasons;
use cc_proto::runner::v1::CallToolRequest;
use cc_proto::runner::v1::call_tool_request::Tool as Call;
use cc_proto::tools::v1 as pb;
use cc_proto::tools::v1::ToolResult;
use cc_proto::tools::v1::tool_result::Result as Outcome;
use tonic::{Code, Status};

use crate::confine::Roots;
use crate::files::{self, ReadOutput, ToolError};
use crate::patch::{self, Change};
use crate::search;

/// Lines `read` returns when the call says none.
pub const DEFAULT_READ_LINES: usize = 2000;
/// Results `find`, `search` and `search_files` return at most.
pub const MAX_RESULTS: usize = 1000;

/// The roots a run's runner is told in its bootstrap's `roots` option: JSON
/// `[[path, writable], …]`, the working directory first.
pub fn parse_roots(json: &str) -> Result<Vec<(PathBuf, bool)>, String> {
    let roots: Vec<(PathBuf, bool)> =
        serde_json::from_str(json).map_err(|e| format!("the bootstrap's roots are not [[path, writable], …]: {e}"))?;
    if roots.is_empty() {
        return Err("the bootstrap names no roots".into());
    }
    Ok(roots)
}

fn path(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

fn start(bytes: &[u8]) -> &Path {
    if bytes.is_empty() { Path::new(".") } else { path(bytes) }
}

fn bytes(p: &Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

/// The most text one `read` returns; a longer window ends at the last whole line.
pub const MAX_READ_BYTES: usize = 1 << 20;

fn fit_window(text: String, lines: usize, more: bool, first_line: usize) -> Result<(String, usize, bool), Status> {
    if text.len() <= MAX_READ_BYTES {
        return Ok((text, lines, more));
    }
    let cut = text.as_bytes()[..MAX_READ_BYTES].iter().rposition(|&b| b == b'\n').ok_or_else(|| {
        Status::failed_precondition(format!(
            "line {first_line} is longer than {} KiB; read it with bash (cut, head -c) in pieces",
            MAX_READ_BYTES >> 10
        ))
    })?;
    let kept = text[..=cut].to_owned();
    let kept_lines = kept.matches('\n').count();
    Ok((kept, kept_lines, true))
}

fn status(error: ToolError) -> Status {
    match error {
        ToolError::Refused(_) => {
            reasons::refusal(Code::PermissionDenied, error.to_string(), reasons::CONFINEMENT_REFUSED, &[])
        }
        ToolError::Failed(message) => Status::failed_precondition(message),
    }
}

/// Runs one call against `roots`. Blocking: off the async threads, except a read
/// (see [`Tools::call`]).
pub fn call(roots: &Roots, call: CallToolRequest) -> Result<ToolResult, Status> {
    let outcome = match call.tool {
        None => return Err(Status::invalid_argument("the call names no tool")),
        Some(Call::Read(r)) => {
            let limit = if r.limit == 0 { DEFAULT_READ_LINES } else { usize::try_from(r.limit).unwrap_or(usize::MAX) };
            let offset = usize::try_from(r.offset).unwrap_or(usize::MAX);
            match files::read(roots, path(&r.path), offset, limit).map_err(status)? {
                ReadOutput::Text { text, first_line, lines, more } => {
                    let (text, lines, more) = fit_window(text, lines, more, first_line)?;
                    Outcome::Read(pb::ReadResult {
                        bytes: text.len() as u64,
                        text,
                        first_line: first_line as u64,
                        lines: lines as u64,
                        more,
                        binary: false,
                    })
                }
                ReadOutput::Binary { bytes } => {
                    Outcome::Read(pb::ReadResult { binary: true, bytes: bytes as u64, ..Default::default() })
                }
            }
        }
        Some(Call::Write(w)) => {
            files::write(roots, path(&w.path), &w.content).map_err(status)?;
            Outcome::Write(pb::WriteResult { bytes: w.content.len() as u64 })
        }
        Some(Call::Edit(e)) => {
            files::edit(roots, path(&e.path), &e.old, &e.new).map_err(status)?;
            Outcome::Edit(pb::EditResult {})
        }
        Some(Call::ApplyPatch(p)) => {
            let changes = patch::apply_patch(roots, &p.patch).map_err(status)?;
            let changes = changes
                .into_iter()
                .map(|c| {
                    let (path, change) = match c {
                        Change::Created(p) => (p, "created"),
                        Change::Modified(p) => (p, "modified"),
                        Change::Deleted(p) => (p, "deleted"),
                    };
                    pb::FileChange { path: bytes(&path), change: change.into() }
                })
                .collect();
            Outcome::Patch(pb::PatchResult { changes })
        }
        Some(Call::Search(s)) => {
            let found = search::search(roots, start(&s.path), &s.pattern, MAX_RESULTS).map_err(status)?;
            let hits = found
                .items
                .into_iter()
                .map(|h| pb::SearchHit { path: bytes(&h.path), line: h.line, text: h.text })
                .collect();
            Outcome::Search(pb::SearchResult { hits, truncated: found.truncated })
        }
        Some(Call::Find(f)) => {
            let found = search::find(roots, start(&f.path), &f.glob, MAX_RESULTS).map_err(status)?;
            Outcome::Paths(pb::PathList {
                paths: found.items.iter().map(|p| bytes(p)).collect(),
                truncated: found.truncated,
            })
        }
        Some(Call::SearchFiles(f)) => {
            let found = search::search_files(roots, start(&f.path), &f.query, MAX_RESULTS).map_err(status)?;
            Outcome::Paths(pb::PathList {
                paths: found.items.iter().map(|p| bytes(p)).collect(),
                truncated: found.truncated,
            })
        }
        Some(Call::WebFetch(_)) => return Err(Status::internal("web_fetch is not a file tool")),
    };
    Ok(ToolResult { result: Some(outcome) })
}

/// The service state: the run's roots, opened once at start, and its egress proxy's
/// socket when its network is on.
#[derive(Clone)]
pub struct Tools {
    roots: Arc<Roots>,
    egress_proxy: Option<Arc<Path>>,
}

impl Tools {
    pub fn new(roots: Roots, egress_proxy: Option<PathBuf>) -> Self {
        Self { roots: Arc::new(roots), egress_proxy: egress_proxy.map(Arc::from) }
    }

    pub async fn call(&self, request: CallToolRequest) -> Result<ToolResult, Status> {
        if let Some(Call::WebFetch(args)) = &request.tool {
            let Some(proxy) = &self.egress_proxy else {
                return Err(Status::failed_precondition("this run's network is off: it has no web_fetch"));
            };
            let fetched = crate::fetch::fetch(proxy, args).await?;
            return Ok(ToolResult { result: Some(Outcome::WebFetch(fetched)) });
        }
        // A read is one bounded open and read of a regular file (at most MAX_FILE_BYTES,
        // never a FIFO or device): done in place, it saves the hand-off to the blocking
        // pool, which was a third of a 4 KiB read's round trip. Writes sync to disk and
        // walks are unbounded, so they go to the pool.
        if matches!(request.tool, Some(Call::Read(_))) {
            return call(&self.roots, request);
        }
        let roots = self.roots.clone();
        tokio::task::spawn_blocking(move || call(&roots, request))
            .await
            .map_err(|e| Status::internal(format!("the tool's worker failed: {e}")))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::confine::work_roots;

    fn read(p: &str) -> CallToolRequest {
        CallToolRequest { tool: Some(Call::Read(pb::ReadArgs { path: p.as_bytes().to_vec(), offset: 0, limit: 0 })) }
    }

    #[test]
    fn refusals_are_permission_denied_and_failures_are_not() {
        let (_t, work, roots) = work_roots();
        std::fs::write(work.join("f"), "hello\n").unwrap();
        let ok = call(&roots, read("f")).unwrap();
        let Some(Outcome::Read(r)) = ok.result else { panic!("{ok:?}") };
        assert_eq!(r.text, "hello\n");
        let refused = call(&roots, read("/etc/passwd")).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert!(refused.message().starts_with("refused: "), "{}", refused.message());
        assert_eq!(reasons::reason_of(&refused).unwrap().0, reasons::CONFINEMENT_REFUSED);
        let missing = call(&roots, read("missing")).unwrap_err();
        assert_eq!(missing.code(), tonic::Code::FailedPrecondition, "{}", missing.message());
        assert_eq!(call(&roots, CallToolRequest { tool: None }).unwrap_err().code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn roots_option_parses_or_says_why() {
        assert_eq!(parse_roots(r#"[["/a", true], ["/b", false]]"#).unwrap().len(), 2);
        assert!(parse_roots("[]").is_err());
        assert!(parse_roots("nope").is_err());
    }
}

//! What ccctl prints: text for people, JSON for machines.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cc_proto::common::v1::Event;
use cc_proto::supervisor::v1 as pb;
use serde_json::{Value, json};

use crate::install::Unit;

/// One line, with control and bidi characters escaped rather than printed (nothing a
/// peer sent can rewrite the terminal) and rather than dropped (a path with a newline
/// in it keeps the rest of its message).
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.trim_end().chars() {
        if c.is_control() || is_bidi(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Text as text, for a person reading an agent's steps: its lines kept (tabs too),
/// each line after the first indented by `indent`; every other control and bidi
/// character escaped, as [`one_line`] does.
pub fn text_block(text: &str, indent: &str) -> String {
    let lines: Vec<String> = text
        .trim_end()
        .split('\n')
        .map(|line| line.split('\t').map(|part| one_line(part.trim_end_matches('\r'))).collect::<Vec<_>>().join("\t"))
        .collect();
    lines.join(&format!("\n{indent}"))
}

/// One of an agent's steps as `ccctl run events` lists it: one line, escaped as
/// [`one_line`] (the text is the model's and the tool results are whatever the
/// commands printed).
pub fn agent_event(kind: &str, payload: &Value) -> String {
    describe_step(kind, payload, |text, _| one_line(text))
}

/// One of an agent's steps as `ccctl run prompt` prints it: text as text
/// ([`text_block`]), a tool result's later lines under its first.
pub fn agent_step(kind: &str, payload: &Value) -> String {
    describe_step(kind, payload, text_block)
}

fn describe_step(kind: &str, payload: &Value, show: impl Fn(&str, &str) -> String) -> String {
    let text = |field: &str, indent: &str| show(payload.get(field).and_then(Value::as_str).unwrap_or_default(), indent);
    match kind {
        "agent_init" => format!(
            "session {}  model {}  {} tools  permission mode {}",
            one_line(payload.get("session_id").and_then(Value::as_str).unwrap_or_default()),
            one_line(payload.get("model").and_then(Value::as_str).unwrap_or_default()),
            payload.get("tools").and_then(Value::as_array).map_or(0, Vec::len),
            one_line(payload.get("permission_mode").and_then(Value::as_str).unwrap_or_default())
        ),
        "agent_text" => text("text", ""),
        "agent_tool_use" => format!("-> {} {}", text("name", "   "), text("input", "   ")),
        "agent_tool_result" if payload.get("is_error").and_then(Value::as_bool) == Some(true) => {
            format!("<- error: {}", text("content", "   "))
        }
        "agent_tool_result" => format!("<- {}", text("content", "   ")),
        "agent_result" => format!(
            "{}: {} turns  ${:.4}  {}",
            text("subtype", ""),
            payload.get("num_turns").and_then(Value::as_u64).unwrap_or(0),
            payload.get("total_cost_usd").and_then(Value::as_f64).unwrap_or(0.0),
            text("result", "  ")
        ),
        other => format!("{} {}", one_line(other), one_line(&payload.to_string())),
    }
}

/// `ccctl config reload`: what was read, what applies now, what waits for a restart,
/// and what live runs keep.
pub fn reloaded(r: &pb::ReloadConfigResponse, json: bool) {
    if json {
        print_json(&json!({
            "config_file": r.config_file,
            "rules_files": r.rules_files,
            "applied": r.applied,
            "restart_required": r.restart_required,
            "fixed_for_live_runs": r.fixed_for_live_runs,
            "live_runs": r.live_runs,
            "elapsed_ms": r.elapsed_ms,
        }));
        return;
    }
    let file =
        if r.config_file.is_empty() { "no config.toml (the defaults)".to_owned() } else { one_line(&r.config_file) };
    let rules = match r.rules_files.len() {
        1 => "1 rules file".to_owned(),
        n => format!("{n} rules files"),
    };
    let mut out =
        format!("reloaded {file} and {rules} in {} ms; {} live runs kept running\n", r.elapsed_ms, r.live_runs);
    let list = |items: &[String]| {
        if items.is_empty() {
            "nothing".to_owned()
        } else {
            items.iter().map(|i| one_line(i)).collect::<Vec<_>>().join(", ")
        }
    };
    out.push_str(&format!("applied now: {}\n", list(&r.applied)));
    if !r.restart_required.is_empty() {
        out.push_str(&format!("changed, applied at the next start: {}\n", list(&r.restart_required)));
    }
    out.push_str("each live run keeps from its start:\n");
    for item in &r.fixed_for_live_runs {
        out.push_str(&format!("  {}\n", one_line(item)));
    }
    print(&out);
}

/// `ccctl adapters`: the matrix as a table, then each cell's words and its proof.
pub fn adapters(m: &pb::ListAdaptersResponse, json: bool) {
    let word = |c: i32| match pb::Coverage::try_from(c) {
        Ok(pb::Coverage::Yes) => "yes",
        Ok(pb::Coverage::Partial) => "partial",
        Ok(pb::Coverage::No) => "no",
        _ => "?",
    };
    let backend = if m.backend == cc_proto::common::v1::SandboxBackend::Native as i32 { "native" } else { "none" };
    if json {
        let adapters: Vec<Value> = m
            .adapters
            .iter()
            .map(|a| {
                let layers: Vec<Value> = a
                    .layers
                    .iter()
                    .map(|l| json!({ "layer": l.layer, "coverage": word(l.coverage), "detail": l.detail, "proof": l.proof }))
                    .collect();
                json!({ "adapter": super::words::adapter_name(a.adapter), "description": a.description, "layers": layers })
            })
            .collect();
        print_json(&json!({ "backend": backend, "detail": m.detail, "adapters": adapters }));
        return;
    }
    let mut out = format!("sandbox backend={backend} ({})\n\n{:<30}", one_line(&m.detail), "layer");
    for a in &m.adapters {
        out.push_str(&format!("{:<24}", super::words::adapter_name(a.adapter)));
    }
    out.push('\n');
    let layers: Vec<&str> =
        m.adapters.first().map(|a| a.layers.iter().map(|l| l.layer.as_str()).collect()).unwrap_or_default();
    for (i, layer) in layers.iter().enumerate() {
        out.push_str(&format!("{layer:<30}"));
        for a in &m.adapters {
            out.push_str(&format!("{:<24}", a.layers.get(i).map_or("?", |l| word(l.coverage))));
        }
        out.push('\n');
    }
    for a in &m.adapters {
        out.push_str(&format!("\n{}: {}\n", super::words::adapter_name(a.adapter), a.description));
        for l in &a.layers {
            out.push_str(&format!(
                "  {:<28} {:<8} {}\n  {:<28} proof: {}\n",
                l.layer,
                word(l.coverage),
                l.detail,
                "",
                l.proof
            ));
        }
    }
    print(&out);
}

fn is_bidi(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn print_json(value: &Value) {
    print(&format!("{value}\n"));
}

/// A time in `--json` output: RFC 3339 in UTC, to the millisecond, as every command
/// gives times (docs/reference/cli.md); null where there is none (a run not ended).
pub fn json_time(timestamp: Option<&cc_proto::Timestamp>) -> Value {
    match timestamp {
        Some(t) if cc_proto::time::unix_ms(Some(t)) > 0 => Value::from(time(Some(t))),
        _ => Value::Null,
    }
}

pub fn time(timestamp: Option<&cc_proto::Timestamp>) -> String {
    let ms = cc_proto::time::unix_ms(timestamp);
    let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

fn state_name(state: i32) -> &'static str {
    match pb::HelperState::try_from(state) {
        Ok(pb::HelperState::Starting) => "starting",
        Ok(pb::HelperState::Running) => "running",
        Ok(pb::HelperState::Backoff) => "backoff",
        Ok(pb::HelperState::Failed) => "failed",
        Ok(pb::HelperState::Stopped) => "stopped",
        _ => "unknown",
    }
}

fn exit_text(exit: Option<&pb::ExitStatus>) -> String {
    match exit {
        None => "-".into(),
        Some(e) => {
            let how = match (e.code, e.signal) {
                (Some(code), _) => format!("code {code}"),
                (None, Some(signal)) => format!("signal {signal}"),
                (None, None) => "did not start".into(),
            };
            match e.killed_because.as_str() {
                "" => how,
                why => format!("{how} ({why})"),
            }
        }
    }
}

fn exit_json(exit: Option<&pb::ExitStatus>) -> Value {
    exit.map_or(Value::Null, |e| {
        json!({
            "code": e.code,
            "signal": e.signal,
            "time": time(e.exit_time.as_ref()),
            "killed_because": (!e.killed_because.is_empty()).then_some(&e.killed_because),
        })
    })
}

fn helper_json(h: &pb::Helper, live: bool) -> Value {
    let mut v = json!({
        "name": h.name,
        "pid": (h.pid != 0).then_some(h.pid),
        "state": state_name(h.state),
        "restarts": h.restarts,
        "last_exit": exit_json(h.last_exit.as_ref()),
        "socket": h.socket,
    });
    if live {
        v["serving"] = h.serving.into();
        v["problem"] = (!h.problem.is_empty()).then(|| h.problem.clone()).into();
        if let Some(r) = &h.reported {
            let hardening = r.hardening.clone().unwrap_or_default();
            v["reported"] = json!({
                "version": r.version,
                "pid": r.pid,
                "dumpable": hardening.dumpable,
                "no_new_privs": hardening.no_new_privs,
                "cap_effective": hardening.cap_effective,
            });
        }
    }
    v
}

fn helper_table(helpers: &[pb::Helper], live: bool) -> String {
    let mut out = String::new();
    let serving_col = if live { "  SERVING" } else { "" };
    out.push_str(&format!(
        "{:<10}{:<10}{:<9}{:<10}{:<16}{serving_col}\n",
        "HELPER", "STATE", "PID", "RESTARTS", "LAST EXIT"
    ));
    for h in helpers {
        let pid = if h.pid == 0 { "-".to_owned() } else { h.pid.to_string() };
        out.push_str(&format!(
            "{:<10}{:<10}{:<9}{:<10}{:<16}",
            h.name,
            state_name(h.state),
            pid,
            h.restarts,
            exit_text(h.last_exit.as_ref())
        ));
        if live {
            let serving = if h.serving {
                "yes".to_owned()
            } else if h.problem.is_empty() {
                "no".to_owned()
            } else {
                format!("no ({})", one_line(&h.problem))
            };
            out.push_str(&format!("  {serving}"));
        }
        out.push('\n');
    }
    out
}

pub fn status(s: &pb::GetStatusResponse, json: bool) {
    if json {
        return print_json(&json!({
            "version": s.version,
            "pid": s.pid,
            "data_dir": s.data_dir,
            "sandbox": s.backend_line,
            "limits": s.limits_line,
            "backend": super::words::sandbox_backend_name(s.backend),
            "started": time(s.start_time.as_ref()),
            "helpers": s.helpers.iter().map(|h| helper_json(h, true)).collect::<Vec<_>>(),
        }));
    }
    let up = SystemTime::now()
        .duration_since(
            UNIX_EPOCH + Duration::from_millis(cc_proto::time::unix_ms(s.start_time.as_ref()).max(0) as u64),
        )
        .map(|d| humantime::format_duration(Duration::from_secs(d.as_secs())).to_string())
        .unwrap_or_else(|_| "0s".into());
    print(&format!(
        "cc-supervisor {} (pid {}), up {up}\ndata dir: {}\n{}\n{}\n\n{}",
        s.version,
        s.pid,
        s.data_dir,
        s.backend_line,
        s.limits_line,
        helper_table(&s.helpers, true)
    ));
}

pub fn helpers(helpers: &[pb::Helper], json: bool) {
    if json {
        return print_json(&Value::Array(helpers.iter().map(|h| helper_json(h, false)).collect()));
    }
    print(&helper_table(helpers, false));
}

pub fn restarted(r: &pb::RestartHelperResponse, json: bool) {
    let Some(h) = &r.helper else { return };
    if json {
        let mut v = helper_json(h, false);
        v["previous_pid"] = (r.previous_pid != 0).then_some(r.previous_pid).into();
        return print_json(&v);
    }
    let previous = if r.previous_pid == 0 { "not running".to_owned() } else { format!("pid {}", r.previous_pid) };
    print(&format!("restarted {}: {previous} → pid {}\n", h.name, h.pid));
}

pub fn event(e: &Event, json: bool) {
    let payload: Value = serde_json::from_str(&e.payload_json).unwrap_or(Value::Null);
    if json {
        return print_json(&json!({
            "id": e.id,
            "time": time(e.create_time.as_ref()),
            "kind": e.kind,
            "subject": e.subject,
            "payload": payload,
        }));
    }
    print(&format!(
        "{:>6}  {}  {:<18} {:<16} {}\n",
        e.id,
        time(e.create_time.as_ref()),
        one_line(&e.kind),
        one_line(&e.subject),
        payload
    ));
}

/// One of a run's events: an agent's step as `ccctl run prompt` shows it, anything
/// else as `ccctl events` does.
pub fn run_event(e: &Event, json: bool) {
    if json || !e.kind.starts_with("agent_") || e.kind == "agent_exited" {
        return event(e, json);
    }
    let payload: Value = serde_json::from_str(&e.payload_json).unwrap_or(Value::Null);
    print(&format!("{:>6}  {}  {}\n", e.id, time(e.create_time.as_ref()), agent_event(&e.kind, &payload)));
}

pub fn installed(unit: &Unit, dry_run: bool, json: bool) {
    if json {
        return print_json(&json!({
            "path": unit.path,
            "written": !dry_run,
            "next": unit.next_step,
            "contents": if dry_run { Some(&unit.contents) } else { None },
        }));
    }
    if dry_run {
        print(&format!("# would write {}\n{}", unit.path.display(), unit.contents));
    } else {
        print(&format!("wrote {}\nnext: {}\n", unit.path.display(), unit.next_step));
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn workspaces(list: &[pb::Workspace], json: bool) {
    if json {
        let items: Vec<Value> = list
            .iter()
            .map(|w| {
                json!({
                    "name": w.workspace_id,
                    "created": time(w.create_time.as_ref()),
                    "linked_github_repositories": w.linked_github_repositories,
                    "egress_allowlist": w.egress_allowlist,
                })
            })
            .collect();
        return print_json(&Value::Array(items));
    }
    let line = |w: &pb::Workspace| match w.linked_github_repositories.as_slice() {
        [] => format!("{}\n", w.workspace_id),
        linked => format!("{}  github: {}\n", w.workspace_id, linked.join(", ")),
    };
    print(&list.iter().map(line).collect::<String>());
}

pub fn repos(list: &[pb::Repository], json: bool) {
    if json {
        let items: Vec<Value> = list
            .iter()
            .map(|r| {
                json!({
                    "workspace": r.workspace_id,
                    "name": r.name,
                    "path": lossy(&r.path),
                    "resolved_path": lossy(&r.resolved_path),
                    "created": time(r.create_time.as_ref()),
                })
            })
            .collect();
        return print_json(&Value::Array(items));
    }
    let mut out = String::new();
    for r in list {
        let resolved = if r.resolved_path == r.path {
            String::new()
        } else {
            format!(" -> {}", one_line(&lossy(&r.resolved_path)))
        };
        out.push_str(&format!("{:<24} {}{resolved}\n", r.name, one_line(&lossy(&r.path))));
    }
    print(&out);
}

fn conversation_json(c: &pb::Conversation) -> Value {
    json!({
        "id": c.conversation_id,
        "workspace": c.workspace_id,
        "backend": super::words::worktree_backend_name(c.backend),
        "created": time(c.create_time.as_ref()),
        "repos": c.repositories.iter().map(|r| json!({
            "name": r.name,
            "source": lossy(&r.source_path),
            "path": lossy(&r.path),
            "branch": (!r.branch.is_empty()).then(|| r.branch.clone()),
        })).collect::<Vec<_>>(),
    })
}

/// The id alone on stdout in text mode, so that `id=$(ccctl conversation new …)` works.
pub fn created(c: &pb::Conversation, json: bool) {
    if json {
        return print_json(&conversation_json(c));
    }
    print(&format!("{}\n", c.conversation_id));
}

pub fn conversations(list: &[pb::Conversation], json: bool) {
    if json {
        return print_json(&Value::Array(list.iter().map(conversation_json).collect()));
    }
    let mut out = format!("{:<20}{:<12}{:<14}{:<26}{}\n", "ID", "WORKSPACE", "BACKEND", "CREATED", "REPOS");
    for c in list {
        let repos: Vec<&str> = c.repositories.iter().map(|r| r.name.as_str()).collect();
        out.push_str(&format!(
            "{:<20}{:<12}{:<14}{:<26}{}\n",
            c.conversation_id,
            c.workspace_id,
            super::words::worktree_backend_name(c.backend),
            time(c.create_time.as_ref()),
            repos.join(",")
        ));
    }
    print(&out);
}

pub fn sandbox_probe(p: &pb::GetProbeResponse, json: bool) {
    let backend = super::words::sandbox_backend_name(p.backend);
    if json {
        return print_json(
            &json!({ "backend": backend, "detail": p.detail, "limits": p.limits, "microvm": p.microvm }),
        );
    }
    print(&format!(
        "sandbox backend={backend} ({})\nlimits={}\n{}\n",
        one_line(&p.detail),
        one_line(&p.limits),
        one_line(&p.microvm)
    ));
}

/// One argument a line, quoted for a POSIX shell, so that it can be pasted and run.
pub fn sandbox_explain(e: &pb::ExplainEnvelopeResponse, json: bool) {
    let backend = super::words::sandbox_backend_name(e.backend);
    if json {
        let argv: Vec<String> = e.argv.iter().map(|a| lossy(a)).collect();
        return print_json(&json!({ "backend": backend, "argv": argv, "env": e.env }));
    }
    let quoted: Vec<String> = e.argv.iter().map(|a| shell_quote(&lossy(a))).collect();
    print(&format!("# backend={backend}\n{}\n", quoted.join(" \\\n  ")));
}

/// Quoted for a POSIX shell (shlex), control characters escaped first so that nothing
/// printed rewrites the terminal.
fn shell_quote(arg: &str) -> String {
    let shown = one_line(arg);
    shlex::try_quote(&shown).map(|q| q.into_owned()).unwrap_or(shown)
}

/// A command's words as a shell line, each quoted as it needs.
pub fn shell_words(argv: &[String]) -> String {
    argv.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ")
}

pub fn done(message: &str, json: bool) {
    if json {
        return print_json(&json!({ "ok": true, "message": message }));
    }
    print(&format!("{message}\n"));
}

pub fn mode_name(mode: i32) -> &'static str {
    use cc_proto::common::v1::Mode;
    match Mode::try_from(mode) {
        Ok(Mode::Plan) => "plan",
        Ok(Mode::Review) => "review",
        Ok(Mode::Orchestrate) => "orchestrate",
        _ => "chat",
    }
}

fn terminal_json(t: &pb::Terminal) -> Value {
    let backend = super::words::terminal_backend_name(t.backend);
    json!({
        "name": t.name,
        "backend": backend,
        "unsandboxed": backend == "host",
        "conversation_id": (!t.conversation_id.is_empty()).then_some(&t.conversation_id),
        "run_id": (!t.run_id.is_empty()).then_some(&t.run_id),
        "state": if t.state == pb::TerminalState::Exited as i32 { "exited" } else { "running" },
        "command": t.command,
        "columns": t.size.map(|s| s.columns),
        "rows": t.size.map(|s| s.rows),
        "attached_clients": t.attached_clients,
        "created": time(t.create_time.as_ref()),
        "pid": (t.pid != 0).then_some(t.pid),
        "exit": t.exit.as_ref().map(|e| json!({ "code": e.code, "signal": e.signal, "reason": e.reason })),
        "confinement": t.confinement,
    })
}

/// Terminals: a table, or (`created`) the new one's name and what confines it.
pub fn terminals(list: &[pb::Terminal], json: bool, created: bool) {
    if json {
        let all: Vec<Value> = list.iter().map(terminal_json).collect();
        return print_json(&if created { all.into_iter().next().unwrap_or(Value::Null) } else { Value::Array(all) });
    }
    if created {
        for t in list {
            print(&format!("{}\n", t.name));
            eprintln!("ccctl: {}", one_line(&t.confinement));
        }
        return;
    }
    let mut out = format!(
        "{:<24}{:<9}{:<9}{:<9}{:<20}{:<18}{}\n",
        "NAME", "BACKEND", "STATE", "CLIENTS", "CONVERSATION", "RUN", "COMMAND"
    );
    for t in list {
        let state = match &t.exit {
            Some(e) => match (e.code, e.signal) {
                (Some(code), _) => format!("exit {code}"),
                (None, Some(signal)) => format!("signal {signal}"),
                _ => "exited".into(),
            },
            None => "running".into(),
        };
        let dash = |s: &str| if s.is_empty() { "-".to_owned() } else { s.to_owned() };
        out.push_str(&format!(
            "{:<24}{:<9}{:<9}{:<9}{:<20}{:<18}{}\n",
            t.name,
            super::words::terminal_backend_name(t.backend),
            state,
            t.attached_clients,
            dash(&t.conversation_id),
            dash(&t.run_id),
            one_line(&shell_words(&t.command)),
        ));
    }
    print(&out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agents_text_prints_as_text_and_its_controls_stay_escaped() {
        let text = json!({ "text": "line one\nline\ttwo\x1b[31m\u{202e}\r\n" });
        assert_eq!(agent_step("agent_text", &text), "line one\nline\ttwo\\u{1b}[31m\\u{202e}");
        let result = json!({ "content": "hi\n65534\n" });
        assert_eq!(agent_step("agent_tool_result", &result), "<- hi\n   65534");
        // The event list keeps one line a step.
        assert_eq!(agent_event("agent_tool_result", &result), "<- hi\\n65534");
    }

    #[test]
    fn one_line_strips_control_and_bidi() {
        assert_eq!(one_line("a\x1b[2Jb\u{202e}c\nsecond\n"), "a\\u{1b}[2Jb\\u{202e}c\\nsecond");
        assert_eq!(one_line(""), "");
    }
}

//! The head of a receive-pack request: what a push asks for, before its pack.
//!
//! ```text
//! *PKT-LINE("shallow" SP obj-id)
//! PKT-LINE(old-id SP new-id SP refname NUL capability-list LF)
//! *PKT-LINE(old-id SP new-id SP refname LF)
//! flush-pkt
//! [*PKT-LINE(push-option) flush-pkt]     when push-options was negotiated
//! [pack]                                  raw bytes, absent when every command deletes
//! ```
//!
//! A request that is a flush alone is git's probe (sent before a large push to check
//! that the server answers). Signed pushes (`push-cert`) are refused: the gateway would
//! have to forward a signature over commands it may change.

use super::is_valid_ref_name;
use super::pktline::{self, Packet, PktError};

/// A head longer than this is refused: no real push names that many refs.
pub const MAX_HEAD_BYTES: usize = 4 << 20;
pub const MAX_COMMANDS: usize = 10_000;
const MAX_PUSH_OPTIONS: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    pub old: String,
    pub new: String,
    pub name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateKind {
    Create,
    Delete,
    Update,
}

impl RefUpdate {
    pub fn kind(&self) -> UpdateKind {
        if is_zero(&self.old) {
            UpdateKind::Create
        } else if is_zero(&self.new) {
            UpdateKind::Delete
        } else {
            UpdateKind::Update
        }
    }
}

fn is_zero(oid: &str) -> bool {
    oid.bytes().all(|b| b == b'0')
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestHead {
    pub shallow: Vec<String>,
    pub commands: Vec<RefUpdate>,
    pub capabilities: Vec<String>,
    pub push_options: Vec<String>,
}

impl RequestHead {
    pub fn has_capability(&self, name: &str) -> bool {
        self.capabilities.iter().any(|c| c == name || c.split_once('=').is_some_and(|(k, _)| k == name))
    }

    /// A pack follows the head unless every command deletes.
    pub fn expects_pack(&self) -> bool {
        self.commands.iter().any(|c| c.kind() != UpdateKind::Delete)
    }

    /// git's probe: a request that is one flush-pkt and nothing else.
    pub fn is_probe(&self) -> bool {
        self.commands.is_empty()
    }

    /// The head as git would send it with only `commands` (a subset of ours, in order).
    pub fn encode(&self, commands: &[&RefUpdate]) -> Vec<u8> {
        let mut out = Vec::new();
        for s in &self.shallow {
            pktline::encode(&mut out, format!("shallow {s}").as_bytes());
        }
        for (i, c) in commands.iter().enumerate() {
            let mut line = format!("{} {} {}", c.old, c.new, c.name).into_bytes();
            if i == 0 {
                line.push(0);
                line.extend_from_slice(self.capabilities.join(" ").as_bytes());
            }
            line.push(b'\n');
            pktline::encode(&mut out, &line);
        }
        pktline::flush(&mut out);
        if self.has_capability("push-options") && !commands.is_empty() {
            for o in &self.push_options {
                pktline::encode(&mut out, o.as_bytes());
            }
            pktline::flush(&mut out);
        }
        out
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error(transparent)]
    Pkt(#[from] PktError),
    #[error("the push request's head is over {MAX_HEAD_BYTES} bytes")]
    HeadTooLong,
    #[error("the push names more than {MAX_COMMANDS} refs")]
    TooManyCommands,
    #[error("the push sends more than {MAX_PUSH_OPTIONS} push options")]
    TooManyPushOptions,
    #[error("signed pushes (push-cert) are not supported through the gateway")]
    SignedPush,
    #[error("a ref update is not \"old new ref\": {0:?}")]
    BadCommand(String),
    #[error("a ref update names an object id that is not hex of one length: {0:?}")]
    BadObjectId(String),
    #[error("a ref update names a ref git would refuse: {0:?}")]
    BadRefName(String),
    #[error("a shallow line is malformed: {0:?}")]
    BadShallow(String),
    #[error("the push request has a {0} where a ref update belongs")]
    Unexpected(&'static str),
}

/// Parses the head at the start of `buf`: the head and how many bytes it took (the
/// pack, if any, starts there), or None when `buf` does not hold all of it yet.
pub fn parse_head(buf: &[u8]) -> Result<Option<(RequestHead, usize)>, RequestError> {
    let mut head = RequestHead::default();
    let mut at = 0;
    // Shallow lines, then the commands up to a flush.
    loop {
        if at > MAX_HEAD_BYTES {
            return Err(RequestError::HeadTooLong);
        }
        let Some((packet, used)) = pktline::decode(&buf[at..])? else {
            return if buf.len() > MAX_HEAD_BYTES { Err(RequestError::HeadTooLong) } else { Ok(None) };
        };
        at += used;
        let line = match packet {
            Packet::Flush => break,
            Packet::Delim => return Err(RequestError::Unexpected("delimiter")),
            Packet::ResponseEnd => return Err(RequestError::Unexpected("response end")),
            Packet::Data(line) => line,
        };
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        if head.commands.is_empty() {
            if line.starts_with(b"push-cert") {
                return Err(RequestError::SignedPush);
            }
            if let Some(oid) = line.strip_prefix(b"shallow ") {
                head.shallow.push(object_id(oid).ok_or_else(|| RequestError::BadShallow(lossy(line)))?);
                continue;
            }
        }
        let (command, caps) = match line.iter().position(|b| *b == 0) {
            Some(nul) if head.commands.is_empty() => (&line[..nul], Some(&line[nul + 1..])),
            Some(_) => return Err(RequestError::BadCommand(lossy(line))),
            None => (line, None),
        };
        if let Some(caps) = caps {
            head.capabilities =
                String::from_utf8_lossy(caps).split(' ').filter(|c| !c.is_empty()).map(str::to_owned).collect();
        }
        head.commands.push(ref_update(command)?);
        if head.commands.len() > MAX_COMMANDS {
            return Err(RequestError::TooManyCommands);
        }
    }
    if head.has_capability("push-options") && !head.commands.is_empty() {
        loop {
            let Some((packet, used)) = pktline::decode(&buf[at..])? else { return Ok(None) };
            at += used;
            match packet {
                Packet::Flush => break,
                Packet::Data(option) => {
                    head.push_options.push(String::from_utf8_lossy(option).trim_end_matches('\n').to_owned());
                    if head.push_options.len() > MAX_PUSH_OPTIONS {
                        return Err(RequestError::TooManyPushOptions);
                    }
                }
                Packet::Delim | Packet::ResponseEnd => return Err(RequestError::Unexpected("special packet")),
            }
        }
    }
    if at > MAX_HEAD_BYTES {
        return Err(RequestError::HeadTooLong);
    }
    Ok(Some((head, at)))
}

fn ref_update(command: &[u8]) -> Result<RefUpdate, RequestError> {
    let text = std::str::from_utf8(command).map_err(|_| RequestError::BadCommand(lossy(command)))?;
    let mut fields = text.splitn(3, ' ');
    let (Some(old), Some(new), Some(name)) = (fields.next(), fields.next(), fields.next()) else {
        return Err(RequestError::BadCommand(text.to_owned()));
    };
    let old = object_id(old.as_bytes()).ok_or_else(|| RequestError::BadObjectId(old.to_owned()))?;
    let new = object_id(new.as_bytes()).ok_or_else(|| RequestError::BadObjectId(new.to_owned()))?;
    if old.len() != new.len() {
        return Err(RequestError::BadObjectId(format!("{old} {new}")));
    }
    if !is_valid_ref_name(name) {
        return Err(RequestError::BadRefName(name.to_owned()));
    }
    Ok(RefUpdate { old, new, name: name.to_owned() })
}

/// A SHA-1 or SHA-256 object id in lowercase hex.
fn object_id(bytes: &[u8]) -> Option<String> {
    let ok = matches!(bytes.len(), 40 | 64) && bytes.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    ok.then(|| String::from_utf8_lossy(bytes).into_owned())
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";
    const Z: &str = "0000000000000000000000000000000000000000";

    fn request(lines: &[&[u8]], options: Option<&[&str]>, pack: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for l in lines {
            pktline::encode(&mut out, l);
        }
        pktline::flush(&mut out);
        if let Some(options) = options {
            for o in options {
                pktline::encode(&mut out, o.as_bytes());
            }
            pktline::flush(&mut out);
        }
        out.extend_from_slice(pack);
        out
    }

    #[test]
    fn a_push_head_is_read_and_the_pack_starts_after_it() {
        let first = format!("{A} {B} refs/heads/main\0report-status side-band-64k atomic agent=git/2.39\n");
        let second = format!("{Z} {B} refs/heads/feature\n");
        let third = format!("{A} {Z} refs/tags/old\n");
        let body = request(&[first.as_bytes(), second.as_bytes(), third.as_bytes()], None, b"PACK....");
        let (head, at) = parse_head(&body).unwrap().unwrap();
        assert_eq!(&body[at..], b"PACK....");
        assert_eq!(head.commands.len(), 3);
        assert_eq!(head.commands[0], RefUpdate { old: A.into(), new: B.into(), name: "refs/heads/main".into() });
        assert_eq!(
            head.commands.iter().map(RefUpdate::kind).collect::<Vec<_>>(),
            [UpdateKind::Update, UpdateKind::Create, UpdateKind::Delete]
        );
        assert!(head.has_capability("atomic") && head.has_capability("agent") && !head.has_capability("quiet"));
        assert!(head.expects_pack());
    }

    #[test]
    fn push_options_shallow_lines_and_deletes() {
        let first = format!("{A} {Z} refs/heads/gone\0report-status push-options\n");
        let shallow = format!("shallow {A}");
        let body = request(&[shallow.as_bytes(), first.as_bytes()], Some(&["ci.skip", "topic=x"]), b"");
        let (head, at) = parse_head(&body).unwrap().unwrap();
        assert_eq!(at, body.len());
        assert_eq!(head.shallow, [A]);
        assert_eq!(head.push_options, ["ci.skip", "topic=x"]);
        assert!(!head.expects_pack());
    }

    #[test]
    fn the_probe_is_a_flush_alone() {
        let (head, at) = parse_head(b"0000").unwrap().unwrap();
        assert!(head.is_probe());
        assert_eq!(at, 4);
    }

    #[test]
    fn an_incomplete_head_asks_for_more() {
        let first = format!("{A} {B} refs/heads/main\0report-status\n");
        let body = request(&[first.as_bytes()], None, b"PACK");
        for cut in [0, 3, 10, body.len() - 8] {
            assert_eq!(parse_head(&body[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn malformed_heads_are_refused_with_a_reason() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (request(&[b"nonsense"], None, b""), "not \"old new ref\""),
            (request(&[format!("{A} {B}").as_bytes()], None, b""), "not \"old new ref\""),
            (request(&[format!("{A} xyz refs/heads/a").as_bytes()], None, b""), "object id"),
            (request(&[format!("{A} {B} main").as_bytes()], None, b""), "git would refuse"),
            (request(&[format!("{A} {B} refs/heads/a\nb").as_bytes()], None, b""), "git would refuse"),
            (request(&[b"push-cert\0report-status\n"], None, b""), "signed pushes"),
            (request(&[b"shallow nothex"], None, b""), "shallow"),
            (b"0001".to_vec(), "delimiter"),
            (b"zzzz".to_vec(), "four hex digits"),
        ];
        for (body, want) in cases {
            let err = parse_head(&body).unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} should say {want:?}");
            assert!(!err.contains('\n'), "{err:?}");
        }
        let second_with_caps = format!("{A} {B} refs/heads/b\0x");
        let first = format!("{A} {B} refs/heads/a\0report-status");
        let body = request(&[first.as_bytes(), second_with_caps.as_bytes()], None, b"");
        assert!(matches!(parse_head(&body), Err(RequestError::BadCommand(_))));
    }

    #[test]
    fn too_many_commands_are_refused() {
        let line = format!("{A} {B} refs/heads/x\n");
        let lines: Vec<&[u8]> = std::iter::repeat_n(line.as_bytes(), MAX_COMMANDS + 1).collect();
        let body = request(&lines, None, b"");
        assert_eq!(parse_head(&body), Err(RequestError::TooManyCommands));
    }

    #[test]
    fn a_subset_is_encoded_as_git_would_send_it() {
        let first = format!("{A} {B} refs/heads/main\0report-status push-options\n");
        let second = format!("{Z} {B} refs/heads/feature\n");
        let body = request(&[first.as_bytes(), second.as_bytes()], Some(&["o"]), b"");
        let (head, _) = parse_head(&body).unwrap().unwrap();
        let only_feature = head.encode(&[&head.commands[1]]);
        let (again, _) = parse_head(&only_feature).unwrap().unwrap();
        assert_eq!(again.commands, [head.commands[1].clone()]);
        assert_eq!(again.capabilities, head.capabilities);
        assert_eq!(again.push_options, ["o"]);
        assert_eq!(head.encode(&[&head.commands[0], &head.commands[1]]), body);
    }
}

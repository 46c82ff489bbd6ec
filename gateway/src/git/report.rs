//! report-status, the answer to a push, in git's own words so that `git push` prints
//! our refusals as it prints any server's:
//!
//! ```text
//! PKT-LINE("unpack" SP ("ok" / error-msg))
//! 1*(PKT-LINE("ok" SP refname) *option-line / PKT-LINE("ng" SP refname SP reason))
//! flush-pkt
//! ```
//!
//! `report-status-v2` adds `option …` lines after an `ok`. With `side-band-64k` the
//! report travels inside band 1 packets (band 2 is progress, band 3 a fatal error),
//! ended by a flush. The gateway reads upstream's report the same way, to merge its
//! own refusals in.

use super::pktline::{self, MAX_PAYLOAD, Packet, PktError};

/// What a reason may hold: git prints it on one line.
const MAX_REASON_BYTES: usize = 1000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefStatus {
    Ok { name: String, options: Vec<String> },
    Rejected { name: String, reason: String },
}

impl RefStatus {
    pub fn name(&self) -> &str {
        match self {
            RefStatus::Ok { name, .. } | RefStatus::Rejected { name, .. } => name,
        }
    }

    pub fn rejected(name: &str, reason: &str) -> RefStatus {
        RefStatus::Rejected { name: name.to_owned(), reason: one_line(reason) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// `Ok(())` for `unpack ok`; otherwise the unpack error git prints.
    pub unpack: Result<(), String>,
    pub refs: Vec<RefStatus>,
}

/// How the client asked to be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Answer {
    pub side_band: bool,
    pub v2: bool,
}

impl Answer {
    pub fn for_capabilities(caps: &[String]) -> Answer {
        let has = |c: &str| caps.iter().any(|x| x == c);
        Answer { side_band: has("side-band-64k") || has("side-band"), v2: has("report-status-v2") }
    }
}

impl Report {
    /// The report's pkt-lines, without side-band framing.
    pub fn encode_plain(&self, v2: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let unpack = match &self.unpack {
            Ok(()) => "unpack ok\n".to_owned(),
            Err(e) => format!("unpack {}\n", one_line(e)),
        };
        pktline::encode(&mut out, unpack.as_bytes());
        for status in &self.refs {
            match status {
                RefStatus::Ok { name, options } => {
                    pktline::encode(&mut out, format!("ok {name}\n").as_bytes());
                    for option in options.iter().filter(|_| v2) {
                        pktline::encode(&mut out, format!("option {option}\n").as_bytes());
                    }
                }
                RefStatus::Rejected { name, reason } => {
                    pktline::encode(&mut out, format!("ng {name} {}\n", one_line(reason)).as_bytes());
                }
            }
        }
        pktline::flush(&mut out);
        out
    }

    /// The whole response body as the client asked for it.
    pub fn encode(&self, answer: Answer) -> Vec<u8> {
        let plain = self.encode_plain(answer.v2);
        if !answer.side_band {
            return plain;
        }
        let mut out = Vec::new();
        band(&mut out, 1, &plain);
        pktline::flush(&mut out);
        out
    }
}

/// Appends `data` as side-band packets of band `n`.
pub fn band(out: &mut Vec<u8>, n: u8, data: &[u8]) {
    for chunk in data.chunks(MAX_PAYLOAD - 1) {
        let mut payload = Vec::with_capacity(chunk.len() + 1);
        payload.push(n);
        payload.extend_from_slice(chunk);
        pktline::encode(out, &payload);
    }
}

/// Reasons and messages go on one line of bounded length.
pub fn one_line(text: &str) -> String {
    let mut line: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if line.len() > MAX_REASON_BYTES {
        let mut cut = MAX_REASON_BYTES;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
    }
    line
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Pkt(#[from] PktError),
    #[error("upstream's answer ends before its report does")]
    Truncated,
    #[error("upstream's answer has a side-band packet of unknown band {0}")]
    BadBand(u8),
    #[error("upstream failed the push: {0}")]
    Fatal(String),
    #[error("upstream's report is malformed: {0:?}")]
    Malformed(String),
}

/// Upstream's response split by band: the report's bytes (band 1, or the whole body
/// without side-band) and the progress text (band 2) to pass on to the client.
pub fn demultiplex(body: &[u8], side_band: bool) -> Result<(Vec<u8>, Vec<u8>), ReportError> {
    if !side_band {
        return Ok((body.to_vec(), Vec::new()));
    }
    let (mut report, mut progress) = (Vec::new(), Vec::new());
    let mut rest = body;
    loop {
        let Some((packet, used)) = pktline::decode(rest)? else { return Err(ReportError::Truncated) };
        rest = &rest[used..];
        match packet {
            Packet::Flush => return Ok((report, progress)),
            Packet::Data([1, data @ ..]) => report.extend_from_slice(data),
            Packet::Data([2, data @ ..]) => progress.extend_from_slice(data),
            Packet::Data([3, data @ ..]) => return Err(ReportError::Fatal(one_line(&String::from_utf8_lossy(data)))),
            Packet::Data([b, ..]) => return Err(ReportError::BadBand(*b)),
            Packet::Data([]) | Packet::Delim | Packet::ResponseEnd => {
                return Err(ReportError::Malformed("an empty or special packet in the side band".into()));
            }
        }
    }
}

/// Parses a report-status (v1 or v2) from its pkt-lines.
pub fn parse(report: &[u8]) -> Result<Report, ReportError> {
    let mut rest = report;
    let mut lines = Vec::new();
    loop {
        let Some((packet, used)) = pktline::decode(rest)? else { return Err(ReportError::Truncated) };
        rest = &rest[used..];
        match packet {
            Packet::Flush => break,
            Packet::Data(line) => lines.push(String::from_utf8_lossy(line).trim_end_matches('\n').to_owned()),
            Packet::Delim | Packet::ResponseEnd => return Err(ReportError::Malformed("a special packet".into())),
        }
    }
    let mut lines = lines.into_iter();
    let unpack = match lines.next().as_deref().and_then(|l| l.strip_prefix("unpack ")) {
        Some("ok") => Ok(()),
        Some(error) => Err(error.to_owned()),
        None => return Err(ReportError::Malformed("it does not start with an unpack status".into())),
    };
    let mut refs: Vec<RefStatus> = Vec::new();
    for line in lines {
        if let Some(name) = line.strip_prefix("ok ") {
            refs.push(RefStatus::Ok { name: name.to_owned(), options: Vec::new() });
        } else if let Some(rest) = line.strip_prefix("ng ") {
            let (name, reason) = rest.split_once(' ').unwrap_or((rest, ""));
            refs.push(RefStatus::Rejected { name: name.to_owned(), reason: reason.to_owned() });
        } else if let Some(option) = line.strip_prefix("option ") {
            match refs.last_mut() {
                Some(RefStatus::Ok { options, .. }) => options.push(option.to_owned()),
                _ => return Err(ReportError::Malformed(format!("an option line after no ok: {line}"))),
            }
        } else {
            return Err(ReportError::Malformed(one_line(&line)));
        }
    }
    Ok(Report { unpack, refs })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        Report {
            unpack: Ok(()),
            refs: vec![
                RefStatus::Ok { name: "refs/heads/feature".into(), options: vec!["refname refs/heads/feature".into()] },
                RefStatus::rejected("refs/heads/main", "Control Center policy: pushes to main are denied\nsecond"),
            ],
        }
    }

    #[test]
    fn a_report_reads_as_git_writes_it() {
        let plain = sample().encode_plain(false);
        let text = String::from_utf8_lossy(&plain);
        assert_eq!(
            text,
            "000eunpack ok\n001aok refs/heads/feature\n004fng refs/heads/main Control Center policy: pushes to main are denied second\n0000"
        );
    }

    #[test]
    fn reports_round_trip_in_every_framing() {
        for side_band in [false, true] {
            for v2 in [false, true] {
                let answer = Answer { side_band, v2 };
                let body = sample().encode(answer);
                let (report, progress) = demultiplex(&body, side_band).unwrap();
                assert!(progress.is_empty());
                let parsed = parse(&report).unwrap();
                let mut want = sample();
                if !v2 {
                    want.refs[0] = RefStatus::Ok { name: "refs/heads/feature".into(), options: vec![] };
                }
                assert_eq!(parsed, want, "side_band={side_band} v2={v2}");
            }
        }
    }

    #[test]
    fn progress_and_fatal_bands_are_told_apart() {
        let mut body = Vec::new();
        band(&mut body, 2, b"remote: counting\n");
        band(&mut body, 1, &sample().encode_plain(false));
        pktline::flush(&mut body);
        let (report, progress) = demultiplex(&body, true).unwrap();
        assert_eq!(progress, b"remote: counting\n");
        assert_eq!(parse(&report).unwrap().refs.len(), 2);
        let mut fatal = Vec::new();
        band(&mut fatal, 3, b"disk full\n");
        assert_eq!(demultiplex(&fatal, true), Err(ReportError::Fatal("disk full ".into())));
        let mut odd = Vec::new();
        band(&mut odd, 7, b"x");
        assert_eq!(demultiplex(&odd, true), Err(ReportError::BadBand(7)));
        assert_eq!(demultiplex(b"", true), Err(ReportError::Truncated));
    }

    #[test]
    fn an_unpack_failure_and_malformed_reports() {
        let report = parse(b"001funpack index-pack abnormal\n0000").unwrap();
        assert_eq!(report.unpack, Err("index-pack abnormal".into()));
        assert!(matches!(parse(b"0009hello0000"), Err(ReportError::Malformed(_))));
        assert!(matches!(parse(b"000eunpack ok\n000foption x y\n0000"), Err(ReportError::Malformed(_))));
        assert_eq!(parse(b"000eunpack ok\n"), Err(ReportError::Truncated));
    }

    #[test]
    fn reasons_are_one_bounded_line() {
        let long = "é".repeat(2000);
        let line = one_line(&long);
        assert!(line.len() <= MAX_REASON_BYTES && line.chars().all(|c| c == 'é'));
        assert_eq!(one_line("a\r\nb\0c"), "a  b c");
    }
}

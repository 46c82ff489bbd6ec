//! pkt-lines: four hex digits of length (the four included), then the payload. `0000`
//! is a flush, `0001` a delimiter and `0002` a response end (protocol v2).

/// The largest pkt-line git sends or accepts, length header included.
pub const MAX_PKT_LEN: usize = 65520;
/// The largest payload of one pkt-line.
pub const MAX_PAYLOAD: usize = MAX_PKT_LEN - 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet<'a> {
    Flush,
    Delim,
    ResponseEnd,
    Data(&'a [u8]),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PktError {
    #[error("a pkt-line length is not four hex digits ({0:?})")]
    BadLength(String),
    #[error("a pkt-line says it is {0} bytes long: shorter than its own header")]
    TooShort(usize),
    #[error("a pkt-line says it is {0} bytes long: more than git's limit of 65520")]
    TooLong(usize),
}

/// Decodes the packet at the start of `buf`: the packet and how many bytes it took, or
/// None when `buf` does not hold all of it yet.
pub fn decode(buf: &[u8]) -> Result<Option<(Packet<'_>, usize)>, PktError> {
    let Some(header) = buf.get(..4) else { return Ok(None) };
    let len = parse_length(header)?;
    let packet = match len {
        0 => return Ok(Some((Packet::Flush, 4))),
        1 => return Ok(Some((Packet::Delim, 4))),
        2 => return Ok(Some((Packet::ResponseEnd, 4))),
        3 => return Err(PktError::TooShort(3)),
        n if n > MAX_PKT_LEN => return Err(PktError::TooLong(n)),
        n => buf.get(4..n).map(Packet::Data),
    };
    Ok(packet.map(|p| (p, len)))
}

fn parse_length(header: &[u8]) -> Result<usize, PktError> {
    let text = std::str::from_utf8(header).ok().filter(|t| t.bytes().all(|b| b.is_ascii_hexdigit()));
    let bad = || PktError::BadLength(String::from_utf8_lossy(header).into_owned());
    usize::from_str_radix(text.ok_or_else(bad)?, 16).map_err(|_| bad())
}

/// Appends `payload` as one pkt-line. A payload longer than git allows is split over
/// several (only ever our own text, which is far shorter).
pub fn encode(out: &mut Vec<u8>, payload: &[u8]) {
    for chunk in payload.chunks(MAX_PAYLOAD) {
        out.extend_from_slice(format!("{:04x}", chunk.len() + 4).as_bytes());
        out.extend_from_slice(chunk);
    }
}

pub fn flush(out: &mut Vec<u8>) {
    out.extend_from_slice(b"0000");
}

/// Every packet in `buf`, which must hold whole packets only.
pub fn decode_all(mut buf: &[u8]) -> Result<Vec<Packet<'_>>, PktError> {
    let mut packets = Vec::new();
    while !buf.is_empty() {
        match decode(buf)? {
            Some((packet, used)) => {
                packets.push(packet);
                buf = &buf[used..];
            }
            None => return Err(PktError::BadLength(format!("{} bytes cut off", buf.len()))),
        }
    }
    Ok(packets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_round_trip() {
        let mut out = Vec::new();
        encode(&mut out, b"hello\n");
        flush(&mut out);
        assert_eq!(out, b"000ahello\n0000");
        assert_eq!(decode(&out).unwrap(), Some((Packet::Data(b"hello\n"), 10)));
        assert_eq!(decode(&out[10..]).unwrap(), Some((Packet::Flush, 4)));
        assert_eq!(decode_all(&out).unwrap(), vec![Packet::Data(b"hello\n"), Packet::Flush]);
    }

    #[test]
    fn partial_input_asks_for_more() {
        assert_eq!(decode(b"00").unwrap(), None);
        assert_eq!(decode(b"000ahel").unwrap(), None);
        assert_eq!(decode(b"0004").unwrap(), Some((Packet::Data(b""), 4)));
        assert_eq!(decode(b"0001").unwrap(), Some((Packet::Delim, 4)));
    }

    #[test]
    fn bad_lengths_are_errors_with_a_reason() {
        assert_eq!(decode(b"zzzz"), Err(PktError::BadLength("zzzz".into())));
        assert_eq!(decode(b"+001"), Err(PktError::BadLength("+001".into())));
        assert_eq!(decode(b"0003"), Err(PktError::TooShort(3)));
        assert_eq!(decode(b"fff1"), Err(PktError::TooLong(0xfff1)));
        assert!(decode_all(b"000ahel").is_err());
    }

    #[test]
    fn long_payloads_are_split() {
        let mut out = Vec::new();
        encode(&mut out, &vec![b'x'; MAX_PAYLOAD + 10]);
        let packets = decode_all(&out).unwrap();
        assert_eq!(packets.len(), 2);
        assert!(matches!(packets[1], Packet::Data(d) if d.len() == 10));
    }
}

//! SOCKS5 (RFC 1928, with RFC 1929's user/password for the proxy credential a run
//! without an envelope needs), as pure functions over the bytes read so far: each
//! returns `Ok(None)` until its message is complete, then the message and how many
//! bytes it took. Only CONNECT is served; BIND and UDP ASSOCIATE get reply 0x07.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

pub const VERSION: u8 = 5;
/// Method: no authentication.
pub const NO_AUTH: u8 = 0x00;
/// Method: user name and password (RFC 1929).
pub const USER_PASSWORD: u8 = 0x02;
/// Method reply: none of the client's methods is acceptable.
pub const NO_ACCEPTABLE_METHOD: u8 = 0xff;

/// Reply codes.
pub mod reply {
    pub const SUCCEEDED: u8 = 0x00;
    pub const GENERAL_FAILURE: u8 = 0x01;
    /// Connection not allowed by ruleset: every policy refusal.
    pub const NOT_ALLOWED: u8 = 0x02;
    pub const HOST_UNREACHABLE: u8 = 0x04;
    pub const CONNECTION_REFUSED: u8 = 0x05;
    pub const COMMAND_NOT_SUPPORTED: u8 = 0x07;
    pub const ADDRESS_TYPE_NOT_SUPPORTED: u8 = 0x08;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SocksError {
    #[error("not SOCKS version 5 (version byte {0})")]
    Version(u8),
    #[error("the greeting offers no method")]
    NoMethods,
    #[error("a reserved byte is not zero")]
    Reserved,
    #[error("address type {0} is not one SOCKS5 has")]
    AddressType(u8),
    #[error("the domain name is empty")]
    EmptyName,
    #[error("the domain name is not UTF-8")]
    NameNotUtf8,
    #[error("user/password subnegotiation version {0} is not 1")]
    AuthVersion(u8),
}

/// What the client offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    pub methods: Vec<u8>,
}

pub fn parse_greeting(buf: &[u8]) -> Result<Option<(Greeting, usize)>, SocksError> {
    let [version, count, ..] = buf else { return Ok(None) };
    if *version != VERSION {
        return Err(SocksError::Version(*version));
    }
    if *count == 0 {
        return Err(SocksError::NoMethods);
    }
    let used = 2 + usize::from(*count);
    let Some(methods) = buf.get(2..used) else { return Ok(None) };
    Ok(Some((Greeting { methods: methods.to_vec() }, used)))
}

/// RFC 1929's request: user name and password, each 1–255 bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: Vec<u8>,
    pub password: Vec<u8>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials {{ user: {:?}, password: [redacted] }}", String::from_utf8_lossy(&self.user))
    }
}

pub fn parse_credentials(buf: &[u8]) -> Result<Option<(Credentials, usize)>, SocksError> {
    let [version, user_len, ..] = buf else { return Ok(None) };
    if *version != 1 {
        return Err(SocksError::AuthVersion(*version));
    }
    let user_end = 2 + usize::from(*user_len);
    let Some(&password_len) = buf.get(user_end) else { return Ok(None) };
    let end = user_end + 1 + usize::from(password_len);
    let Some(password) = buf.get(user_end + 1..end) else { return Ok(None) };
    Ok(Some((Credentials { user: buf[2..user_end].to_vec(), password: password.to_vec() }, end)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Connect,
    Bind,
    UdpAssociate,
    Other(u8),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Ip(std::net::IpAddr),
    /// As sent; the decision validates and canonicalizes it (CR/LF and NUL refused).
    Name(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub command: Command,
    pub address: Address,
    pub port: u16,
}

pub fn parse_request(buf: &[u8]) -> Result<Option<(Request, usize)>, SocksError> {
    let [version, command, reserved, kind, ..] = buf else { return Ok(None) };
    if *version != VERSION {
        return Err(SocksError::Version(*version));
    }
    if *reserved != 0 {
        return Err(SocksError::Reserved);
    }
    let command = match command {
        1 => Command::Connect,
        2 => Command::Bind,
        3 => Command::UdpAssociate,
        other => Command::Other(*other),
    };
    let (address, at) = match kind {
        1 => {
            let Some(octets) = buf.get(4..8) else { return Ok(None) };
            (Address::Ip(Ipv4Addr::new(octets[0], octets[1], octets[2], octets[3]).into()), 8)
        }
        4 => {
            let Some(octets) = buf.get(4..20) else { return Ok(None) };
            let mut bytes = [0u8; 16];
            bytes.copy_from_slice(octets);
            (Address::Ip(Ipv6Addr::from(bytes).into()), 20)
        }
        3 => {
            let Some(&len) = buf.get(4) else { return Ok(None) };
            if len == 0 {
                return Err(SocksError::EmptyName);
            }
            let end = 5 + usize::from(len);
            let Some(name) = buf.get(5..end) else { return Ok(None) };
            let name = std::str::from_utf8(name).map_err(|_| SocksError::NameNotUtf8)?;
            (Address::Name(name.to_owned()), end)
        }
        other => return Err(SocksError::AddressType(*other)),
    };
    let Some(port) = buf.get(at..at + 2) else { return Ok(None) };
    Ok(Some((Request { command, address, port: u16::from_be_bytes([port[0], port[1]]) }, at + 2)))
}

/// A reply; `bound` is the proxy's side of the connection (0.0.0.0:0 when none).
pub fn reply(code: u8, bound: Option<SocketAddr>) -> Vec<u8> {
    let bound = bound.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut out = vec![VERSION, code, 0];
    match bound {
        SocketAddr::V4(v4) => {
            out.push(1);
            out.extend_from_slice(&v4.ip().octets());
        }
        SocketAddr::V6(v6) => {
            out.push(4);
            out.extend_from_slice(&v6.ip().octets());
        }
    }
    out.extend_from_slice(&bound.port().to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_by_name_is_read_piece_by_piece() {
        let greeting = [5, 2, NO_AUTH, USER_PASSWORD];
        for cut in 0..greeting.len() {
            assert_eq!(parse_greeting(&greeting[..cut]), Ok(None));
        }
        assert_eq!(parse_greeting(&greeting), Ok(Some((Greeting { methods: vec![0, 2] }, 4))));
        let mut request = vec![5, 1, 0, 3, 16];
        request.extend_from_slice(b"api.example.test");
        request.extend_from_slice(&443u16.to_be_bytes());
        for cut in 0..request.len() {
            assert_eq!(parse_request(&request[..cut]), Ok(None), "{cut}");
        }
        let (r, used) = parse_request(&request).unwrap().unwrap();
        assert_eq!(
            (r.command, r.address, r.port, used),
            (Command::Connect, Address::Name("api.example.test".into()), 443, 23)
        );
    }

    #[test]
    fn addresses_and_commands_of_every_kind() {
        let v4 = [5, 2, 0, 1, 127, 0, 0, 1, 0, 80];
        let (r, _) = parse_request(&v4).unwrap().unwrap();
        assert_eq!((r.command, r.address), (Command::Bind, Address::Ip("127.0.0.1".parse().unwrap())));
        let mut v6 = vec![5, 3, 0, 4];
        v6.extend_from_slice(&"::1".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&[0, 53]);
        let (r, used) = parse_request(&v6).unwrap().unwrap();
        assert_eq!((r.command, r.port, used), (Command::UdpAssociate, 53, 22));
        assert_eq!(parse_request(&[5, 9, 0, 1, 1, 2, 3, 4, 0, 1]).unwrap().unwrap().0.command, Command::Other(9));
    }

    #[test]
    fn malformed_messages_are_refused() {
        assert_eq!(parse_greeting(&[4, 1, 0]), Err(SocksError::Version(4)));
        assert_eq!(parse_greeting(&[5, 0]), Err(SocksError::NoMethods));
        assert_eq!(parse_request(&[5, 1, 1, 1]), Err(SocksError::Reserved));
        assert_eq!(parse_request(&[5, 1, 0, 9]), Err(SocksError::AddressType(9)));
        assert_eq!(parse_request(&[5, 1, 0, 3, 0]), Err(SocksError::EmptyName));
        assert_eq!(parse_request(&[5, 1, 0, 3, 2, 0xff, 0xfe, 0, 80]), Err(SocksError::NameNotUtf8));
        // A name with CR/LF or NUL is read as sent: the host check refuses it.
        let (r, _) = parse_request(&[5, 1, 0, 3, 3, b'a', b'\r', 0, 0, 80]).unwrap().unwrap();
        assert!(
            cc_policy::egress::host::canonical(match &r.address {
                Address::Name(n) => n,
                Address::Ip(_) => unreachable!(),
            })
            .is_err()
        );
    }

    #[test]
    fn credentials_and_replies() {
        let auth = [1, 3, b'r', b'u', b'n', 2, b'p', b'w'];
        let (c, used) = parse_credentials(&auth).unwrap().unwrap();
        assert_eq!((c.user.as_slice(), c.password.as_slice(), used), (&b"run"[..], &b"pw"[..], 8));
        assert!(!format!("{c:?}").contains("pw"));
        assert_eq!(parse_credentials(&auth[..6]), Ok(None));
        assert_eq!(parse_credentials(&[2, 0]), Err(SocksError::AuthVersion(2)));
        assert_eq!(reply(reply::NOT_ALLOWED, None), [5, 2, 0, 1, 0, 0, 0, 0, 0, 0]);
        let bound: SocketAddr = "[::1]:1080".parse().unwrap();
        assert_eq!(reply(reply::SUCCEEDED, Some(bound)).len(), 22);
    }
}

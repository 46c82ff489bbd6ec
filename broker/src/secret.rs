//! A credential's secret part. It prints as `[redacted]` everywhere (Debug, Display,
//! logs, errors); `expose` is the one way to read it, for the request that needs it.

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints() {
        let s = Secret::new("ghs_abcdef");
        assert_eq!(format!("{s} {s:?} {:?}", Some(&s)), "[redacted] [redacted] Some([redacted])");
        assert_eq!(s.expose(), "ghs_abcdef");
    }
}

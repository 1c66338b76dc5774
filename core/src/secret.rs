//! Secrets (bearer tokens) that never reach a log or an error message:
//! [`Secret`]'s `Debug` and `Display` print `***`.

use std::fmt;

/// A secret string; `Debug` and `Display` print `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// The secret itself, for the one place that must send or compare it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl std::str::FromStr for Secret {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("empty token".to_owned());
        }
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("token must be printable ASCII without spaces".to_owned());
        }
        Ok(Self(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed() {
        let s: Secret = "hunter2".parse().unwrap();
        assert_eq!(format!("{s} {s:?}"), "*** ***");
        assert_eq!(s.expose(), "hunter2");
        assert!("".parse::<Secret>().is_err());
        assert!("a b".parse::<Secret>().is_err());
    }
}

//! The admin calls' bearer token and the requester's address (the actor in the history).

use axum::extract::connect_info::ConnectInfo;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use subtle::{Choice, ConstantTimeEq};

/// The secret that admin calls must present as `Authorization: Bearer <token>`. (A build
/// without the rooms that check it keeps the flag and ignores it.)
#[derive(Clone)]
#[cfg_attr(not(any(feature = "http-api", feature = "consul")), allow(dead_code))]
pub(crate) struct Token(Vec<u8>);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// A token from its text, without surrounding whitespace.
    ///
    /// # Errors
    /// An empty token, or one with characters a header cannot carry.
    pub(crate) fn new(text: &str) -> Result<Token, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("the token is empty".into());
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the token must be printable ASCII without spaces".into());
        }
        Ok(Token(text.as_bytes().to_vec()))
    }

    /// Reads the token from `path` (surrounding whitespace, such as a final newline, is not
    /// part of it).
    ///
    /// # Errors
    /// An unreadable file, or a token [`new`](Token::new) refuses; the message names the file
    /// but never its content.
    pub(crate) fn read(path: &Path) -> Result<Token, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
        Token::new(&text).map_err(|e| format!("token file {}: {e}", path.display()))
    }

    /// Whether `given` is this token. The time taken depends on `given`'s length only, never
    /// on where it first differs from the secret, nor on the secret's length.
    #[cfg_attr(not(any(feature = "http-api", feature = "consul")), allow(dead_code))]
    pub(crate) fn matches(&self, given: &[u8]) -> bool {
        let secret = &self.0;
        let mut same: Choice = (given.len() as u64).ct_eq(&(secret.len() as u64));
        for (i, byte) in given.iter().enumerate() {
            same &= byte.ct_eq(&secret[i % secret.len()]);
        }
        same.into()
    }
}

/// The credentials of `Bearer <credentials>` (the scheme is case-insensitive).
#[cfg_attr(not(any(feature = "http-api", feature = "consul")), allow(dead_code))]
pub(crate) fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// Who sent a request, as recorded in the history: `http:<address>:<port>`.
#[cfg_attr(not(any(feature = "http-api", feature = "consul")), allow(dead_code))]
pub(super) struct Actor(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Actor {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Actor, Infallible> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or_else(|| "unknown".to_string(), |c| c.0.to_string());
        Ok(Actor(format!("http:{peer}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_exactly() {
        let token = Token::new("s3cret-token\n").unwrap();
        assert!(token.matches(b"s3cret-token"));
        for wrong in [
            &b""[..],
            b"s3cret-toke",
            b"s3cret-tokem",
            b"s3cret-token ",
            b"s3cret-tokens3cret-token",
            b"S3cret-token",
        ] {
            assert!(
                !token.matches(wrong),
                "{:?}",
                String::from_utf8_lossy(wrong)
            );
        }
        assert!(Token::new(" \n").is_err());
        assert!(Token::new("two words").is_err());
        assert_eq!(format!("{token:?}"), "Token(<redacted>)");
    }

    #[test]
    fn bearer_scheme() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bear"), None);
    }
}

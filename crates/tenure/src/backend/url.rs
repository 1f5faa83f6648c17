//! Database URLs with the password hidden, for errors, logs and `Debug`.

use std::fmt;

/// A database URL whose password (if any) has been replaced by `***`. The original is never
/// stored in it, so no `Debug`, `Display` or error can reveal it.
#[derive(Clone, PartialEq, Eq)]
pub struct RedactedUrl(String);

impl RedactedUrl {
    /// Redacts `url`. A URL that does not parse is shown up to its scheme only, since it could
    /// hold a password in a form we do not recognise.
    pub fn new(url: &str) -> Self {
        match url::Url::parse(url) {
            Ok(mut parsed) => {
                if parsed.password().is_some() {
                    let _ = parsed.set_password(Some("***"));
                }
                for (key, _) in parsed.query_pairs() {
                    if key.eq_ignore_ascii_case("password") {
                        let scheme = parsed.scheme().to_string();
                        return RedactedUrl(format!("{scheme}://(redacted)"));
                    }
                }
                RedactedUrl(parsed.to_string())
            }
            Err(_) if !url.contains('@') && !url.contains("password") => {
                RedactedUrl(url.to_string())
            }
            Err(_) => RedactedUrl(format!(
                "{}:(redacted)",
                url.split(':').next().unwrap_or_default()
            )),
        }
    }

    /// The redacted text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RedactedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for RedactedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// tenure's own URL option `pooler=`: how the server is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pooler {
    /// Directly, or through a session-mode pooler (which behaves as a direct connection).
    None,
    /// Through a transaction-mode pooler (`?pooler=transaction`, e.g. PgBouncer with
    /// `pool_mode = transaction`): a server is ours only inside a transaction.
    Transaction,
}

/// Reads tenure's `pooler=` option from `url` and returns the URL without it (the drivers
/// warn about parameters they do not know), and the mode it names.
///
/// # Errors
/// A message saying what `pooler` may be, for a value it may not.
pub(crate) fn split_pooler(url: &str) -> Result<(String, Pooler), String> {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return Ok((url.to_string(), Pooler::None));
    };
    let mut mode = Pooler::None;
    let mut rest = Vec::new();
    let mut found = false;
    for (key, value) in parsed.query_pairs() {
        if key == "pooler" {
            found = true;
            mode = match value.as_ref() {
                "transaction" => Pooler::Transaction,
                "session" | "none" => Pooler::None,
                other => {
                    return Err(format!(
                        "pooler={other:?}: the pooler option is `transaction` (PgBouncer's \
                         pool_mode = transaction and other transaction poolers) or `session` \
                         (the same as a direct connection)"
                    ))
                }
            };
        } else {
            rest.push((key.into_owned(), value.into_owned()));
        }
    }
    if !found {
        return Ok((url.to_string(), Pooler::None));
    }
    if rest.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(rest);
    }
    Ok((parsed.to_string(), mode))
}

#[cfg(test)]
mod tests {
    use super::{split_pooler, Pooler, RedactedUrl};

    #[test]
    fn the_pooler_option_is_read_and_removed() {
        let (url, mode) = split_pooler("postgres://u:p@h:6432/db?pooler=transaction").unwrap();
        assert_eq!(
            (url.as_str(), mode),
            ("postgres://u:p@h:6432/db", Pooler::Transaction)
        );
        let (url, mode) =
            split_pooler("postgres://h/db?sslmode=disable&pooler=session&application_name=x")
                .unwrap();
        assert_eq!(
            (url.as_str(), mode),
            (
                "postgres://h/db?sslmode=disable&application_name=x",
                Pooler::None
            )
        );
        let plain = "postgres://h/db?sslmode=disable";
        assert_eq!(
            split_pooler(plain).unwrap(),
            (plain.to_string(), Pooler::None)
        );
        let err = split_pooler("postgres://h/db?pooler=statement").unwrap_err();
        assert!(
            err.contains("transaction") && err.contains("statement"),
            "{err}"
        );
        // tenure shows the option to users: it is part of how the store was reached.
        assert_eq!(
            RedactedUrl::new("postgres://u:p@h/db?pooler=transaction").as_str(),
            "postgres://u:***@h/db?pooler=transaction"
        );
    }

    #[test]
    fn hides_passwords() {
        let r = RedactedUrl::new("postgres://app:s3cret@db:5432/x");
        assert_eq!(r.as_str(), "postgres://app:***@db:5432/x");
        assert!(!format!("{r:?}").contains("s3cret"));
        let q = RedactedUrl::new("mysql://db/x?password=s3cret");
        assert!(!q.as_str().contains("s3cret"), "{q}");
        let bad = RedactedUrl::new("postgres://app:s3cret@[bad");
        assert!(!bad.as_str().contains("s3cret"), "{bad}");
        assert_eq!(RedactedUrl::new("sqlite:x.db").as_str(), "sqlite:x.db");
    }

    #[test]
    fn sqlite_urls_need_a_path() {
        use crate::BackendKind;
        for ok in [
            "sqlite:x.db",
            "sqlite:///tmp/x.db",
            "SQLITE://x.db?mode=rwc",
        ] {
            assert_eq!(
                BackendKind::check_url(ok).unwrap(),
                BackendKind::Sqlite,
                "{ok}"
            );
        }
        for bad in ["sqlite:", "sqlite://", "sqlite:?mode=rwc"] {
            let err = BackendKind::check_url(bad).unwrap_err().to_string();
            assert!(
                err.contains("path of the SQLite file is missing"),
                "{bad}: {err}"
            );
        }
        assert!(BackendKind::check_url("redis://x").is_err());
    }
}

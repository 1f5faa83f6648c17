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

#[cfg(test)]
mod tests {
    use super::RedactedUrl;

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

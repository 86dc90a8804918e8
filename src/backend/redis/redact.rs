//! Keeping secrets out of messages: the password (from the URL) and the
//! lock token are scrubbed from server text, URLs are shown redacted, and
//! keys are escaped and shortened.

use redis::{ConnectionAddr, ConnectionInfo};

use super::Inner;

/// Longest server message kept in an error.
const MAX_MESSAGE_LEN: usize = 300;

impl Inner {
    pub(super) fn scrub(&self, text: &str, token: Option<&[u8]>) -> String {
        scrub(text, &self.secrets, token)
    }
}

/// A key for messages: escaped, at most 64 bytes shown.
pub(super) fn show_key(key: &[u8]) -> String {
    let shown: String = key
        .iter()
        .take(64)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    if key.len() > 64 {
        format!("\"{shown}...\" ({} bytes)", key.len())
    } else {
        format!("\"{shown}\"")
    }
}

/// `text` with every secret replaced by `***` and the token (when it is
/// text) by `<token>`. Also truncates overly long server messages.
pub(super) fn scrub(text: &str, secrets: &[String], token: Option<&[u8]>) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        out = out.replace(secret.as_str(), "***");
    }
    if let Some(token) = token.and_then(|t| std::str::from_utf8(t).ok())
        && !token.is_empty()
    {
        out = out.replace(token, "<token>");
    }
    if out.len() > MAX_MESSAGE_LEN {
        let mut end = MAX_MESSAGE_LEN;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push_str("...");
    }
    out
}

/// Redacts a URL that may not even parse: everything between `://` (or the
/// start) and the last `@` is credentials. Keeps the user name when the URL
/// is well-formed enough to tell it apart.
pub(super) fn redact_raw_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let creds = &rest[..at];
    let host = &rest[at + 1..];
    let shown = match creds.split_once(':') {
        Some((user, _)) if !user.contains(['/', '?', '#']) => format!("{user}:***"),
        Some(_) => "***".to_owned(),
        None => creds.to_owned(),
    };
    format!("{scheme}{shown}@{host}")
}

/// `redis://[user[:***]@]host:port/db` from parsed connection info.
pub(super) fn describe_info(info: &ConnectionInfo) -> String {
    let settings = info.redis_settings();
    let creds = match (settings.username(), settings.password().is_some()) {
        (Some(user), true) => format!("{user}:***@"),
        (None, true) => ":***@".to_owned(),
        (Some(user), false) => format!("{user}@"),
        (None, false) => String::new(),
    };
    let db = settings.db();
    let host_port = |host: &str, port: u16| {
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    };
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => {
            format!("redis://{creds}{}/{db}", host_port(host, *port))
        }
        ConnectionAddr::TcpTls { host, port, .. } => {
            format!("rediss://{creds}{}/{db}", host_port(host, *port))
        }
        ConnectionAddr::Unix(path) => format!("unix://{creds}{}?db={db}", path.display()),
        other => format!("redis://{creds}{other}/{db}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn raw_url_redaction() {
        assert_eq!(
            redact_raw_url("redis://user:pa55@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_raw_url("redis://:pa55@host"), "redis://:***@host");
        assert_eq!(redact_raw_url("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact_raw_url("redis://user@host"), "redis://user@host");
        // An unencoded '@' in the password: everything up to the last '@'.
        assert_eq!(
            redact_raw_url("redis://u:p@ss@host:x"),
            "redis://u:***@host:x"
        );
        assert_eq!(redact_raw_url("nonsense:pw@host"), "nonsense:***@host");
        assert!(!redact_raw_url("redis//:s3cret@h").contains("s3cret"));
    }

    #[test]
    pub(super) fn scrub_removes_secrets_and_token() {
        let secrets = vec!["s3cret".to_owned()];
        let out = scrub("AUTH s3cret failed for tok-123", &secrets, Some(b"tok-123"));
        assert_eq!(out, "AUTH *** failed for <token>");
        let long = "x".repeat(1000);
        assert!(scrub(&long, &[], None).len() <= MAX_MESSAGE_LEN + 3);
    }

    #[test]
    fn keys_are_escaped_and_truncated_in_messages() {
        assert_eq!(show_key(b"a\xffb"), "\"a\\xffb\"");
        assert!(show_key(&[b'k'; 100]).ends_with("(100 bytes)"));
    }
}

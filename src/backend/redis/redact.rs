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

/// A lock's keys for messages: the key (as [`show_key`]) of a single
/// lock; the members of a set (`lock_all`) as text, `{a, b}`, at most 200
/// characters shown.
pub(super) fn show_keys(keys: &crate::backend::KeySet) -> String {
    if let Some(key) = keys.single() {
        return show_key(key);
    }
    let shown = keys.to_string();
    match shown.char_indices().nth(200) {
        Some((cut, _)) => {
            let bytes: usize = keys.iter().map(<[u8]>::len).sum();
            format!("{}... ({} keys, {bytes} bytes)", &shown[..cut], keys.len())
        }
        None => shown,
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

/// Query parameters whose values are passwords. The `redis` crate reads
/// `pass` (Unix socket URLs); `password` is redacted too, as a likely
/// spelling. User names (`user=`, `username=`, or before the `:` in the
/// user-info) are not secrets and stay visible, like in
/// [`describe`](crate::backend::Backend::describe).
/// (`sentinel_password=` is a Sentinel node's: `backend/sentinel`.)
const SECRET_PARAMS: [&str; 3] = ["pass", "password", "sentinel_password"];

/// Every password written in `url`, as written and percent-decoded: the
/// user-info password and the values of `pass=` / `password=` query
/// parameters (whose names may be percent-encoded too). Scrubbed from every
/// message, also from server and parser text.
pub(super) fn url_secrets(url: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    let mut add = |raw: &str| {
        for form in [
            raw.to_owned(),
            percent_decode(raw, false),
            percent_decode(raw, true),
        ] {
            if !form.is_empty() && !secrets.contains(&form) {
                secrets.push(form);
            }
        }
    };
    let rest = url.find("://").map_or(url, |i| &url[i + 3..]);
    if let Some(at) = rest.rfind('@')
        && let Some((_, password)) = rest[..at].split_once(':')
    {
        add(password);
    }
    for (_, value) in secret_params(url) {
        add(value);
    }
    secrets
}

/// The `(name, value)` query parameters of `url` that hold a password.
fn secret_params(url: &str) -> Vec<(&str, &str)> {
    let Some(q) = url.find('?') else {
        return Vec::new();
    };
    let query = url[q + 1..].split('#').next().unwrap_or("");
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(name, _)| {
            let name = percent_decode(name, true).to_ascii_lowercase();
            SECRET_PARAMS.contains(&name.as_str())
        })
        .collect()
}

/// Redacts a URL that may not even parse: the values of password query
/// parameters, and everything between `://` (or the start) and the last
/// `@` (the user-info). Keeps the user name when the URL is well-formed
/// enough to tell it apart.
pub(super) fn redact_raw_url(url: &str) -> String {
    let mut url = url.to_owned();
    for (name, value) in secret_params(&url.clone()) {
        url = url.replace(&format!("{name}={value}"), &format!("{name}=***"));
    }
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url.as_str()),
    };
    let Some(at) = rest.rfind('@') else {
        return url.clone();
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

/// `%XX` sequences decoded (and `+` as a space, for query text, when
/// `plus`); anything malformed is kept as written.
fn percent_decode(text: &str, plus: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        // Two hex digits: at most 255.
                        out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' if plus => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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
        ConnectionAddr::Unix(path) => {
            let mut shown = format!("unix://{}?db={db}", path.display());
            if let Some(user) = settings.username() {
                shown.push_str(&format!("&user={user}"));
            }
            if settings.password().is_some() {
                shown.push_str("&pass=***");
            }
            shown
        }
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

    /// Every URL form that carries a password: no error, `Debug`,
    /// `Display` or description of the backend shows it, whether the URL
    /// opens or not, and whether the call after it fails or not.
    #[test]
    fn no_url_form_leaks_its_password() {
        use std::time::Duration;

        use crate::backend::redis::RedisBackend;
        use crate::backend::{Backend, Probe};

        // (url, opens)
        let cases: &[(&str, bool)] = &[
            ("redis://:hunter2@127.0.0.1:1/0", true),
            ("redis://bob:hunter2@127.0.0.1:1/0", true),
            ("redis://bob:hun%74er2@127.0.0.1:1", true),
            ("redis://:p%40ss%2Fw0rd@127.0.0.1:1", true),
            ("redis://:hunter2@127.0.0.1:1/0?password=hunter2", true),
            ("valkey://:hunter2@127.0.0.1:1/0", true),
            (
                "unix:///tmp/quorum-lock-none.sock?user=bob&pass=hunter2",
                true,
            ),
            ("unix:///tmp/quorum-lock-none.sock?pass=hun%74er2", true),
            ("redis+unix:///tmp/quorum-lock-none.sock?pass=hunter2", true),
            ("redis://:hunter2@127.0.0.1:notaport", false),
            ("redis://:hunter2@127.0.0.1:1/x", false),
            ("redis://u:p@ss/w0rd@host:x", false),
            ("redis://u:hunter2@0.0.0.0:6379", false),
            ("valkey://:hunter2@127.0.0.1:1/x", false),
            ("http://:hunter2@127.0.0.1:6379", false),
            (":hunter2@nowhere", false),
            ("nowhere:hunter2@host", false),
            ("unix:///tmp/r.sock?pass=hunter2&db=x", false),
            ("unix:///tmp/r.sock?db=x&password=hunter2", false),
            ("unix:///tmp/r.sock?pa%73s=hunter2&db=x", false),
            ("unix:///tmp/r.sock?PASS=hunter2&db=x", false),
            ("unix:///tmp/r.sock?pass=hun%74er2&db=x", false),
            ("unix:///tmp/r.sock?pass=p%40ss%2Fw0rd&db=x", false),
            (
                "unix:///tmp/quorum-lock-none.sock?pass=hunter2#frag&db=x",
                true,
            ),
            ("redis+unix:///tmp/r.sock?user=bob&pass=hunter2&db=x", false),
            ("rediss://:hunter2@127.0.0.1:1/0#notinsecure", false),
        ];
        let secrets = ["hunter2", "hun%74er2", "p@ss", "p%40ss", "w0rd"];
        let check = |url: &str, text: &str| {
            for secret in secrets {
                assert!(!text.contains(secret), "{url}: leaked in {text}");
            }
            assert!(!text.contains('\n'), "{url}: {text}");
        };
        for &(url, opens) in cases {
            match RedisBackend::open(url, Duration::from_millis(200)) {
                Ok(b) => {
                    assert!(opens, "{url} opened");
                    check(url, &format!("{b:?} {}", b.describe()));
                    let e = crate::backend::acquire(&b, b"k", b"t", Duration::from_secs(1))
                        .unwrap_err();
                    check(url, &format!("{e} {e:?}"));
                    let e = b.server_info().unwrap_err();
                    check(url, &format!("{e} {e:?}"));
                }
                Err(e) => {
                    assert!(!opens, "{url}: {e}");
                    check(url, &format!("{e} {e:?}"));
                }
            }
        }
        // The reported leak, redacted but still readable.
        let e = RedisBackend::open(
            "unix:///tmp/r.sock?pass=hunter2&db=x",
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("unix:///tmp/r.sock?pass=***&db=x"),
            "{e}"
        );
        let b = RedisBackend::open(
            "unix:///tmp/r.sock?user=bob&pass=hunter2",
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(b.describe(), "unix:///tmp/r.sock?db=0&user=bob&pass=***");
    }

    #[test]
    fn url_secrets_finds_every_form() {
        let s = url_secrets("redis://u:p%40ss@h?pass=a+b&x=1&pa%73sword=c%21");
        for want in ["p%40ss", "p@ss", "a+b", "a b", "c%21", "c!"] {
            assert!(s.iter().any(|x| x == want), "{want} not in {s:?}");
        }
        assert!(url_secrets("redis://u@h:1/0?user=bob").is_empty());
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

//! Owner labels: who holds a lock, stored with it on every node.
//!
//! The value a node stores for a lock is the lock's random token (20
//! bytes) followed by [`OWNER_MARK`] and the manager's owner label, such as
//! `;owner=build-7:4211`. Release, extend and every compare-and-act script
//! compare the whole value, and the token makes it unique, so nothing about
//! the algorithm changes. Other Redlock clients still interoperate: they
//! compare only their own values, which never equal ours.
//!
//! A label is public (anyone who can read the key reads it), so it must
//! never carry a secret: the default is the host name and process id.

use crate::token::{TOKEN_LEN, Token};

/// Longest owner label, in bytes.
pub const MAX_OWNER_LEN: usize = 64;

/// What separates the token from the label in a stored value.
pub(crate) const OWNER_MARK: &[u8] = b";owner=";

/// Checks a label given to
/// [`LockManagerBuilder::owner`](crate::LockManagerBuilder::owner): at most
/// [`MAX_OWNER_LEN`] bytes of printable ASCII (space included), so that it
/// prints on one line anywhere. Empty means "store no label". The error
/// is the reason, which the builder reports as
/// [`Error::Config`](crate::Error::Config).
pub(crate) fn check_label(label: &str) -> Result<(), String> {
    if label.len() > MAX_OWNER_LEN {
        return Err(format!(
            "owner label is {} bytes long; at most {MAX_OWNER_LEN} are allowed",
            label.len()
        ));
    }
    if let Some(bad) = label.chars().find(|c| !is_printable(*c)) {
        return Err(format!(
            "owner label contains {bad:?}: only printable ASCII (space included) is allowed"
        ));
    }
    Ok(())
}

fn is_printable(c: char) -> bool {
    c == ' ' || c.is_ascii_graphic()
}

/// The default label: this host's name and this process's id, as
/// `host:pid` (`unknown-host:pid` when the name cannot be read).
pub(crate) fn default_label() -> String {
    let host = host_name()
        .map(|h| {
            h.chars()
                .filter(|c| c.is_ascii_graphic())
                .take(MAX_OWNER_LEN - 11)
                .collect::<String>()
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}:{}", std::process::id())
}

/// The host name, from the kernel (Linux) or the environment.
fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().to_owned())
}

/// What follows the token in every value a manager stores: the mark and
/// the label, or nothing for an empty label.
pub(crate) fn value_suffix(label: &str) -> Box<[u8]> {
    if label.is_empty() {
        return Box::default();
    }
    [OWNER_MARK, label.as_bytes()].concat().into_boxed_slice()
}

/// Appends the value stored for `token` (the token, then `suffix`).
pub(crate) fn push_value(token: &Token, suffix: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(token.as_bytes());
    out.extend_from_slice(suffix);
}

impl Token {
    /// Whether `value`, read from a node, is this token's lock: the token,
    /// alone or followed by an owner label
    /// ([`LockManagerBuilder::owner`](crate::LockManagerBuilder::owner)).
    pub fn matches_stored(&self, value: &[u8]) -> bool {
        value
            .strip_prefix(self.as_bytes())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(OWNER_MARK))
    }
}

/// The owner label in a stored value, if the value is one of ours with a
/// label that passes [`check_label`]; `None` for a value of another client
/// or one stored without a label. Never any part of the token.
pub(crate) fn owner_in(value: &[u8]) -> Option<&str> {
    let rest = value.get(TOKEN_LEN..)?.strip_prefix(OWNER_MARK)?;
    let label = std::str::from_utf8(rest).ok()?;
    (!label.is_empty() && check_label(label).is_ok()).then_some(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_carries_its_label_after_the_token() {
        let token = Token::random().unwrap();
        let mut value = Vec::new();
        push_value(&token, &value_suffix("worker-3:812"), &mut value);
        assert!(value.starts_with(token.as_bytes()));
        assert_eq!(owner_in(&value), Some("worker-3:812"));
    }

    #[test]
    fn foreign_or_unlabelled_values_have_no_owner() {
        let token = Token::random().unwrap();
        let mut value = Vec::new();
        push_value(&token, &value_suffix(""), &mut value);
        assert_eq!(value, token.as_bytes());
        assert_eq!(owner_in(&value), None);
        assert_eq!(owner_in(b"6f1c2a9e-0000-4000-8000-1234567890ab"), None);
        assert_eq!(owner_in(b"short"), None);
        // A label that would not pass the builder's check is not shown.
        let mut bad = token.as_bytes().to_vec();
        bad.extend_from_slice(b";owner=line\nbreak");
        assert_eq!(owner_in(&bad), None);
    }

    #[test]
    fn labels_are_checked() {
        assert!(check_label("build-7:4211").is_ok());
        assert!(check_label("").is_ok());
        assert!(check_label(&"x".repeat(MAX_OWNER_LEN + 1)).is_err());
        assert!(check_label("tab\there").is_err());
        assert!(check_label("é").is_err());
        let default = default_label();
        assert!(check_label(&default).is_ok(), "{default:?}");
        assert!(default.ends_with(&format!(":{}", std::process::id())));
    }
}

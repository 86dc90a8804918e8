//! A report's resource, written out as text only when someone reads it:
//! a lock's every round makes a report, and most are never shown.

use std::fmt;
use std::sync::OnceLock;

use crate::backend::KeySet;

/// The resource a [`Report`](super::Report) is about: the lock's keys
/// (shared with the lock, not copied) and their text, made on first read.
#[derive(Clone)]
pub(crate) struct Name {
    keys: Option<KeySet>,
    text: OnceLock<String>,
}

impl Name {
    /// The name of `keys` (as their `Display` writes them).
    pub(crate) fn of(keys: &KeySet) -> Self {
        Self {
            keys: Some(keys.clone()),
            text: OnceLock::new(),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        self.text.get_or_init(|| {
            self.keys
                .as_ref()
                .map_or_else(String::new, ToString::to_string)
        })
    }
}

impl From<String> for Name {
    fn from(text: String) -> Self {
        Self {
            keys: None,
            text: OnceLock::from(text),
        }
    }
}

impl From<&str> for Name {
    fn from(text: &str) -> Self {
        Self::from(text.to_owned())
    }
}

/// As the text: a report's `Debug` shows `resource: "orders:42"`.
impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_the_keys_display() {
        let one = KeySet::one("orders:42");
        assert_eq!(Name::of(&one).as_str(), one.to_string());
        let set = KeySet::new(["b", "a"]).expect("a set");
        assert_eq!(Name::of(&set).as_str(), set.to_string());
        assert_eq!(format!("{:?}", Name::of(&one)), "\"orders:42\"");
        assert_eq!(Name::from("job").as_str(), "job");
    }
}

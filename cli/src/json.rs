//! The little JSON the tool prints for scripts (`--json`): objects,
//! arrays, strings, integers, booleans, null. Writing it takes a few lines;
//! a serializer dependency would not pay for itself. Numbers are integers
//! only, printed exactly (no `f64` on the way: fences and counts above 2^53
//! would be rounded), and durations are integer milliseconds.

use std::fmt;
use std::time::Duration;

/// A JSON value.
#[derive(Debug, Clone)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Int(i128),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(&'static str, Json)>),
}

impl From<&str> for Json {
    fn from(s: &str) -> Self {
        Self::Str(s.to_owned())
    }
}

impl From<String> for Json {
    fn from(s: String) -> Self {
        Self::Str(s)
    }
}

impl From<bool> for Json {
    fn from(b: bool) -> Self {
        Self::Bool(b)
    }
}

impl From<u64> for Json {
    fn from(n: u64) -> Self {
        Self::Int(n.into())
    }
}

impl From<i64> for Json {
    fn from(n: i64) -> Self {
        Self::Int(n.into())
    }
}

impl From<usize> for Json {
    fn from(n: usize) -> Self {
        // usize is at most 64 bits on every target Rust supports.
        Self::Int(i128::try_from(n).unwrap_or(i128::MAX))
    }
}

impl Json {
    /// A duration as whole milliseconds (rounded down).
    pub(crate) fn millis(d: Duration) -> Self {
        Self::Int(i128::try_from(d.as_millis()).unwrap_or(i128::MAX))
    }

    /// Whole microseconds: a round trip on a LAN is below a millisecond.
    pub(crate) fn micros(d: Duration) -> Self {
        Self::Int(i128::try_from(d.as_micros()).unwrap_or(i128::MAX))
    }
}

impl<T: Into<Json>> From<Option<T>> for Json {
    fn from(o: Option<T>) -> Self {
        o.map_or(Self::Null, Into::into)
    }
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Null => f.write_str("null"),
            Self::Bool(b) => write!(f, "{b}"),
            Self::Int(n) => write!(f, "{n}"),
            Self::Str(s) => write_str(f, s),
            Self::Arr(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            Self::Obj(fields) => {
                f.write_str("{")?;
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write_str(f, key)?;
                    write!(f, ":{value}")?;
                }
                f.write_str("}")
            }
        }
    }
}

fn write_str(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_nests() {
        let value = Json::Obj(vec![
            ("name", "a\"b\\c\n".into()),
            ("n", 3u64.into()),
            ("ok", true.into()),
            ("none", Option::<u64>::None.into()),
            ("list", Json::Arr(vec![1i64.into(), "\u{1}".into()])),
            ("big", u64::MAX.into()),
            ("ms", Json::millis(Duration::from_micros(1999))),
        ]);
        assert_eq!(
            value.to_string(),
            r#"{"name":"a\"b\\c\n","n":3,"ok":true,"none":null,"list":[1,"\u0001"],"big":18446744073709551615,"ms":1}"#
        );
    }
}

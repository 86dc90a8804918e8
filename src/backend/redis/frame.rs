//! Reply framing with limits: where one RESP2 reply ends in the bytes
//! received so far, checked against the sizes a lock server can
//! legitimately send, *before* anything is parsed or allocated.
//!
//! The `redis` crate's parser turns a complete frame into a
//! [`Value`](redis::Value); it has no limits of its own (a header announcing
//! 99 999 999 999 elements makes it collect for as long as bytes arrive) and
//! cannot say where a reply ends. So the connection keeps its own buffer,
//! asks [`scan`] whether it holds a whole reply, and hands exactly that
//! frame to the parser.
//!
//! The backend never sends `HELLO`, so the server speaks RESP2: simple
//! strings, errors, integers, bulk strings and arrays. Anything else is a
//! peer that is not (acting as) a Redis server.

use redis::Value;

/// Largest reply accepted, in bytes. The largest legitimate answer to the
/// backend's commands is `INFO server`, a few KiB.
pub(super) const MAX_REPLY_BYTES: usize = 64 * 1024;

/// Largest array length accepted in a header. None of the backend's
/// commands is answered with an array at all.
const MAX_ARRAY_LEN: i64 = 1024;

/// Deepest nesting of arrays accepted.
pub(super) const MAX_DEPTH: usize = 8;

/// What the buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Scan {
    /// A whole reply: its first `n` bytes.
    Complete(usize),
    /// Not yet a whole reply; do not scan again before the buffer holds at
    /// least `need` bytes.
    Incomplete {
        /// Bytes the buffer must hold before the reply can be complete.
        need: usize,
    },
    /// Not a RESP2 reply, or one beyond the limits: why, on one line.
    Invalid(String),
}

/// Finds the end of the first reply in `buf`.
pub(super) fn scan(buf: &[u8]) -> Scan {
    let mut pos = 0;
    // Elements still expected by each open array, innermost last.
    let mut open: Vec<i64> = Vec::new();
    loop {
        let Some(&kind) = buf.get(pos) else {
            return Scan::Incomplete { need: pos + 1 };
        };
        if !matches!(kind, b'+' | b'-' | b':' | b'$' | b'*') {
            return Scan::Invalid(not_resp(&buf[pos..], pos == 0));
        }
        let Some(eol) = find_crlf(buf, pos + 1) else {
            return Scan::Incomplete {
                need: buf.len() + 1,
            };
        };
        let line = &buf[pos + 1..eol];
        pos = eol + 2;
        match kind {
            b'$' => {
                let len = match header(line, "string length") {
                    Ok(len) => len,
                    Err(why) => return Scan::Invalid(why),
                };
                if len >= 0 {
                    if len > MAX_REPLY_BYTES as i64 {
                        return Scan::Invalid(format!(
                            "reply announces a {len}-byte string, larger than the \
                             {MAX_REPLY_BYTES}-byte limit"
                        ));
                    }
                    // In range: at most MAX_REPLY_BYTES.
                    let end = pos + len as usize + 2;
                    if buf.len() < end {
                        return Scan::Incomplete { need: end };
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Scan::Invalid(
                            "bulk string not terminated by CRLF where its length says".to_owned(),
                        );
                    }
                    pos = end;
                }
            }
            b'*' => {
                let len = match header(line, "array length") {
                    Ok(len) => len,
                    Err(why) => return Scan::Invalid(why),
                };
                if len > MAX_ARRAY_LEN {
                    return Scan::Invalid(format!(
                        "reply announces an array of {len} elements, more than the \
                         {MAX_ARRAY_LEN} accepted"
                    ));
                }
                if len > 0 {
                    if open.len() >= MAX_DEPTH {
                        return Scan::Invalid(format!("arrays nested deeper than {MAX_DEPTH}"));
                    }
                    open.push(len);
                    continue;
                }
            }
            b':' => {
                if let Err(why) = header(line, "integer") {
                    return Scan::Invalid(why);
                }
            }
            // `+` and `-`: the line is the value.
            _ => {}
        }
        // One element is complete: close every array it completes.
        loop {
            match open.last_mut() {
                None => return Scan::Complete(pos),
                Some(left) => {
                    *left -= 1;
                    if *left > 0 {
                        break;
                    }
                    open.pop();
                }
            }
        }
    }
}

/// The index of the first `\r\n` at or after `from`.
pub(super) fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    rest.windows(2).position(|w| w == b"\r\n").map(|i| from + i)
}

/// A header's integer: a length (`-1` for nil) or an integer reply.
fn header(line: &[u8], what: &str) -> Result<i64, String> {
    let parsed = std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<i64>().ok());
    match parsed {
        Some(n) if n >= -1 || what == "integer" => Ok(n),
        _ => Err(format!("invalid {what} {}", shown(line, 24))),
    }
}

/// Why bytes that do not start a RESP2 value are not a reply, with a hint
/// when they look like another protocol.
fn not_resp(bytes: &[u8], at_start: bool) -> String {
    let hint = match bytes.first() {
        Some(0x15 | 0x16) if at_start => {
            " (looks like TLS: is this a TLS port? use rediss://)".to_owned()
        }
        _ if bytes.starts_with(b"HTTP/") => " (an HTTP server?)".to_owned(),
        _ => String::new(),
    };
    format!("not a Redis reply: starts with {}{hint}", shown(bytes, 32))
}

/// Up to `max` bytes, quoted and escaped, on one line.
fn shown(bytes: &[u8], max: usize) -> String {
    let text: String = bytes
        .iter()
        .take(max)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    let more = if bytes.len() > max { "..." } else { "" };
    format!("\"{text}{more}\"")
}

/// The text of a status or bulk reply.
pub(crate) fn value_text(value: &Value) -> Option<String> {
    match value {
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".to_owned()),
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// A reply's shape for messages, without its content.
pub(super) fn describe_value(value: &Value) -> String {
    match value {
        Value::Nil => "nil".to_owned(),
        Value::Int(n) => format!("integer {n}"),
        Value::Okay => "OK".to_owned(),
        Value::SimpleString(_) => "a status reply".to_owned(),
        Value::BulkString(b) => format!("a {}-byte string", b.len()),
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::ServerError(e) => format!("error {}", e.code()),
        _ => "an unexpected reply type".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn invalid(buf: &[u8]) -> String {
        match scan(buf) {
            Scan::Invalid(why) => why,
            other => panic!(
                "{:?}: expected Invalid, got {other:?}",
                String::from_utf8_lossy(buf)
            ),
        }
    }

    #[test]
    fn complete_replies_end_where_they_should() {
        let cases: [(&[u8], usize); 10] = [
            (b"+OK\r\n", 5),
            (b"+OK\r\n+OK\r\n", 5),
            (b"-ERR no\r\n:1\r\n", 9),
            (b":-42\r\n", 6),
            (b"$-1\r\n", 5),
            (b"$0\r\n\r\n", 6),
            (b"$3\r\na\r\n\r\n:1\r\n", 9),
            (b"*-1\r\n", 5),
            (b"*0\r\n", 4),
            (b"*2\r\n*1\r\n:1\r\n$1\r\nx\r\n+tail\r\n", 19),
        ];
        for (buf, end) in cases {
            assert_eq!(
                scan(buf),
                Scan::Complete(end),
                "{:?}",
                String::from_utf8_lossy(buf)
            );
            // Every proper prefix is incomplete, never invalid.
            for cut in 0..end {
                assert!(
                    matches!(scan(&buf[..cut]), Scan::Incomplete { need } if need > cut),
                    "{:?} cut at {cut}",
                    String::from_utf8_lossy(buf)
                );
            }
        }
    }

    #[test]
    fn bulk_bodies_say_how_much_is_needed() {
        assert_eq!(scan(b"$10\r\nabc"), Scan::Incomplete { need: 17 });
    }

    #[test]
    fn declared_sizes_beyond_the_limits_are_refused_at_once() {
        assert!(invalid(b"*99999999999\r\n").contains("99999999999"));
        assert!(invalid(b"$99999999999\r\n").contains("99999999999"));
        assert!(invalid(b"$65537\r\n").contains("65537"));
        assert!(matches!(scan(b"$65536\r\n"), Scan::Incomplete { .. }));
        assert!(invalid(b"*2000\r\n").contains("2000"));
        let deep = b"*1\r\n".repeat(MAX_DEPTH + 1);
        assert!(invalid(&deep).contains("nested"));
        assert!(invalid(b"$-2\r\n").contains("invalid"));
        assert!(invalid(b"$abc\r\n").contains("invalid"));
        assert!(invalid(b":1.5\r\n").contains("invalid"));
        assert!(invalid(b"$1\r\nabc\r\n").contains("CRLF"));
    }

    #[test]
    fn other_protocols_are_named() {
        let http = invalid(b"HTTP/1.1 400 Bad Request\r\n\r\n<html>\n");
        assert!(
            http.contains("not a Redis reply") && http.contains("HTTP"),
            "{http}"
        );
        assert!(!http.contains('\n') && !http.contains('\r'), "{http}");
        assert!(invalid(b"\x15\x03\x03\x00\x02\x02\x46").contains("TLS"));
        // RESP3 types are not sent to a RESP2 client.
        assert!(invalid(b"%1\r\n").contains("not a Redis reply"));
        assert!(invalid(b"*1\r\n!3\r\n").contains("not a Redis reply"));
    }

    #[test]
    fn frames_parse_with_the_redis_parser() {
        let buf = b"*2\r\n$3\r\nabc\r\n:7\r\n+rest\r\n";
        let Scan::Complete(n) = scan(buf) else {
            panic!("incomplete")
        };
        let value = redis::parse_redis_value(&buf[..n]).unwrap();
        assert_eq!(
            value,
            redis::Value::Array(vec![
                redis::Value::BulkString(b"abc".to_vec()),
                redis::Value::Int(7)
            ])
        );
    }
}

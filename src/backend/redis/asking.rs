//! A connection in `ASKING` mode, for a cluster's `ASK` redirect: the key
//! is (or will be) on a master that is importing its slot, and serves it
//! only to a command that follows `ASKING` (the flag lasts one command).
//! So every command of a request gets its own `ASKING` before it, and the
//! `ASKING` replies are dropped on the way back: the pipeline code above
//! never sees them.

use redis::Value;

/// `ASKING`, packed.
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// `request` (commands packed as RESP arrays of bulk strings, as
/// `redis::Cmd` packs them) with `ASKING` before each command; `None` for
/// a request that is not such a list (never one this backend packs).
pub(super) fn each_asked(request: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(request.len() + request.len() / 4);
    let mut at = 0;
    while at < request.len() {
        let start = at;
        let parts = number_after(request, &mut at, b'*')?;
        for _ in 0..parts {
            let len = number_after(request, &mut at, b'$')?;
            at = at.checked_add(len)?.checked_add(2)?;
            if at > request.len() {
                return None;
            }
        }
        out.extend_from_slice(ASKING);
        out.extend_from_slice(&request[start..at]);
    }
    Some(out)
}

/// The number after `mark` at `*at`, up to its `\r\n` (moved past).
fn number_after(request: &[u8], at: &mut usize, mark: u8) -> Option<usize> {
    if request.get(*at) != Some(&mark) {
        return None;
    }
    let rest = &request[*at + 1..];
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    let number = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    *at += 1 + end + 2;
    Some(number)
}

/// The replies of an asked request without the `ASKING` ones: every other
/// reply, from the second on.
pub(super) fn answers_only(replies: Vec<Value>) -> Vec<Value> {
    replies.into_iter().skip(1).step_by(2).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn every_command_is_asked_for() {
        let mut request = Vec::new();
        redis::cmd("SET")
            .arg("k")
            .arg(b"\r\n*1\r\n".as_slice())
            .arg("NX")
            .write_packed_command(&mut request);
        redis::cmd("WAIT")
            .arg(1)
            .arg(5)
            .write_packed_command(&mut request);
        let asked = each_asked(&request).unwrap();
        let mut expected = ASKING.to_vec();
        redis::cmd("SET")
            .arg("k")
            .arg(b"\r\n*1\r\n".as_slice())
            .arg("NX")
            .write_packed_command(&mut expected);
        expected.extend_from_slice(ASKING);
        redis::cmd("WAIT")
            .arg(1)
            .arg(5)
            .write_packed_command(&mut expected);
        assert_eq!(asked, expected);
        assert_eq!(each_asked(b"").unwrap(), b"");
        assert_eq!(each_asked(b"PING\r\n"), None);
        assert_eq!(each_asked(b"*1\r\n$9\r\nPING\r\n"), None);
        let replies = vec![Value::Okay, Value::Int(1), Value::Okay, Value::Nil];
        assert_eq!(answers_only(replies), vec![Value::Int(1), Value::Nil]);
    }
}

//! A whole RESP2 reply turned into a [`Value`] in one pass, without the
//! `redis` crate's parser, for the kinds the backend's commands are
//! answered with.
//!
//! The crate's parser reads through `combine` and zeroes a read buffer for
//! every reply: counted with cachegrind on `quorum-bench --wakes 1` (one
//! thread, N=1, lock + `release()`), 6,300 instructions per reply, about
//! 12,800 of the 47,700 the client spent per lock + release. The frame
//! handed here is complete and within limits (checked by
//! [`frame::scan`](super::frame::scan)), so decoding it is a walk over its
//! lines. Whatever this would not produce exactly as the crate's parser
//! does (an error reply, a status line that is not UTF-8, an integer with
//! spaces) gives `None`, and the caller hands the frame to the parser.

use redis::Value;

use super::frame::{MAX_DEPTH, find_crlf};

/// The value of the whole reply `frame`, or `None` when the crate's parser
/// must read it.
pub(super) fn decode(frame: &[u8]) -> Option<Value> {
    let mut pos = 0;
    let value = one(frame, &mut pos, 0)?;
    (pos == frame.len()).then_some(value)
}

/// The reply at the head of `pending` and its length, when it is one of
/// the replies a lock's operations get most: `+OK` (a `SET .. NX` that
/// set), `$-1` (one that did not), `:1` and `:0` (a script's answer).
/// Each is one line, so it is whole when its bytes are there, and its
/// value is the one [`decode`] gives; read here without the scan and the
/// decoding, which cost several hundred instructions per reply (counted
/// with callgrind; six replies per lock + release at N=3). `None`:
/// anything else, or not all of it yet.
pub(super) fn common(pending: &[u8]) -> Option<(Value, usize)> {
    match pending.get(..4)? {
        b":1\r\n" => Some((Value::Int(1), 4)),
        b":0\r\n" => Some((Value::Int(0), 4)),
        b"+OK\r" if pending.get(4) == Some(&b'\n') => Some((Value::Okay, 5)),
        b"$-1\r" if pending.get(4) == Some(&b'\n') => Some((Value::Nil, 5)),
        _ => None,
    }
}

/// The value starting at `pos`, which moves past it.
fn one(buf: &[u8], pos: &mut usize, depth: usize) -> Option<Value> {
    let kind = *buf.get(*pos)?;
    let eol = find_crlf(buf, *pos + 1)?;
    let line = &buf[*pos + 1..eol];
    *pos = eol + 2;
    match kind {
        b'+' => {
            let text = std::str::from_utf8(line).ok()?;
            Some(if text == "OK" {
                Value::Okay
            } else {
                Value::SimpleString(text.to_owned())
            })
        }
        b':' => Some(Value::Int(integer(line)?)),
        b'$' => {
            let Ok(len) = usize::try_from(integer(line)?) else {
                return Some(Value::Nil);
            };
            let end = pos.checked_add(len)?;
            let bytes = buf.get(*pos..end)?;
            if buf.get(end..end.checked_add(2)?)? != b"\r\n" {
                return None;
            }
            *pos = end + 2;
            Some(Value::BulkString(bytes.to_vec()))
        }
        b'*' => {
            let Ok(len) = usize::try_from(integer(line)?) else {
                return Some(Value::Nil);
            };
            // `scan` refuses deeper nesting before a frame gets here;
            // the recursion is bounded all the same.
            if depth >= MAX_DEPTH {
                return None;
            }
            // The header is checked by `scan`; the capacity is bounded
            // all the same.
            let mut items = Vec::with_capacity(len.min(64));
            for _ in 0..len {
                items.push(one(buf, pos, depth + 1)?);
            }
            Some(Value::Array(items))
        }
        // Errors (`-`), and anything else: the crate's parser.
        _ => None,
    }
}

/// A header's or an integer reply's number, as the crate's parser reads
/// it when there is no space around it.
fn integer(line: &[u8]) -> Option<i64> {
    std::str::from_utf8(line).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use testkit::rng::Rng;

    use super::*;
    use crate::backend::redis::frame::{Scan, scan};

    /// Decodes `frame` both ways: ours must equal the crate's parser's, or
    /// be `None` (then the parser reads it, as before).
    fn agrees(frame: &[u8]) -> Option<Value> {
        let theirs = redis::parse_redis_value(frame).ok();
        let ours = decode(frame);
        if let Some(ours) = &ours {
            assert_eq!(
                Some(ours),
                theirs.as_ref(),
                "frame {:?}",
                String::from_utf8_lossy(frame)
            );
        }
        ours
    }

    /// The common replies read without the scan are the whole frames
    /// the scan finds, with the values the decoding gives, whatever
    /// follows them; anything else, or a part of one, is left to both.
    #[test]
    fn the_common_replies_read_as_the_scan_and_the_decoding_read_them() {
        for frame in [&b"+OK\r\n"[..], b"$-1\r\n", b":1\r\n", b":0\r\n"] {
            for tail in [&b""[..], b"+OK\r\n", b":12\r\n", b"$-"] {
                let pending = [frame, tail].concat();
                let (value, len) = common(&pending).unwrap();
                assert_eq!(scan(&pending), Scan::Complete(len));
                assert_eq!(Some(value), agrees(&pending[..len]));
            }
            for cut in 0..frame.len() {
                assert_eq!(common(&frame[..cut]), None);
            }
        }
        let others: &[&[u8]] = &[
            b"+OKAY\r\n",
            b"+OK\n",
            b":10\r\n",
            b":-1\r\n",
            b":1\n\r\n",
            b"$-10\r\n",
            b"$1\r\n1\r\n",
            b"-ERR\r\n",
            b"*1\r\n:1\r\n",
        ];
        for other in others {
            assert_eq!(common(other), None, "{:?}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn the_backend_s_replies_decode_as_the_crate_s_parser_reads_them() {
        let decoded: &[&[u8]] = &[
            b"+OK\r\n",
            b"+QUEUED\r\n",
            b"+\r\n",
            b":0\r\n",
            b":-1\r\n",
            b":9223372036854775807\r\n",
            b":-9223372036854775808\r\n",
            b"$-1\r\n",
            b"$0\r\n\r\n",
            b"$5\r\nab\r\nc\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n$3\r\nabc\r\n:7\r\n*2\r\n+OK\r\n$-1\r\n",
        ];
        for frame in decoded {
            assert!(
                agrees(frame).is_some(),
                "{:?}",
                String::from_utf8_lossy(frame)
            );
        }
        let to_the_parser: &[&[u8]] = &[
            b"-ERR wrong\r\n",
            b"*2\r\n:1\r\n-NOSCRIPT no\r\n",
            b"+\xff\xfe\r\n",
            b": 5\r\n",
            b"$3\r\nabcd\r\n",
            b"+OK\r\n+OK\r\n",
            b"*2\r\n:1\r\n",
            b"%1\r\n",
        ];
        for frame in to_the_parser {
            assert_eq!(agrees(frame), None, "{:?}", String::from_utf8_lossy(frame));
        }
    }

    /// A random RESP2 value of at most `depth` levels, written to `out`;
    /// whether it holds an error reply.
    fn random_frame(rng: &mut Rng, depth: usize, out: &mut Vec<u8>) -> bool {
        match rng.below(if depth == 0 { 6 } else { 8 }) {
            0 => out.extend_from_slice(if rng.below(2) == 0 {
                b"+OK\r\n"
            } else {
                b"+PONG\r\n"
            }),
            1 => {
                let n = match rng.below(3) {
                    0 => rng.next_u64() as i64,
                    1 => rng.below(100) as i64 - 50,
                    _ => [i64::MIN, i64::MAX, 0][rng.below(3) as usize],
                };
                out.extend_from_slice(format!(":{n}\r\n").as_bytes());
            }
            2 => {
                let len = rng.below(12) as usize;
                let bytes: Vec<u8> = (0..len)
                    .map(|_| [b'a', b'\r', b'\n', 0, 0xff, b'$'][rng.below(6) as usize])
                    .collect();
                out.extend_from_slice(format!("${len}\r\n").as_bytes());
                out.extend_from_slice(&bytes);
                out.extend_from_slice(b"\r\n");
            }
            3 => out.extend_from_slice(b"$-1\r\n"),
            4 => out.extend_from_slice(b"*-1\r\n"),
            5 => {
                out.extend_from_slice(b"-ERR something\r\n");
                return true;
            }
            _ => {
                let len = rng.below(4);
                out.extend_from_slice(format!("*{len}\r\n").as_bytes());
                let mut error = false;
                for _ in 0..len {
                    error |= random_frame(rng, depth - 1, out);
                }
                return error;
            }
        }
        false
    }

    #[test]
    fn random_replies_decode_as_the_crate_s_parser_reads_them() {
        let mut rng = Rng::new(46);
        let mut decoded = 0;
        for _ in 0..5_000 {
            let mut frame = Vec::new();
            let error = random_frame(&mut rng, 3, &mut frame);
            assert_eq!(scan(&frame), Scan::Complete(frame.len()));
            let ours = agrees(&frame);
            assert_eq!(
                ours.is_none(),
                error,
                "only a reply holding an error goes to the parser: {:?}",
                String::from_utf8_lossy(&frame)
            );
            decoded += usize::from(ours.is_some());
        }
        assert!(decoded > 3_000, "{decoded} of 5,000 decoded here");
    }
}

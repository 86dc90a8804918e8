//! What an election's record key holds: the leader's term, the token of
//! its lock, and its value, in one string that inspection reads whole.
//!
//! Layout: [`MAGIC`], the term (8 bytes, big-endian), the leader's token
//! ([`TOKEN_LEN`] bytes), then the value. A record counts on a node only
//! beside a lock key that holds the same token (`observe.rs`): the token
//! ties the record to one acquisition, and tokens are never reused.

use crate::backend::MAX_INSPECTED_VALUE;
use crate::token::{TOKEN_LEN, Token};

/// What starts every record: a foreign value in the key is never read as
/// one.
const MAGIC: &[u8; 4] = b"qle1";

/// The bytes a record adds to its value.
const HEADER: usize = MAGIC.len() + 8 + TOKEN_LEN;

/// Longest value a leader may proclaim, in bytes: what an inspection
/// reads of a key ([`MAX_INSPECTED_VALUE`], 256) less the record's
/// header (32), so that `observe` always reads a value whole.
pub const MAX_LEADER_VALUE: usize = MAX_INSPECTED_VALUE - HEADER;

/// A record, as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) term: u64,
    pub(crate) token: [u8; TOKEN_LEN],
    pub(crate) value: Vec<u8>,
}

/// The record of the leader holding `token` in `term`, proclaiming
/// `value` (at most [`MAX_LEADER_VALUE`] bytes: the caller checks).
pub(crate) fn encode(term: u64, token: &Token, value: &[u8]) -> Vec<u8> {
    encode_raw(term, token.as_bytes(), value)
}

/// [`encode`] of a token's bytes ([`TOKEN_LEN`] of them).
pub(crate) fn encode_raw(term: u64, token: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + value.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&term.to_be_bytes());
    out.extend_from_slice(token);
    out.extend_from_slice(value);
    out
}

/// The record in `bytes` (the whole stored value, `len` bytes long), or
/// `None` for anything that is not one (or was cut by the read).
pub(crate) fn decode(bytes: &[u8], len: usize) -> Option<Record> {
    if bytes.len() != len || !bytes.starts_with(MAGIC) || bytes.len() < HEADER {
        return None;
    }
    let rest = &bytes[MAGIC.len()..];
    let term = u64::from_be_bytes(rest[..8].try_into().ok()?);
    let token = rest[8..8 + TOKEN_LEN].try_into().ok()?;
    Some(Record {
        term,
        token,
        value: rest[8 + TOKEN_LEN..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_record_reads_back_and_anything_else_does_not() {
        let token = Token::random().unwrap();
        let bytes = encode(42, &token, b"host-1:8080");
        let record = decode(&bytes, bytes.len()).unwrap();
        assert_eq!(record.term, 42);
        assert_eq!(&record.token[..], token.as_bytes());
        assert_eq!(record.value, b"host-1:8080");
        // Cut by the read, foreign, or too short: not a record.
        assert_eq!(decode(&bytes, bytes.len() + 1), None);
        assert_eq!(decode(b"someone else's value", 20), None);
        assert_eq!(decode(b"qle1", 4), None);
        // The longest value fits in what an inspection reads.
        let longest = encode(u64::MAX, &token, &[b'x'; MAX_LEADER_VALUE]);
        assert_eq!(longest.len(), MAX_INSPECTED_VALUE);
        assert_eq!(MAX_LEADER_VALUE, 224);
    }
}

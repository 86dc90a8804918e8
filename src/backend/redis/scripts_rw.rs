//! The read-write lock's scripts. The readers are a sorted set: member =
//! the reader's value (token and owner label), score = the server time
//! (`TIME`, in ms) at which that reader expires, so each reader expires on
//! its own and on the server's clock; the set's own expiry follows its
//! last reader, so it is gone with it. The writer is a plain lock key
//! (taken, extended and released by the plain scripts and commands).
//!
//! [`MAX_READERS`](crate::MAX_READERS) is written into the acquire script
//! (a test checks that it is the crate's).

/// Now on the server's clock, in ms (`TIME`: seconds and microseconds).
macro_rules! server_now {
    () => {
        "local t = redis.call('time') \
         local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
    };
}

/// Sets the readers' key (`KEYS[1]` here) to expire with its last reader.
macro_rules! follow_last_reader {
    ($key:literal) => {
        concat!(
            "local last = redis.call('zrange', ",
            $key,
            ", -1, -1, 'withscores') \
             if last[2] then redis.call('pexpireat', ",
            $key,
            ", last[2]) end "
        )
    };
}

/// A reader enters: `KEYS[1]` the readers, `KEYS[2]` the writer's key,
/// `ARGV[1]` the reader's value, `ARGV[2]` its TTL in ms. Refused while
/// the writer's key exists: `{value, pttl}` of that key. Else the readers
/// past their expiry are dropped; -2 when this value is already in, 0 when
/// the set is full, else the value is added with its own expiry: 1.
pub(super) const READ_ACQUIRE: &str = concat!(
    "local w = redis.call('get', KEYS[2]) \
     if w then return {w, redis.call('pttl', KEYS[2])} end ",
    server_now!(),
    "redis.call('zremrangebyscore', KEYS[1], '-inf', now) \
     if redis.call('zscore', KEYS[1], ARGV[1]) then return -2 end \
     if redis.call('zcard', KEYS[1]) >= 1024 then return 0 end \
     redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1]) ",
    follow_last_reader!("KEYS[1]"),
    "return 1"
);

/// A reader's extend: `KEYS[1]` the readers, `ARGV[1]` its value,
/// `ARGV[2]` the TTL in ms. The readers past their expiry are dropped
/// first (so a crashed reader is gone from the server at the latest at a
/// live reader's next extend after its expiry). Only while its own entry
/// is still there (never adds one): 1, else 0.
pub(super) const READ_EXTEND: &str = concat!(
    server_now!(),
    "redis.call('zremrangebyscore', KEYS[1], '-inf', now) \
     local s = redis.call('zscore', KEYS[1], ARGV[1]) \
     if not s then return 0 end \
     redis.call('zadd', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1]) ",
    follow_last_reader!("KEYS[1]"),
    "return 1"
);

/// A reader's release: `KEYS[1]` the readers, `ARGV[1]` its value. 0 when
/// it was not there; else it is removed and the release announced as the
/// plain release script does: 1 plus the subscribers of exactly that
/// channel.
pub(super) const READ_RELEASE: &str = concat!(
    "if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then return 0 end ",
    follow_last_reader!("KEYS[1]"),
    "local ch = 'quorum-lock:released:' .. KEYS[1] \
     local p = redis.pcall('publish', ch, '') \
     if type(p) ~= 'number' or p == 0 then return 1 end \
     local s = redis.pcall('pubsub', 'numsub', ch) \
     if type(s) == 'table' and type(s[2]) == 'number' then return 1 + s[2] end \
     return 1"
);

/// The writer's admission: `KEYS[1]` the writer's key, `KEYS[2]` the
/// readers, `ARGV[1]` the writer's value, `ARGV[2]` its TTL in ms. 0 when
/// the key is not the writer's; `{value, ms left}` of the last reader to
/// expire while readers are in (those past their expiry dropped); else the
/// key's expiry is set to the TTL: 1.
pub(super) const ADMIT: &str = concat!(
    "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end ",
    server_now!(),
    "redis.call('zremrangebyscore', KEYS[2], '-inf', now) \
     local last = redis.call('zrange', KEYS[2], -1, -1, 'withscores') \
     if last[2] then return {last[1], tonumber(last[2]) - now} end \
     redis.call('pexpire', KEYS[1], ARGV[2]) \
     return 1"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::op::MAX_READERS;

    #[test]
    fn the_acquire_script_caps_readers_at_the_crates_bound() {
        let cap = format!("zcard', KEYS[1]) >= {MAX_READERS} then");
        assert!(READ_ACQUIRE.contains(&cap), "{READ_ACQUIRE}");
    }

    #[test]
    fn a_readers_release_is_announced_on_the_release_channel() {
        let publish = format!("'{}' .. KEYS[1]", crate::backend::RELEASE_CHANNEL_PREFIX);
        assert!(READ_RELEASE.contains(&publish), "{READ_RELEASE}");
    }
}

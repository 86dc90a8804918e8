//! The Lua scripts the backend runs. Their digests for `EVALSHA` come from
//! the server (`SCRIPT LOAD` replies), never from a SHA-1 computed here:
//! deployments under FIPS rules may forbid SHA-1 in the client.

use std::time::Duration;

use redis::Value;

use super::scripts_election::PROCLAIM;
use super::scripts_rw::{ADMIT, READ_ACQUIRE, READ_EXTEND, READ_RELEASE};
use crate::backend::Reply;

/// Deletes `KEYS[1]` only if it holds `ARGV[1]`, and then announces the
/// release on the channel `quorum-lock:released:` + `KEYS[1]` (see
/// [`RELEASE_CHANNEL_PREFIX`](crate::backend::RELEASE_CHANNEL_PREFIX)).
/// Returns 0 when the key was not ours; else 1 plus the number of
/// subscribers of exactly that channel (so 1 when nobody listens).
///
/// The count is `PUBSUB NUMSUB`'s, not `PUBLISH`'s: `PUBLISH` also counts
/// pattern subscribers (a `PSUBSCRIBE *` debugging session, a dashboard),
/// which hear every release and wait for no lock; counted, they made
/// every release look awaited and every re-lock yield. A client of
/// another program subscribed to the exact channel still
/// counts: nothing on the server tells it from a waiter of ours.
/// `PUBSUB NUMSUB` runs only when `PUBLISH` reached someone (its count
/// includes the exact channel's subscribers): on the common release that
/// nobody waits for, the script does one command less.
/// `PUBLISH` and `PUBSUB` go through `pcall`: a server (or an ACL) that
/// refuses either still releases, and answers 1.
const RELEASE: &str = "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
     redis.call('del', KEYS[1]) \
     local ch = 'quorum-lock:released:' .. KEYS[1] \
     local p = redis.pcall('publish', ch, '') \
     if type(p) ~= 'number' or p == 0 then return 1 end \
     local s = redis.pcall('pubsub', 'numsub', ch) \
     if type(s) == 'table' and type(s[2]) == 'number' then return 1 + s[2] end \
     return 1";

/// Sets the expiry of `KEYS[1]` to `ARGV[2]` ms only if it holds `ARGV[1]`.
/// `PEXPIRE` on a missing key does nothing, so this never creates a key.
const EXTEND: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// Fenced acquire. `KEYS[2]` is the hash of every fence counter of the
/// node (field: the lock key). The counter is read first, so a foreign
/// value there fails before anything is written. Then `SET KEYS[1]
/// ARGV[1] NX PX ARGV[2]`. Returns the counter (0 when absent) when this
/// call set the key, -2 when the key already held our token (another name
/// of the same server set it), and the value that holds it when another
/// token does (as the `GET` after a refused `SET NX`: it tells a waiter a
/// new holder from the same one).
const ACQUIRE_FENCED: &str = "\
     local n = tonumber(redis.call('hget', KEYS[2], KEYS[1]) or '0') \
     if not n then return redis.error_reply('WRONGTYPE fence counter is not a number') end \
     if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return n end \
     local held = redis.call('get', KEYS[1]) \
     if held == ARGV[1] then return -2 end \
     return held";

/// Raises the lock's counter (field `KEYS[1]` of the hash `KEYS[2]`) to at
/// least `ARGV[2]`, only while `KEYS[1]` holds `ARGV[1]`. Returns 1, or 0
/// when the lock is not ours. The counter never goes down, never expires.
const RAISE_FENCE: &str = "\
     if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
     local n = tonumber(redis.call('hget', KEYS[2], KEYS[1]) or '0') \
     if not n then return redis.error_reply('WRONGTYPE fence counter is not a number') end \
     if n < tonumber(ARGV[2]) then redis.call('hset', KEYS[2], KEYS[1], ARGV[2]) end \
     return 1";

/// Takes every key of `KEYS` for `ARGV[1]` with a `PX` of `ARGV[2]`, or
/// none: each key is read first (a key of another type fails there, before
/// any write). Returns 1 when all were set, the value of the first member
/// held by another value (as [`ACQUIRE_FENCED`]), -2 when one already
/// holds `ARGV[1]` (another name of the same server set them): nothing is
/// written in either case.
const ACQUIRE_ALL: &str = "\
     local ours = false \
     for _, k in ipairs(KEYS) do \
       local v = redis.call('get', k) \
       if v then if v ~= ARGV[1] then return v end ours = true end \
     end \
     if ours then return -2 end \
     for _, k in ipairs(KEYS) do redis.call('set', k, ARGV[1], 'PX', ARGV[2]) end \
     return 1";

/// Sets the expiry of every key of `KEYS` to `ARGV[2]` ms, only if each
/// holds `ARGV[1]`; else changes nothing. Returns 1 or 0.
const EXTEND_ALL: &str = "\
     for _, k in ipairs(KEYS) do \
       if redis.call('get', k) ~= ARGV[1] then return 0 end \
     end \
     for _, k in ipairs(KEYS) do redis.call('pexpire', k, ARGV[2]) end \
     return 1";

/// Deletes every key of `KEYS` that holds `ARGV[1]`, announcing each as
/// [`RELEASE`] does. Returns 0 when none was ours; else 1 plus the
/// subscribers of exactly those channels (`PUBSUB NUMSUB`, as [`RELEASE`]).
const RELEASE_ALL: &str = "\
     local deleted, heard = 0, 0 \
     for _, k in ipairs(KEYS) do \
       if redis.call('get', k) == ARGV[1] then \
         redis.call('del', k) \
         deleted = deleted + 1 \
         local ch = 'quorum-lock:released:' .. k \
         local p = redis.pcall('publish', ch, '') \
         if type(p) == 'number' and p > 0 then \
           local s = redis.pcall('pubsub', 'numsub', ch) \
           if type(s) == 'table' and type(s[2]) == 'number' then heard = heard + s[2] end \
         end \
       end \
     end \
     if deleted == 0 then return 0 end \
     return 1 + heard";

/// [`ACQUIRE_ALL`] for fenced sets. The last key is the hash of the fence
/// counters, the others the members. Every member's counter is read first
/// (a foreign value in the hash fails there, before any write). Returns
/// the highest counter (0 when none) when all members were set; the value
/// of the first member held by another value; -2 when one already holds
/// `ARGV[1]`.
const ACQUIRE_ALL_FENCED: &str = "\
     local hash = KEYS[#KEYS] \
     local n = 0 \
     for i = 1, #KEYS - 1 do \
       local c = tonumber(redis.call('hget', hash, KEYS[i]) or '0') \
       if not c then return redis.error_reply('WRONGTYPE fence counter is not a number') end \
       if c > n then n = c end \
     end \
     local ours = false \
     for i = 1, #KEYS - 1 do \
       local v = redis.call('get', KEYS[i]) \
       if v then if v ~= ARGV[1] then return v end ours = true end \
     end \
     if ours then return -2 end \
     for i = 1, #KEYS - 1 do redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2]) end \
     return n";

/// [`RAISE_FENCE`] for sets: raises every member's counter (the last key
/// is the hash) to at least `ARGV[2]`, only while every member holds
/// `ARGV[1]`. Returns 1, or 0 when some member is not ours.
const RAISE_FENCE_ALL: &str = "\
     local hash = KEYS[#KEYS] \
     for i = 1, #KEYS - 1 do \
       if redis.call('get', KEYS[i]) ~= ARGV[1] then return 0 end \
     end \
     for i = 1, #KEYS - 1 do \
       local c = tonumber(redis.call('hget', hash, KEYS[i]) or '0') \
       if not c then return redis.error_reply('WRONGTYPE fence counter is not a number') end \
       if c < tonumber(ARGV[2]) then redis.call('hset', hash, KEYS[i], ARGV[2]) end \
     end \
     return 1";

/// One of the scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Script {
    Release,
    Extend,
    AcquireFenced,
    RaiseFence,
    AcquireAll,
    ExtendAll,
    ReleaseAll,
    AcquireAllFenced,
    RaiseFenceAll,
    ReadAcquire,
    ReadExtend,
    ReadRelease,
    Admit,
    Proclaim,
}

impl Script {
    /// Every script, in the order of [`Digests`].
    pub(super) const ALL: [Self; 14] = [
        Self::Release,
        Self::Extend,
        Self::AcquireFenced,
        Self::RaiseFence,
        Self::AcquireAll,
        Self::ExtendAll,
        Self::ReleaseAll,
        Self::AcquireAllFenced,
        Self::RaiseFenceAll,
        Self::ReadAcquire,
        Self::ReadExtend,
        Self::ReadRelease,
        Self::Admit,
        Self::Proclaim,
    ];

    pub(super) fn text(self) -> &'static str {
        match self {
            Self::Release => RELEASE,
            Self::Extend => EXTEND,
            Self::AcquireFenced => ACQUIRE_FENCED,
            Self::RaiseFence => RAISE_FENCE,
            Self::AcquireAll => ACQUIRE_ALL,
            Self::ExtendAll => EXTEND_ALL,
            Self::ReleaseAll => RELEASE_ALL,
            Self::AcquireAllFenced => ACQUIRE_ALL_FENCED,
            Self::RaiseFenceAll => RAISE_FENCE_ALL,
            Self::ReadAcquire => READ_ACQUIRE,
            Self::ReadExtend => READ_EXTEND,
            Self::ReadRelease => READ_RELEASE,
            Self::Admit => ADMIT,
            Self::Proclaim => PROCLAIM,
        }
    }

    /// What the script's reply says: 0 / 1 for extend and raise; 0, or 1
    /// plus the subscribers its notice reached, for release; the counter,
    /// -1 (held elsewhere) or -2 (already ours) for a fenced acquire; the
    /// holder's value when another holds a key. `Err`: a reply the script
    /// never gives.
    pub(super) fn reply(self, value: Value) -> Result<Reply, Value> {
        use Script::{
            AcquireAll, AcquireAllFenced, AcquireFenced, Admit, Extend, ExtendAll, Proclaim,
            RaiseFence, RaiseFenceAll, ReadAcquire, ReadExtend, ReadRelease, Release, ReleaseAll,
        };
        match (self, value) {
            // Refused, with who holds it and for how long yet (ms).
            (ReadAcquire | Admit, Value::Array(held)) => match &held[..] {
                [Value::BulkString(by), Value::Int(left)] => {
                    let refused = Reply::held_by(by);
                    Ok(match u64::try_from(*left) {
                        Ok(ms) => refused.expiring_in(Duration::from_millis(ms)),
                        Err(_) => refused,
                    })
                }
                _ => Err(Value::Array(held)),
            },
            (ReadAcquire, Value::Int(-2)) => Ok(Reply::AlreadyOurs),
            (AcquireFenced | AcquireAllFenced, Value::Int(-1)) => Ok(Reply::No),
            (AcquireFenced | AcquireAll | AcquireAllFenced, Value::BulkString(held)) => {
                Ok(Reply::held_by(&held))
            }
            (AcquireFenced | AcquireAllFenced, Value::Int(-2)) => Ok(Reply::AlreadyOurs),
            (AcquireFenced | AcquireAllFenced, Value::Int(n)) if n >= 0 => {
                Ok(Reply::Fenced(n.unsigned_abs()))
            }
            (AcquireAll, Value::Int(-2)) => Ok(Reply::AlreadyOurs),
            (Release | ReleaseAll | ReadRelease, Value::Int(n)) if n > 1 => {
                Ok(Reply::Notified(n.unsigned_abs() - 1))
            }
            (
                Release | Extend | RaiseFence | AcquireAll | ExtendAll | ReleaseAll | RaiseFenceAll
                | ReadAcquire | ReadExtend | ReadRelease | Admit | Proclaim,
                Value::Int(n @ (0 | 1)),
            ) => Ok(Reply::from(n == 1)),
            (_, other) => Err(other),
        }
    }

    /// The script's name, for messages.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Release => "the release script",
            Self::Extend => "the extend script",
            Self::AcquireFenced => "the fenced acquire script",
            Self::RaiseFence => "the fence script",
            Self::AcquireAll => "the set acquire script",
            Self::ExtendAll => "the set extend script",
            Self::ReleaseAll => "the set release script",
            Self::AcquireAllFenced => "the fenced set acquire script",
            Self::RaiseFenceAll => "the set fence script",
            Self::ReadAcquire => "the read-write lock's reader acquire script",
            Self::ReadExtend => "the read-write lock's reader extend script",
            Self::ReadRelease => "the read-write lock's reader release script",
            Self::Admit => "the read-write lock's writer admission script",
            Self::Proclaim => "the leader election's proclaim script",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The digest of every script, as a server's `SCRIPT LOAD` returned it
/// (the same on every server: it names the text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Digests([String; Script::ALL.len()]);

impl Digests {
    /// The digests from `SCRIPT LOAD` replies in [`Script::ALL`] order;
    /// `None` unless all are there.
    pub(super) fn from_replies(replies: Vec<Option<String>>) -> Option<Self> {
        let digests: Vec<String> = replies.into_iter().collect::<Option<_>>()?;
        Some(Self(digests.try_into().ok()?))
    }

    pub(super) fn of(&self, script: Script) -> &str {
        &self.0[script.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script and the subscriber agree on the channel.
    #[test]
    fn the_release_script_publishes_on_the_release_channel() {
        let publish = format!("'{}' .. KEYS[1]", crate::backend::RELEASE_CHANNEL_PREFIX);
        assert!(RELEASE.contains(&publish), "{RELEASE}");
        let publish = format!("'{}' .. k", crate::backend::RELEASE_CHANNEL_PREFIX);
        assert!(RELEASE_ALL.contains(&publish), "{RELEASE_ALL}");
    }
}

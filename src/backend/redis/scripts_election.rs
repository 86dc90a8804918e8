//! A leader election's script ([`Election`](crate::Election)): the
//! proclaim, which writes the election's record key only while the
//! election's lock key holds the leader's value. The lock key itself is
//! taken, extended, fenced and released by the plain lock's scripts.

/// The proclaim: `KEYS[1]` the election's lock key, `KEYS[2]` its record
/// key, `ARGV[1]` the leader's lock value, `ARGV[2]` the record. 0 when
/// the lock key does not hold the leader's value; else the record is set
/// (no expiry: it is read only beside the lock key) and announced on the
/// record key's release channel, `quorum-lock:released:` + `KEYS[2]`
/// (the observers waiting for a new value listen there; the lock key's
/// waiters do not, so a proclaim never wakes a campaign or spends its
/// early wake-ups): 1. A record key of another type fails on its `GET`
/// (`WRONGTYPE`) before any write. `PUBLISH` goes through `pcall`: a
/// server (or an ACL) that refuses it still proclaims, and answers 1.
pub(super) const PROCLAIM: &str = "\
     if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
     redis.call('get', KEYS[2]) \
     redis.call('set', KEYS[2], ARGV[2]) \
     redis.pcall('publish', 'quorum-lock:released:' .. KEYS[2], '') \
     return 1";

#[cfg(test)]
mod tests {
    use super::*;

    /// The record never gets an expiry of its own, and is written only
    /// after the lock key's compare.
    #[test]
    fn the_proclaim_compares_the_lock_key_before_it_writes() {
        let compare = PROCLAIM.find("~= ARGV[1]").unwrap_or(usize::MAX);
        let write = PROCLAIM.find("'set'").unwrap_or(0);
        assert!(compare < write, "{PROCLAIM}");
        assert!(!PROCLAIM.contains("px") && !PROCLAIM.contains("expire"));
    }

    /// The proclaim announces itself on the record key's channel, after
    /// the write, and never on the lock key's (whose waiters are
    /// campaigns: a proclaim must not wake them).
    #[test]
    fn the_proclaim_announces_on_the_record_keys_channel_only() {
        let publish = format!("'{}' .. KEYS[2]", crate::backend::RELEASE_CHANNEL_PREFIX);
        assert!(PROCLAIM.contains(&publish), "{PROCLAIM}");
        assert!(!PROCLAIM.contains(".. KEYS[1]"), "{PROCLAIM}");
        let write = PROCLAIM.find("'set'").unwrap_or(usize::MAX);
        let announce = PROCLAIM.find("'publish'").unwrap_or(0);
        assert!(write < announce, "{PROCLAIM}");
        assert_eq!(PROCLAIM.matches("'publish'").count(), 1);
        assert!(PROCLAIM.contains("redis.pcall('publish'"), "{PROCLAIM}");
    }
}

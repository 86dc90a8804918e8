//! The Lua scripts the backend runs, each with its SHA-1 for `EVALSHA`
//! (the text is sent by `EVAL` when the server answers `NOSCRIPT`).

/// Deletes `KEYS[1]` only if it holds `ARGV[1]`. Returns 1 or 0.
const RELEASE_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('del', KEYS[1]) else return 0 end";

/// Sets the expiry of `KEYS[1]` to `ARGV[2]` ms only if it holds `ARGV[1]`.
/// `PEXPIRE` on a missing key does nothing, so this never creates a key.
const EXTEND_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// Fenced acquire: `SET KEYS[1] ARGV[1] NX PX ARGV[2]` (a key already
/// holding our token counts as set), then the fence counter `KEYS[2]` (0
/// when absent). Returns the counter, or -1 when the lock is held by
/// another token. A key of another type fails with `WRONGTYPE` at the
/// `GET`.
const ACQUIRE_FENCED_SCRIPT: &str = "\
     if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) \
        or redis.call('get', KEYS[1]) == ARGV[1] then \
       return tonumber(redis.call('get', KEYS[2]) or '0') \
     end \
     return -1";

/// Raises the fence counter `KEYS[2]` to at least `ARGV[2]`, only while
/// `KEYS[1]` holds `ARGV[1]`. Returns 1, or 0 when the lock is not ours.
/// The counter never goes down and never expires.
const RAISE_FENCE_SCRIPT: &str = "\
     if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
     if tonumber(redis.call('get', KEYS[2]) or '0') < tonumber(ARGV[2]) then \
       redis.call('set', KEYS[2], ARGV[2]) \
     end \
     return 1";

/// A script and its SHA-1.
pub(super) struct Script {
    pub(super) text: &'static str,
    pub(super) sha: String,
}

impl Script {
    fn new(text: &'static str) -> Self {
        Self {
            text,
            sha: redis::Script::new(text).get_hash().to_owned(),
        }
    }
}

/// Every script the backend runs.
pub(super) struct Scripts {
    pub(super) release: Script,
    pub(super) extend: Script,
    pub(super) acquire_fenced: Script,
    pub(super) raise_fence: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Self {
            release: Script::new(RELEASE_SCRIPT),
            extend: Script::new(EXTEND_SCRIPT),
            acquire_fenced: Script::new(ACQUIRE_FENCED_SCRIPT),
            raise_fence: Script::new(RAISE_FENCE_SCRIPT),
        }
    }
}

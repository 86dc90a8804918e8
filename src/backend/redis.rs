//! The Redis backend (in progress; replaced by the real one).

/// Placeholder.
#[derive(Debug)]
pub struct RedisBackend;

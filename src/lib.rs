//! Placeholder: crate docs are written below once the API settles.
#![doc = "quorum-lock"]

pub mod backend;
mod clock;
mod engine;
mod error;
mod guard;
mod manager;
mod token;

pub use backend::memory::MemoryBackend;
#[cfg(feature = "redis")]
pub use backend::redis::RedisBackend;
pub use backend::{Backend, BackendError, BackendErrorKind, Op, ServerInfo};
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use error::{Error, NodeOutcome, NodeReport, Operation, Report, Result};
pub use guard::LockGuard;
pub use manager::{
    DEFAULT_DRIFT_FACTOR, DEFAULT_MAX_TTL, DEFAULT_NODE_TIMEOUT, DEFAULT_TTL, LockManager,
    LockManagerBuilder, LockOptions, MAX_TTL_LIMIT, RetryPolicy,
};
pub use token::{TOKEN_LEN, Token};

//! Fencing tokens: a number that strictly increases from one holder of a
//! resource to the next, agreed by a quorum (see `docs/safety.md`).
//!
//! Each node keeps one counter per lock key, all of them in one hash
//! (`<prefix>{quorum-lock}:fences`, a field per lock key, no expiry), in
//! the crate's own namespace that no resource may enter (see
//! `src/resource.rs`), so no lock ever collides with a counter. Phase 1, in the acquire itself: every granting node returns its
//! counter. Phase 2, only after a quorum granted: the fence is
//! `F = max(highest counter read + 1, wall-clock microseconds since the
//! epoch)`, written back as "counter = max(counter, F)" to the nodes while
//! our key still holds our token there, and it counts only once a quorum
//! acknowledged it before the lock's validity ran out.
//!
//! Why it holds: the write-back of holder A reached a quorum W_A while A's
//! keys were alive there; the grants of the next holder B form a quorum
//! G_B, which meets W_A on some node; B's grant there came after A's key
//! there was gone, hence after A's write-back, so B reads at least F_A and
//! picks more. A node that restarted without persistence forgot its
//! counters, but it votes again only `max_ttl` after its restart
//! (quarantine), so the wall-clock floor of B's fence has moved past A's by
//! then, as long as the clients' wall clocks differ by less than about
//! half of `max_ttl`.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::report::{NodeOutcome, NodeReport, Report};

/// Fences stay below 2^53, so SQL integer columns, JSON numbers and
/// JavaScript carry them unchanged (and Redis' Lua compares them exactly).
pub(crate) const FENCE_LIMIT: u64 = 1 << 53;

/// The fence for a lock whose granting nodes read `reads`, at wall-clock
/// time `wall` (microseconds since the epoch).
///
/// # Errors
///
/// [`Error::Runtime`] if the counter would pass [`FENCE_LIMIT`].
pub(crate) fn next_fence(reads: impl IntoIterator<Item = u64>, wall: u64) -> Result<u64> {
    let highest = reads.into_iter().max().unwrap_or(0);
    let fence = highest.saturating_add(1).max(wall);
    if fence >= FENCE_LIMIT {
        return Err(Error::Runtime {
            reason: format!(
                "the fence counter reached {fence}, beyond 2^53: a node's counter was set \
                 by something else"
            ),
        });
    }
    Ok(fence)
}

/// `since_epoch` in whole microseconds: the floor that keeps fences
/// increasing across servers that forgot their counters.
pub(crate) fn wall_micros(since_epoch: Duration) -> u64 {
    u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX)
}

/// Why a fenced acquire could not hand out its fence.
pub(super) enum FenceFailure {
    /// The counter is beyond what a fence may be.
    Counter(Error),
    /// No quorum acknowledged the fence within the validity: each node's
    /// answer to the write-back.
    NotAcknowledged(Vec<NodeOutcome>),
}

impl FenceFailure {
    /// The error to return, from the acquire's report and the nodes' names.
    pub(super) fn into_error<'a>(
        self,
        mut report: Report,
        names: impl Iterator<Item = &'a str>,
    ) -> Error {
        match self {
            Self::Counter(error) => error,
            Self::NotAcknowledged(outcomes) => {
                report.nodes = names
                    .zip(outcomes)
                    .map(|(node, outcome)| NodeReport {
                        node: node.into(),
                        outcome,
                    })
                    .collect();
                Error::NoQuorum {
                    report: Box::new(report),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::clock::Clock;
    use crate::redlock::fencing::*;

    #[test]
    fn the_fence_passes_every_read_and_the_wall_clock() {
        assert_eq!(next_fence([3, 9, 4], 0).unwrap(), 10);
        assert_eq!(next_fence([], 0).unwrap(), 1);
        assert_eq!(next_fence([3], 1_000).unwrap(), 1_000);
        assert_eq!(next_fence([5_000], 1_000).unwrap(), 5_001);
        assert!(next_fence([FENCE_LIMIT - 1], 0).is_err());
        assert!(next_fence([u64::MAX], 0).is_err());
        let now = crate::clock::MonotonicClock.since_epoch();
        assert!(wall_micros(now) > 1_700_000_000_000_000, "after 2023");
        assert!(wall_micros(now) < FENCE_LIMIT);
    }
}

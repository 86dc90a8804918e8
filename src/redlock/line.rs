//! One lock's line inside the process ([`Line`]): who holds the local
//! turn ([`Holder`]), who waits behind it ([`Waiter`], with what it
//! asked for: [`Want`]), and the messages a waiter receives ([`Grant`],
//! [`Given`]). The queue that keeps the lines and the ticket that passes a
//! turn are `turns.rs`; the line explorer (`checks/line/`) runs their
//! steps in every order.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crossbeam_channel::Sender;

use super::lease::Lease;
use super::streak::Streak;
use crate::canary::{self, Canary};

/// One lock's line: who holds the turn, and who waits behind it.
#[derive(Debug)]
pub(super) struct Line {
    pub(super) holder: Holder,
    pub(super) waiting: VecDeque<Waiter>,
}

/// The current turn-holder.
#[derive(Debug)]
pub(super) struct Holder {
    /// The id of the ticket (`turns::Ticket`) that owns the turn.
    pub(super) ticket: u64,
    /// Its place in the streak of local turns.
    pub(super) streak: Streak,
    /// Its lock, once it has one: its validity bounds the line. `None`
    /// while it contends (bounded by its own wait budget).
    pub(super) lease: Option<Weak<Lease>>,
}

#[derive(Debug)]
pub(super) struct Waiter {
    /// Also the id of the ticket it gets with its turn.
    pub(super) id: u64,
    /// The lock the waiter asked for: a handed-over lock must match it.
    pub(super) want: Want,
    /// Unbounded: besides the one grant, it carries nudges.
    pub(super) grant: Sender<Grant>,
}

/// What a waiting thread asked for: everything a handed-over lock must
/// match (a fenced waiter was once handed a plain lock when the line knew
/// only the TTL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Want {
    /// The TTL of the lock.
    pub(crate) ttl: Duration,
    /// A fencing token: such a waiter needs a fence of its own, larger
    /// than the holder's, so it is never handed a lock.
    pub(crate) fenced: bool,
}

/// A message to a waiter.
#[derive(Debug)]
pub(super) enum Grant {
    /// Its turn, maybe with the lock itself.
    Given(Given),
    /// Look at the line again: the holder got a lock or lost it, or this
    /// waiter became the first in line.
    Recheck,
}

/// What a waiter receives when its turn comes.
#[derive(Debug)]
pub(super) enum Given {
    /// Contend with the servers now.
    Turn(Streak),
    /// The lock itself, handed over by the previous holder.
    Lock(Streak, Arc<Lease>),
}

impl Line {
    pub(super) fn held_by(ticket: u64, streak: Streak) -> Self {
        Self {
            holder: Holder {
                ticket,
                streak,
                lease: None,
            },
            waiting: VecDeque::new(),
        }
    }

    /// Whether ticket `id` holds this line's turn: a stale ticket (the
    /// line gave the turn to someone else after its holder's lock ran
    /// out) has nothing to pass and nothing to hand.
    pub(super) fn turn_is(&self, id: u64) -> bool {
        self.holder.ticket == id || canary::on(Canary::StaleTicketsPass)
    }

    /// Gives the turn at `streak` to `next`, just taken from the front of
    /// the line, with the lock itself when `handed`, and nudges the new
    /// first waiter. Returns whether the lock was handed over.
    pub(super) fn give(
        &mut self,
        next: Waiter,
        streak: Streak,
        handed: Option<Arc<Lease>>,
    ) -> bool {
        self.holder = Holder {
            ticket: next.id,
            streak,
            lease: handed.as_ref().map(Arc::downgrade),
        };
        let handed_over = handed.is_some();
        let given = match handed {
            Some(lease) => Given::Lock(streak, lease),
            None => Given::Turn(streak),
        };
        // The waiter was still in line (a waiter leaves only under the
        // lines' lock, held by the caller), so its receiver is alive.
        let _ = next.grant.send(Grant::Given(given));
        self.nudge_first();
        handed_over
    }

    pub(super) fn nudge_first(&self) {
        if let Some(first) = self.waiting.front() {
            let _ = first.grant.send(Grant::Recheck);
        }
    }
}

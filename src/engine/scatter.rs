//! A round from the engine's side: scattered to every node (queued for
//! its thread, or driven by the caller on idle nodes, `drive.rs`), then
//! gathered (`pending.rs`); and the releases sent without waiting (the
//! undo of a failed attempt, a dropped guard's release).

use std::time::{Duration, Instant};

use super::ballots;
use super::drive::Driven;
use super::node::Vote;
use super::node::jobs::ReplyTo;
use super::pending::Slot;
use super::{Action, Direct, Engine, Gather, Hold, Pending, Request};
use crate::report::NodeOutcome;
use crate::token::Token;

/// The most nodes a caller drives in one round without a list: most
/// deployments run 3 or 5.
const DRIVEN_IN_PLACE: usize = 5;

impl Engine {
    /// Scatters `req` to every node and gathers per `gather` for at most
    /// `wait` (real time). Returns one outcome per node, in node order.
    pub(crate) fn round(
        &self,
        req: &Request<'_>,
        gather: Gather,
        wait: Duration,
        direct: Direct,
    ) -> Vec<NodeOutcome> {
        let gathered = self.scatter(req, wait, direct, gather).gather(gather);
        gathered.into_outcomes().collect()
    }

    /// Sends `req` to every node; the answers are collected by
    /// [`Pending::gather`] until `wait` from now (real time), so many rounds
    /// scattered together share one wait.
    ///
    /// With [`Direct::Never`] it only queues, never blocks, and may be called
    /// under a short lock (the watchdog does, to order an extend against a
    /// concurrent release). With [`Direct::IdleNodes`] the caller drives
    /// the round itself on every idle node whose backend bounds its calls
    /// within `wait` (see `drive.rs`): it sends there first, queues to the
    /// other nodes, then reads the answers it drives until the round is
    /// decided per `gather`, and hands what it has not read to the node
    /// threads. It never waits longer than the round would.
    pub(crate) fn scatter(
        &self,
        req: &Request<'_>,
        wait: Duration,
        direct: Direct,
        gather: Gather,
    ) -> Pending {
        let n = self.nodes.len();
        let deadline = Instant::now().checked_add(wait);
        let traced = crate::trace::Round::begin(&self.traced, req.action.name());
        let mut slots = super::pending::reached_slots(n);
        let item = req.item();
        // The caller drives every idle node whose backend bounds its calls
        // (no thread hand-off there) and queues to the others, whose
        // threads batch what contending callers queue. Gates are taken
        // with `try_lock` only: a caller never blocks holding one. Up to
        // `DRIVEN_IN_PLACE` nodes are kept on the stack (no list to
        // allocate per round).
        let mut in_place: [Option<Driven<'_>>; DRIVEN_IN_PLACE] = Default::default();
        let mut listed = Vec::new();
        let driven = if n <= DRIVEN_IN_PLACE {
            &mut in_place[..n]
        } else {
            listed.resize_with(n, || None);
            &mut listed[..]
        };
        let mut count = 0;
        if direct == Direct::IdleNodes {
            for (slot, node) in self.nodes.iter().enumerate() {
                if node.exec.can_run_within(wait)
                    && let Some(state) = node.idle()
                {
                    driven[count] = Some(Driven::begin(slot, node, state, &item));
                    count += 1;
                }
            }
        }
        let driven = &mut driven[..count];
        // The box the node threads post their votes in: a round that no
        // node thread answers (the caller drives every node) needs none,
        // unless a span records the round there.
        let (reply, answers) = (count < n || traced.is_on())
            .then(|| ballots::new_round(traced, n))
            .unzip();
        let mut taken = driven.iter().flatten().map(|d| d.slot).peekable();
        for (slot, node) in self.nodes.iter().enumerate() {
            if taken.next_if_eq(&slot).is_some() {
                continue;
            }
            let down = node.skipped_as_down();
            // A down node is skipped at no cost, but still gets the release
            // (an earlier acquire may have landed), parked until it is
            // back; nobody waits for its answer.
            if down && (req.action != Action::Release || node.park_release(req)) {
                slots[slot] = Slot {
                    vote: Some(Vote::of(NodeOutcome::Down)),
                    reached: false,
                };
                continue;
            }
            let reply_to = match &reply {
                Some(ballot) if !down => Some(ReplyTo {
                    ballot: ballot.clone(),
                    slot,
                }),
                _ => None,
            };
            slots[slot].vote = match node.send(req, reply_to) {
                Err(refused) => {
                    slots[slot].reached = false;
                    Some(Vote::of(refused.outcome()))
                }
                Ok(()) if down => Some(Vote::of(NodeOutcome::Down)),
                Ok(()) => None,
            };
        }
        if crate::trace::ON
            && let Some(reply) = &reply
        {
            // What is known at once (down, not queued) is in the round's
            // span too.
            for (slot, known) in slots.iter().enumerate() {
                if let Some(vote) = &known.vote {
                    reply.trace().vote(slot, &vote.outcome);
                }
            }
        }
        let mut round = Pending {
            slots,
            answers,
            deadline,
        };
        if count > 0 {
            self.drive(driven, &item, gather, reply.as_ref(), &mut round);
        }
        round
    }

    /// Queues a release of `hold` on every node (down or not) and returns
    /// at once. Each release runs after whatever was queued before it.
    /// With a span on (the `tracing` feature: a dropped guard's), a round
    /// in it goes with each batch, so the node threads record the answers
    /// there.
    pub(crate) fn release_detached(&self, hold: &Hold, token: Token) {
        let traced = crate::trace::Round::begin(&self.traced, Action::Release.name());
        let ballot = traced.is_on().then(|| ballots::new_round(traced, 0).0);
        self.send_releases(hold, token, |_| true, ballot.as_ref());
    }

    /// [`release_detached`](Self::release_detached) on the nodes where
    /// `reached` is true: those that an attempt's acquire may have reached
    /// ([`Gathered::reached`](super::Gathered::reached)). A node that
    /// never got the acquire needs no release. Untraced: an undo is part
    /// of its attempt's round.
    pub(crate) fn release_detached_where(&self, hold: &Hold, token: Token, reached: &[bool]) {
        self.send_releases(hold, token, |slot| reached.get(slot) == Some(&true), None);
    }

    /// A release of `hold` sent to every node `to` picks, answered on
    /// `ballot`'s round when given (for its span), else to nobody.
    ///
    /// **One wake-up for the caller, whatever N.** The releases are queued
    /// without waking the node threads; of those that sleep, the caller
    /// wakes one, and that one wakes the others before its own round trip
    /// (a [`Job::Nudge`](super::node::jobs::Job::Nudge) queued with its
    /// release). Each wake-up of a sleeping thread costs the waker more
    /// than a queue push: the woken thread tends to run at once on the
    /// waker's CPU. Counted with an instrumented build before this (the
    /// latency block's drop timed apart), a drop cost its caller 6-8 us at
    /// N=1 and 67-84 us at N=3.
    fn send_releases(
        &self,
        hold: &Hold,
        token: Token,
        to: impl Fn(usize) -> bool,
        ballot: Option<&ballots::Ballot>,
    ) {
        let req = Request {
            action: Action::Release,
            hold,
            token,
        };
        let mut sleeping = Vec::new();
        for (slot, node) in self.nodes.iter().enumerate().filter(|(slot, _)| to(*slot)) {
            let reply = ballot.map(|ballot| ReplyTo {
                ballot: ballot.clone(),
                slot,
            });
            // Parked when the node is marked down, else queued. A release
            // is never refused for a full queue (the bound is for what can
            // take or prolong a key), so it always follows the acquire it
            // undoes; a failed send means the worker is gone, and nothing
            // is left to release through it.
            if !node.park_release(&req) && node.send_quietly(&req, reply) {
                sleeping.push(slot);
            }
        }
        let Some((&first, others)) = sleeping.split_first() else {
            return;
        };
        let chained = !others.is_empty() && self.nodes[first].send_nudge_quietly();
        if !chained {
            // One sleeper, or the first one woke meanwhile (or its thread
            // is gone) and would not see the nudge at once: each is woken
            // here.
            for &slot in others {
                self.nodes[slot].nudge();
            }
        }
        self.nodes[first].nudge();
    }

    /// The undo of a failed attempt: [`release_detached_where`](Self::release_detached_where),
    /// registered first as this manager's own (see `echoes.rs`), so that
    /// its release notice wakes none of this manager's waiters.
    pub(crate) fn undo_where(&self, hold: &Hold, token: Token, reached: &[bool]) {
        let echoes = self.shared.waiters.echoes();
        let now = Instant::now();
        for (index, _) in reached.iter().enumerate().filter(|(_, r)| **r) {
            echoes.expect(index, hold, token, now);
        }
        self.release_detached_where(hold, token, reached);
    }
}

//! Where a round's votes arrive: the node threads post each node's vote,
//! the caller takes them until the round is decided.
//!
//! A channel would do, but every blocking receive of the channel crate
//! first spins and then yields the CPU four times (`sched_yield`) before
//! it sleeps: measured with 8 threads taking locks on distinct keys, the
//! callers made 10 `sched_yield` calls per lock + release, and on a
//! machine with more threads than cores each one is a switch to another
//! thread. The caller here sleeps at once (`thread::park`), and a vote
//! wakes it (`unpark`). A vote posted after the round was decided is kept
//! until the last handle goes, and read by nobody.

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::Instant;

use parking_lot::Mutex;

use super::node::Vote;
use crate::trace;

/// One node's vote, with its slot in the round.
pub(crate) type Posted = (usize, Vote);

/// The round's box: the votes not taken yet, how many node-side handles
/// ([`Ballot`]) may still post, and who waits.
struct BallotBox {
    state: Mutex<State>,
    /// The round's span: a node thread that posts a vote records it there,
    /// even after the caller stopped waiting (nothing without the
    /// `tracing` feature).
    trace: trace::Round,
}

struct State {
    votes: VecDeque<Posted>,
    ballots: usize,
    /// The thread waiting in [`Ballots::take_until`], if one is.
    taker: Option<Thread>,
    /// How many votes the taker waits for before it looks: fewer cannot
    /// decide its round, so a post below it wakes nobody.
    wanted: usize,
}

impl BallotBox {
    /// Wakes the waiting thread, if any, once `state`'s lock is let go.
    fn wake(state: parking_lot::MutexGuard<'_, State>) {
        let taker = state.taker.clone();
        drop(state);
        if let Some(taker) = taker {
            taker.unpark();
        }
    }
}

/// The node side: posts one vote per job. Cloned for every job that
/// carries the round's reply; when the last one goes without posting (a
/// node thread that stopped), the caller stops waiting.
pub(crate) struct Ballot(Arc<BallotBox>);

/// The caller's side.
pub(crate) struct Ballots(Arc<BallotBox>);

/// Why [`Ballots::take_until`] came back without a vote.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NoVote {
    /// The deadline passed.
    Timeout,
    /// Every ballot is gone: no vote can come.
    Closed,
}

/// A round's box, and its first ballot; `trace` is the round's span,
/// `expected` the votes its nodes may post: room made for them at once,
/// not grown at the first vote (growing cost about twice the
/// allocation's instructions, counted with callgrind).
pub(crate) fn new_round(trace: trace::Round, expected: usize) -> (Ballot, Ballots) {
    let shared = Arc::new(BallotBox {
        trace,
        state: Mutex::new(State {
            votes: VecDeque::with_capacity(expected),
            ballots: 1,
            taker: None,
            wanted: 1,
        }),
    });
    (Ballot(Arc::clone(&shared)), Ballots(shared))
}

impl Ballot {
    /// Posts `vote` for node `slot`; wakes the caller once the votes it
    /// waits for are in.
    pub(crate) fn post(&self, slot: usize, vote: Vote) {
        self.0.trace.vote(slot, &vote.outcome);
        let mut state = self.0.state.lock();
        state.votes.push_back((slot, vote));
        if state.votes.len() >= state.wanted {
            BallotBox::wake(state);
        }
    }

    /// The round's span, for the votes the caller reads itself.
    pub(crate) fn trace(&self) -> &trace::Round {
        &self.0.trace
    }
}

impl Clone for Ballot {
    fn clone(&self) -> Self {
        self.0.state.lock().ballots += 1;
        Self(Arc::clone(&self.0))
    }
}

impl Drop for Ballot {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.ballots -= 1;
        if state.ballots == 0 {
            BallotBox::wake(state);
        }
    }
}

impl Ballots {
    /// The round's span.
    pub(crate) fn trace(&self) -> &trace::Round {
        &self.0.trace
    }

    /// A vote that has arrived, without waiting.
    pub(crate) fn try_take(&self) -> Option<Posted> {
        self.0.state.lock().votes.pop_front()
    }

    /// The next vote, once at least `wanted` votes are in (the caller's
    /// count says fewer could not decide its round: [`Tally::wanted`]),
    /// waiting until `deadline` (`None`: as long as a ballot may still
    /// post). The thread is woken once, when the `wanted`-th vote is
    /// posted, or when no ballot is left; at the deadline, or with no
    /// ballot left, the votes that are in are handed out all the same.
    ///
    /// [`Tally::wanted`]: super::pending::Tally::wanted
    pub(crate) fn take_until(
        &self,
        wanted: usize,
        deadline: Option<Instant>,
    ) -> Result<Posted, NoVote> {
        let wanted = wanted.max(1);
        loop {
            let left = {
                let mut state = self.0.state.lock();
                // Enough votes in, or no ballot left to post one: the call
                // is settled without the clock. Otherwise it is read once
                // per wait (the time left is the park's timeout): the
                // reads here were the most of any function's, counted at
                // 8 threads: 8.2 per lock, about 22 ns each on this VM.
                let settled = state.votes.len() >= wanted || state.ballots == 0;
                let left = if settled {
                    None
                } else {
                    deadline.map(|d| d.saturating_duration_since(Instant::now()))
                };
                if settled || left.is_some_and(|l| l.is_zero()) {
                    state.taker = None;
                    state.wanted = 1;
                    return match state.votes.pop_front() {
                        Some(vote) => Ok(vote),
                        None if state.ballots == 0 => Err(NoVote::Closed),
                        None => Err(NoVote::Timeout),
                    };
                }
                // Registered under the lock that posts take: a post that
                // brings the count to `wanted`, or the last drop, from now
                // on unparks this thread.
                state.wanted = wanted;
                if state.taker.is_none() {
                    state.taker = Some(thread::current());
                }
                left
            };
            // A park after an unpark returns at once, so a wake-up between
            // the look above and the park is not lost. Other wake-ups (a
            // vote of an earlier round, which shared this thread) only
            // make it look again.
            match left {
                None => thread::park(),
                Some(left) => thread::park_timeout(left),
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::report::NodeOutcome;

    fn granted() -> Vote {
        Vote::of(NodeOutcome::Granted)
    }

    #[test]
    fn a_vote_posted_from_another_thread_wakes_the_caller() {
        let (ballot, ballots) = new_round(trace::Round::none(), 2);
        let poster = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            ballot.post(2, granted());
        });
        let far = Instant::now() + Duration::from_secs(30);
        let (slot, vote) = ballots.take_until(1, Some(far)).unwrap();
        assert_eq!(slot, 2);
        assert!(vote.outcome.is_granted());
        poster.join().unwrap();
        // The only ballot went with the poster's thread.
        assert_eq!(ballots.take_until(1, Some(far)).err(), Some(NoVote::Closed));
    }

    #[test]
    fn votes_come_in_order_and_the_deadline_ends_the_wait() {
        let (ballot, ballots) = new_round(trace::Round::none(), 2);
        let other = ballot.clone();
        ballot.post(0, granted());
        other.post(1, Vote::of(NodeOutcome::Refused));
        assert_eq!(ballots.try_take().map(|(slot, _)| slot), Some(0));
        let soon = Some(Instant::now() + Duration::from_millis(1));
        assert_eq!(ballots.take_until(1, soon).map(|(slot, _)| slot), Ok(1));
        assert!(ballots.try_take().is_none());
        assert_eq!(ballots.take_until(1, soon).err(), Some(NoVote::Timeout));
        drop((ballot, other));
        assert_eq!(ballots.take_until(1, None).err(), Some(NoVote::Closed));
    }

    /// A caller that waits for two votes is not woken by the first: it
    /// gets both after the second (or the first at the deadline).
    #[test]
    fn the_caller_wakes_once_the_votes_it_wants_are_in() {
        let (ballot, ballots) = new_round(trace::Round::none(), 2);
        let second = ballot.clone();
        let (posted_first, first_posted) = std::sync::mpsc::channel();
        let poster = thread::spawn(move || {
            ballot.post(0, granted());
            posted_first.send(()).unwrap();
            thread::sleep(Duration::from_millis(50));
            second.post(1, granted());
        });
        first_posted.recv().unwrap();
        let far = Some(Instant::now() + Duration::from_secs(30));
        assert_eq!(ballots.take_until(2, far).map(|(slot, _)| slot), Ok(0));
        // The second was in when the caller was let go.
        assert_eq!(ballots.try_take().map(|(slot, _)| slot), Some(1));
        poster.join().unwrap();

        let (ballot, ballots) = new_round(trace::Round::none(), 2);
        ballot.post(3, granted());
        let soon = Some(Instant::now() + Duration::from_millis(5));
        // One vote of the two wanted: handed out at the deadline.
        assert_eq!(ballots.take_until(2, soon).map(|(slot, _)| slot), Ok(3));
        drop(ballot);
        assert_eq!(ballots.take_until(2, soon).err(), Some(NoVote::Closed));
    }

    #[test]
    fn a_vote_for_a_round_nobody_waits_for_is_harmless() {
        let (ballot, ballots) = new_round(trace::Round::none(), 2);
        drop(ballots);
        ballot.post(0, granted());
    }
}

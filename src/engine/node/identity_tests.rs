//! Tests of `identity.rs`.

use super::*;
use crate::clock::Reading;

const Q: Duration = Duration::from_secs(60);

fn info(run_id: &str, uptime_secs: u64) -> Option<ServerInfo> {
    Some(ServerInfo::new(
        run_id,
        Some(Duration::from_secs(uptime_secs)),
    ))
}

impl Identity {
    /// Observes `server` and discards the standing.
    fn see(&mut self, server: &Option<ServerInfo>, now: Instant, registry: &Registry) {
        let _ = self.judge(server.as_ref(), &mut Reading::at(now), registry);
    }
}

#[test]
fn a_young_server_is_quarantined_until_max_ttl_after_its_start() {
    let registry = Registry::default();
    let now = Instant::now();
    let mut id = Identity::new(0, Some(Q), false);
    id.see(&info("a", 20), now, &registry);
    // 20 s reported is more than 19 s real: credited one second less.
    assert_eq!(
        id.standing(now),
        Standing::Quarantined(Duration::from_secs(41))
    );
    assert_eq!(id.standing(now + Duration::from_secs(41)), Standing::Voting);
}

#[test]
fn an_old_server_votes_and_a_changed_identity_is_quarantined_in_full() {
    let registry = Registry::default();
    let now = Instant::now();
    let mut id = Identity::new(0, Some(Q), false);
    id.see(&info("a", 3600), now, &registry);
    assert_eq!(id.standing(now), Standing::Voting);
    let later = now + Duration::from_secs(5);
    id.see(&info("b", 2), later, &registry);
    assert_eq!(id.standing(later), Standing::Quarantined(Q));
    // The same identity again changes nothing.
    id.see(&info("b", 3), later, &registry);
    assert_eq!(id.standing(later), Standing::Quarantined(Q));
}

/// Regression: another server that has been up for a long time, now
/// answering at the node's address (a DNS or port change), never had
/// our keys: its uptime must not shorten the quarantine.
#[test]
fn a_long_running_server_swapped_in_is_still_quarantined() {
    let registry = Registry::default();
    let now = Instant::now();
    let mut id = Identity::new(0, Some(Q), false);
    id.see(&info("a", 3600), now, &registry);
    id.see(&info("other", 7200), now, &registry);
    assert_eq!(id.standing(now), Standing::Quarantined(Q));
    assert_eq!(id.standing(now + Q), Standing::Voting);
}

#[test]
fn quarantine_off_and_unknown_identity() {
    let registry = Registry::default();
    let now = Instant::now();
    let mut off = Identity::new(0, None, false);
    off.see(&info("a", 0), now, &registry);
    assert_eq!(off.standing(now), Standing::Voting);
    assert_eq!(
        off.judge(None, &mut Reading::at(now), &registry),
        Standing::Voting
    );
    // Regression: with quarantine on, an answer from a server that cannot
    // be identified never counts, on first contact or later.
    let mut unknown = Identity::new(1, Some(Q), false);
    let anonymous = ServerInfo::default();
    assert_eq!(
        unknown.judge(Some(&anonymous), &mut Reading::at(now), &registry),
        Standing::Unverified
    );
    assert_eq!(
        unknown.judge(None, &mut Reading::at(now), &registry),
        Standing::Unverified
    );
    unknown.see(&info("b", 3600), now, &registry);
    assert_eq!(unknown.standing(now), Standing::Voting);
    assert_eq!(
        unknown.judge(Some(&anonymous), &mut Reading::at(now), &registry),
        Standing::Unverified
    );
}

/// Regression: one second of reported uptime may be a few milliseconds of
/// real uptime, so it buys nothing.
#[test]
fn a_whole_second_of_uptime_is_not_credited() {
    let registry = Registry::default();
    let now = Instant::now();
    let q = Duration::from_millis(1012);
    let mut id = Identity::new(0, Some(q), false);
    id.see(&info("a", 1), now, &registry);
    assert_eq!(id.standing(now), Standing::Quarantined(q));
}

/// A server that may evict lock keys does not vote, unless the manager
/// accepts the risk; the verdict follows the settings each answer came
/// with.
#[test]
fn a_server_that_may_evict_votes_only_when_the_risk_is_accepted() {
    let registry = Registry::default();
    let now = Instant::now();
    let evicting = info("a", 3600).map(|s| s.with_memory(1 << 20, "allkeys-lfu"));
    let mut strict = Identity::new(0, Some(Q), false);
    strict.see(&evicting, now, &registry);
    assert_eq!(strict.standing(now), Standing::MayEvict);
    assert_eq!(
        strict.eviction(),
        Some("maxmemory 1048576, maxmemory-policy allkeys-lfu")
    );
    assert!(
        strict.take_forgotten().is_some(),
        "an evicting server is a forget"
    );
    // Back to `noeviction`: the keys it may have dropped belong to
    // locks that may still be held, so it waits out the window.
    strict.see(
        &info("a", 3600).map(|s| s.with_memory(1 << 20, "noeviction")),
        now,
        &registry,
    );
    assert_eq!(strict.standing(now), Standing::Quarantined(Q));
    assert_eq!(strict.standing(now + Q), Standing::Voting);
    assert!(strict.take_forgotten().is_none());
    let mut accepting = Identity::new(1, Some(Q), true);
    accepting.see(
        &info("b", 3600).map(|s| s.with_memory(1 << 20, "volatile-ttl")),
        now,
        &registry,
    );
    assert_eq!(accepting.standing(now), Standing::Voting);
    assert!(accepting.eviction().is_some());
}

#[test]
fn the_same_server_twice_votes_once() {
    let registry = Registry::default();
    let now = Instant::now();
    let mut first = Identity::new(0, None, false);
    let mut second = Identity::new(1, None, false);
    first.see(&info("same", 100), now, &registry);
    second.see(&info("same", 100), now, &registry);
    assert_eq!(first.standing(now), Standing::Voting);
    assert_eq!(second.standing(now), Standing::DuplicateOf(0));
    // After the first node's server changes, the second owns the id.
    first.see(&info("other", 100), now, &registry);
    second.see(&info("moved", 100), now, &registry);
    assert_eq!(second.standing(now), Standing::Voting);
}

/// What a server says of its replication, read again without a restart. A
/// new history on the same server (a failover, `REPLICAOF`, a replica
/// promoted) is a forget and a quarantine; a replica does not vote; a
/// restart's new history is not a forget of its own (the restart quarantine
/// covers it).
#[test]
fn a_new_replication_history_is_a_forget_and_a_replica_does_not_vote() {
    let registry = Registry::default();
    let now = Instant::now();
    let with = |run_id: &str, replica: bool, replid: &str| {
        info(run_id, 3600).map(|s| s.with_replication(replica, replid))
    };
    let mut id = Identity::new(0, None, false).forgetting_for(Q);
    id.see(&with("a", false, "h1"), now, &registry);
    assert_eq!(id.standing(now), Standing::Voting);
    assert!(id.take_forgotten().is_none(), "first contact is no forget");
    id.see(&with("a", true, "h2"), now, &registry);
    assert_eq!(id.standing(now), Standing::Replica);
    let forgot = id.take_forgotten().unwrap();
    assert!(forgot.contains("replication history"), "{forgot}");
    id.see(&with("a", false, "h3"), now, &registry);
    assert!(id.take_forgotten().is_some());
    assert_eq!(id.standing(now), Standing::Quarantined(Q));
    assert_eq!(id.standing(now + Q), Standing::Voting);
    // A restart brings a new run id and a new history: the restart
    // rules alone apply (quarantine is off here).
    let later = now + Q;
    id.see(&with("b", false, "h4"), later, &registry);
    assert!(id.take_forgotten().is_none());
    assert_eq!(id.standing(later), Standing::Voting);
}

/// A policy switched on, keys evicted and the policy switched back between
/// two reads shows in `evicted_keys`.
#[test]
fn evicted_keys_that_grew_between_two_reads_are_a_forget() {
    let registry = Registry::default();
    let now = Instant::now();
    let with = |id: &str, evicted: u64| info(id, 3600).map(|s| s.with_evicted_keys(evicted));
    let mut id = Identity::new(0, None, false).forgetting_for(Q);
    id.see(&with("a", 7), now, &registry);
    assert!(
        id.take_forgotten().is_none(),
        "evictions before the first read"
    );
    assert_eq!(id.standing(now), Standing::Voting);
    id.see(&with("a", 7), now, &registry);
    assert!(id.take_forgotten().is_none());
    id.see(&with("a", 9), now, &registry);
    assert!(id.take_forgotten().unwrap().contains("evicted 2 keys"));
    assert_eq!(id.standing(now), Standing::Quarantined(Q));
    // With the risk accepted, evictions are no news.
    let mut accepting = Identity::new(1, None, true).forgetting_for(Q);
    accepting.see(&with("b", 1), now, &registry);
    accepting.see(&with("b", 5), now, &registry);
    assert!(accepting.take_forgotten().is_none());
    assert_eq!(accepting.standing(now), Standing::Voting);
}

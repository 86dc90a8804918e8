//! What a node's identity says, as `health()` shows it and the log tells
//! it: a small state machine that turns each batch's verdict into the
//! changes to publish and log, once each.
//!
//! Three verdicts travel together (quarantined until when, the same server
//! as which other node, answering without an identity), plus the server's
//! eviction settings. The worker judges every batch; this remembers what
//! was last announced, so the shared status is written (under its lock)
//! and a line is logged only when something changed.

use std::time::{Duration, Instant};

use super::identity::Standing;

/// The identity's verdicts on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Verdict {
    /// Quarantined until then (on the manager's clock).
    pub(super) quarantined_until: Option<Instant>,
    /// The same server as this node, which votes for both.
    pub(super) duplicate_of: Option<usize>,
    /// Answered without a server identity (quarantine on).
    pub(super) unidentified: bool,
    /// The server said it is a replica.
    pub(super) replica: bool,
}

/// What changed with one batch's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct News {
    /// The verdict to publish, when it changed.
    pub(super) publish: Option<Verdict>,
    /// Newly quarantined, for this long.
    pub(super) quarantined_for: Option<Duration>,
    /// The quarantine is over: clear it in the identity too.
    pub(super) quarantine_over: bool,
    /// Newly found to be the same server as this node.
    pub(super) duplicate_of: Option<usize>,
    /// Newly answering without an identity.
    pub(super) unidentified: bool,
}

/// What was last announced about one node.
#[derive(Debug, Default)]
pub(super) struct Announced {
    verdict: Verdict,
    eviction: Option<String>,
}

impl Announced {
    /// The news in `verdict`, judged `standing` for the batch.
    pub(super) fn verdict(&mut self, verdict: Verdict, standing: Standing) -> News {
        let was = self.verdict;
        let quarantine_over = was.quarantined_until.is_some() && standing == Standing::Voting;
        if verdict == was && !quarantine_over {
            return News::default();
        }
        let mut news = News {
            quarantined_for: match standing {
                Standing::Quarantined(left)
                    if verdict.quarantined_until != was.quarantined_until =>
                {
                    Some(left)
                }
                _ => None,
            },
            duplicate_of: verdict
                .duplicate_of
                .filter(|_| verdict.duplicate_of != was.duplicate_of),
            unidentified: verdict.unidentified && !was.unidentified,
            ..News::default()
        };
        let mut published = verdict;
        // Over only when nothing new replaced it in this same batch.
        if quarantine_over && verdict.quarantined_until == was.quarantined_until {
            published.quarantined_until = None;
            news.quarantine_over = true;
        }
        self.verdict = published;
        news.publish = Some(published);
        news
    }

    /// The server's eviction settings, when they changed since the last
    /// announcement: `Some(new)` (itself `None` when they are gone).
    pub(super) fn eviction(&mut self, eviction: Option<&str>) -> Option<Option<String>> {
        if eviction == self.eviction.as_deref() {
            return None;
        }
        self.eviction = eviction.map(str::to_owned);
        Some(self.eviction.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quarantined(until: Instant) -> Verdict {
        Verdict {
            quarantined_until: Some(until),
            ..Verdict::default()
        }
    }

    #[test]
    fn a_quarantine_is_announced_once_and_its_end_once() {
        let until = Instant::now() + Duration::from_secs(60);
        let mut announced = Announced::default();
        let left = Duration::from_secs(60);
        let news = announced.verdict(quarantined(until), Standing::Quarantined(left));
        assert_eq!(news.quarantined_for, Some(left));
        assert_eq!(news.publish, Some(quarantined(until)));
        let again = announced.verdict(quarantined(until), Standing::Quarantined(left / 2));
        assert_eq!(
            again,
            News::default(),
            "nothing new: nothing written, nothing logged"
        );
        let over = announced.verdict(quarantined(until), Standing::Voting);
        assert!(over.quarantine_over);
        assert_eq!(over.publish, Some(Verdict::default()), "published as over");
        assert_eq!(over.quarantined_for, None);
        let after = announced.verdict(Verdict::default(), Standing::Voting);
        assert_eq!(after, News::default());
    }

    #[test]
    fn a_duplicate_and_a_missing_identity_are_news_only_when_they_appear() {
        let mut announced = Announced::default();
        let duplicate = Verdict {
            duplicate_of: Some(1),
            ..Verdict::default()
        };
        let news = announced.verdict(duplicate, Standing::DuplicateOf(1));
        assert_eq!(news.duplicate_of, Some(1));
        assert_eq!(
            announced.verdict(duplicate, Standing::DuplicateOf(1)),
            News::default()
        );
        let unidentified = Verdict {
            unidentified: true,
            ..Verdict::default()
        };
        let news = announced.verdict(unidentified, Standing::Unverified);
        assert!(news.unidentified && news.duplicate_of.is_none());
        assert_eq!(news.publish, Some(unidentified));
        let news = announced.verdict(unidentified, Standing::Unverified);
        assert_eq!(news, News::default());
    }

    #[test]
    fn eviction_settings_are_news_when_they_change() {
        let mut announced = Announced::default();
        assert_eq!(announced.eviction(None), None);
        let policy = "maxmemory 4194304, maxmemory-policy allkeys-lru";
        assert_eq!(
            announced.eviction(Some(policy)),
            Some(Some(policy.to_owned()))
        );
        assert_eq!(announced.eviction(Some(policy)), None);
        assert_eq!(announced.eviction(None), Some(None));
    }
}

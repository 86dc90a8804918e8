//! The library's messages name its builder settings (`max_ttl`,
//! `LockManagerBuilder::accept_eviction_risk`); the tool's users set
//! flags. Every library text the tool prints (errors, reports, the
//! library's warnings) goes through [`flags`] first, so that it names
//! the flag to change. And the words the tool gives the library's values
//! (an inspection's verdict), in its lines and its JSON alike.

use quorum_lock::inspection::Verdict;

/// Library words and the flag that sets them, the longer first (a
/// replacement never meets a word an earlier one wrote).
const FLAGS: [(&str, &str); 13] = [
    (
        "LockManagerBuilder::accept_eviction_risk",
        "--accept-eviction-risk",
    ),
    (
        "LockManagerBuilder::restart_quarantine(false)",
        "--no-restart-quarantine",
    ),
    (
        "settings: max_ttl, restart_quarantine",
        "flags: --max-ttl, --no-restart-quarantine",
    ),
    ("max_ttl", "--max-ttl"),
    ("configuration: quorum ", "configuration: --quorum "),
    (
        "configuration: drift factor ",
        "configuration: --drift-factor ",
    ),
    (
        "configuration: node timeout ",
        "configuration: --node-timeout ",
    ),
    ("above the node timeout ", "above --node-timeout "),
    ("below the TTL ", "below --ttl "),
    ("argument: the TTL ", "argument: --ttl "),
    ("configuration: the TTL ", "configuration: --ttl "),
    ("configuration: the prefix is", "configuration: --prefix is"),
    ("configuration: owner label", "configuration: --owner"),
];

/// `text` with the library's setting names replaced by the tool's flags.
pub(crate) fn flags(text: &str) -> String {
    FLAGS.iter().fold(text.to_owned(), |text, (word, flag)| {
        text.replace(word, flag)
    })
}

/// A verdict's word, as `status` prints it and its JSON gives it (for a
/// lock, a semaphore's slot and a read-write lock alike).
pub(crate) fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Held => "held",
        Verdict::Free => "free",
        Verdict::Split => "split",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_words_become_flags() {
        assert_eq!(
            flags("invalid configuration: the TTL 90s is above max_ttl 60s"),
            "invalid configuration: --ttl 90s is above --max-ttl 60s"
        );
        assert_eq!(
            flags(
                "invalid configuration: node timeout 100ms must be above zero and below the TTL 100ms"
            ),
            "invalid configuration: --node-timeout 100ms must be above zero and below --ttl 100ms"
        );
        assert_eq!(
            flags("or accept the risk with LockManagerBuilder::accept_eviction_risk)"),
            "or accept the risk with --accept-eviction-risk)"
        );
        assert_eq!(
            flags("votes again in 3 s (settings: max_ttl, restart_quarantine)"),
            "votes again in 3 s (flags: --max-ttl, --no-restart-quarantine)"
        );
        assert_eq!(
            flags("invalid configuration: owner label contains '\\n': only printable ASCII"),
            "invalid configuration: --owner contains '\\n': only printable ASCII"
        );
        let plain = "the per-node timeout must be larger than zero";
        assert_eq!(flags(plain), plain);
    }
}

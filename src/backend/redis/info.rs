//! What a connection knows of the server at its other end, and the `INFO`
//! a batch's pipeline asks to learn it: the identity once per connection,
//! the settings that can change without a restart again once they are
//! [`SETTINGS_MAX_AGE`] old.

use std::time::{Duration, Instant};

use redis::Value;

use crate::backend::{SETTINGS_MAX_AGE, ServerInfo, ServerProduct, ServerVersion};

use super::frame::value_text;

/// What a batch on this connection must ask about the server first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ask {
    /// Nothing: the identity is known and its settings are fresh (or the
    /// server refuses `INFO`).
    Nothing,
    /// `INFO` (a new connection): the identity and every setting.
    Identity,
    /// `INFO memory`, `INFO replication` and `INFO stats`: the settings
    /// again.
    Settings,
}

impl Ask {
    /// The `INFO` sections read again for [`Ask::Settings`]: eviction
    /// (`memory`), the role and history (`replication`), `evicted_keys`
    /// (`stats`). One command and one reply each.
    const SETTINGS_SECTIONS: [&'static str; 3] = ["memory", "replication", "stats"];

    /// How many replies the asking adds to a pipeline.
    pub(super) fn replies(self) -> usize {
        match self {
            Self::Nothing => 0,
            Self::Identity => 1,
            Self::Settings => Self::SETTINGS_SECTIONS.len(),
        }
    }

    /// Packs the asking into `buf`: exactly [`replies`](Self::replies)
    /// commands.
    pub(super) fn pack(self, buf: &mut Vec<u8>) {
        match self {
            Self::Nothing => {}
            Self::Identity => pack_info(buf),
            Self::Settings => {
                for section in Self::SETTINGS_SECTIONS {
                    redis::cmd("INFO").arg(section).write_packed_command(buf);
                }
            }
        }
    }
}

/// What this connection knows about the server at its other end.
pub(super) enum Identity {
    /// `INFO server` not asked yet.
    Unread,
    /// The server's answer, when it was read, and when its settings were
    /// last read.
    Known {
        info: ServerInfo,
        read_at: Instant,
        settings_at: Instant,
    },
    /// The server refused `INFO` (e.g. `NOPERM`) or its reply was not
    /// readable: unknown for this connection's life; never asked again.
    Unavailable,
}

impl Identity {
    /// What the next batch on this connection, sent at `now`, must ask
    /// first.
    pub(super) fn ask(&self, now: Instant) -> Ask {
        match self {
            Self::Known { settings_at, .. }
                if now.saturating_duration_since(*settings_at) >= SETTINGS_MAX_AGE =>
            {
                Ask::Settings
            }
            Self::Known { .. } => Ask::Nothing,
            Self::Unread | Self::Unavailable => self.look(),
        }
    }

    /// What a look at the server asks ([`Probe`](crate::backend::Probe)):
    /// the identity on a new connection, the settings on a known one
    /// however fresh (the engine looks when it wants them read), nothing
    /// (a `PING` only) when the server refuses `INFO`.
    pub(super) fn look(&self) -> Ask {
        match self {
            Self::Known { .. } => Ask::Settings,
            Self::Unread => Ask::Identity,
            Self::Unavailable => Ask::Nothing,
        }
    }

    /// Records the replies to what `ask` asked (in order). An error reply
    /// or one that is not text leaves the identity unknown for good: a
    /// server whose settings cannot be read again cannot be vouched for.
    pub(super) fn learn(&mut self, ask: Ask, replies: &mut impl Iterator<Item = Value>) {
        // Most batches ask nothing: no reply of theirs is the identity's.
        if ask == Ask::Nothing {
            return;
        }
        let texts: Vec<Option<String>> = (0..ask.replies())
            .map(|_| replies.next().as_ref().and_then(value_text))
            .collect();
        let Some(texts) = texts.into_iter().collect::<Option<Vec<String>>>() else {
            *self = Self::Unavailable;
            return;
        };
        let now = Instant::now();
        match (ask, &mut *self) {
            (
                Ask::Settings,
                Self::Known {
                    info, settings_at, ..
                },
            ) => {
                let mut fresh = ServerInfo::default();
                for text in &texts {
                    parse_into(&mut fresh, text);
                }
                info.maxmemory = fresh.maxmemory;
                info.maxmemory_policy = fresh.maxmemory_policy;
                info.replica = fresh.replica;
                info.replication_id = fresh.replication_id;
                info.evicted_keys = fresh.evicted_keys;
                *settings_at = now;
            }
            _ => {
                *self = Self::Known {
                    info: parse_info(&texts.concat()),
                    read_at: now,
                    settings_at: now,
                };
            }
        }
    }

    /// Which server and version is at the other end; `None` when unknown.
    pub(super) fn version(&self) -> Option<ServerVersion> {
        match self {
            Self::Known { info, .. } => info.version,
            Self::Unread | Self::Unavailable => None,
        }
    }

    /// The server at the other end, with its uptime advanced by the time
    /// from `INFO`'s reading to `at` (a batch's checkout: an uptime
    /// advanced less than it could be only makes the quarantine credit
    /// the server less); `None` when unknown.
    pub(super) fn server(&self, at: Instant) -> Option<ServerInfo> {
        match self {
            Self::Known { info, read_at, .. } => {
                let mut info = info.clone();
                let since = at.saturating_duration_since(*read_at);
                info.uptime = info.uptime.map(|u| u.saturating_add(since));
                Some(info)
            }
            Self::Unread | Self::Unavailable => None,
        }
    }
}

/// `INFO` with its default sections: `server` (the identity) and `memory`
/// (whether the server may evict lock keys) among them, in one reply that
/// every Redis and Valkey version answers.
pub(super) fn pack_info(buf: &mut Vec<u8>) {
    redis::cmd("INFO").write_packed_command(buf);
}

/// `run_id`, `uptime_in_seconds`, `maxmemory`, `maxmemory_policy`, `role`,
/// `master_replid` and `evicted_keys` from an `INFO` reply (Redis and Valkey spell them
/// alike), and the server's version: `valkey_version` when there is one
/// (Valkey reports `redis_version:7.2.4` in every release), else
/// `redis_version`.
pub(super) fn parse_info(text: &str) -> ServerInfo {
    let mut info = ServerInfo::default();
    parse_into(&mut info, text);
    info
}

/// The fields of [`parse_info`] found in `text`, written into `info`.
fn parse_into(info: &mut ServerInfo, text: &str) {
    for line in text.lines() {
        let Some((name, value)) = line.trim_end().split_once(':') else {
            continue;
        };
        match name {
            "run_id" => info.run_id = (!value.is_empty()).then(|| value.into()),
            "uptime_in_seconds" => {
                info.uptime = value.parse::<u64>().ok().map(Duration::from_secs);
            }
            "maxmemory" => info.maxmemory = value.parse::<u64>().ok(),
            "maxmemory_policy" => info.maxmemory_policy = Some(value.into()),
            "role" => info.replica = Some(value != "master"),
            "evicted_keys" => info.evicted_keys = value.parse::<u64>().ok(),
            "redis_version" if info.version.is_none() => {
                info.version = ServerVersion::parse(ServerProduct::Redis, value);
            }
            "valkey_version" => info.version = ServerVersion::parse(ServerProduct::Valkey, value),
            "master_replid" => {
                info.replication_id = (!value.is_empty()).then(|| value.into());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn every_ask_packs_as_many_commands_as_it_expects_replies() {
        for ask in [Ask::Nothing, Ask::Identity, Ask::Settings] {
            let mut buf = Vec::new();
            ask.pack(&mut buf);
            // Each packed command is a RESP array: it starts with `*`.
            let commands = buf.windows(2).filter(|w| w == b"\n*").count()
                + usize::from(buf.first() == Some(&b'*'));
            assert_eq!(commands, ask.replies(), "{ask:?}");
        }
    }

    #[test]
    fn info_parsing() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n\
                    # Memory\r\nmaxmemory:4194304\r\nmaxmemory_human:4.00M\r\n\
                    maxmemory_policy:volatile-lru\r\n";
        let info = parse_info(text);
        assert_eq!(info.run_id.as_deref(), Some("abc123"));
        assert_eq!(info.uptime, Some(Duration::from_secs(42)));
        assert_eq!(
            info.eviction().as_deref(),
            Some("maxmemory 4194304, maxmemory-policy volatile-lru")
        );
        assert_eq!(parse_info(""), ServerInfo::default());
        assert_eq!(
            info.version,
            Some(ServerVersion::new(ServerProduct::Redis, 7, 0, 15))
        );
    }

    /// Valkey says `redis_version:7.2.4` whatever its own version: the
    /// `valkey_version` line decides, before or after it.
    #[test]
    fn valkey_is_told_by_its_own_version_line() {
        let valkey = ServerVersion::new(ServerProduct::Valkey, 9, 1, 2);
        for text in [
            "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n",
            "valkey_version:9.1.2\r\nredis_version:7.2.4\r\n",
        ] {
            assert_eq!(parse_info(text).version, Some(valkey), "{text:?}");
        }
        assert_eq!(parse_info("redis_version:x\r\n").version, None);
    }
}

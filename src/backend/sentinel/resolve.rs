//! Which server is the master: asked of every sentinel at once
//! (`SENTINEL GET-MASTER-ADDR-BY-NAME`, `SENTINEL REPLICAS`), taken only
//! when a majority of the sentinels given name the same address, then
//! checked on the server itself (`ROLE`).

use std::time::Instant;

use redis::Value;

use super::{Found, Set};
use crate::backend::redis::RedisBackend;
use crate::backend::redis::frame::value_text;
use crate::backend::{BackendError, BackendErrorKind};

/// What one sentinel said: the master's address and how many of its
/// replicas it sees up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Named {
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) replicas: usize,
}

impl Set {
    /// Asks every sentinel at once (a thread each, every one ended by
    /// `until`), takes the address a majority of the sentinels given
    /// name, and checks with `ROLE` that the server there is a master:
    /// the node's master from then on.
    /// Its holds wait for the larger number of replicas any of those
    /// sentinels sees up (and as many as the master counts: `confirm.rs`).
    pub(super) fn resolve(&self, until: Instant) -> Result<RedisBackend, BackendError> {
        let said: Vec<Result<Named, BackendError>> = std::thread::scope(|scope| {
            let asked: Vec<_> = self
                .sentinels
                .iter()
                .map(|sentinel| {
                    std::thread::Builder::new()
                        .name("quorum-lock-sentinel".into())
                        .spawn_scoped(scope, move || self.ask(sentinel, until))
                })
                .collect();
            asked
                .into_iter()
                .map(|spawned| match spawned {
                    Ok(handle) => handle.join().unwrap_or_else(|_| {
                        Err(self.error(BackendErrorKind::Panicked, "a sentinel's reader panicked"))
                    }),
                    Err(e) => Err(self.error(
                        BackendErrorKind::Other,
                        &format!("no thread to ask a sentinel: {e}"),
                    )),
                })
                .collect()
        });
        let named = majority(&said, self.sentinels.len())
            .ok_or_else(|| self.error(BackendErrorKind::Unreachable, &self.no_majority(&said)))?;
        let (master, new) = match self.found_before(&named) {
            Some(made) => (made, false),
            None => (
                self.template
                    .shard_at(&named.host, named.port, named.replicas)?,
                true,
            ),
        };
        let role = master.command_by(&redis::cmd("ROLE"), until).map_err(|e| {
            self.error(
                e.kind(),
                &format!(
                    "the master the sentinels name did not answer ROLE: {}",
                    e.message()
                ),
            )
        })?;
        if !is_master(&role) {
            return Err(self.error(
                BackendErrorKind::ReadOnly,
                &format!(
                    "the sentinels name {} as the master, but it says it is not one (ROLE)",
                    master.url_redacted()
                ),
            ));
        }
        *self.master.lock() = Some(Found {
            backend: master.clone(),
            current: true,
        });
        // Once per master found so (a node that keeps asking again, its
        // holds refused, would repeat it at every attempt).
        if new && named.replicas == 0 {
            log::warn!(
                "{}: the sentinels list no replica of {} that is up: its holds are confirmed \
                 by as many replicas as it counts itself, none if it has none (a plain \
                 server's, which no failover can replace)",
                self.described,
                master.url_redacted()
            );
        }
        Ok(master)
    }

    /// The backend of the master found before, if it is `named` (its
    /// address, and as many replicas to wait for).
    fn found_before(&self, named: &Named) -> Option<RedisBackend> {
        self.master
            .lock()
            .as_ref()
            .map(|found| &found.backend)
            .filter(|m| {
                m.host_port() == Some((named.host.as_str(), named.port))
                    && m.replicas() == named.replicas
            })
            .cloned()
    }

    /// Why `said` names no master: how many sentinels answered and what
    /// each named, then what kept the others from answering.
    fn no_majority(&self, said: &[Result<Named, BackendError>]) -> String {
        let mut answered = Vec::new();
        let mut failed = Vec::new();
        for (said, sentinel) in said.iter().zip(&self.sentinels) {
            match said {
                Ok(n) => answered.push(format!(
                    "{} names {}:{}",
                    sentinel.url_redacted(),
                    n.host,
                    n.port
                )),
                Err(e) => failed.push(e.message().to_owned()),
            }
        }
        let mut why = format!(
            "no majority of the {} sentinels names a master for {}: {} of them answered",
            self.sentinels.len(),
            self.name,
            answered.len()
        );
        if !answered.is_empty() {
            why.push_str(&format!(" ({})", answered.join("; ")));
        }
        if !failed.is_empty() {
            why.push_str(&format!(
                ", {} did not ({})",
                failed.len(),
                failed.join("; ")
            ));
        }
        why
    }

    /// One sentinel's answer: the master's address and its replicas up.
    fn ask(&self, sentinel: &RedisBackend, until: Instant) -> Result<Named, BackendError> {
        let sentinel_cmd = |sub: &str| {
            let mut cmd = redis::cmd("SENTINEL");
            cmd.arg(sub).arg(&self.name);
            sentinel.command_by(&cmd, until)
        };
        let address = sentinel_cmd("GET-MASTER-ADDR-BY-NAME")?;
        let (host, port) = address_of(&address).ok_or_else(|| {
            BackendError::new(
                BackendErrorKind::Protocol,
                format!(
                    "{}: knows no master {} (GET-MASTER-ADDR-BY-NAME)",
                    sentinel.url_redacted(),
                    self.name
                ),
            )
        })?;
        let replicas = replicas_up(&sentinel_cmd("REPLICAS")?);
        Ok(Named {
            host,
            port,
            replicas,
        })
    }
}

/// The address more than half of `total` sentinels name, with the most
/// replicas any of them sees up.
fn majority(said: &[Result<Named, BackendError>], total: usize) -> Option<Named> {
    let named: Vec<&Named> = said.iter().filter_map(|s| s.as_ref().ok()).collect();
    named.iter().find_map(|candidate| {
        let agreeing: Vec<&&Named> = named
            .iter()
            .filter(|n| n.host == candidate.host && n.port == candidate.port)
            .collect();
        (agreeing.len() > total / 2).then(|| Named {
            host: candidate.host.clone(),
            port: candidate.port,
            replicas: agreeing.iter().map(|n| n.replicas).max().unwrap_or(0),
        })
    })
}

/// `[host, port]` of a `GET-MASTER-ADDR-BY-NAME` reply (nil: the name is
/// unknown).
fn address_of(reply: &Value) -> Option<(String, u16)> {
    let Value::Array(fields) = reply else {
        return None;
    };
    let host = value_text(fields.first()?)?;
    let port = value_text(fields.get(1)?)?.parse().ok()?;
    (!host.is_empty()).then_some((host, port))
}

/// The replicas of a `SENTINEL REPLICAS` reply not flagged down or
/// disconnected (`s_down`, `o_down`, `disconnected`).
fn replicas_up(reply: &Value) -> usize {
    let Value::Array(replicas) = reply else {
        return 0;
    };
    replicas
        .iter()
        .filter(|replica| {
            let Value::Array(fields) = replica else {
                return false;
            };
            let flags = fields
                .chunks(2)
                .find(|pair| pair.first().and_then(value_text).as_deref() == Some("flags"))
                .and_then(|pair| pair.get(1).and_then(value_text))
                .unwrap_or_default();
            !flags.is_empty()
                && !flags
                    .split(',')
                    .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"))
        })
        .count()
}

/// Whether a `ROLE` reply says `master`.
fn is_master(reply: &Value) -> bool {
    match reply {
        Value::Array(fields) => fields
            .first()
            .and_then(value_text)
            .is_some_and(|role| role == "master"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn named(port: u16, replicas: usize) -> Result<Named, BackendError> {
        Ok(Named {
            host: "h".into(),
            port,
            replicas,
        })
    }

    #[test]
    fn a_master_needs_a_majority_of_the_sentinels_given() {
        let down = || Err(BackendError::new(BackendErrorKind::Unreachable, "down"));
        let two = [named(1, 0), named(1, 1), down()];
        assert_eq!(
            majority(&two, 3).map(|n| (n.port, n.replicas)),
            Some((1, 1))
        );
        assert_eq!(majority(&[named(1, 1), down(), down()], 3), None);
        assert_eq!(majority(&[named(1, 1), named(2, 1), down()], 3), None);
        assert_eq!(majority(&[named(1, 1), named(1, 1)], 4), None);
        assert_eq!(majority(&[], 0), None);
    }

    #[test]
    fn replies_are_read() {
        let address = Value::Array(vec![bulk("127.0.0.1"), bulk("6380")]);
        assert_eq!(address_of(&address), Some(("127.0.0.1".into(), 6380)));
        assert_eq!(address_of(&Value::Nil), None);
        let replica =
            |flags: &str| Value::Array(vec![bulk("name"), bulk("x"), bulk("flags"), bulk(flags)]);
        let replicas = Value::Array(vec![
            replica("slave"),
            replica("s_down,slave"),
            replica("slave,disconnected"),
            replica("slave"),
        ]);
        assert_eq!(replicas_up(&replicas), 2);
        assert_eq!(replicas_up(&Value::Array(vec![])), 0);
        assert!(is_master(&Value::Array(vec![
            bulk("master"),
            Value::Int(0)
        ])));
        assert!(!is_master(&Value::Array(vec![bulk("slave")])));
        assert!(!is_master(&Value::Nil));
    }
}

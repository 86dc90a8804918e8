//! Which master serves which slots, read from `CLUSTER SLOTS`, with the
//! number of replicas each master has (whose acknowledgment a hold on
//! that shard waits for).

use redis::Value;

use super::slot::SLOTS;

/// One master's contiguous range of slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) start: u16,
    pub(crate) end: u16,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The replicas the cluster lists for this master.
    pub(crate) replicas: usize,
}

/// The cluster's slot map, as one node reported it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Topology {
    /// Sorted by `start`.
    ranges: Vec<Range>,
}

impl Topology {
    /// Reads a `CLUSTER SLOTS` reply. A master announced without a host
    /// (empty, or `?`: the node does not know how it is reached) is at
    /// `asked_host`, the host that gave the reply, as the cluster
    /// specification says.
    pub(crate) fn parse(reply: &Value, asked_host: &str) -> Result<Self, String> {
        let Value::Array(entries) = reply else {
            return Err(format!("CLUSTER SLOTS answered {reply:?}, not a list"));
        };
        let mut ranges = Vec::with_capacity(entries.len());
        for entry in entries {
            ranges.push(range(entry, asked_host).ok_or_else(|| {
                format!("CLUSTER SLOTS answered an entry quorum-lock cannot read: {entry:?}")
            })?);
        }
        ranges.sort_by_key(|r| r.start);
        if ranges.is_empty() {
            return Err(
                "the cluster serves no slots (CLUSTER SLOTS is empty): is it created?".into(),
            );
        }
        Ok(Self { ranges })
    }

    /// A range of the master at `host:port` (with the replicas listed
    /// for it), if the map lists that master.
    pub(crate) fn master(&self, host: &str, port: u16) -> Option<&Range> {
        self.ranges
            .iter()
            .find(|r| r.host == host && r.port == port)
    }

    /// The range that holds `slot`, if some master serves it.
    pub(crate) fn range_of(&self, slot: u16) -> Option<&Range> {
        let i = self.ranges.partition_point(|r| r.start <= slot);
        let range = self.ranges.get(i.checked_sub(1)?)?;
        (slot <= range.end).then_some(range)
    }
}

/// One entry: `[start, end, [host, port, id, ...], replica...]`.
fn range(entry: &Value, asked_host: &str) -> Option<Range> {
    let Value::Array(fields) = entry else {
        return None;
    };
    let number = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let start = number(fields.first()?)?;
    let end = number(fields.get(1)?)?;
    let Value::Array(master) = fields.get(2)? else {
        return None;
    };
    let host = match master.first()? {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok()?,
        Value::SimpleString(text) => text.clone(),
        _ => return None,
    };
    let host = if host.is_empty() || host == "?" {
        asked_host.to_owned()
    } else {
        host
    };
    let port = number(master.get(1)?)?;
    (start <= end && end < SLOTS).then(|| Range {
        start,
        end,
        host,
        port,
        replicas: fields.len() - 3,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"0123abcd".to_vec()),
        ])
    }

    fn entry(start: i64, end: i64, nodes: Vec<Value>) -> Value {
        let mut fields = vec![Value::Int(start), Value::Int(end)];
        fields.extend(nodes);
        Value::Array(fields)
    }

    #[test]
    fn slots_map_to_their_masters() {
        let reply = Value::Array(vec![
            entry(
                5461,
                10922,
                vec![node("10.0.0.2", 7001), node("10.0.0.5", 7004)],
            ),
            entry(0, 5460, vec![node("", 7000)]),
            entry(
                10923,
                16383,
                vec![node("10.0.0.3", 7002), node("a", 1), node("b", 2)],
            ),
        ]);
        let map = Topology::parse(&reply, "seed.example").unwrap();
        let at = |slot| {
            map.range_of(slot)
                .map(|r| (r.host.clone(), r.port, r.replicas))
        };
        assert_eq!(at(0), Some(("seed.example".into(), 7000, 0)));
        assert_eq!(at(5460), Some(("seed.example".into(), 7000, 0)));
        assert_eq!(at(5461), Some(("10.0.0.2".into(), 7001, 1)));
        assert_eq!(at(16383), Some(("10.0.0.3".into(), 7002, 2)));
    }

    #[test]
    fn gaps_and_garbage_are_told() {
        let reply = Value::Array(vec![entry(100, 200, vec![node("h", 1)])]);
        let map = Topology::parse(&reply, "h").unwrap();
        assert_eq!(map.range_of(99), None);
        assert_eq!(map.range_of(201), None);
        assert!(Topology::parse(&Value::Array(vec![]), "h").is_err());
        assert!(Topology::parse(&Value::Nil, "h").is_err());
        let bad = Value::Array(vec![entry(10, 20000, vec![node("h", 1)])]);
        assert!(Topology::parse(&bad, "h").is_err());
    }
}

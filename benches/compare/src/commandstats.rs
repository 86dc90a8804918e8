//! What the servers received: `INFO commandstats` of every server, read
//! before and after a block, so that a block's server-side work is counted
//! per command (calls, and the microseconds the server spent in them), not
//! only what its caller saw. A command a script runs (`redis.call`) is
//! counted under its own name too, and its time is also inside the
//! script's (`EVALSHA`) time: the figures of one block are not to be
//! added up.

use std::collections::BTreeMap;

/// Per command (lower case, as the server names it): calls and
/// microseconds, summed over the servers read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommandStats {
    pub by_command: BTreeMap<String, (u64, u64)>,
}

impl CommandStats {
    /// `INFO commandstats` of every server at `urls`, summed.
    pub fn read(urls: &[String]) -> Result<Self, String> {
        let mut all = CommandStats::default();
        for url in urls {
            let text: String = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection())
                .and_then(|mut c| redis::cmd("INFO").arg("commandstats").query(&mut c))
                .map_err(|e| format!("INFO commandstats of {url}: {e}"))?;
            for (name, (calls, usec)) in parse(&text).by_command {
                let entry = all.by_command.entry(name).or_default();
                entry.0 += calls;
                entry.1 += usec;
            }
        }
        Ok(all)
    }

    /// What was counted between `before` and `self` (the `INFO` calls of
    /// this harness left out).
    pub fn since(&self, before: &CommandStats) -> CommandStats {
        let by_command = self
            .by_command
            .iter()
            .filter(|(name, _)| name.as_str() != "info")
            .map(|(name, &(calls, usec))| {
                let (c0, u0) = before.by_command.get(name).copied().unwrap_or((0, 0));
                (
                    name.clone(),
                    (calls.saturating_sub(c0), usec.saturating_sub(u0)),
                )
            })
            .filter(|(_, (calls, _))| *calls > 0)
            .collect();
        CommandStats { by_command }
    }

    /// Calls and microseconds of one command.
    pub fn of(&self, name: &str) -> (u64, u64) {
        self.by_command.get(name).copied().unwrap_or((0, 0))
    }
}

/// Per command, of one `INFO commandstats` reply.
fn parse(text: &str) -> CommandStats {
    let by_command = testkit::commandstats::parse(text)
        .into_iter()
        .map(|(name, calls, usec)| (name, (calls, usec)))
        .collect();
    CommandStats { by_command }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPLY: &str = "# Commandstats\r\n\
        cmdstat_set:calls=16400,usec=11935,usec_per_call=0.73,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_evalsha:calls=16399,usec=66521,usec_per_call=4.06,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_publish:calls=16400,usec=2969,usec_per_call=0.18,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_script|load:calls=24,usec=352,usec_per_call=14.67,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_info:calls=4,usec=163,usec_per_call=40.75,rejected_calls=0,failed_calls=0\r\n";

    #[test]
    fn every_command_line_is_read_with_its_calls_and_time() {
        let s = parse(REPLY);
        assert_eq!(s.of("set"), (16_400, 11_935));
        assert_eq!(s.of("evalsha"), (16_399, 66_521));
        assert_eq!(s.of("script|load"), (24, 352));
        assert_eq!(s.of("get"), (0, 0));
        assert_eq!(s.by_command.len(), 5);
    }

    #[test]
    fn a_delta_leaves_out_the_harness_s_info_and_commands_not_called() {
        let before = parse(REPLY);
        let mut after = before.clone();
        after.by_command.insert("set".into(), (16_500, 12_000));
        after.by_command.insert("info".into(), (10, 400));
        let d = after.since(&before);
        assert_eq!(d.of("set"), (100, 65));
        assert_eq!(d.by_command.len(), 1, "{d:?}");
    }
}

//! What `doctor` found on one node: a verdict, facts (for people and for
//! `--json`) and findings (why the verdict is not ok).

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Verdict {
    Ok,
    Warn,
    Fail,
}

impl Verdict {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "fail",
        }
    }
}

/// A fact's value: text for people, and a typed value for `--json`.
pub(crate) enum Value {
    Text(String),
    /// Printed as `{:?}`; whole milliseconds in JSON, and whole
    /// microseconds under the second key.
    Millis(Duration, &'static str),
    /// Whole seconds.
    Secs(u64),
}

/// One fact about a node: its label for people, its JSON key, its value.
pub(crate) struct Fact {
    pub(crate) label: &'static str,
    pub(crate) key: &'static str,
    pub(crate) value: Value,
}

/// What was found on one node.
pub(crate) struct Checkup {
    pub(crate) verdict: Verdict,
    /// Its votes do not count yet (restart quarantine), but will.
    pub(crate) quarantined: bool,
    /// How long its quarantine lasts, about (the longest of a cluster's
    /// shards), when known.
    pub(crate) quarantine_left: Option<Duration>,
    /// The server's `run_id`, to find one server under two names.
    pub(crate) run_id: Option<String>,
    pub(crate) facts: Vec<Fact>,
    /// Why the verdict is not ok, each with its own level, in the order
    /// found.
    pub(crate) findings: Vec<(Verdict, String)>,
}

impl Checkup {
    pub(crate) fn new() -> Self {
        Self {
            verdict: Verdict::Ok,
            quarantined: false,
            quarantine_left: None,
            run_id: None,
            facts: Vec::new(),
            findings: Vec::new(),
        }
    }

    pub(crate) fn note(&mut self, verdict: Verdict, finding: String) {
        self.verdict = self.verdict.max(verdict);
        self.findings.push((verdict, finding));
    }

    /// Whether a finding already fails the node.
    pub(crate) fn failed(&self) -> bool {
        self.verdict == Verdict::Fail
    }

    /// The findings below the verdict's level (each on a line of its own,
    /// `warn: ...`), then the verdict's own: its level's findings, the
    /// cause in one short line.
    pub(crate) fn verdict_lines(&self) -> (Vec<String>, String) {
        let lesser = self
            .findings
            .iter()
            .filter(|(level, _)| *level < self.verdict)
            .map(|(level, text)| format!("{}: {text}", level.as_str()))
            .collect();
        let causes: Vec<&str> = self
            .findings
            .iter()
            .filter(|(level, _)| *level == self.verdict)
            .map(|(_, text)| text.as_str())
            .collect();
        let verdict = if causes.is_empty() {
            self.verdict.as_str().to_owned()
        } else {
            format!("{}: {}", self.verdict.as_str(), causes.join("; "))
        };
        (lesser, verdict)
    }

    pub(crate) fn fact(&mut self, label: &'static str, key: &'static str, value: Value) {
        self.facts.push(Fact { label, key, value });
    }

    pub(crate) fn text(&mut self, label: &'static str, key: &'static str, value: String) {
        self.fact(label, key, Value::Text(value));
    }
}

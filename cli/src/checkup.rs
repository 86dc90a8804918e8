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
    /// The server's `run_id`, to find one server under two names.
    pub(crate) run_id: Option<String>,
    pub(crate) facts: Vec<Fact>,
    /// Why the verdict is not ok.
    pub(crate) findings: Vec<String>,
}

impl Checkup {
    pub(crate) fn new() -> Self {
        Self {
            verdict: Verdict::Ok,
            quarantined: false,
            run_id: None,
            facts: Vec::new(),
            findings: Vec::new(),
        }
    }

    pub(crate) fn note(&mut self, verdict: Verdict, finding: String) {
        self.verdict = self.verdict.max(verdict);
        self.findings.push(finding);
    }

    pub(crate) fn fact(&mut self, label: &'static str, key: &'static str, value: Value) {
        self.facts.push(Fact { label, key, value });
    }

    pub(crate) fn text(&mut self, label: &'static str, key: &'static str, value: String) {
        self.fact(label, key, Value::Text(value));
    }
}

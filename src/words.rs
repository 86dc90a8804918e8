//! A duration and a resource name as the crate's one-line messages
//! (reports, errors, health, inspections, log lines) write them.

use std::fmt;
use std::time::Duration;

/// A duration for people: `812 µs`, `15.3 ms`, `1.53 s`, `2 min 5 s`.
pub(crate) fn human(d: Duration) -> String {
    let micros = d.as_micros();
    if micros < 1_000 {
        format!("{micros} µs")
    } else if micros < 10_000 {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else if micros < 1_000_000 {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else if d.as_secs() < 60 {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{} min {} s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

/// Longest resource name shown in full in messages; longer ones are cut
/// (the report keeps the whole name).
const SHOWN_RESOURCE_CHARS: usize = 64;

/// A resource name for a one-line message: quoted, cut after
/// [`SHOWN_RESOURCE_CHARS`] characters with the full length said.
pub(crate) struct Shortened<'a>(pub(crate) &'a str);

impl fmt::Display for Shortened<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let chars = self.0.chars().count();
        if chars <= SHOWN_RESOURCE_CHARS {
            return write!(f, "{:?}", self.0);
        }
        let head: String = self.0.chars().take(SHOWN_RESOURCE_CHARS).collect();
        write!(f, "{head:?}... ({} bytes)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_people_write_them() {
        let ms = Duration::from_millis;
        assert_eq!(human(Duration::from_micros(812)), "812 µs");
        assert_eq!(human(Duration::from_micros(1530)), "1.53 ms");
        assert_eq!(human(ms(15) + Duration::from_micros(300)), "15.3 ms");
        assert_eq!(human(ms(1530)), "1.53 s");
        assert_eq!(human(Duration::from_secs(125)), "2 min 5 s");
    }

    #[test]
    fn a_long_resource_name_is_cut_and_its_length_said() {
        assert_eq!(Shortened("job").to_string(), "\"job\"");
        let long = "x".repeat(100);
        let shown = Shortened(&long).to_string();
        assert!(shown.ends_with("... (100 bytes)"), "{shown}");
        assert_eq!(shown.matches('x').count(), 64, "{shown}");
    }
}

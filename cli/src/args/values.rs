//! How a flag's text becomes its value: durations people write (`30s`,
//! `500ms`), `--scripts`, and `--nodes` split at commas with a Sentinel
//! URL's own commas kept. Apart from the flags because these are plain
//! functions of text, tested as such, that several subcommands share.

use std::time::Duration;

use quorum_lock::Scripts;

/// `-n K` / `--permits K` (of `run` and `status`): a count of permits the
/// library accepts, 1 to [`MAX_PERMITS`](quorum_lock::MAX_PERMITS).
pub(crate) fn permit_count() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..=i64::from(quorum_lock::MAX_PERMITS))
}

/// `30s`, `500ms`, `2m`, `1h`, `1.5s`: a number and a unit (ms, s, m, h).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("`{text}` has no unit: write e.g. 30s, 500ms, 2m or 1h"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a number"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "s" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}`: use ms, s, m or h"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("`{text}` is out of range"))
}

/// `auto`, `never` or `always` (see [`Global::scripts`](super::Global::scripts)).
pub(super) fn parse_scripts(text: &str) -> Result<Scripts, String> {
    match text {
        "auto" => Ok(Scripts::Auto),
        "never" => Ok(Scripts::Never),
        "always" => Ok(Scripts::Always),
        other => Err(format!("`{other}`: expected auto, never or always")),
    }
}

/// The node URLs of `--nodes` split at every comma, put back together
/// where a comma was a Sentinel URL's (between its sentinels): a piece
/// without a scheme (`://`) continues the URL before it.
pub(crate) fn rejoin_sentinels(pieces: Vec<String>) -> Vec<String> {
    let mut urls: Vec<String> = Vec::with_capacity(pieces.len());
    for piece in pieces {
        match urls.last_mut() {
            Some(last) if !piece.contains("://") && last.contains("+sentinel://") => {
                last.push(',');
                last.push_str(&piece);
            }
            _ => urls.push(piece),
        }
    }
    urls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_keeps_its_commas() {
        let split = |text: &str| text.split(',').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            rejoin_sentinels(split(
                "redis://a:1,redis+sentinel://s1:1,s2:2,s3/main,redis://b:2"
            )),
            [
                "redis://a:1",
                "redis+sentinel://s1:1,s2:2,s3/main",
                "redis://b:2"
            ]
        );
        // A stray piece after a plain URL stays a (bad) URL of its own.
        assert_eq!(
            rejoin_sentinels(split("redis://a:1,b:2")),
            ["redis://a:1", "b:2"]
        );
    }

    #[test]
    fn durations_people_write() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("1e999s").is_err());
    }
}

//! A Sentinel node's URL, read without connecting:
//! `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/NAME[/db][?query][#fragment]`.
//! The user-info is the data nodes'; `sentinel_user=` and
//! `sentinel_password=` in the query are the sentinels'; the other query
//! settings and the fragment (`#insecure`) apply as on a `redis://` URL.

/// The URL schemes of a Sentinel node, with the scheme of its servers.
pub(super) const SCHEMES: [(&str, &str); 2] = [
    ("redis+sentinel://", "redis://"),
    ("rediss+sentinel://", "rediss://"),
];

/// The port a sentinel listens on when the URL names none.
const DEFAULT_PORT: u16 = 26379;

/// What a Sentinel node's URL says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SentinelUrl {
    /// `redis://` or `rediss://`.
    pub(super) plain: &'static str,
    /// The sentinels, as `host:port` (an IPv6 host in brackets).
    pub(super) sentinels: Vec<String>,
    /// The master name the sentinels monitor.
    pub(super) name: String,
    /// The data nodes' URL, at the first sentinel's address (its
    /// settings: user-info, db, query, fragment; `shard_at` moves it).
    pub(super) data: String,
    /// One sentinel's URL without its host (`{}` stands for it): the
    /// sentinels' credentials and the fragment.
    sentinel_template: String,
}

impl SentinelUrl {
    /// The URL of the sentinel at `host_port`.
    pub(super) fn sentinel(&self, host_port: &str) -> String {
        self.sentinel_template.replacen("{}", host_port, 1)
    }
}

/// Reads `url`; `Err` says what is wrong (the caller names the URL,
/// redacted).
pub(super) fn parse(url: &str) -> Result<SentinelUrl, String> {
    let Some((scheme, plain)) = SCHEMES.iter().find(|(s, _)| url.starts_with(s)) else {
        return Err(
            "a Sentinel node's URL starts with redis+sentinel:// or rediss+sentinel://".into(),
        );
    };
    let rest = &url[scheme.len()..];
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, fragment)) => (rest, format!("#{fragment}")),
        None => (rest, String::new()),
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let Some((authority, path)) = rest.split_once('/') else {
        return Err("no master name: expected .../MASTER-NAME after the sentinels".into());
    };
    let (name, db) = path.split_once('/').unwrap_or((path, ""));
    if name.is_empty() {
        return Err("no master name: expected .../MASTER-NAME after the sentinels".into());
    }
    if !db.is_empty() && db.parse::<i64>().is_err() {
        return Err(format!(
            "the database after the master name is not a number: {db}"
        ));
    }
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
        None => (String::new(), authority),
    };
    let mut sentinels = Vec::new();
    for host_port in hosts.split(',') {
        sentinels.push(host_and_port(host_port)?);
    }
    let mut data_query = Vec::new();
    let (mut user, mut password) = (None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sentinel_user", value)) => user = Some(value),
            Some(("sentinel_password", value)) => password = Some(value),
            _ => data_query.push(pair),
        }
    }
    let sentinel_auth = match (user, password) {
        (None, None) => String::new(),
        (user, None) => format!("{}@", user.unwrap_or_default()),
        (user, Some(password)) => format!("{}:{password}@", user.unwrap_or_default()),
    };
    let data_query = if data_query.is_empty() {
        String::new()
    } else {
        format!("?{}", data_query.join("&"))
    };
    let db = if db.is_empty() { "0" } else { db };
    Ok(SentinelUrl {
        plain,
        data: format!(
            "{plain}{userinfo}{}/{db}{data_query}{fragment}",
            sentinels[0]
        ),
        sentinel_template: format!("{plain}{sentinel_auth}{{}}{fragment}"),
        sentinels,
        name: name.to_owned(),
    })
}

/// `host[:port]` (the port 26379 by default), checked.
fn host_and_port(text: &str) -> Result<String, String> {
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let Some((host, after)) = v6.split_once(']') else {
            return Err(format!("a sentinel's address `{text}` has no closing `]`"));
        };
        (format!("[{host}]"), after.strip_prefix(':'))
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (text.to_owned(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err("a sentinel's address has no host (expected host:port)".into());
    }
    if host.contains(['/', '@', ' ']) {
        return Err(format!("a sentinel's host `{host}` is not a host name"));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => {
                return Err(format!(
                    "a sentinel's port `{port}` is not a port (1 to 65535)"
                ));
            }
        },
    };
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_url_names_sentinels_a_master_and_settings() {
        let url = parse(
            "redis+sentinel://u:pw@10.0.0.1:26380,10.0.0.2,[::1]:5/main/2?sentinel_password=sp&x=1",
        )
        .unwrap();
        assert_eq!(
            url.sentinels,
            ["10.0.0.1:26380", "10.0.0.2:26379", "[::1]:5"]
        );
        assert_eq!(url.name, "main");
        assert_eq!(url.data, "redis://u:pw@10.0.0.1:26380/2?x=1");
        assert_eq!(url.sentinel("h:1"), "redis://:sp@h:1");
        let tls = parse("rediss+sentinel://h/m?sentinel_user=s#insecure").unwrap();
        assert_eq!(tls.data, "rediss://h:26379/0#insecure");
        assert_eq!(tls.sentinel("h:26379"), "rediss://s@h:26379#insecure");
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (url, says) in [
            ("redis+sentinel://h:1", "no master name"),
            ("redis+sentinel://h:1/", "no master name"),
            ("redis+sentinel:///m", "no host"),
            ("redis+sentinel://:pw@/m", "no host"),
            ("redis+sentinel://h:99999/m", "not a port"),
            ("redis+sentinel://h:0/m", "not a port"),
            ("redis+sentinel://h:x/m", "not a port"),
            ("redis+sentinel://h:1,/m", "no host"),
            ("redis+sentinel://h:1/m/x", "not a number"),
            ("redis://h:1/m", "starts with"),
        ] {
            let e = parse(url).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
        }
    }
}

//! Inspection connections: a plain `redis` client connection with
//! bounded reads and writes, which tests use to look at a server beside
//! the library under test. Apart from the server's process: any URL can
//! be inspected, a cluster member's or a proxy's too.

use std::time::Duration;

/// Read timeout of inspection connections.
const INSPECT_TIMEOUT: Duration = Duration::from_secs(5);

/// An inspection connection to `url` with 5 s timeouts.
pub fn connect(url: &str) -> redis::Connection {
    try_connect(url).unwrap_or_else(|e| panic!("inspection connection to {url}: {e}"))
}

/// [`connect`], with the failure as a value.
pub(super) fn try_connect(url: &str) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(url).expect("inspection URL");
    let conn = client.get_connection_with_timeout(INSPECT_TIMEOUT)?;
    conn.set_read_timeout(Some(INSPECT_TIMEOUT))?;
    conn.set_write_timeout(Some(INSPECT_TIMEOUT))?;
    Ok(conn)
}

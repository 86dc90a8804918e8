//! The read-write arm's watcher: it reads the writer's key on every
//! server directly (not through the proxies) while a writer call is in
//! progress, and notes when each intent was first seen on a quorum, for
//! the no-overtaking check (`rw_checker.rs`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::config::NODES;
use crate::recorder::Shared;
use crate::rw_checker::Sighting;

/// The watcher's connect, read and write timeout (a frozen server must
/// not hold it up for long).
const WATCH_TIMEOUT: Duration = Duration::from_millis(50);

/// The writer's key on one server, on a connection of the watcher's own
/// (dropped on any error, opened again next time).
fn look(conn: &mut Option<redis::Connection>, url: &str, key: &[u8]) -> Option<Vec<u8>> {
    if conn.is_none() {
        let client = redis::Client::open(url).ok()?;
        let c = client.get_connection_with_timeout(WATCH_TIMEOUT).ok()?;
        c.set_read_timeout(Some(WATCH_TIMEOUT)).ok()?;
        c.set_write_timeout(Some(WATCH_TIMEOUT)).ok()?;
        *conn = Some(c);
    }
    let answer = redis::cmd("GET").arg(key).query(conn.as_mut()?);
    answer.unwrap_or_else(|_| {
        *conn = None;
        None
    })
}

/// While a writer call is in progress, passes over every server (not
/// through the proxies) and notes the first moment each value of the
/// writer's key was seen on a quorum: the end of that pass.
pub(crate) fn watch(
    urls: &[String],
    key: &[u8],
    (shared, writers_calling, sightings): (&Shared, &AtomicUsize, &Mutex<Vec<Sighting>>),
) {
    let mut conns: Vec<Option<redis::Connection>> = urls.iter().map(|_| None).collect();
    while !shared.stopping() {
        if writers_calling.load(Ordering::SeqCst) == 0 {
            thread::sleep(Duration::from_millis(1));
            continue;
        }
        let values: Vec<Option<Vec<u8>>> = conns
            .iter_mut()
            .zip(urls)
            .map(|(conn, url)| look(conn, url, key))
            .collect();
        let at = Instant::now();
        let mut sightings = sightings.lock().unwrap();
        for value in values.iter().flatten() {
            let copies = values.iter().flatten().filter(|v| *v == value).count();
            if copies > NODES / 2 && !sightings.iter().any(|s| s.value == *value) {
                sightings.push(Sighting {
                    value: value.clone(),
                    at,
                });
            }
        }
        drop(sightings);
        thread::sleep(Duration::from_millis(1));
    }
}

//! The one loopback accept loop: a listener on a free `127.0.0.1` port, a
//! named thread that hands every accepted connection to a handler, and a
//! stop flag that the handler's worker threads watch. On drop everything
//! stops and every thread is joined.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the accept loop sleeps when no connection is waiting.
const ACCEPT_POLL: Duration = Duration::from_millis(5);

/// What an accept loop's handler and workers share: the stop flag and the
/// worker threads to join.
#[derive(Debug, Default)]
pub struct Stop {
    flag: AtomicBool,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Stop {
    /// True once the [`Acceptor`] is being dropped.
    pub fn stopped(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    /// Runs `work` on a named thread that is joined when the acceptor
    /// stops; finished workers are forgotten, so the list stays bounded.
    /// A thread that cannot be spawned is skipped (its work not done).
    pub fn spawn(&self, name: &str, work: impl FnOnce() + Send + 'static) {
        let spawned = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(work);
        let mut workers = self.workers.lock().unwrap();
        workers.retain(|w| !w.is_finished());
        if let Ok(worker) = spawned {
            workers.push(worker);
        }
    }
}

/// A running accept loop; stops on drop.
#[derive(Debug)]
pub struct Acceptor {
    port: u16,
    accepted: Arc<AtomicUsize>,
    stop: Arc<Stop>,
    thread: Option<JoinHandle<()>>,
}

impl Acceptor {
    /// Listens on a free loopback port; `handle` gets every accepted
    /// connection (blocking mode) on the accept thread, named
    /// `<name>-<port>-accept`, and may hand it to [`Stop::spawn`].
    pub fn start(
        name: &str,
        mut handle: impl FnMut(TcpStream, &Arc<Stop>) + Send + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .unwrap_or_else(|e| panic!("{name}: bind 127.0.0.1:0: {e}"));
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let port = listener.local_addr().expect("listener address").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(Stop::default());
        let thread = {
            let (accepted, stop) = (Arc::clone(&accepted), Arc::clone(&stop));
            std::thread::Builder::new()
                .name(format!("{name}-{port}-accept"))
                .spawn(move || {
                    while !stop.stopped() {
                        match listener.accept() {
                            Ok((stream, _)) => {
                                accepted.fetch_add(1, Ordering::Relaxed);
                                let _ = stream.set_nonblocking(false);
                                handle(stream, &stop);
                            }
                            Err(_) => std::thread::sleep(ACCEPT_POLL),
                        }
                    }
                })
                .unwrap_or_else(|e| panic!("spawn the {name} accept thread: {e}"))
        };
        Self {
            port,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Connections accepted so far (also those the handler closed at once).
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.stop.flag.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let workers = std::mem::take(&mut *self.stop.workers.lock().unwrap());
        for worker in workers {
            let _ = worker.join();
        }
    }
}

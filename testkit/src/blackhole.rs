//! A listener that accepts connections, never reads and never answers:
//! requests sent to it time out (the comparison benchmark's "blackholed"
//! node). Stopped, and its connections closed, on drop.

use std::collections::VecDeque;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use crate::acceptor::Acceptor;

/// Connections a blackhole keeps open at most (the oldest are closed).
const MAX_HELD: usize = 4096;

/// A running blackhole; stops on drop.
#[derive(Debug)]
pub struct Blackhole {
    // Declared first: dropped (and joined) before the held connections.
    acceptor: Acceptor,
    _held: Arc<Mutex<VecDeque<TcpStream>>>,
}

impl Blackhole {
    /// Starts the listener on a free loopback port.
    pub fn start() -> Self {
        let held = Arc::new(Mutex::new(VecDeque::new()));
        let acceptor = {
            let held = Arc::clone(&held);
            Acceptor::start("blackhole", move |stream, _| {
                let mut held = held.lock().unwrap();
                if held.len() >= MAX_HELD {
                    held.pop_front();
                }
                held.push_back(stream);
            })
        };
        Self {
            acceptor,
            _held: held,
        }
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.acceptor.port()
    }

    /// `redis://127.0.0.1:PORT` of the blackhole.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }
}

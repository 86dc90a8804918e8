//! [`RedisServers`]: several independent servers, the nodes of a Redlock
//! test, as a slice of [`RedisServer`]. Apart from the one server's file,
//! which it only starts `n` times.

use super::redis_server::RedisServer;

/// Several independent servers.
#[derive(Debug)]
pub struct RedisServers {
    servers: Vec<RedisServer>,
}

impl RedisServers {
    /// `n` servers, each started like [`RedisServer::start`].
    pub fn start(n: usize) -> Self {
        Self {
            servers: (0..n).map(|_| RedisServer::start()).collect(),
        }
    }

    /// `n` servers, each started like
    /// [`RedisServer::start_with_clock`]: their clocks can be stepped.
    pub fn start_with_clock(n: usize) -> Self {
        Self {
            servers: (0..n).map(|_| RedisServer::start_with_clock()).collect(),
        }
    }

    /// Their URLs, in order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }
}

impl std::ops::Deref for RedisServers {
    type Target = [RedisServer];
    fn deref(&self) -> &[RedisServer] {
        &self.servers
    }
}

impl std::ops::DerefMut for RedisServers {
    fn deref_mut(&mut self) -> &mut [RedisServer] {
        &mut self.servers
    }
}

//! A TLS Sentinel set's parts: the one certificate every process shows
//! and trusts, the settings that make a data node or a sentinel use it,
//! and the `redis-server` that speaks TLS.

use std::path::{Path, PathBuf};

use crate::server::{RedisServer, ServerKind, TLS_SERVER_ENV, TempDir};

/// The certificate every process of a TLS set shows and trusts (its own
/// CA), in a directory of its own.
#[derive(Debug)]
pub(super) struct Certificate {
    cert: PathBuf,
    key: PathBuf,
    _dir: TempDir,
}

impl Certificate {
    pub(super) fn new() -> Self {
        let dir = TempDir::new("quorum-lock-sentinel-tls");
        let (cert, key) = crate::server::certificate(dir.path());
        Self {
            cert,
            key,
            _dir: dir,
        }
    }

    /// `redis-server` arguments that make a data node show and trust it,
    /// and replicate over TLS (after [`RedisServer::start_tls_with`]'s
    /// own: the last of a setting wins).
    pub(super) fn server_args(&self) -> Vec<String> {
        let path = |p: &Path| p.to_string_lossy().into_owned();
        [
            ("--tls-cert-file", path(&self.cert)),
            ("--tls-key-file", path(&self.key)),
            ("--tls-ca-cert-file", path(&self.cert)),
            ("--tls-replication", "yes".to_owned()),
        ]
        .into_iter()
        .flat_map(|(name, value)| [name.to_owned(), value])
        .collect()
    }

    /// The same in a sentinel's config file, with its TLS port.
    pub(super) fn sentinel_conf(&self, tls_port: u16) -> String {
        format!(
            "tls-port {tls_port}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
             tls-replication yes\ntls-auth-clients no\n",
            self.cert.display(),
            self.key.display(),
            self.cert.display()
        )
    }
}

/// The `redis-server` for TLS: the one [`TLS_SERVER_ENV`] names, else
/// the one on `PATH` (as [`RedisServer::start_tls`] picks it).
pub(super) fn tls_binary() -> PathBuf {
    match std::env::var_os(TLS_SERVER_ENV) {
        Some(binary) => PathBuf::from(binary),
        None => {
            ServerKind::Redis.version();
            ServerKind::Redis.binary().to_path_buf()
        }
    }
}

/// The port the sentinels and the replica reach `server` at: its TLS
/// port in a TLS set.
pub(super) fn data_port(server: &RedisServer) -> u16 {
    server.tls_port().unwrap_or_else(|| server.port())
}

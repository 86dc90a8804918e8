//! The test certificate of TLS servers: self-signed for `127.0.0.1`, made
//! by `openssl`. Apart because a TLS server of the cluster harness needs
//! one too (`crate::server::certificate`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A self-signed certificate for `127.0.0.1` (also its own CA), made by
/// `openssl` in `dir`: (certificate, key).
pub(crate) fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let status = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| {
            panic!("`openssl` is needed for the TLS tests ({e}): apt-get install -y openssl")
        });
    assert!(
        status.success(),
        "openssl could not make a test certificate"
    );
    (cert, key)
}

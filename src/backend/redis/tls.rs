//! `rediss://`: TLS (rustls with the `ring` provider) driven by hand over a
//! TCP socket, so that the handshake and every record read obey the call's
//! deadline like plain reads do (one socket read at a time, each bounded by
//! the time left).
//!
//! Certificates are checked against the system's root certificates
//! (`rustls-native-certs`, loaded once per process), or not at all with a
//! `#insecure` URL fragment (signatures are still verified, so the server
//! must hold the key of the certificate it shows).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore};

use super::bounded::{Socket, is_wait, read_bounded, remaining};
use super::fault::{Fault, Phase};

/// The TLS client configuration for one node. `insecure`: accept any
/// certificate (the URL's `#insecure` fragment).
pub(super) fn client_config(insecure: bool) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let config = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate {
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth()
    } else {
        builder
            .with_root_certificates(Arc::clone(native_roots()))
            .with_no_client_auth()
    };
    Ok(Arc::new(config))
}

/// The system's root certificates, read once per process. Unreadable ones
/// are skipped; with none at all, every handshake fails with an unknown
/// issuer (a clear error at the first call).
fn native_roots() -> &'static Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        Arc::new(roots)
    })
}

/// A TLS session over a TCP socket.
pub(super) struct TlsStream {
    tls: ClientConnection,
    sock: TcpStream,
}

impl TlsStream {
    /// Runs the handshake on `sock` by `deadline`.
    pub(super) fn handshake(
        config: Arc<ClientConfig>,
        host: &str,
        sock: TcpStream,
        deadline: Instant,
    ) -> Result<Self, Fault> {
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| Fault::Tls(format!("invalid server name {host:?}: {e}")))?;
        let tls = ClientConnection::new(config, name).map_err(|e| Fault::Tls(e.to_string()))?;
        let mut stream = Self { tls, sock };
        // The first bytes the server sent, to tell a plain-text answer.
        let mut first = Vec::new();
        while stream.tls.is_handshaking() {
            stream.flush(deadline, Phase::Tls)?;
            if !stream.tls.is_handshaking() {
                break;
            }
            let mut recording = Recording {
                sock: &mut stream.sock,
                first: &mut first,
            };
            let n = match read_tls_bounded(&mut stream.tls, &mut recording, deadline, Phase::Tls) {
                Ok(n) => n,
                Err(Fault::Timeout { phase, .. }) => {
                    return Err(Fault::Timeout {
                        phase,
                        received: first.len(),
                    });
                }
                Err(other) => return Err(other),
            };
            if n == 0 {
                return Err(Fault::Tls(
                    "the server closed the connection during the TLS handshake \
                     (does this port speak TLS?)"
                        .to_owned(),
                ));
            }
            if let Err(e) = stream.tls.process_new_packets() {
                return Err(Fault::Tls(handshake_error(&e, &first)));
            }
        }
        stream.flush(deadline, Phase::Tls)?;
        Ok(stream)
    }

    /// One read of decrypted data, by `deadline`; `Ok(0)` when the server
    /// closed the session.
    pub(super) fn read_some(
        &mut self,
        buf: &mut [u8],
        deadline: Instant,
        phase: Phase,
    ) -> Result<usize, Fault> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(Fault::io(phase, e)),
            }
            self.flush(deadline, phase)?;
            if read_tls_bounded(&mut self.tls, &mut self.sock, deadline, phase)? == 0 {
                return Err(Fault::Closed { phase });
            }
            self.tls
                .process_new_packets()
                .map_err(|e| Fault::Tls(e.to_string()))?;
        }
    }

    /// One read of decrypted data that has already arrived, without
    /// waiting: `Ok(None)` when nothing has (see
    /// `Transport::read_now`).
    pub(super) fn read_now(
        &mut self,
        buf: &mut [u8],
        phase: Phase,
    ) -> Result<Option<usize>, Fault> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(Fault::io(phase, e)),
            }
            // No whole record decrypted yet: feed rustls what the socket
            // already holds, and stop when that is nothing.
            self.sock
                .set_nonblocking(true)
                .map_err(|e| Fault::io(phase, e))?;
            let read = self.tls.read_tls(&mut self.sock);
            self.sock
                .set_nonblocking(false)
                .map_err(|e| Fault::io(phase, e))?;
            match read {
                Ok(0) => return Err(Fault::Closed { phase }),
                Ok(_) => {}
                Err(e) if is_wait(e.kind()) => return Ok(None),
                Err(e) => return Err(Fault::io(phase, e)),
            }
            self.tls
                .process_new_packets()
                .map_err(|e| Fault::Tls(e.to_string()))?;
        }
    }

    /// Encrypts and sends all of `data` by `deadline`.
    pub(super) fn write_all(
        &mut self,
        data: &[u8],
        deadline: Instant,
        phase: Phase,
    ) -> Result<(), Fault> {
        self.tls
            .writer()
            .write_all(data)
            .map_err(|e| Fault::io(phase, e))?;
        self.flush(deadline, phase)
    }

    /// Sends every TLS record rustls has queued, by `deadline`.
    fn flush(&mut self, deadline: Instant, phase: Phase) -> Result<(), Fault> {
        while self.tls.wants_write() {
            let left = remaining(deadline).ok_or(Fault::Timeout { phase, received: 0 })?;
            self.sock
                .set_write_timeout(Some(left))
                .map_err(|e| Fault::io(phase, e))?;
            match self.tls.write_tls(&mut self.sock) {
                Ok(0) => return Err(Fault::Closed { phase }),
                Ok(_) => {}
                Err(e) if is_wait(e.kind()) => {}
                Err(e) => return Err(Fault::io(phase, e)),
            }
        }
        Ok(())
    }
}

/// One socket read into rustls, bounded by `deadline`.
fn read_tls_bounded<S: Socket>(
    tls: &mut ClientConnection,
    sock: &mut S,
    deadline: Instant,
    phase: Phase,
) -> Result<usize, Fault> {
    // rustls reads at most one buffer's worth per call; bounding that read
    // bounds the call.
    let mut adapter = OneRead {
        sock,
        deadline,
        phase,
        fault: None,
    };
    match tls.read_tls(&mut adapter) {
        Ok(n) => Ok(n),
        Err(e) => Err(adapter.fault.take().unwrap_or_else(|| Fault::io(phase, e))),
    }
}

/// Adapts [`read_bounded`] to the `Read` rustls wants, keeping the typed
/// fault.
struct OneRead<'a, S> {
    sock: &'a mut S,
    deadline: Instant,
    phase: Phase,
    fault: Option<Fault>,
}

impl<S: Socket> Read for OneRead<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_bounded(self.sock, buf, self.deadline, self.phase, &mut None).map_err(|fault| {
            self.fault = Some(fault);
            io::Error::other("read failed")
        })
    }
}

/// A socket that remembers the first bytes read from it.
struct Recording<'a> {
    sock: &'a mut TcpStream,
    first: &'a mut Vec<u8>,
}

impl Read for Recording<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.sock.read(buf)?;
        let keep = n.min(16usize.saturating_sub(self.first.len()));
        self.first.extend_from_slice(&buf[..keep]);
        Ok(n)
    }
}

impl Write for Recording<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sock.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

impl Socket for Recording<'_> {
    fn read_timeout(&self, t: std::time::Duration) -> io::Result<()> {
        self.sock.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: std::time::Duration) -> io::Result<()> {
        self.sock.set_write_timeout(Some(t))
    }
    fn nonblocking(&self, on: bool) -> io::Result<()> {
        self.sock.set_nonblocking(on)
    }
}

/// A handshake failure, telling a plain-text server apart.
fn handshake_error(e: &rustls::Error, first: &[u8]) -> String {
    let plain = first
        .first()
        .is_some_and(|b| b"+-:$*".contains(b) || b.is_ascii_alphabetic());
    if plain {
        let text: String = first
            .iter()
            .take_while(|&&b| b != b'\r' && b != b'\n')
            .flat_map(|&b| std::ascii::escape_default(b))
            .map(char::from)
            .collect();
        format!(
            "TLS handshake failed: the server answered in plain text (\"{text}...\"): \
             this port does not speak TLS (use redis://, or the server's TLS port)"
        )
    } else {
        format!("TLS handshake failed: {e}")
    }
}

/// Accepts any certificate (`#insecure`), but still checks the handshake
/// signatures against it.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

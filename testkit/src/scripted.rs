//! A fake server whose every answer a test writes: each command it reads
//! (a RESP array of bulk strings, as clients send them) is given to the
//! test's closure, whose bytes go back as the reply. For what a real
//! server gives only under a race (a cluster member that answers `ASK`
//! to one command and `MOVED` to the next).
//!
//! Each accepted connection gets its own thread, which checks the stop
//! flag at least every [`POLL`]; a connection that sends more than
//! [`MAX_REQUEST_BYTES`] without a whole command is closed. Everything
//! stops, and is joined, when the [`ScriptedServer`] is dropped.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::acceptor::{Acceptor, Stop};

/// How often blocked threads look at the stop flag.
const POLL: Duration = Duration::from_millis(10);
/// The most a connection may send without completing a command.
const MAX_REQUEST_BYTES: usize = 1 << 20;

/// One command as the server read it: its words (the first is the name).
pub type Command = Vec<Vec<u8>>;

type Answer = dyn Fn(&[Vec<u8>]) -> Vec<u8> + Send + Sync;

/// A running scripted server; stops on drop.
pub struct ScriptedServer {
    acceptor: Acceptor,
    heard: Arc<Mutex<Vec<Command>>>,
}

impl std::fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedServer")
            .field("port", &self.port())
            .finish_non_exhaustive()
    }
}

impl ScriptedServer {
    /// Starts a server on a free loopback port that answers each command
    /// with `answer(words)`: raw RESP bytes (such as `b"+OK\r\n"`), one
    /// whole reply per command.
    pub fn start(answer: impl Fn(&[Vec<u8>]) -> Vec<u8> + Send + Sync + 'static) -> Self {
        let answer: Arc<Answer> = Arc::new(answer);
        let heard = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let heard = Arc::clone(&heard);
            Acceptor::start("scripted", move |stream, stop| {
                let (answer, heard, worker_stop) =
                    (Arc::clone(&answer), Arc::clone(&heard), Arc::clone(stop));
                stop.spawn("scripted-conn", move || {
                    serve(stream, &*answer, &heard, &worker_stop);
                });
            })
        };
        Self { acceptor, heard }
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.acceptor.port()
    }

    /// Every command read so far, on every connection, in the order read.
    pub fn heard(&self) -> Vec<Command> {
        self.heard.lock().unwrap().clone()
    }
}

/// Reads commands and answers each, until the client closes or the server
/// stops.
fn serve(mut stream: TcpStream, answer: &Answer, heard: &Mutex<Vec<Command>>, stop: &Stop) {
    let _ = stream.set_read_timeout(Some(POLL));
    let _ = stream.set_write_timeout(Some(POLL));
    let _ = stream.set_nodelay(true);
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    while !stop.stopped() && pending.len() <= MAX_REQUEST_BYTES {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        }
        let mut out = Vec::new();
        while let Some((command, used)) = parse_command(&pending) {
            pending.drain(..used);
            out.extend_from_slice(&answer(&command));
            heard.lock().unwrap().push(command);
        }
        if !out.is_empty() && !write_all(&mut stream, &out, stop) {
            break;
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// Writes all of `bytes`, retrying on write timeouts; false when the
/// client went away or the server is stopping.
fn write_all(stream: &mut TcpStream, mut bytes: &[u8], stop: &Stop) -> bool {
    while !bytes.is_empty() {
        if stop.stopped() {
            return false;
        }
        match stream.write(bytes) {
            Ok(0) => return false,
            Ok(n) => bytes = &bytes[n..],
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return false,
        }
    }
    true
}

/// The first whole command in `bytes` (`*<n>\r\n` then `n` times
/// `$<len>\r\n<bytes>\r\n`) and the bytes it took; `None` until all of it
/// is there (or when it is not such a command: the connection then waits
/// for more, up to the limit, and is closed).
fn parse_command(bytes: &[u8]) -> Option<(Command, usize)> {
    let mut at = 0;
    let words = number_after(bytes, &mut at, b'*')?;
    let mut command = Vec::with_capacity(words);
    for _ in 0..words {
        let len = number_after(bytes, &mut at, b'$')?;
        let end = at.checked_add(len)?;
        if bytes.get(end..end + 2)? != b"\r\n" {
            return None;
        }
        command.push(bytes[at..end].to_vec());
        at = end + 2;
    }
    Some((command, at))
}

/// The number after `mark` at `*at`, up to its `\r\n` (moved past).
fn number_after(bytes: &[u8], at: &mut usize, mark: u8) -> Option<usize> {
    if *bytes.get(*at)? != mark {
        return None;
    }
    let rest = &bytes[*at + 1..];
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    let number = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    *at += 1 + end + 2;
    Some(number)
}

/// A bulk-string reply.
pub fn bulk(bytes: &[u8]) -> Vec<u8> {
    [format!("${}\r\n", bytes.len()).as_bytes(), bytes, b"\r\n"].concat()
}

/// An error reply (`text` without the leading `-`).
pub fn error(text: &str) -> Vec<u8> {
    format!("-{text}\r\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_read_whole_or_not_at_all() {
        let two = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n";
        let (first, used) = parse_command(two).unwrap();
        assert_eq!(first, vec![b"GET".to_vec(), b"k".to_vec()]);
        let (second, rest) = parse_command(&two[used..]).unwrap();
        assert_eq!((second, used + rest), (vec![b"PING".to_vec()], two.len()));
        assert_eq!(parse_command(&two[..used - 1]), None);
        assert_eq!(parse_command(b""), None);
        assert_eq!(bulk(b"ab"), b"$2\r\nab\r\n");
    }
}

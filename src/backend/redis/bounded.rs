//! One read or write on a socket, bounded by the call's deadline.
//!
//! A socket timeout bounds one `read()`; a peer that sends one byte just
//! before each timeout would keep a plain reader busy for ever. Here every
//! read and write first sets the socket timeout to the time *left* until
//! the deadline, and a deadline that has passed ends the call, whatever
//! the peer sends.

use std::io::{self, Read, Write};
use std::net::TcpStream;
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::fault::{Fault, Phase};

/// A socket whose timeouts can be set (TCP or Unix).
pub(super) trait Socket: Read + Write {
    fn read_timeout(&self, t: Duration) -> io::Result<()>;
    fn write_timeout(&self, t: Duration) -> io::Result<()>;
    fn nonblocking(&self, on: bool) -> io::Result<()>;
}

impl Socket for TcpStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
    fn nonblocking(&self, on: bool) -> io::Result<()> {
        self.set_nonblocking(on)
    }
}

#[cfg(unix)]
impl Socket for UnixStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
    fn nonblocking(&self, on: bool) -> io::Result<()> {
        self.set_nonblocking(on)
    }
}

/// One `read()` on `s` of what has already arrived (`None`: nothing). The
/// socket is non-blocking for that read only: every other read and write
/// on it is bounded by a deadline through the socket timeouts, which a
/// non-blocking socket ignores.
pub(super) fn read_nonblocking<S: Socket>(
    s: &mut S,
    buf: &mut [u8],
    phase: Phase,
) -> Result<Option<usize>, Fault> {
    s.nonblocking(true).map_err(|e| Fault::io(phase, e))?;
    let read = s.read(buf);
    s.nonblocking(false).map_err(|e| Fault::io(phase, e))?;
    match read {
        Ok(n) => Ok(Some(n)),
        Err(e) if is_wait(e.kind()) => Ok(None),
        Err(e) => Err(Fault::io(phase, e)),
    }
}

/// The time left until `deadline`, `None` once it has passed.
pub(super) fn remaining(deadline: Instant) -> Option<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    (!left.is_zero()).then_some(left)
}

/// One `read()` on `s` bounded by `deadline`. `set` is the read timeout
/// already set on `s`, if known (see [`Timeouts`]).
pub(super) fn read_bounded<S: Socket>(
    s: &mut S,
    buf: &mut [u8],
    deadline: Instant,
    phase: Phase,
    set: &mut Option<Duration>,
) -> Result<usize, Fault> {
    let mut exact = false;
    loop {
        let left = remaining(deadline).ok_or(Fault::Timeout { phase, received: 0 })?;
        if exact || set.is_none_or(|t| t > left) {
            s.read_timeout(left).map_err(|e| Fault::io(phase, e))?;
            *set = Some(left);
        }
        match s.read(buf) {
            Ok(n) => return Ok(n),
            // Timed out (or woke early): the loop checks the deadline,
            // and reads again with the exact time left.
            Err(e) if is_wait(e.kind()) => exact = true,
            Err(e) => return Err(Fault::io(phase, e)),
        }
    }
}

/// Writes all of `data` to `s` by `deadline`. `set` is the write timeout
/// already set on `s`, if known (see [`Timeouts`]).
pub(super) fn write_bounded<S: Socket>(
    s: &mut S,
    mut data: &[u8],
    deadline: Instant,
    phase: Phase,
    set: &mut Option<Duration>,
) -> Result<(), Fault> {
    let mut exact = false;
    while !data.is_empty() {
        let left = remaining(deadline).ok_or(Fault::Timeout { phase, received: 0 })?;
        if exact || set.is_none_or(|t| t > left) {
            s.write_timeout(left).map_err(|e| Fault::io(phase, e))?;
            *set = Some(left);
        }
        match s.write(data) {
            Ok(0) => return Err(Fault::Closed { phase }),
            Ok(n) => data = &data[n..],
            Err(e) if is_wait(e.kind()) => exact = true,
            Err(e) => return Err(Fault::io(phase, e)),
        }
    }
    Ok(())
}

/// A socket timeout (or a spurious wake-up).
pub(super) fn is_wait(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use std::cell::RefCell;

    use super::*;

    /// A socket that records the read timeouts set on it and answers each
    /// read from a script: `None` is a timeout, `Some(n)` reads n bytes.
    struct Scripted {
        sets: RefCell<Vec<Duration>>,
        reads: Vec<Option<usize>>,
    }

    impl Read for Scripted {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            match self.reads.remove(0) {
                Some(n) => Ok(n),
                None => Err(io::ErrorKind::WouldBlock.into()),
            }
        }
    }

    impl Write for Scripted {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            Ok(data.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Socket for Scripted {
        fn read_timeout(&self, t: Duration) -> io::Result<()> {
            self.sets.borrow_mut().push(t);
            Ok(())
        }
        fn write_timeout(&self, _: Duration) -> io::Result<()> {
            Ok(())
        }
        fn nonblocking(&self, _: bool) -> io::Result<()> {
            Ok(())
        }
    }

    /// A kept timeout never outlasts the deadline: it is kept only when
    /// the deadline leaves at least that long, set anew when it leaves
    /// less, and set to the exact time left after it ran out early.
    #[test]
    fn a_kept_timeout_never_outlasts_the_deadline() {
        let mut sock = Scripted {
            sets: RefCell::new(Vec::new()),
            reads: vec![Some(1), Some(1), Some(1), None, Some(1)],
        };
        let mut set = None;
        let read = |sock: &mut Scripted, set: &mut Option<Duration>, left_ms| {
            let deadline = Instant::now() + Duration::from_millis(left_ms);
            read_bounded(sock, &mut [0u8; 4], deadline, Phase::Request, set).unwrap()
        };
        read(&mut sock, &mut set, 100); // first read: set
        read(&mut sock, &mut set, 200); // 100 ms kept (it ends before 200)
        assert_eq!(
            sock.sets.borrow().len(),
            1,
            "kept: {:?}",
            sock.sets.borrow()
        );
        read(&mut sock, &mut set, 10); // 10 ms left: must shrink
        let sets = sock.sets.borrow().clone();
        assert_eq!(sets.len(), 2);
        assert!(sets[1] <= Duration::from_millis(10), "{sets:?}");
        // The 10 ms kept runs out early on a 500 ms deadline: the read
        // goes on with the exact time left.
        read(&mut sock, &mut set, 500);
        let sets = sock.sets.borrow().clone();
        assert_eq!(sets.len(), 3, "{sets:?}");
        assert!(sets[2] > Duration::from_millis(400), "{sets:?}");
    }
}

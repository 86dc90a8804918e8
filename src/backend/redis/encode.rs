//! Commands written straight into a batch's buffer, in the form
//! `redis::Cmd::write_packed_command` writes them (a RESP array of bulk
//! strings: `*<count>\r\n`, then `$<len>\r\n<bytes>\r\n` per argument),
//! without building a `redis::Cmd` first. A `Cmd` keeps its arguments in
//! buffers of its own, grown argument by argument: several allocations
//! per command, on every lock's hot path. Here a command costs none
//! beyond the batch buffer's own growth.

/// A command being written: [`command`] wrote its header, each argument
/// goes in by [`bytes`](Self::bytes) or [`number`](Self::number), exactly
/// as many as the header announced.
pub(super) struct Command<'a> {
    buf: &'a mut Vec<u8>,
    /// Arguments announced and not written yet.
    left: usize,
}

/// Starts a command of `args` arguments (its name included) in `buf`.
pub(super) fn command(buf: &mut Vec<u8>, args: usize) -> Command<'_> {
    header(buf, b'*', args as u64);
    Command { buf, left: args }
}

/// `n` in decimal, into the end of `digits`; returns where it starts.
/// (`write!` through `fmt` costs about 330 instructions per header,
/// counted with cachegrind: nine per lock + release.)
fn decimal(n: u64, digits: &mut [u8; 20]) -> usize {
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        // `rest % 10` is a single digit.
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            return at;
        }
    }
}

/// A header line: `kind`, `n` in decimal, CRLF. Counts below 100 (every
/// argument count, and the length of every argument but a long key or a
/// script's text) are written as one fixed-size copy: a copy of a length
/// known only at run time is a `memcpy` call, and a header took about 80
/// instructions that way, about 3,000 per lock + release at N=3 (counted
/// with callgrind).
fn header(buf: &mut Vec<u8>, kind: u8, n: u64) {
    // `n % 10` and `n / 10` (n < 100) are single digits.
    match n {
        0..=9 => buf.extend_from_slice(&[kind, b'0' + n as u8, b'\r', b'\n']),
        10..=99 => buf.extend_from_slice(&[
            kind,
            b'0' + (n / 10) as u8,
            b'0' + (n % 10) as u8,
            b'\r',
            b'\n',
        ]),
        _ => {
            let mut digits = [0u8; 20];
            let at = decimal(n, &mut digits);
            buf.push(kind);
            buf.extend_from_slice(&digits[at..]);
            buf.extend_from_slice(b"\r\n");
        }
    }
}

impl Command<'_> {
    /// One argument, as given.
    pub(super) fn bytes(&mut self, arg: &[u8]) -> &mut Self {
        self.left = self.left.wrapping_sub(1);
        header(self.buf, b'$', arg.len() as u64);
        self.buf.extend_from_slice(arg);
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    /// Arguments already in the protocol's form (`$<len>\r\n<bytes>\r\n`
    /// each), `count` of them: a command's constant words (its name,
    /// `NX`, `PX`) in one copy of known size, instead of a header and two
    /// copies each (about 60 instructions an argument, counted with
    /// callgrind: six such words per lock + release at N=3).
    pub(super) fn encoded(&mut self, args: &[u8], count: usize) -> &mut Self {
        self.left = self.left.wrapping_sub(count);
        self.buf.extend_from_slice(args);
        self
    }

    /// One argument: `n` in decimal, as `redis` writes an integer.
    pub(super) fn number(&mut self, n: u64) -> &mut Self {
        // A single digit (a script's key count): one copy of known size.
        if n < 10 {
            let digit = b'0' + n as u8;
            return self.encoded(&[b'$', b'1', b'\r', b'\n', digit, b'\r', b'\n'], 1);
        }
        let mut digits = [0u8; 20];
        let at = decimal(n, &mut digits);
        self.bytes(&digits[at..])
    }
}

impl Drop for Command<'_> {
    fn drop(&mut self) {
        debug_assert_eq!(self.left, 0, "a command's header announced another count");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_what_redis_cmd_writes() {
        let mut ours = Vec::new();
        command(&mut ours, 6)
            .bytes(b"SET")
            .bytes(b"key:\xff")
            .bytes(&[0u8; 20])
            .bytes(b"NX")
            .bytes(b"PX")
            .number(10_000);
        command(&mut ours, 3).bytes(b"X").number(0).number(u64::MAX);
        command(&mut ours, 2).bytes(b"GET").bytes(b"");
        command(&mut ours, 4)
            .encoded(b"$3\r\nSET\r\n", 1)
            .bytes(b"k")
            .encoded(b"$2\r\nNX\r\n$2\r\nPX\r\n", 2);
        // Each side of the short headers' bounds (9/10, 99/100).
        command(&mut ours, 5)
            .number(9)
            .number(10)
            .number(99)
            .number(100)
            .bytes(&[b'y'; 99]);
        command(&mut ours, 2).bytes(&[b'z'; 100]).bytes(&[b'z'; 10]);
        command(&mut ours, 11)
            .bytes(b"MANY")
            .bytes(&[b'x'; 1234])
            .bytes(b"")
            .bytes(b"")
            .bytes(b"")
            .bytes(b"")
            .bytes(b"")
            .bytes(b"")
            .bytes(b"")
            .bytes(b"")
            .number(9);
        let mut theirs = Vec::new();
        redis::cmd("SET")
            .arg(&b"key:\xff"[..])
            .arg(&[0u8; 20][..])
            .arg("NX")
            .arg("PX")
            .arg(10_000u64)
            .write_packed_command(&mut theirs);
        redis::cmd("X")
            .arg(0u64)
            .arg(u64::MAX)
            .write_packed_command(&mut theirs);
        redis::cmd("GET")
            .arg(&b""[..])
            .write_packed_command(&mut theirs);
        redis::cmd("SET")
            .arg("k")
            .arg("NX")
            .arg("PX")
            .write_packed_command(&mut theirs);
        redis::cmd("9")
            .arg(10u64)
            .arg(99u64)
            .arg(100u64)
            .arg(&[b'y'; 99][..])
            .write_packed_command(&mut theirs);
        redis::cmd(&"z".repeat(100))
            .arg(&[b'z'; 10][..])
            .write_packed_command(&mut theirs);
        let mut many = redis::cmd("MANY");
        many.arg(&[b'x'; 1234][..]);
        for _ in 0..8 {
            many.arg(&b""[..]);
        }
        many.arg(9u64).write_packed_command(&mut theirs);
        assert_eq!(ours, theirs);
    }
}

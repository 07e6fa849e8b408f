//! The byte transport under the protocol: a TCP, Unix-socket or TLS stream, one large
//! reusable read buffer, and framing of backend messages in place.
//!
//! Every backend message is `tag: u8, length: i32 (counting itself), body` (protocol
//! chapter, "Message Formats"). [`Wire::next_frame`] returns the tag and the body's
//! position inside the read buffer, so callers borrow the body without a copy and no
//! message costs a heap allocation. The buffer starts at 256 KiB so one `read` brings in
//! many CopyData frames; a longer message grows it by doubling as its bytes arrive (never
//! to the length a header merely claims), and it shrinks back once that message is
//! consumed.
//!
//! Time-outs: a read that hits its deadline leaves every byte where it was (partial frames
//! in our buffer, partial TLS records inside rustls), so the next call resumes exactly.
//!
//! Backlog: while the server sends faster than the client reads (a replication stream
//! catching up, a COPY), a read that wakes up for every few kilobytes costs a system call
//! and a context switch each time, and on a machine where the server shares the cores,
//! each wake-up also pre-empts the sender (a walsender streaming 600,000 changes was
//! pre-empted 40,000 to 120,000 times; our client spent more time in wake-ups than in
//! decoding). So once a read brings in [`BACKLOG_READ`] or more, the socket is asked not
//! to wake the reader before [`BACKLOG_LOW_WATER`] bytes are in (`SO_RCVLOWAT`), each
//! read then waiting at most [`BACKLOG_WAIT`] for them: a read that gets less, or whose
//! wait runs out, goes back to waking at the first byte. Latency during a backlog grows
//! by at most [`BACKLOG_WAIT`]; outside one, nothing changes.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rustls::{ClientConnection, StreamOwned};

use super::error::PgError;

/// Initial (and resting) size of the read buffer.
pub(crate) const READ_BUFFER: usize = 256 * 1024;
/// Compact the buffer when less than this is free at its end.
const MIN_READ: usize = 16 * 1024;
/// Largest message accepted: PostgreSQL's own limit on one allocation is 1 GiB.
const MAX_MESSAGE: usize = 1 << 30;
/// A read bringing in at least this much means the server has a backlog for us.
const BACKLOG_READ: usize = 64 * 1024;
/// Bytes a read waits for during a backlog (`SO_RCVLOWAT`).
const BACKLOG_LOW_WATER: usize = 64 * 1024;
/// A read bringing in less than this during a backlog ends it.
const BACKLOG_END: usize = 16 * 1024;
/// The longest a read waits for [`BACKLOG_LOW_WATER`] bytes.
const BACKLOG_WAIT: Duration = Duration::from_millis(2);

/// The socket, plain or wrapped in TLS.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(timeout),
            Stream::Unix(s) => s.set_read_timeout(timeout),
            Stream::Tls(s) => s.sock.set_read_timeout(timeout),
        }
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tls(s) => s.sock.set_nonblocking(on),
        }
    }

    /// Sets `SO_RCVLOWAT`: a blocking read returns once `bytes` are in (or its time-out
    /// passes, with what arrived).
    fn set_receive_low_water(&self, bytes: usize) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let fd = match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.sock.as_raw_fd(),
        };
        let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fd` is the open socket `self` owns; the option value is a c_int read
        // through a pointer to a live local of the length passed.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                std::ptr::addr_of!(value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(timeout),
            Stream::Unix(s) => s.set_write_timeout(timeout),
            Stream::Tls(s) => s.sock.set_write_timeout(timeout),
        }
    }

    pub(crate) fn tls(&self) -> Option<&ClientConnection> {
        match self {
            Stream::Tls(s) => Some(&s.conn),
            _ => None,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A complete backend message: its tag and where its body sits in the read buffer.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    pub tag: u8,
    pub body: Range<usize>,
}

/// The framed connection.
pub(crate) struct Wire {
    stream: Stream,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// Outgoing messages are built here and written in one go.
    pub(crate) out: BytesMut,
    /// The read time-out currently set on the socket (to skip redundant setsockopt calls).
    read_timeout: Option<Duration>,
    /// The time-out of reads without a deadline (the login's connect_timeout).
    base_timeout: Option<Duration>,
    /// Reads wait for [`BACKLOG_LOW_WATER`] bytes (see the module docs).
    backlog: bool,
}

impl Wire {
    pub(crate) fn new(stream: Stream) -> Self {
        Wire {
            stream,
            buf: vec![0; READ_BUFFER],
            start: 0,
            end: 0,
            out: BytesMut::with_capacity(1024),
            read_timeout: None,
            base_timeout: None,
            backlog: false,
        }
    }

    pub(crate) fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Time-outs for every read and write until changed (the connect_timeout of the
    /// login); `None` blocks.
    pub(crate) fn set_timeouts(&mut self, timeout: Option<Duration>) -> Result<(), PgError> {
        self.base_timeout = timeout;
        self.set_read_timeout(timeout)?;
        self.stream
            .set_write_timeout(timeout)
            .map_err(|e| PgError::io("could not set the socket time-out", e))
    }

    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> Result<(), PgError> {
        if self.read_timeout != timeout {
            self.stream
                .set_read_timeout(timeout)
                .map_err(|e| PgError::io("could not set the socket time-out", e))?;
            self.read_timeout = timeout;
        }
        Ok(())
    }

    /// Writes `out` to the socket and clears it.
    pub(crate) fn flush(&mut self) -> Result<(), PgError> {
        let result = self
            .stream
            .write_all(&self.out)
            .and_then(|()| self.stream.flush());
        self.out.clear();
        result.map_err(|e| io_error("could not send data to the server", e))
    }

    /// The body of a frame returned by [`Wire::next_frame`] (valid until the next read).
    pub(crate) fn body(&self, frame: &Frame) -> Result<&[u8], PgError> {
        self.buf
            .get(frame.body.clone())
            .ok_or_else(|| PgError::protocol("message position outside the read buffer"))
    }

    /// The next complete message, reading as needed. `deadline` bounds the wait:
    /// `Ok(None)` once it passes with no complete message; `None` waits for ever (or for
    /// the socket time-out set with [`Wire::set_timeouts`]).
    pub(crate) fn next_frame(
        &mut self,
        deadline: Option<Instant>,
    ) -> Result<Option<Frame>, PgError> {
        let mut first = true;
        loop {
            if let Some(frame) = self.parse_frame()? {
                return Ok(Some(frame));
            }
            if !self.fill(deadline, first)? {
                return Ok(None);
            }
            first = false;
        }
    }

    /// The next complete message if the buffer already holds it, without reading.
    pub(crate) fn buffered_frame(&mut self) -> Result<Option<Frame>, PgError> {
        self.parse_frame()
    }

    /// Bytes received but not yet handed out (a partial message, after a time-out).
    #[cfg(test)]
    pub(crate) fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Whether reads wait for a backlog's low-water mark now.
    #[cfg(test)]
    pub(crate) fn in_backlog(&self) -> bool {
        self.backlog
    }

    /// A blocking [`Wire::next_frame`].
    pub(crate) fn frame(&mut self) -> Result<Frame, PgError> {
        match self.next_frame(None)? {
            Some(frame) => Ok(frame),
            None => Err(PgError::connect("timed out waiting for the server")),
        }
    }

    /// Frames the message at the front of the buffer if it is complete.
    fn parse_frame(&mut self) -> Result<Option<Frame>, PgError> {
        let Some(len) = self.header_len()? else {
            return Ok(None);
        };
        let total = len + 1;
        if self.end - self.start < total {
            return Ok(None);
        }
        let tag = self.buf.get(self.start).copied().unwrap_or_default();
        let body = self.start + 5..self.start + total;
        self.start += total;
        Ok(Some(Frame { tag, body }))
    }

    /// The length field of the message at the front, once its 5-byte header is in.
    fn header_len(&self) -> Result<Option<usize>, PgError> {
        if self.end - self.start < 5 {
            return Ok(None);
        }
        let header: Option<[u8; 5]> = self
            .buf
            .get(self.start..self.start + 5)
            .and_then(|h| h.try_into().ok());
        let Some([tag, a, b, c, d]) = header else {
            return Ok(None);
        };
        let len = i32::from_be_bytes([a, b, c, d]);
        usize::try_from(len)
            .ok()
            .filter(|len| (4..=MAX_MESSAGE).contains(len))
            .map(Some)
            .ok_or_else(|| {
                PgError::protocol(format!(
                    "invalid length {len} in a message of type '{}'",
                    char::from(tag)
                ))
            })
    }

    /// Reads more bytes; `false` when `deadline` passed first. The `first` read of a call
    /// happens even when the deadline has already passed (without blocking then), so that
    /// polling with a zero time-out still makes progress.
    fn fill(&mut self, deadline: Option<Instant>, first: bool) -> Result<bool, PgError> {
        self.make_room();
        let mut poll = false;
        let timeout = match deadline {
            None => self.base_timeout,
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() && !first {
                    return Ok(false);
                }
                poll = left.is_zero();
                // A zero socket time-out would mean "block"; round tiny waits up (the
                // kernel rounds them to a clock tick anyway).
                Some(left.max(Duration::from_micros(100)))
            }
        };
        if !poll {
            let timeout = if self.backlog {
                Some(timeout.map_or(BACKLOG_WAIT, |t| t.min(BACKLOG_WAIT)))
            } else {
                timeout
            };
            self.set_read_timeout(timeout)?;
        }
        let free = self.buf.get_mut(self.end..).unwrap_or_default();
        let result = if poll {
            self.stream.set_nonblocking(true).and_then(|()| {
                let read = self.stream.read(free);
                self.stream.set_nonblocking(false).and(read)
            })
        } else {
            self.stream.read(free)
        };
        match result {
            Ok(0) => Err(PgError::connect(
                "server closed the connection unexpectedly",
            )),
            Ok(n) => {
                self.end += n;
                if self.backlog && n < BACKLOG_END {
                    self.set_backlog(false);
                } else if !self.backlog && n >= BACKLOG_READ {
                    self.set_backlog(true);
                }
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
            // Nothing within the backlog's short wait: the backlog is over, and the caller's
            // own deadline (not passed yet, or this is the read it may make after it) is
            // waited for again by the next read.
            Err(e) if is_timeout(&e) && self.backlog => {
                self.set_backlog(false);
                Ok(true)
            }
            Err(e) if is_timeout(&e) => {
                if deadline.is_some() {
                    Ok(false)
                } else {
                    Err(PgError::io("timed out waiting for the server", e))
                }
            }
            Err(e) => Err(io_error("could not receive data from the server", e)),
        }
    }

    /// Starts or ends a backlog (see the module docs). The socket option is a hint: if it
    /// cannot be set, reads simply go on waking at the first byte.
    fn set_backlog(&mut self, on: bool) {
        if on {
            self.backlog = self.stream.set_receive_low_water(BACKLOG_LOW_WATER).is_ok();
        } else {
            self.backlog = false;
            // Best effort as well: should it fail, the reads' own time-outs still bound
            // each wait.
            let _ = self.stream.set_receive_low_water(1);
        }
    }

    /// Moves the unconsumed bytes to the front and grows or shrinks the buffer so that
    /// there is space to read into.
    fn make_room(&mut self) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > READ_BUFFER {
                self.buf.truncate(READ_BUFFER);
                self.buf.shrink_to_fit();
            }
        } else if self.start > 0 && self.buf.len() - self.end < MIN_READ {
            // Little room left at the tail: move the partial message to the front rather
            // than read in small pieces.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            // A message longer than the buffer: double, but not past what it needs.
            let need = self
                .header_len()
                .ok()
                .flatten()
                .map_or(self.buf.len() + 1, |len| len + 1);
            let grown = self
                .buf
                .len()
                .saturating_mul(2)
                .min(need.max(self.buf.len() + 1));
            self.buf.resize(grown, 0);
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// An I/O error while connected: an abrupt close reads as such, not as "early eof".
pub(crate) fn io_error(context: &str, e: io::Error) -> PgError {
    match e.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe => PgError::Connect {
            message: format!("{context}: server closed the connection unexpectedly ({e})"),
            source: Some(e),
        },
        _ if is_timeout(&e) => PgError::io(&format!("{context}: timed out"), e),
        _ => PgError::io(context, e),
    }
}

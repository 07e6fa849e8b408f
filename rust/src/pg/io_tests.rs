//! Framing over a real socket pair: messages split across writes at every awkward place,
//! read with deadlines that expire mid-message, must come out whole and in order; a
//! message longer than the buffer grows it; bad lengths are protocol errors.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::{Duration, Instant};

use super::error::PgError;
use super::io::{Stream, Wire, READ_BUFFER};

fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn pair() -> (Wire, UnixStream) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    (Wire::new(Stream::Unix(ours)), theirs)
}

#[test]
fn frames_survive_partial_writes_and_timeouts() {
    let (mut wire, mut peer) = pair();
    // Bodies of many sizes, one larger than the read buffer.
    let bodies: Vec<Vec<u8>> = (0..200u32)
        .map(|i| {
            let len = match i {
                77 => READ_BUFFER * 3 + 5,
                _ => (i as usize * 37) % 1000,
            };
            (0..len).map(|j| (i as usize + j) as u8).collect()
        })
        .collect();
    let stream: Vec<u8> = bodies.iter().flat_map(|b| frame(b'd', b)).collect();
    let writer = thread::spawn(move || {
        // Odd-sized pieces with pauses longer than the reader's deadline, so reads time
        // out with a header or a body half-received.
        for (n, chunk) in stream.chunks(7919).enumerate() {
            peer.write_all(chunk).unwrap();
            if n % 5 == 0 {
                thread::sleep(Duration::from_millis(15));
            }
        }
        peer
    });
    let mut received = 0;
    let mut partial_timeouts = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while received < bodies.len() {
        assert!(Instant::now() < deadline, "stalled at message {received}");
        match wire
            .next_frame(Some(Instant::now() + Duration::from_micros(300)))
            .unwrap()
        {
            None if wire.buffered() > 0 => partial_timeouts += 1,
            None => {}
            Some(f) => {
                assert_eq!(f.tag, b'd');
                assert_eq!(
                    wire.body(&f).unwrap(),
                    &bodies[received][..],
                    "message {received}"
                );
                received += 1;
            }
        }
    }
    assert!(
        partial_timeouts > 10,
        "only {partial_timeouts} time-outs with a partial message buffered"
    );
    let _peer = writer.join().unwrap();
}

#[test]
fn bad_lengths_and_closed_sockets_are_errors() {
    for header in [
        [b'd', 0, 0, 0, 3],
        [b'd', 0xff, 0xff, 0xff, 0xff],
        [b'd', 0x7f, 0xff, 0xff, 0xff],
    ] {
        let (mut wire, mut peer) = pair();
        peer.write_all(&header).unwrap();
        assert!(
            matches!(wire.frame(), Err(PgError::Protocol(_))),
            "{header:?}"
        );
    }
    let (mut wire, mut peer) = pair();
    peer.write_all(&frame(b'Z', b"I")[..4]).unwrap();
    drop(peer);
    let err = wire.frame().unwrap_err();
    assert!(matches!(err, PgError::Connect { .. }), "{err:?}");
    assert!(err.to_string().contains("closed"), "{err}");
}

#[test]
fn a_deadline_in_the_past_reads_nothing_but_keeps_buffered_frames() {
    let (mut wire, mut peer) = pair();
    peer.write_all(&[frame(b'a', b"1"), frame(b'b', b"22")].concat())
        .unwrap();
    let f = wire.frame().unwrap();
    assert_eq!(wire.body(&f).unwrap(), b"1");
    // The second frame arrived with the first read: no socket read is needed for it.
    let past = Instant::now()
        .checked_sub(Duration::from_millis(1))
        .unwrap();
    let f = wire.next_frame(Some(past)).unwrap().unwrap();
    assert_eq!((f.tag, wire.body(&f).unwrap()), (b'b', &b"22"[..]));
    assert!(wire.next_frame(Some(past)).unwrap().is_none());
    // Polling (a deadline already passed) still reads what has arrived, without waiting.
    peer.write_all(&frame(b'c', b"333")).unwrap();
    let f = wire.next_frame(Some(past)).unwrap().unwrap();
    assert_eq!((f.tag, wire.body(&f).unwrap()), (b'c', &b"333"[..]));
    let polled = Instant::now();
    assert!(wire.next_frame(Some(past)).unwrap().is_none());
    assert!(polled.elapsed() < Duration::from_millis(50));
}

/// After a read that brought in a backlog, a short message that comes alone is still
/// delivered at once (within the backlog's short wait), not at the caller's deadline; and
/// the frames around it come out whole.
#[test]
fn a_message_after_a_backlog_is_not_held_back() {
    let (mut wire, mut peer) = pair();
    let big = frame(b'd', &vec![7u8; 200 * 1024]);
    let writer = thread::spawn(move || {
        peer.write_all(&big).unwrap();
        // Let the reader take the backlog in before the lone message comes.
        thread::sleep(Duration::from_millis(200));
        peer.write_all(&frame(b'd', b"alone")).unwrap();
        thread::sleep(Duration::from_secs(3));
        peer
    });
    let deadline = || Some(Instant::now() + Duration::from_secs(2));
    let first = wire.next_frame(deadline()).unwrap().unwrap();
    assert_eq!(wire.body(&first).unwrap().len(), 200 * 1024);
    assert!(wire.in_backlog());
    let started = Instant::now();
    let second = wire.next_frame(deadline()).unwrap().unwrap();
    assert_eq!(wire.body(&second).unwrap(), b"alone");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(!wire.in_backlog());
    // And nothing more: the deadline is kept.
    let started = Instant::now();
    let none = wire
        .next_frame(Some(Instant::now() + Duration::from_millis(300)))
        .unwrap();
    assert!(none.is_none());
    assert!(started.elapsed() >= Duration::from_millis(290));
    drop(writer.join().unwrap());
}

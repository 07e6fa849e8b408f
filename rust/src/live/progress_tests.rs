//! The rules of the session's bookkeeping ([`super::progress`]), one test per rule: what
//! is reported as written and flushed, what a batch carries, when the server's position
//! is confirmed on the consumer's behalf, when status updates and reply requests go out,
//! when batches are cut, how long a read waits, and when a silent server counts as dead.
//! Time is a fixed `t0` plus offsets: nothing here sleeps.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::time::{Duration, Instant};

use super::progress::{
    BatchLimits, KeepaliveReply, Outstanding, Progress, StatusPositions, Stop, BACKLOG_READ_WAIT,
    IDLE_POSITION_INTERVAL, MIN_READ_WAIT, UNTIL_POSITION_INTERVAL,
};

const STATUS_INTERVAL: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A session started at `start` that reports `acked` as flushed, without a stall
/// time-out, created at the returned instant.
fn progress(start: u64, acked: u64) -> (Progress, Instant) {
    let t0 = Instant::now();
    (Progress::new(start, acked, STATUS_INTERVAL, None, t0), t0)
}

/// Nothing outstanding.
fn idle() -> Outstanding {
    Outstanding::default()
}

fn rows(n: usize) -> Outstanding {
    Outstanding {
        rows: n,
        ..Outstanding::default()
    }
}

fn open_transaction() -> Outstanding {
    Outstanding {
        in_transaction: true,
        ..Outstanding::default()
    }
}

fn limits() -> BatchLimits {
    BatchLimits {
        max_rows: 1000,
        max_bytes: 1 << 20,
        max_wait: secs(1),
        until_lsn: None,
        idle_timeout: None,
        idle_confirm_limit: None,
    }
}

fn status(write: u64, flush: u64) -> StatusPositions {
    StatusPositions {
        write,
        flush,
        apply: flush,
    }
}

/// A transaction from Begin to Commit: its Begin arrives at `at`, its end LSN is `end`.
fn transaction(p: &mut Progress, wal_start: u64, end: u64, at: Instant) {
    p.xlog_data(wal_start, 25, at);
    assert!(!p.transaction_finished(end, None, &rows(1)));
}

#[test]
fn a_new_session_reports_its_acked_position_as_flushed() {
    let (p, _) = progress(100, 80);
    assert_eq!(p.status(), status(100, 80));
    assert_eq!(p.boundary(), 100);
    assert_eq!(p.delivered(), 100);
    assert_eq!(p.pending_lsn(), 100);
    assert_eq!(p.acked(), 80);
    assert_eq!(p.flush_position(), 80);

    // Starting at 0 (the slot's confirmed position) with an ack from an earlier session of
    // the run: the write position is never below the flush position.
    let (p, _) = progress(0, 200);
    assert_eq!(p.status(), status(200, 200));
}

#[test]
fn the_flush_position_never_passes_the_acked_lsn() {
    let (mut p, t0) = progress(100, 100);
    transaction(&mut p, 150, 200, t0);
    assert_eq!(p.boundary(), 200);
    assert_eq!(p.status(), status(150, 100), "fed, not even cut");
    assert_eq!(p.cut(t0), 200);
    assert_eq!(p.status(), status(150, 100), "handed out, not acked");
    // A keepalive while the batch is un-acked confirms nothing.
    let reply = p.keepalive(300, false, None, &idle());
    assert_eq!(reply, KeepaliveReply::default());
    assert_eq!(p.status(), status(300, 100));
    assert_eq!(p.boundary(), 200);

    assert!(p.ack(200), "a higher ack is reported at once");
    assert_eq!(p.status(), status(300, 200));
    assert!(!p.ack(150), "a lower ack is ignored");
    assert!(!p.ack(200), "so is the same one again");
    assert_eq!(p.acked(), 200);
    assert_eq!(p.status(), status(300, 200));
}

#[test]
fn the_write_position_is_the_highest_position_received() {
    let (mut p, t0) = progress(100, 100);
    p.xlog_data(150, 10, t0);
    p.xlog_data(120, 10, t0);
    assert_eq!(p.status().write, 150);
    p.keepalive(400, false, None, &rows(1));
    assert_eq!(p.status().write, 400);
    p.keepalive(300, false, None, &rows(1));
    assert_eq!(p.status().write, 400);
    // An ack beyond it (of an earlier session's batch) lifts it.
    p.ack(500);
    assert_eq!(p.status(), status(500, 500));
}

#[test]
fn a_keepalive_asking_for_a_reply_is_answered_whatever_is_outstanding() {
    for held in [idle(), rows(3), open_transaction()] {
        let (mut p, t0) = progress(100, 100);
        transaction(&mut p, 150, 200, t0);
        let reply = p.keepalive(250, true, None, &held);
        assert!(reply.send_status, "{held:?}");
        let reply = p.keepalive(250, false, None, &held);
        assert!(!reply.send_status, "{held:?}");
    }
}

#[test]
fn an_idle_session_confirms_the_servers_position_on_the_consumers_behalf() {
    let (mut p, _) = progress(100, 100);
    let reply = p.keepalive(500, false, None, &idle());
    assert!(
        reply.send_status,
        "the confirmed position is reported at once"
    );
    assert_eq!(p.boundary(), 500);
    assert_eq!(p.delivered(), 500, "a new session resumes there");
    assert_eq!(p.flush_position(), 500);
    assert_eq!(p.status(), status(500, 500));
    assert_eq!(p.acked(), 100, "the consumer acked nothing");

    // Every keepalive is answered while the confirmed position is ahead of the acked one.
    assert!(p.keepalive(500, false, None, &idle()).send_status);
    p.ack(500);
    assert!(!p.keepalive(500, false, None, &idle()).send_status);
    // A later position is confirmed again.
    assert!(p.keepalive(600, false, None, &idle()).send_status);
    assert_eq!(p.boundary(), 600);
    // A keepalive behind the boundary confirms nothing new.
    p.ack(600);
    assert!(!p.keepalive(550, false, None, &idle()).send_status);
    assert_eq!(p.boundary(), 600);
}

#[test]
fn an_idle_session_never_confirms_past_the_consumers_record() {
    let (mut p, _) = progress(100, 100);
    p.limit_idle_confirm(Some(300));
    let reply = p.keepalive(500, false, None, &idle());
    assert!(reply.send_status);
    assert_eq!(p.flush_position(), 300, "confirmed up to the limit only");
    assert_eq!(p.delivered(), 300);
    // The server's position still counts for `until`.
    assert!(p.keepalive(500, false, Some(450), &idle()).until_reached);
    // The consumer's own ack passes the limit.
    p.ack(500);
    assert_eq!(p.flush_position(), 500);
    // Without a limit the idle session follows the server again.
    p.limit_idle_confirm(None);
    p.keepalive(700, false, None, &idle());
    assert_eq!(p.flush_position(), 700);
}

#[test]
fn nothing_is_confirmed_while_anything_is_outstanding() {
    let held_cases = [
        rows(1),
        open_transaction(),
        Outstanding {
            pending_transactions: 1,
            ..Outstanding::default()
        },
    ];
    for held in held_cases {
        let (mut p, _) = progress(100, 100);
        assert!(!p.idle_with_nothing_unacked(&held), "{held:?}");
        assert!(!p.keepalive(500, false, None, &held).send_status);
        assert_eq!(
            (p.boundary(), p.delivered(), p.flush_position()),
            (100, 100, 100)
        );
    }

    // A batch handed out and not acked.
    let (mut p, t0) = progress(100, 100);
    transaction(&mut p, 150, 200, t0);
    p.cut(t0);
    assert!(!p.idle_with_nothing_unacked(&idle()));
    p.keepalive(500, false, None, &idle());
    assert_eq!((p.boundary(), p.flush_position()), (200, 100));
    // Once acked, the session is idle again.
    p.ack(200);
    assert!(p.idle_with_nothing_unacked(&idle()));

    // A transaction fed completely but not yet cut into a batch: the consumer must get
    // its LSN first.
    let (mut p, t0) = progress(100, 100);
    transaction(&mut p, 150, 200, t0);
    assert!(!p.idle_with_nothing_unacked(&idle()));
    p.keepalive(500, false, None, &idle());
    assert_eq!((p.boundary(), p.flush_position()), (200, 100));
}

#[test]
fn a_finished_transaction_moves_the_boundary_and_the_next_batch_carries_it() {
    let (mut p, t0) = progress(100, 100);
    p.xlog_data(150, 25, t0);
    assert!(!p.transaction_finished(200, None, &idle()));
    assert_eq!(p.boundary(), 200);
    assert_eq!(
        p.pending_lsn(),
        100,
        "a poll that cuts nothing reports the last batch"
    );
    assert_eq!(p.cut(t0), 200);
    assert_eq!(p.delivered(), 200);
    assert_eq!(p.pending_lsn(), 200);
    // The boundary never goes back.
    p.transaction_finished(180, None, &idle());
    assert_eq!(p.boundary(), 200);
}

#[test]
fn a_batch_cut_inside_a_transaction_carries_the_last_complete_one() {
    let (mut p, t0) = progress(100, 100);
    transaction(&mut p, 150, 200, t0);
    p.xlog_data(250, 25, t0);
    let full = BatchLimits {
        max_rows: 2,
        ..limits()
    };
    let held = Outstanding {
        rows: 2,
        in_transaction: true,
        ..Outstanding::default()
    };
    assert_eq!(p.batch_due(t0, &full, &held), Some(Stop::Full));
    assert_eq!(p.cut(t0), 200, "never a point inside the open transaction");
    assert_eq!(p.cut(t0), 200);
    p.transaction_finished(300, None, &idle());
    assert_eq!(p.cut(t0), 300);
}

#[test]
fn an_open_or_prepared_transaction_holds_the_boundary() {
    let (mut p, _) = progress(100, 100);
    p.transaction_finished(200, None, &open_transaction());
    assert_eq!(p.boundary(), 100);
    let prepared = Outstanding {
        prepared_transactions: 1,
        pending_transactions: 1,
        ..Outstanding::default()
    };
    p.transaction_finished(200, None, &prepared);
    assert_eq!(p.boundary(), 100);
    // A streamed transaction still open does not hold it.
    let streamed = Outstanding {
        pending_transactions: 1,
        ..Outstanding::default()
    };
    p.transaction_finished(200, None, &streamed);
    assert_eq!(p.boundary(), 200);
}

#[test]
fn until_is_reached_when_the_boundary_gets_there() {
    let (mut p, _) = progress(100, 100);
    assert!(!p.until_reached(None));
    assert!(p.until_reached(Some(100)));
    assert!(!p.until_reached(Some(200)));
    assert!(p.transaction_finished(200, Some(200), &idle()));
    assert!(!p.transaction_finished(210, Some(250), &idle()));
    // Held by a prepared transaction: not reached.
    let prepared = Outstanding {
        prepared_transactions: 1,
        ..Outstanding::default()
    };
    assert!(!p.transaction_finished(300, Some(250), &prepared));
}

#[test]
fn a_keepalive_past_until_ends_the_stream_when_nothing_is_open() {
    let held = Outstanding {
        pending_transactions: 1,
        ..Outstanding::default()
    };
    let (mut p, _) = progress(100, 100);
    let reply = p.keepalive(260, false, Some(250), &held);
    assert!(
        reply.until_reached,
        "the server passed until, nothing is open"
    );
    assert_eq!(p.boundary(), 100, "a held transaction keeps the boundary");

    let (mut p, _) = progress(100, 100);
    assert!(
        !p.keepalive(260, false, Some(250), &open_transaction())
            .until_reached
    );
    assert!(!p.keepalive(240, false, Some(250), &held).until_reached);
    assert!(!p.keepalive(260, false, None, &held).until_reached);

    // Idle: the keepalive moves the boundary to wal_end, which reaches until.
    let (mut p, _) = progress(100, 100);
    let reply = p.keepalive(250, false, Some(250), &idle());
    assert!(reply.until_reached && reply.send_status);
    assert!(p.until_reached(Some(250)));
}

#[test]
fn a_begin_committing_after_until_cuts_before_its_rows() {
    let (p, _) = progress(100, 100);
    assert!(p.begin_is_past_until(300, Some(250), &idle()));
    assert!(!p.begin_is_past_until(250, Some(250), &idle()));
    assert!(!p.begin_is_past_until(300, None, &idle()));
    assert!(!p.begin_is_past_until(300, Some(250), &open_transaction()));
}

#[test]
fn a_logical_message_outside_a_transaction_asks_for_the_position_under_until() {
    let (p, _) = progress(100, 100);
    assert!(p.position_wanted_after_message(Some(300), &idle()));
    assert!(p.position_wanted_after_message(Some(300), &rows(5)));
    assert!(!p.position_wanted_after_message(None, &idle()));
    assert!(!p.position_wanted_after_message(Some(300), &open_transaction()));
}

#[test]
fn a_batch_is_full_at_max_rows_or_max_bytes() {
    let (mut p, t0) = progress(100, 100);
    let l = BatchLimits {
        max_rows: 10,
        max_bytes: 100,
        ..limits()
    };
    assert_eq!(p.batch_due(t0, &l, &rows(9)), None);
    assert_eq!(p.batch_due(t0, &l, &rows(10)), Some(Stop::Full));
    // max_rows 0 counts as 1.
    let zero = BatchLimits { max_rows: 0, ..l };
    assert_eq!(p.batch_due(t0, &zero, &rows(0)), None);
    assert_eq!(p.batch_due(t0, &zero, &rows(1)), Some(Stop::Full));
    // Bytes count every XLogData payload, rows or not.
    p.xlog_data(150, 60, t0);
    assert_eq!(p.batch_due(t0, &l, &idle()), None);
    p.xlog_data(160, 40, t0);
    assert_eq!(p.batch_due(t0, &l, &idle()), Some(Stop::Full));
    p.cut(t0);
    assert_eq!(
        p.batch_due(t0, &l, &idle()),
        None,
        "a cut starts the count again"
    );
}

#[test]
fn a_batch_waits_at_most_max_wait_after_its_first_message() {
    let (mut p, t0) = progress(100, 100);
    let l = limits();
    assert_eq!(
        p.batch_due(t0 + secs(5), &l, &rows(1)),
        None,
        "no message yet"
    );
    p.xlog_data(150, 10, t0 + secs(1));
    p.xlog_data(160, 10, t0 + ms(1500));
    assert_eq!(p.batch_due(t0 + ms(1999), &l, &rows(1)), None);
    assert_eq!(p.batch_due(t0 + secs(2), &l, &rows(1)), Some(Stop::Waited));
    // Without rows and without a new LSN there is nothing to hand out.
    assert_eq!(p.batch_due(t0 + secs(3), &l, &idle()), None);
    // A row-less batch that moves the LSN (a transaction whose rows went out before) is
    // cut, so the consumer gets to ack it; not while a transaction is open.
    p.transaction_finished(200, None, &idle());
    assert_eq!(p.batch_due(t0 + secs(3), &l, &idle()), Some(Stop::Waited));
    assert_eq!(p.batch_due(t0 + secs(3), &l, &open_transaction()), None);
    assert_eq!(p.cut(t0), 200);
    assert_eq!(
        p.batch_due(t0 + secs(9), &l, &rows(1)),
        None,
        "no message since the cut"
    );
}

#[test]
fn after_a_slow_apply_a_batch_collects_the_backlog_for_as_long_as_the_apply_took() {
    let (mut p, t0) = progress(100, 100);
    let l = limits(); // max_wait 1 s
    assert_eq!(p.batch_window(&l), secs(1), "no batch applied yet");
    p.xlog_data(150, 10, t0);
    assert_eq!(p.batch_due(t0 + secs(1), &l, &rows(1)), Some(Stop::Waited));
    p.cut(t0 + secs(1));
    // The consumer took 3 s over that batch: while the changes that arrived meanwhile
    // keep coming out of the socket, the next batch collects for up to 3 s.
    p.poll_started(t0 + secs(4));
    assert_eq!(p.batch_window(&l), secs(3));
    p.xlog_data(160, 10, t0 + secs(4));
    assert_eq!(
        p.read_wait(t0 + ms(4500), t0 + secs(4), secs(60), &l),
        Some(ms(500)),
        "within max_wait a read waits as usual"
    );
    assert_eq!(p.batch_due(t0 + secs(5), &l, &rows(1)), None);
    assert_eq!(
        p.read_wait(t0 + secs(5), t0 + secs(4), secs(60), &l),
        Some(BACKLOG_READ_WAIT),
        "past max_wait a read only asks whether more is waiting"
    );
    assert_eq!(p.batch_due(t0 + ms(6999), &l, &rows(1)), None);
    assert_eq!(p.batch_due(t0 + secs(7), &l, &rows(1)), Some(Stop::Waited));
    // The limits still bound it.
    assert_eq!(p.batch_due(t0 + secs(5), &l, &rows(1000)), Some(Stop::Full));
    // Once a read finds nothing waiting, the backlog is read: max_wait again.
    p.read_found_nothing();
    assert_eq!(p.batch_window(&l), secs(1));
    assert_eq!(p.batch_due(t0 + secs(5), &l, &rows(1)), Some(Stop::Waited));
    p.cut(t0 + secs(5));
    // A quick apply (and later polls of the same wait) keep max_wait.
    p.poll_started(t0 + ms(5100));
    p.poll_started(t0 + secs(60));
    assert_eq!(p.batch_window(&l), secs(1));
}

#[test]
fn idle_timeout_counts_from_the_last_message_or_the_consumers_return() {
    let (mut p, t0) = progress(100, 100);
    let l = BatchLimits {
        idle_timeout: Some(secs(2)),
        max_wait: secs(100),
        ..limits()
    };
    assert_eq!(p.batch_due(t0 + ms(1999), &l, &idle()), None);
    assert_eq!(p.batch_due(t0 + secs(2), &l, &idle()), Some(Stop::Idle));
    p.xlog_data(150, 10, t0 + secs(1));
    assert_eq!(p.batch_due(t0 + ms(2999), &l, &idle()), None);
    assert_eq!(p.batch_due(t0 + secs(3), &l, &idle()), Some(Stop::Idle));

    // Time the consumer spends on a batch does not count.
    p.cut(t0);
    p.poll_started(t0 + secs(10));
    assert_eq!(p.batch_due(t0 + secs(11), &l, &idle()), None);
    assert_eq!(p.batch_due(t0 + secs(12), &l, &idle()), Some(Stop::Idle));
    // A poll after a poll that handed out nothing does not restart the count.
    p.poll_started(t0 + secs(11));
    assert_eq!(p.batch_due(t0 + secs(12), &l, &idle()), Some(Stop::Idle));
}

#[test]
fn status_updates_go_out_every_status_interval() {
    let (mut p, t0) = progress(100, 100);
    assert!(!p.status_due(t0 + STATUS_INTERVAL.saturating_sub(ms(1))));
    assert!(p.status_due(t0 + STATUS_INTERVAL));
    p.status_sent(t0 + secs(4), false);
    assert!(!p.status_due(t0 + STATUS_INTERVAL));
    assert!(p.status_due(t0 + secs(4) + STATUS_INTERVAL));
    // A reply request is a status update too.
    p.status_sent(t0 + secs(8), true);
    assert!(!p.status_due(t0 + secs(4) + STATUS_INTERVAL));
}

#[test]
fn an_idle_session_asks_for_the_servers_position_every_idle_position_interval() {
    let (mut p, t0) = progress(100, 100);
    assert!(!p.idle_position_due(t0 + IDLE_POSITION_INTERVAL.saturating_sub(ms(1)), &idle()));
    assert!(p.idle_position_due(t0 + IDLE_POSITION_INTERVAL, &idle()));
    assert!(!p.idle_position_due(t0 + IDLE_POSITION_INTERVAL, &rows(1)));
    assert!(!p.idle_position_due(t0 + IDLE_POSITION_INTERVAL, &open_transaction()));
    // A status update without the reply flag does not count as a request.
    p.status_sent(t0 + ms(900), false);
    assert!(p.idle_position_due(t0 + IDLE_POSITION_INTERVAL, &idle()));
    let asked = t0 + IDLE_POSITION_INTERVAL;
    p.status_sent(asked, true);
    assert!(!p.idle_position_due(asked + ms(999), &idle()));
    assert!(p.idle_position_due(asked + IDLE_POSITION_INTERVAL, &idle()));
    // Not while a batch handed out is un-acked.
    transaction(&mut p, 150, 200, asked);
    p.cut(t0);
    assert!(!p.idle_position_due(asked + secs(5), &idle()));
}

#[test]
fn until_asks_for_the_position_when_the_stream_is_quiet() {
    let (mut p, t0) = progress(100, 100);
    let until = Some(300);
    assert!(!p.until_position_due(t0 + secs(5), None));
    assert!(!p.until_position_due(t0 + UNTIL_POSITION_INTERVAL.saturating_sub(ms(1)), until));
    assert!(p.until_position_due(t0 + UNTIL_POSITION_INTERVAL, until));
    // Data keeps it from asking...
    p.xlog_data(150, 10, t0 + ms(400));
    assert!(!p.until_position_due(t0 + ms(899), until));
    assert!(p.until_position_due(t0 + ms(900), until));
    // ...and so does a recent request.
    p.status_sent(t0 + ms(900), true);
    assert!(!p.until_position_due(t0 + ms(1399), until));
    assert!(p.until_position_due(t0 + ms(1400), until));
}

#[test]
fn a_read_waits_until_the_first_deadline() {
    let (mut p, t0) = progress(100, 100);
    let slice = secs(5);
    let l = limits();
    assert_eq!(p.read_wait(t0, t0, slice, &l), Some(secs(5)));
    assert_eq!(p.read_wait(t0 + secs(1), t0, slice, &l), Some(secs(4)));
    assert_eq!(
        p.read_wait(t0 + secs(5), t0, slice, &l),
        None,
        "the slice is over"
    );
    // The status interval, from the last update.
    assert_eq!(
        p.read_wait(t0 + secs(7), t0 + secs(6), slice, &l),
        Some(secs(3))
    );
    // max_wait, from the batch's first message.
    p.xlog_data(150, 10, t0);
    assert_eq!(p.read_wait(t0 + ms(300), t0, slice, &l), Some(ms(700)));
    assert_eq!(
        p.read_wait(t0 + secs(2), t0, slice, &l),
        Some(Duration::ZERO)
    );
    p.cut(t0);
    // idle_timeout, from the last message.
    let idle_limits = BatchLimits {
        idle_timeout: Some(secs(3)),
        ..l
    };
    assert_eq!(
        p.read_wait(t0 + secs(1), t0, slice, &idle_limits),
        Some(secs(2))
    );
    // until: at most the position interval.
    let until_limits = BatchLimits {
        until_lsn: Some(300),
        ..l
    };
    assert_eq!(
        p.read_wait(t0, t0, slice, &until_limits),
        Some(UNTIL_POSITION_INTERVAL)
    );
    // Never less than the minimum, so a passed deadline does not spin.
    assert_eq!(p.bounded_by_stall(t0, Duration::ZERO), MIN_READ_WAIT);
    assert_eq!(
        p.bounded_by_stall(t0, secs(3)),
        secs(3),
        "no stall time-out"
    );
}

#[test]
fn a_silent_server_is_asked_for_a_reply_then_given_up() {
    let t0 = Instant::now();
    let stall = secs(10);
    let mut p = Progress::new(100, 100, STATUS_INTERVAL, Some(stall), t0);
    assert!(!p.ping_due(t0 + ms(4999)));
    assert!(p.ping_due(t0 + secs(5)));
    assert_eq!(p.bounded_by_stall(t0 + secs(1), secs(60)), secs(4));
    // The request goes out; the next check is when the whole time-out has passed.
    p.status_sent(t0 + secs(5), true);
    assert!(!p.ping_due(t0 + secs(6)));
    assert_eq!(p.bounded_by_stall(t0 + secs(6), secs(60)), secs(4));
    assert_eq!(p.stalled(t0 + ms(9999)), None);
    assert_eq!(p.stalled(t0 + secs(10)), Some(secs(10)));
    // A later request does not restart the clock of the first.
    p.status_sent(t0 + secs(7), true);
    assert_eq!(p.stalled(t0 + secs(10)), Some(secs(10)));

    // Anything from the server clears it.
    p.heard(t0 + secs(9));
    assert_eq!(p.stalled(t0 + secs(12)), None);
    assert!(!p.ping_due(t0 + ms(13999)));
    assert!(p.ping_due(t0 + secs(14)));
}

#[test]
fn a_server_silent_for_the_whole_time_out_gets_half_of_it_to_answer() {
    let t0 = Instant::now();
    let stall = secs(10);
    let mut p = Progress::new(100, 100, STATUS_INTERVAL, Some(stall), t0);
    // The request went out late (the consumer was busy): silence alone is not enough.
    p.status_sent(t0 + secs(9), true);
    assert_eq!(p.stalled(t0 + secs(12)), None);
    assert_eq!(p.bounded_by_stall(t0 + secs(12), secs(60)), secs(2));
    assert_eq!(p.stalled(t0 + secs(14)), Some(secs(14)));
}

#[test]
fn without_a_stall_timeout_a_silent_server_is_never_given_up() {
    let (mut p, t0) = progress(100, 100);
    assert!(!p.ping_due(t0 + secs(3600)));
    p.status_sent(t0 + secs(1), true);
    assert_eq!(p.stalled(t0 + secs(3600)), None);
    assert_eq!(p.bounded_by_stall(t0, secs(7)), secs(7));
}

#[test]
fn a_replay_fills_the_batch_like_messages_from_the_socket() {
    let (mut p, t0) = progress(100, 100);
    let l = BatchLimits {
        max_bytes: 300,
        ..limits()
    };
    p.replay_started(t0 + secs(1));
    p.replayed(200);
    assert_eq!(p.batch_due(t0 + ms(1500), &l, &rows(1)), None);
    assert_eq!(p.batch_due(t0 + secs(2), &l, &rows(1)), Some(Stop::Waited));
    p.replay_started(t0 + ms(1800));
    p.replayed(100);
    assert_eq!(p.batch_due(t0 + ms(1500), &l, &rows(1)), Some(Stop::Full));
}

#[test]
fn stop_names_and_finality() {
    let stops = [
        (Stop::Pending, "pending", false),
        (Stop::Full, "full", false),
        (Stop::Waited, "waited", false),
        (Stop::UntilLsn, "until_lsn", true),
        (Stop::Idle, "idle", true),
    ];
    for (stop, name, last) in stops {
        assert_eq!(stop.name(), name);
        assert_eq!(stop.is_final(), last);
    }
}

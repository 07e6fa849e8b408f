//! The bookkeeping of a streaming session, apart from its I/O: which WAL positions a
//! batch may carry, which the server may be told are flushed, when a standby status
//! update goes out and whether it asks for a reply, when a batch is cut, and how long the
//! next read may wait. Nothing here reads the socket or the clock: the session passes in
//! what arrived, what the decoder and the sink hold ([`Outstanding`]) and the time
//! (`now`), and does the sending and reading the answers call for.
//!
//! Positions (WAL positions as u64):
//! * boundary: the end of the last transaction fed completely (its Commit's `end_lsn`),
//!   or a point the server said it has passed while nothing was open. A batch's LSN is
//!   the boundary when it is cut, so it is always a transaction boundary. Batches respect
//!   the row, byte and time limits even inside a transaction (memory stays bounded); the
//!   rows of a transaction that spans batches only count as acked once a batch carrying
//!   an LSN past its Commit is acked.
//! * acked: the highest batch LSN the consumer acked. It is the only *flush* position
//!   ever reported to the server — except when the consumer is idle with nothing
//!   un-acked: then the position the server reports as sent (keepalive `wal_end`) is
//!   confirmed too, so a slot on quiet tables does not pin WAL forever. A walsender busy
//!   decoding WAL of other tables sends no keepalives of its own, so an idle session asks
//!   for one every [`IDLE_POSITION_INTERVAL`].
//! * received: the highest WAL position the server sent (reported as *write*, never
//!   below the flush position).
//! * delivered: the boundary handed out with the last batch: where a new session resumes
//!   without delivering anything twice.
//! * held transactions: a streamed transaction still open does not stop the boundary
//!   (the server re-sends it in full after a restart, since its commit lies beyond any
//!   confirmed point), but a prepared transaction held for its COMMIT PREPARED does: once
//!   confirmed past its PREPARE, the server would not send its changes again.
//!
//! Status updates go out at least every status interval, at once after an ack and when a
//! session starts (with what the run acked so far), in answer to a keepalive that asks for
//! a reply, and as a reply request (the walsender answers with a keepalive carrying its
//! position) when the session needs to know how far the server has got: idle with nothing un-acked (every [`IDLE_POSITION_INTERVAL`]), waiting
//! for `until_lsn` on a quiet stream (every [`UNTIL_POSITION_INTERVAL`]), or checking
//! that a silent server is still there (after half the stall time-out; after the whole
//! time-out without an answer the connection counts as dead).

use std::time::{Duration, Instant};

/// How often a session idle with nothing un-acked asks the server for its position (a
/// status update requesting a reply), to confirm it on the consumer's behalf.
pub const IDLE_POSITION_INTERVAL: Duration = Duration::from_secs(1);

/// While a poll waits for `until_lsn`: how long the stream may go without XLogData
/// before the session asks the server for its position, the least time between two such
/// requests, and so also the longest one read waits.
pub const UNTIL_POSITION_INTERVAL: Duration = Duration::from_millis(500);

/// The shortest wait of one read, so a deadline that has just passed does not make the
/// session spin.
pub const MIN_READ_WAIT: Duration = Duration::from_millis(1);

/// While a batch collects past `max_wait` what arrived during the consumer's last apply
/// (see [`Progress::batch_window`]): a read that finds nothing this long means the
/// backlog is read.
pub const BACKLOG_READ_WAIT: Duration = Duration::from_millis(10);

/// When a batch is cut.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    pub max_rows: usize,
    /// Payload bytes of the pgoutput messages that went into the batch.
    pub max_bytes: usize,
    /// Time since the batch's first message; longer after a batch the consumer took
    /// longer than this to apply (see [`Progress::batch_window`]).
    pub max_wait: Duration,
    /// Stop once every transaction committed up to this LSN has been delivered.
    pub until_lsn: Option<u64>,
    /// Stop after this long without any message from the stream.
    pub idle_timeout: Option<Duration>,
    /// A consumer idle with nothing un-acked is confirmed at most up to here (see
    /// [`Progress::limit_idle_confirm`]).
    pub idle_confirm_limit: Option<u64>,
}

/// Why `poll` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Nothing to hand out yet; call again (the call returns at least this often so the
    /// caller can look at signals).
    Pending,
    /// The batch reached `max_rows` or `max_bytes`.
    Full,
    /// The batch's first message is `max_wait` old.
    Waited,
    /// Everything committed up to `until_lsn` is in this or earlier batches: stop.
    UntilLsn,
    /// `idle_timeout` passed without a message: stop.
    Idle,
}

impl Stop {
    pub fn name(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Full => "full",
            Self::Waited => "waited",
            Self::UntilLsn => "until_lsn",
            Self::Idle => "idle",
        }
    }

    /// The stream is over.
    pub fn is_final(self) -> bool {
        matches!(self, Self::UntilLsn | Self::Idle)
    }
}

/// What the decoder and the sink hold that no batch has carried yet, as far as the
/// bookkeeping cares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outstanding {
    /// Rows appended since the last cut.
    pub rows: usize,
    /// A transaction is open (between its Begin and its end, or being replayed).
    pub in_transaction: bool,
    /// Streamed or prepared transactions held, waiting for their commit.
    pub pending_transactions: usize,
    /// Prepared transactions held for their COMMIT PREPARED / ROLLBACK PREPARED.
    pub prepared_transactions: usize,
}

/// The three positions of a standby status update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusPositions {
    pub write: u64,
    pub flush: u64,
    pub apply: u64,
}

/// What a primary keepalive calls for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeepaliveReply {
    /// Send a status update (without asking for a reply).
    pub send_status: bool,
    /// Everything up to `until_lsn` has been received and nothing is open: cut with
    /// [`Stop::UntilLsn`].
    pub until_reached: bool,
}

/// The bookkeeping of one session (see the module documentation).
#[derive(Debug, Clone)]
pub struct Progress {
    boundary: u64,
    acked: u64,
    /// Confirmed on the consumer's behalf while it was idle with nothing un-acked.
    idle_confirmed: u64,
    /// No further than this (see [`Progress::limit_idle_confirm`]).
    idle_confirm_limit: Option<u64>,
    received: u64,
    delivered: u64,

    status_interval: Duration,
    stall_timeout: Option<Duration>,
    last_status: Instant,
    last_reply_request: Instant,
    /// When the last XLogData arrived.
    last_message: Instant,
    /// When the server last sent anything (keepalives included).
    last_heard: Instant,
    /// A reply was requested while the server was silent, at this time.
    ping_sent: Option<Instant>,
    /// When the consumer handed control back after its last batch: `idle_timeout` counts
    /// from here at the earliest, so time the consumer spends on a batch (while messages
    /// wait unread in the socket) never counts as idle.
    resumed: Instant,
    /// A batch was handed out and the consumer has not polled since.
    handed_out: bool,
    /// When the last batch was handed out.
    cut_at: Option<Instant>,
    /// How long the consumer took over its last batch: from the cut to its next poll.
    last_apply: Duration,
    /// Since the last cut a read found nothing waiting, or the server sent a keepalive:
    /// what arrived while the consumer applied its last batch has been read.
    caught_up: bool,
    batch_started: Option<Instant>,
    batch_bytes: usize,
}

impl Progress {
    /// A session starting at `start_lsn` (0: the slot's confirmed position) that reports
    /// `acked_lsn` as flushed until the consumer acks more.
    pub fn new(
        start_lsn: u64,
        acked_lsn: u64,
        status_interval: Duration,
        stall_timeout: Option<Duration>,
        now: Instant,
    ) -> Self {
        Self {
            boundary: start_lsn,
            acked: acked_lsn,
            idle_confirmed: 0,
            idle_confirm_limit: None,
            received: start_lsn,
            delivered: start_lsn,
            status_interval,
            stall_timeout,
            last_status: now,
            last_reply_request: now,
            last_message: now,
            last_heard: now,
            ping_sent: None,
            resumed: now,
            handed_out: false,
            cut_at: None,
            last_apply: Duration::ZERO,
            caught_up: false,
            batch_started: None,
            batch_bytes: 0,
        }
    }

    pub fn status_interval(&self) -> Duration {
        self.status_interval
    }

    /// The LSN the next batch would carry.
    pub fn boundary(&self) -> u64 {
        self.boundary
    }

    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// The LSN of the last batch handed out, or a later point confirmed while idle:
    /// where a new session resumes without delivering anything twice within this run.
    pub fn delivered(&self) -> u64 {
        self.delivered.max(self.idle_confirmed)
    }

    /// The position the server may take as durably applied: what the consumer acked, or
    /// what was confirmed on its behalf while it was idle.
    pub fn flush_position(&self) -> u64 {
        self.acked.max(self.idle_confirmed)
    }

    /// The positions of the next standby status update: everything received counts as
    /// written; flushed and applied are the flush position.
    pub fn status(&self) -> StatusPositions {
        let flush = self.flush_position();
        StatusPositions {
            write: self.received.max(flush),
            flush,
            apply: flush,
        }
    }

    /// A status update went out at `at`.
    pub fn status_sent(&mut self, at: Instant, reply_requested: bool) {
        self.last_status = at;
        if reply_requested {
            self.last_reply_request = at;
            if self.ping_sent.is_none() {
                self.ping_sent = Some(at);
            }
        }
    }

    /// The consumer made everything up to `lsn` durable. True when that moves the acked
    /// position: the server is to be told at once.
    pub fn ack(&mut self, lsn: u64) -> bool {
        if lsn > self.acked {
            self.acked = lsn;
            true
        } else {
            false
        }
    }

    /// A poll begins at `now`; after a batch was handed out, idle time counts from here.
    pub fn poll_started(&mut self, now: Instant) {
        if std::mem::take(&mut self.handed_out) {
            self.resumed = now;
            self.last_apply = self
                .cut_at
                .map_or(Duration::ZERO, |cut| now.saturating_duration_since(cut));
        }
    }

    /// How long a batch collects after its first message: `max_wait`; after an apply
    /// that took longer, as long as that apply took, until the changes that arrived
    /// meanwhile are read ([`Progress::read_found_nothing`]). Batching by cost: a consumer
    /// whose every apply has a large fixed cost (a Spark MERGE) would otherwise get
    /// `max_wait`'s worth of reading per apply and fall further behind whenever the
    /// backlog takes longer than that to read; the longer window takes in the backlog so
    /// one apply serves it (the row and byte limits still bound the batch). A consumer
    /// faster than `max_wait`, or one that has caught up, keeps `max_wait`: nothing waits
    /// longer for changes yet to come.
    pub fn batch_window(&self, limits: &BatchLimits) -> Duration {
        if self.caught_up {
            limits.max_wait
        } else {
            limits.max_wait.max(self.last_apply)
        }
    }

    /// A read found nothing waiting, or the server sent a keepalive (it does when it has
    /// nothing to send): the backlog of the consumer's last apply is read.
    pub fn read_found_nothing(&mut self) {
        self.caught_up = true;
    }

    /// The server sent something (any message) at `at`: it is alive.
    pub fn heard(&mut self, at: Instant) {
        self.last_heard = at;
        self.ping_sent = None;
    }

    /// An XLogData frame of `bytes` payload bytes starting at `wal_start` arrived at `at`;
    /// it goes into the current batch.
    pub fn xlog_data(&mut self, wal_start: u64, bytes: usize, at: Instant) {
        self.last_message = at;
        self.received = self.received.max(wal_start);
        if self.batch_started.is_none() {
            self.batch_started = Some(at);
        }
        self.batch_bytes += bytes;
    }

    /// The replay of a held transaction's messages into the current batch begins at `at`.
    pub fn replay_started(&mut self, at: Instant) {
        if self.batch_started.is_none() {
            self.batch_started = Some(at);
        }
    }

    /// The replay put `bytes` payload bytes into the current batch.
    pub fn replayed(&mut self, bytes: usize) {
        self.batch_bytes += bytes;
    }

    /// Nothing is pending on the consumer's side: no rows, no open or held transaction,
    /// every batch handed out acked (or confirmed on the consumer's behalf before).
    pub fn idle_with_nothing_unacked(&self, held: &Outstanding) -> bool {
        held.rows == 0
            && !held.in_transaction
            && held.pending_transactions == 0
            && self.flush_position() >= self.delivered
            && self.boundary <= self.delivered.max(self.idle_confirmed)
    }

    /// The consumer keeps a record in the WAL ahead of the slot (a logical message at
    /// `limit`, read again from the slot after a restart): confirming on its behalf while
    /// it is idle must not pass it. Only its own acks move the slot past `limit`.
    pub fn limit_idle_confirm(&mut self, limit: Option<u64>) {
        self.idle_confirm_limit = limit;
    }

    /// A primary keepalive: the server has sent everything up to `wal_end`.
    pub fn keepalive(
        &mut self,
        wal_end: u64,
        reply_requested: bool,
        until: Option<u64>,
        held: &Outstanding,
    ) -> KeepaliveReply {
        self.received = self.received.max(wal_end);
        let quiet = self.idle_with_nothing_unacked(held);
        let confirmable = self
            .idle_confirm_limit
            .map_or(wal_end, |limit| wal_end.min(limit));
        if quiet && confirmable > self.boundary {
            // Everything before wal_end that this slot had to send has been received and
            // delivered: confirm it on the consumer's behalf.
            self.boundary = confirmable;
            self.idle_confirmed = self.idle_confirmed.max(confirmable);
            self.delivered = self.delivered.max(confirmable);
        }
        // When the server has passed `until` and nothing is open, every transaction
        // committed before it has been received.
        let until_reached = !held.in_transaction
            && (self.until_reached(until) || until.is_some_and(|u| wal_end >= u));
        KeepaliveReply {
            send_status: reply_requested || (quiet && self.idle_confirmed > self.acked),
            until_reached,
        }
    }

    /// A Begin whose commit lies at `final_lsn` arrived (`held` as before it): a
    /// transaction that commits after `until` is not wanted, so the batch is cut after its
    /// Begin, before any of its rows (a poll with a later `until` goes on with it).
    pub fn begin_is_past_until(
        &self,
        final_lsn: u64,
        until: Option<u64>,
        held: &Outstanding,
    ) -> bool {
        until.is_some_and(|u| !held.in_transaction && final_lsn > u)
    }

    /// A transaction ended at `end` (its end LSN; `held` as after it): the boundary moves
    /// there unless a transaction is still open or a prepared one holds it. True when
    /// `until` is reached.
    pub fn transaction_finished(
        &mut self,
        end: u64,
        until: Option<u64>,
        held: &Outstanding,
    ) -> bool {
        if !held.in_transaction && held.prepared_transactions == 0 {
            self.boundary = self.boundary.max(end);
        }
        self.until_reached(until)
    }

    /// Every transaction committed up to `until` is in a batch cut now or before.
    pub fn until_reached(&self, until: Option<u64>) -> bool {
        until.is_some_and(|u| self.boundary >= u)
    }

    /// A logical decoding message arrived (`held` as after it). Outside a transaction it
    /// is often what `until` waits for (a snapshot chunk's watermark): true when the
    /// server is to be asked for its position now rather than after a quiet
    /// [`UNTIL_POSITION_INTERVAL`].
    pub fn position_wanted_after_message(&self, until: Option<u64>, held: &Outstanding) -> bool {
        until.is_some() && !held.in_transaction
    }

    /// Whether the batch is due at `now` by the limits (not counting `until_lsn`).
    pub fn batch_due(
        &self,
        now: Instant,
        limits: &BatchLimits,
        held: &Outstanding,
    ) -> Option<Stop> {
        // The limits bound every batch, also inside a transaction: the rows of a large
        // transaction span batches, and only the batch holding its Commit carries an LSN
        // past it.
        if held.rows >= limits.max_rows.max(1) || self.batch_bytes >= limits.max_bytes {
            return Some(Stop::Full);
        }
        if let Some(started) = self.batch_started {
            // A batch with no rows is cut too when it moves the LSN (the end of a
            // transaction whose rows went out in earlier batches): the consumer must get
            // to ack it.
            let moves_lsn = self.boundary > self.delivered && !held.in_transaction;
            let window = self.batch_window(limits);
            if now.duration_since(started) >= window && (held.rows > 0 || moves_lsn) {
                return Some(Stop::Waited);
            }
        }
        if let Some(idle) = limits.idle_timeout {
            if now.duration_since(self.quiet_since()) >= idle {
                return Some(Stop::Idle);
            }
        }
        None
    }

    /// A batch is cut at `now`: its LSN (the boundary), and the batch counters start
    /// again.
    pub fn cut(&mut self, now: Instant) -> u64 {
        self.batch_started = None;
        self.batch_bytes = 0;
        self.delivered = self.delivered.max(self.boundary);
        self.handed_out = true;
        self.cut_at = Some(now);
        self.caught_up = false;
        self.boundary
    }

    /// The LSN a poll that cuts nothing reports (the last batch's).
    pub fn pending_lsn(&self) -> u64 {
        self.delivered
    }

    /// A status update is due by the status interval.
    pub fn status_due(&self, now: Instant) -> bool {
        now.duration_since(self.last_status) >= self.status_interval
    }

    /// Idle with nothing un-acked and no reply requested for [`IDLE_POSITION_INTERVAL`]:
    /// ask the server for its position.
    pub fn idle_position_due(&self, now: Instant, held: &Outstanding) -> bool {
        now.duration_since(self.last_reply_request) >= IDLE_POSITION_INTERVAL
            && self.idle_with_nothing_unacked(held)
    }

    /// Waiting for `until` on a stream quiet for [`UNTIL_POSITION_INTERVAL`], with no
    /// reply requested for as long: ask the server for its position.
    pub fn until_position_due(&self, now: Instant, until: Option<u64>) -> bool {
        until.is_some()
            && now.duration_since(self.last_message) >= UNTIL_POSITION_INTERVAL
            && now.duration_since(self.last_reply_request) >= UNTIL_POSITION_INTERVAL
    }

    /// How long the next read may wait at `now`, for a poll that began at `poll_start`
    /// and may last `slice`: until the first deadline (status interval, `max_wait`,
    /// `idle_timeout`, the `until` position request). `None` once the slice is over: the
    /// poll returns [`Stop::Pending`].
    pub fn read_wait(
        &self,
        now: Instant,
        poll_start: Instant,
        slice: Duration,
        limits: &BatchLimits,
    ) -> Option<Duration> {
        let elapsed = now.duration_since(poll_start);
        if elapsed >= slice {
            return None;
        }
        let mut wait = slice.saturating_sub(elapsed);
        wait = wait.min(
            self.status_interval
                .saturating_sub(now.duration_since(self.last_status)),
        );
        if let Some(started) = self.batch_started {
            let age = now.duration_since(started);
            if age < limits.max_wait {
                wait = wait.min(limits.max_wait.saturating_sub(age));
            } else {
                // Past max_wait only to read the backlog: a short read tells whether more
                // is waiting.
                let window = self.batch_window(limits);
                wait = wait.min(window.saturating_sub(age)).min(BACKLOG_READ_WAIT);
            }
        }
        if let Some(idle) = limits.idle_timeout {
            wait = wait.min(idle.saturating_sub(now.duration_since(self.quiet_since())));
        }
        if limits.until_lsn.is_some() {
            wait = wait.min(UNTIL_POSITION_INTERVAL);
        }
        Some(wait)
    }

    /// `wait` shortened to the next stall check, and at least [`MIN_READ_WAIT`].
    pub fn bounded_by_stall(&self, now: Instant, wait: Duration) -> Duration {
        let wait = match self.stall_wait(now) {
            Some(stall) => wait.min(stall),
            None => wait,
        };
        wait.max(MIN_READ_WAIT)
    }

    /// The server has been silent for half the stall time-out and no reply request is
    /// out: ask for one.
    pub fn ping_due(&self, now: Instant) -> bool {
        self.stall_timeout.is_some_and(|stall| {
            self.ping_sent.is_none() && now.duration_since(self.last_heard) >= stall / 2
        })
    }

    /// The server has neither sent anything for the stall time-out nor answered a reply
    /// request for half of it: the connection is dead. Gives how long it has been silent.
    pub fn stalled(&self, now: Instant) -> Option<Duration> {
        let stall = self.stall_timeout?;
        let silent = now.duration_since(self.last_heard);
        let unanswered = self
            .ping_sent
            .is_some_and(|sent| now.duration_since(sent) >= stall / 2);
        (silent >= stall && unanswered).then_some(silent)
    }

    /// When the stall checks next need to run.
    fn stall_wait(&self, now: Instant) -> Option<Duration> {
        let stall = self.stall_timeout?;
        let silent = now.duration_since(self.last_heard);
        Some(match self.ping_sent {
            None => (stall / 2).saturating_sub(silent),
            Some(sent) => stall
                .saturating_sub(silent)
                .max((stall / 2).saturating_sub(now.duration_since(sent))),
        })
    }

    /// `idle_timeout` counts from the last XLogData, or from when the consumer came back
    /// for more, whichever is later.
    fn quiet_since(&self) -> Instant {
        self.last_message.max(self.resumed)
    }
}

//! One streaming replication session: `START_REPLICATION … LOGICAL` on a slot, pgoutput
//! decoded into change tables, batches cut at the consumer's limits.
//!
//! Bookkeeping (all LSNs are WAL positions as u64):
//! * `boundary`: the end of the last transaction fed completely (its Commit's `end_lsn`),
//!   or a point the server said it has passed while nothing was open. A batch's LSN is the
//!   boundary when it is cut. Batches respect the row, byte and time limits even inside
//!   a transaction (memory stays bounded); the rows of a transaction that spans batches
//!   only count as acked once a batch carrying an LSN past its Commit is acked. After a
//!   restart such a partly acked transaction comes again in full (at-least-once); its
//!   rows keep their `(_commit_lsn, _tx_ordinal)`, and none has a `_commit_lsn` at or
//!   below an acked LSN.
//! * `acked`: the highest batch LSN the consumer acked. It is the only *flush* position
//!   ever reported to the server — except when the consumer is idle with nothing un-acked:
//!   then the position the server reports as sent (keepalive `wal_end`) is confirmed too,
//!   so a slot on quiet tables does not pin WAL forever. A walsender busy decoding WAL of
//!   other tables sends no keepalives of its own, so an idle session asks for one every
//!   [`IDLE_POSITION_INTERVAL`].
//! * held transactions: a streamed transaction still open does not stop the boundary
//!   (the server re-sends it in full after a restart, since its commit lies beyond any
//!   confirmed point), but a prepared transaction held for its COMMIT PREPARED does: once
//!   confirmed past its PREPARE, the server would not send its changes again.
//!
//! A committed streamed or prepared transaction (millions of rows, perhaps held on disk,
//! see [`crate::held`]) is delivered a chunk at a time between the batch checks, not in
//! one go: batches stay bounded, and the socket is not read meanwhile, so the server waits
//! instead of the session buffering. A slow consumer holds the whole pipeline back the
//! same way: nothing is read ahead of what it polls for.
//!
//! A dead connection that the socket does not report (a stalled network path, a
//! half-open TCP connection) is found the way PostgreSQL's own `wal_receiver_timeout`
//! finds it: after half the stall time-out without any message the session asks the
//! server for a reply (a status update with the reply flag; the walsender answers with a
//! keepalive); after the whole time-out without an answer the stream is dropped and
//! `poll` fails with a connection error.

use std::time::{Duration, Instant};

use arrow_schema::ArrowError;

use crate::arrow::{ArrowSink, Segment};
use crate::decoder::{Decoder, DecoderConfig};
use crate::error::{DecodeError, Reason};
use crate::held::SpillConfig;
use crate::pg::{ConnParams, Connection, PgError, ReplicationMessage, ReplicationStream};
use crate::relation::BaseType;
use crate::sink::{EventMeta, EventRef, EventSink};

/// How often a session idle with nothing un-acked asks the server for its position (a
/// status update requesting a reply), to confirm it on the consumer's behalf.
pub const IDLE_POSITION_INTERVAL: Duration = Duration::from_secs(1);

/// Messages of a committed held transaction delivered between two looks at the batch
/// limits, the clock and the status interval.
const REPLAY_CHUNK: usize = 8192;

/// How to start streaming.
#[derive(Debug, Clone)]
pub struct StartOptions {
    pub slot: String,
    /// Where to start: 0 lets the server use the slot's `confirmed_flush_lsn`. Must be
    /// a transaction boundary (a confirmed or delivered batch LSN).
    pub start_lsn: u64,
    /// pgoutput protocol version (1 to 4).
    pub proto_version: u32,
    pub binary: bool,
    pub publication_names: Vec<String>,
    /// Ask for logical decoding messages (`pg_logical_emit_message`).
    pub messages: bool,
    /// Ask for in-progress transactions to be streamed (protocol 2 and later).
    pub streaming: bool,
    /// Standby status updates are sent at least this often; keep it well inside the
    /// server's `wal_sender_timeout` (60 s by default).
    pub status_interval: Duration,
    /// The flush position to report until the consumer acks more (what it acked in an
    /// earlier session of this run, or the slot's confirmed position).
    pub acked_lsn: u64,
    /// `(commit_lsn, tx_ordinal)` of the last row an earlier session of this run handed
    /// out from a transaction it had not finished: resuming at `start_lsn` the server sends
    /// that transaction again, and its rows up to there are skipped.
    pub skip_through: Option<(u64, u64)>,
    /// The connection counts as dead after this long without any message from the server
    /// (see the module documentation); `None` never gives up on a silent server.
    pub stall_timeout: Option<Duration>,
    /// Held (streamed or prepared) transactions past this much memory go to disk.
    pub spill: SpillConfig,
}

/// When a batch is cut.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    pub max_rows: usize,
    /// Payload bytes of the pgoutput messages that went into the batch.
    pub max_bytes: usize,
    /// Time since the batch's first message.
    pub max_wait: Duration,
    /// Stop once every transaction committed up to this LSN has been delivered.
    pub until_lsn: Option<u64>,
    /// Stop after this long without any message from the stream.
    pub idle_timeout: Option<Duration>,
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

/// One poll's result: the rows cut into a batch (empty for `Pending`) and its LSN.
#[derive(Debug)]
pub struct Polled {
    pub segments: Vec<Segment>,
    pub lsn: u64,
    pub stop: Stop,
}

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(transparent)]
    Pg(#[from] PgError),
    #[error(transparent)]
    Decode(DecodeError),
    /// Rows whose values the change tables cannot hold (the first, and how many).
    #[error("{first} ({count} row(s) rejected)")]
    Values { first: DecodeError, count: usize },
    #[error("building Arrow tables failed: {0}")]
    Arrow(#[from] ArrowError),
    #[error("the replication session is closed")]
    Closed,
}

/// The decoder's events into the Arrow sink, noting where transactions end.
struct Tracker<'a> {
    sink: &'a mut ArrowSink,
    value_errors: &'a mut Vec<DecodeError>,
    /// The end LSN of a transaction that finished in this message.
    finished: Option<u64>,
    /// `(commit_lsn, tx_ordinal)` of the last row appended.
    last_row: &'a mut Option<(u64, u64)>,
    /// Rows already handed out by an earlier session of this run: skipped.
    skip_through: Option<(u64, u64)>,
}

impl<'a> Tracker<'a> {
    fn new(
        sink: &'a mut ArrowSink,
        value_errors: &'a mut Vec<DecodeError>,
        last_row: &'a mut Option<(u64, u64)>,
        skip_through: Option<(u64, u64)>,
    ) -> Self {
        Self {
            sink,
            value_errors,
            finished: None,
            last_row,
            skip_through,
        }
    }
}

impl EventSink for Tracker<'_> {
    fn event(&mut self, meta: &EventMeta, event: EventRef<'_, '_>) -> Result<(), DecodeError> {
        match event {
            EventRef::Commit(c) => self.finished = Some(c.end_lsn),
            EventRef::StreamCommit(c) => self.finished = Some(c.end_lsn),
            EventRef::CommitPrepared(c) => self.finished = Some(c.end_lsn),
            EventRef::RollbackPrepared(r) => self.finished = Some(r.rollback_end_lsn),
            EventRef::Insert { .. }
            | EventRef::Update { .. }
            | EventRef::Delete { .. }
            | EventRef::Truncate { .. } => {
                let row = (meta.commit_lsn.unwrap_or(0), meta.tx_ordinal);
                if let Some((commit, ordinal)) = self.skip_through {
                    if row.0 == commit && row.1 <= ordinal {
                        return Ok(());
                    }
                }
                *self.last_row = Some(row);
            }
            _ => {}
        }
        match self.sink.event(meta, event) {
            Err(e) if matches!(e.reason, Reason::Value { .. }) => {
                self.value_errors.push(e);
                Ok(())
            }
            other => other,
        }
    }
}

/// A streaming session on one slot.
pub struct LiveSession {
    stream: Option<ReplicationStream>,
    decoder: Decoder,
    sink: ArrowSink,
    value_errors: Vec<DecodeError>,
    status_interval: Duration,
    boundary: u64,
    acked: u64,
    /// Confirmed on the consumer's behalf while it was idle with nothing un-acked.
    idle_confirmed: u64,
    /// The highest WAL position received (reported as *write*).
    received: u64,
    /// The boundary handed out with the last batch.
    delivered: u64,
    /// See [`StartOptions::skip_through`].
    skip_through: Option<(u64, u64)>,
    /// `(commit_lsn, tx_ordinal)` of the last row appended.
    last_row: Option<(u64, u64)>,
    /// The last batch ended inside a transaction, after this row.
    partial: Option<(u64, u64)>,
    last_status: Instant,
    last_message: Instant,
    /// When the consumer handed control back after its last batch: `idle_timeout` counts
    /// from here at the earliest, so time the consumer spends on a batch (while messages
    /// wait unread in the socket) never counts as idle.
    resumed: Instant,
    /// A batch was handed out and the consumer has not polled since.
    handed_out: bool,
    last_reply_request: Instant,
    /// When the server last sent anything (keepalives included).
    last_heard: Instant,
    /// A reply was requested while the server was silent, at this time.
    ping_sent: Option<Instant>,
    stall_timeout: Option<Duration>,
    batch_started: Option<Instant>,
    batch_bytes: usize,
}

/// `"a","b"`: the `publication_names` option value (identifiers, each double-quoted).
fn quoted_names(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("\"{}\"", n.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(",")
}

fn be_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let field = bytes.get(at..at + 8)?;
    Some(u64::from_be_bytes(field.try_into().ok()?))
}

impl LiveSession {
    /// Starts streaming on `conn` (a `replication=database` connection).
    pub fn start(
        conn: Connection,
        options: &StartOptions,
        types: impl IntoIterator<Item = (u32, BaseType)>,
    ) -> Result<Self, LiveError> {
        let mut pgoutput = vec![
            ("proto_version", options.proto_version.to_string()),
            (
                "publication_names",
                quoted_names(&options.publication_names),
            ),
        ];
        if options.binary {
            pgoutput.push(("binary", "true".to_owned()));
        }
        if options.messages {
            pgoutput.push(("messages", "true".to_owned()));
        }
        if options.streaming && options.proto_version >= 2 {
            pgoutput.push(("streaming", "on".to_owned()));
        }
        let stream = conn.start_logical_replication(&options.slot, options.start_lsn, &pgoutput)?;
        let mut decoder = Decoder::new(DecoderConfig {
            proto_version: options.proto_version,
            binary: options.binary,
        })
        .with_spill(options.spill.clone());
        decoder.extend_type_catalog(types);
        let now = Instant::now();
        Ok(Self {
            stream: Some(stream),
            decoder,
            sink: ArrowSink::new(options.binary),
            value_errors: Vec::new(),
            status_interval: options.status_interval,
            boundary: options.start_lsn,
            acked: options.acked_lsn,
            skip_through: options.skip_through,
            last_row: None,
            partial: None,
            idle_confirmed: 0,
            received: options.start_lsn,
            delivered: options.start_lsn,
            last_status: now,
            last_message: now,
            resumed: now,
            handed_out: false,
            last_reply_request: now,
            last_heard: now,
            ping_sent: None,
            stall_timeout: options.stall_timeout,
            batch_started: None,
            batch_bytes: 0,
        })
    }

    /// Connects (replication=database) and starts streaming.
    pub fn connect(
        params: &ConnParams,
        options: &StartOptions,
        types: impl IntoIterator<Item = (u32, BaseType)>,
    ) -> Result<Self, LiveError> {
        let conn = Connection::connect(params, true)?;
        Self::start(conn, options, types)
    }

    /// The LSN of the last batch handed out (a transaction boundary): where a new session
    /// resumes without delivering anything twice within this run.
    pub fn delivered_lsn(&self) -> u64 {
        self.delivered.max(self.idle_confirmed)
    }

    pub fn acked_lsn(&self) -> u64 {
        self.acked
    }

    /// The last row handed out, when the last batch ended inside a transaction (see
    /// [`StartOptions::skip_through`]).
    pub fn partial_transaction(&self) -> Option<(u64, u64)> {
        self.partial
    }

    fn flush_position(&self) -> u64 {
        self.acked.max(self.idle_confirmed)
    }

    fn send_status(&mut self, reply_requested: bool) -> Result<(), LiveError> {
        let flush = self.flush_position();
        let write = self.received.max(flush);
        let stream = self.stream.as_mut().ok_or(LiveError::Closed)?;
        stream.send_status(write, flush, flush, reply_requested)?;
        let now = Instant::now();
        self.last_status = now;
        if reply_requested {
            self.last_reply_request = now;
            if self.ping_sent.is_none() {
                self.ping_sent = Some(now);
            }
        }
        Ok(())
    }

    /// Asks the server for a reply once it has been silent for half the stall time-out.
    fn ping_if_silent(&mut self, now: Instant) -> Result<(), LiveError> {
        if let Some(stall) = self.stall_timeout {
            if self.ping_sent.is_none() && now.duration_since(self.last_heard) >= stall / 2 {
                self.send_status(true)?;
            }
        }
        Ok(())
    }

    /// The server has neither sent anything for the stall time-out nor answered a reply
    /// request for half of it: the connection is dropped (a graceful end would wait on the
    /// dead socket) and reported lost.
    fn check_stalled(&mut self, now: Instant) -> Result<(), LiveError> {
        let Some(stall) = self.stall_timeout else {
            return Ok(());
        };
        let silent = now.duration_since(self.last_heard);
        let unanswered = self
            .ping_sent
            .is_some_and(|sent| now.duration_since(sent) >= stall / 2);
        if silent >= stall && unanswered {
            self.stream = None;
            return Err(LiveError::Pg(PgError::connect(format!(
                "no message from the server for {:.1} s, not even an answer to a status \
                 request: the connection is considered dead (stall_timeout)",
                silent.as_secs_f64()
            ))));
        }
        Ok(())
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

    /// Sends a status update if none went out for `status_interval`: called from a
    /// keeper thread while the consumer works on a batch (nobody polls then), so the
    /// server's `wal_sender_timeout` does not end the connection under a slow consumer.
    pub fn keep_alive(&mut self) -> Result<(), LiveError> {
        if self.stream.is_some() && self.last_status.elapsed() >= self.status_interval {
            self.send_status(false)?;
        }
        Ok(())
    }

    pub fn status_interval(&self) -> Duration {
        self.status_interval
    }

    /// The consumer made everything up to `lsn` durable (a batch LSN): the slot may
    /// advance there. Reported to the server at once.
    pub fn ack(&mut self, lsn: u64) -> Result<(), LiveError> {
        if lsn > self.acked {
            self.acked = lsn;
            if self.stream.is_some() {
                self.send_status(false)?;
            }
        }
        Ok(())
    }

    /// Nothing is pending on the consumer's side: no rows, no open or held transaction,
    /// every batch handed out acked (or confirmed on the consumer's behalf before).
    fn idle_with_nothing_unacked(&self) -> bool {
        self.sink.rows() == 0
            && !self.decoder.in_transaction()
            && self.decoder.pending_transactions() == 0
            && self.flush_position() >= self.delivered
            && self.boundary <= self.delivered.max(self.idle_confirmed)
    }

    fn until_reached(&self, until: Option<u64>) -> bool {
        until.is_some_and(|u| self.boundary >= u)
    }

    fn cut(&mut self, stop: Stop) -> Result<Polled, LiveError> {
        if !self.value_errors.is_empty() {
            let count = self.value_errors.len();
            let mut errors = std::mem::take(&mut self.value_errors);
            let first = errors.swap_remove(0);
            return Err(LiveError::Values { first, count });
        }
        let segments = self.sink.take()?;
        if self.decoder.in_transaction() {
            // Cut inside a transaction: rows up to `last_row` are out.
            if self.last_row.is_some() {
                self.partial = self.last_row;
            }
        } else {
            self.partial = None;
        }
        self.batch_started = None;
        self.batch_bytes = 0;
        self.delivered = self.delivered.max(self.boundary);
        self.handed_out = true;
        Ok(Polled {
            segments,
            lsn: self.boundary,
            stop,
        })
    }

    /// Reads the stream until a batch is due, `until`/`idle_timeout` ends the stream, or
    /// `slice` passes (then returns `Stop::Pending` without cutting, so the caller can
    /// check for signals and call again).
    pub fn poll(&mut self, limits: &BatchLimits, slice: Duration) -> Result<Polled, LiveError> {
        let poll_start = Instant::now();
        if std::mem::take(&mut self.handed_out) {
            self.resumed = poll_start;
        }
        if self.until_reached(limits.until_lsn) {
            return self.cut(Stop::UntilLsn);
        }
        if limits.until_lsn.is_some() {
            // Learn at once how far the server has got.
            self.send_status(true)?;
        }
        loop {
            let now = Instant::now();
            // The limits bound every batch, also inside a transaction: the rows of a large
            // transaction span batches, and only the batch holding its Commit carries an
            // LSN past it (see the module documentation).
            if self.sink.rows() >= limits.max_rows.max(1) || self.batch_bytes >= limits.max_bytes {
                return self.cut(Stop::Full);
            }
            if let Some(started) = self.batch_started {
                // A batch with no rows is cut too when it moves the LSN (the end of a
                // transaction whose rows went out in earlier batches): the consumer must
                // get to ack it.
                let moves_lsn = self.boundary > self.delivered && !self.decoder.in_transaction();
                if now.duration_since(started) >= limits.max_wait
                    && (self.sink.rows() > 0 || moves_lsn)
                {
                    return self.cut(Stop::Waited);
                }
            }
            let quiet_since = self.last_message.max(self.resumed);
            if let Some(idle) = limits.idle_timeout {
                if now.duration_since(quiet_since) >= idle {
                    return self.cut(Stop::Idle);
                }
            }
            if now.duration_since(self.last_status) >= self.status_interval {
                self.send_status(false)?;
            }
            if now.duration_since(self.last_reply_request) >= IDLE_POSITION_INTERVAL
                && self.idle_with_nothing_unacked()
            {
                self.send_status(true)?;
            }
            if limits.until_lsn.is_some()
                && now.duration_since(self.last_message) >= Duration::from_millis(500)
                && now.duration_since(self.last_reply_request) >= Duration::from_millis(500)
            {
                self.send_status(true)?;
            }
            let elapsed = now.duration_since(poll_start);
            if elapsed >= slice {
                return Ok(Polled {
                    segments: Vec::new(),
                    lsn: self.delivered,
                    stop: Stop::Pending,
                });
            }
            // Wake up for whichever deadline comes first.
            let mut wait = slice - elapsed;
            wait = wait.min(
                self.status_interval
                    .saturating_sub(now.duration_since(self.last_status)),
            );
            if let Some(started) = self.batch_started {
                wait = wait.min(limits.max_wait.saturating_sub(now.duration_since(started)));
            }
            if let Some(idle) = limits.idle_timeout {
                wait = wait.min(idle.saturating_sub(now.duration_since(quiet_since)));
            }
            if limits.until_lsn.is_some() {
                wait = wait.min(Duration::from_millis(500));
            }
            self.ping_if_silent(now)?;
            if let Some(stall) = self.stall_wait(now) {
                wait = wait.min(stall);
            }
            let wait = wait.max(Duration::from_millis(1));

            if self.decoder.replaying() {
                // A committed streamed or prepared transaction is being delivered: as much
                // of it as fits the batch, then the checks above again. The socket is not
                // read meanwhile, so the server waits (TCP backpressure).
                let room = limits.max_rows.max(1).saturating_sub(self.sink.rows());
                if self.replay_some(room.clamp(1, REPLAY_CHUNK), limits)? {
                    return self.cut(Stop::UntilLsn);
                }
                continue;
            }

            let stream = self.stream.as_mut().ok_or(LiveError::Closed)?;
            let Some(message) = stream.recv(wait)? else {
                // Only after a read found nothing: a consumer that was busy with a batch
                // may find the server's answer waiting in the socket.
                self.check_stalled(Instant::now())?;
                continue;
            };
            self.last_heard = Instant::now();
            self.ping_sent = None;
            match message {
                ReplicationMessage::Keepalive {
                    wal_end,
                    reply_requested,
                    ..
                } => {
                    self.received = self.received.max(wal_end);
                    let quiet = self.idle_with_nothing_unacked();
                    if quiet && wal_end > self.boundary {
                        // Everything before wal_end that this slot had to send has been
                        // received and delivered: confirm it on the consumer's behalf.
                        self.boundary = wal_end;
                        self.idle_confirmed = self.idle_confirmed.max(wal_end);
                        self.delivered = self.delivered.max(wal_end);
                    }
                    if reply_requested || (quiet && self.idle_confirmed > self.acked) {
                        self.send_status(false)?;
                    }
                    if !self.decoder.in_transaction() && self.until_reached(limits.until_lsn) {
                        return self.cut(Stop::UntilLsn);
                    }
                    if limits.until_lsn.is_some_and(|u| wal_end >= u)
                        && !self.decoder.in_transaction()
                    {
                        // The server has passed `until` and nothing is open: every
                        // transaction committed before it has been received.
                        return self.cut(Stop::UntilLsn);
                    }
                }
                ReplicationMessage::XLogData {
                    wal_start, data, ..
                } => {
                    self.last_message = Instant::now();
                    self.received = self.received.max(wal_start);
                    // A transaction that commits after `until` is not wanted: the batch is
                    // cut after its Begin (no row of it is out), so a poll with a later
                    // `until` goes on with it.
                    let past_until = match (limits.until_lsn, data.first()) {
                        (Some(until), Some(b'B')) => {
                            !self.decoder.in_transaction()
                                && be_u64(data, 1).is_some_and(|final_lsn| final_lsn > until)
                        }
                        _ => false,
                    };
                    if self.batch_started.is_none() {
                        self.batch_started = Some(self.last_message);
                    }
                    self.batch_bytes += data.len();
                    let mut tracker = Tracker::new(
                        &mut self.sink,
                        &mut self.value_errors,
                        &mut self.last_row,
                        self.skip_through,
                    );
                    self.decoder
                        .feed_bounded(data, wal_start, &mut tracker)
                        .map_err(LiveError::Decode)?;
                    let finished = tracker.finished;
                    let message = data.first() == Some(&b'M');
                    if past_until || self.transaction_finished(finished, limits) {
                        return self.cut(Stop::UntilLsn);
                    }
                    if limits.until_lsn.is_some() && message && !self.decoder.in_transaction() {
                        // A message outside a transaction (a snapshot chunk's watermark,
                        // `pgwire_cdc.incremental`) is often what `until` waits for: ask for
                        // the server's position now rather than after a quiet half second.
                        self.send_status(true)?;
                    }
                }
            }
        }
    }

    /// A transaction ended (at `finished`, its end LSN): the boundary moves there unless
    /// a prepared transaction still holds it. True when `until_lsn` is reached.
    fn transaction_finished(&mut self, finished: Option<u64>, limits: &BatchLimits) -> bool {
        let Some(end) = finished else {
            return false;
        };
        if !self.decoder.in_transaction() && self.decoder.prepared_transactions() == 0 {
            self.boundary = self.boundary.max(end);
        }
        self.until_reached(limits.until_lsn)
    }

    /// Delivers up to `max_messages` of the committed transaction being replayed.
    /// True when it finished and `until_lsn` is reached.
    fn replay_some(
        &mut self,
        max_messages: usize,
        limits: &BatchLimits,
    ) -> Result<bool, LiveError> {
        if self.batch_started.is_none() {
            self.batch_started = Some(Instant::now());
        }
        let mut tracker = Tracker::new(
            &mut self.sink,
            &mut self.value_errors,
            &mut self.last_row,
            self.skip_through,
        );
        let done = self
            .decoder
            .replay_some(&mut tracker, max_messages)
            .map_err(LiveError::Decode)?;
        let finished = tracker.finished;
        self.batch_bytes += done.bytes;
        Ok(self.transaction_finished(finished, limits))
    }

    /// Reports the acked position one last time and ends the stream.
    pub fn close(&mut self) -> Result<(), LiveError> {
        if self.stream.is_some() {
            let status = self.send_status(false);
            if let Some(stream) = self.stream.take() {
                let conn = stream.finish()?;
                conn.close();
            }
            status?;
        }
        Ok(())
    }
}

impl Drop for LiveSession {
    fn drop(&mut self) {
        // Best effort: the consumer's acks reach the server even without close().
        let _ = self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publication_names_are_quoted_identifiers() {
        assert_eq!(
            quoted_names(&["pub".to_owned(), "we\"ird, name".to_owned()]),
            "\"pub\",\"we\"\"ird, name\""
        );
    }

    #[test]
    fn begin_final_lsn_is_read_from_its_field() {
        let mut begin = vec![b'B'];
        begin.extend_from_slice(&0x0000_0001_0000_0010u64.to_be_bytes());
        assert_eq!(be_u64(&begin, 1), Some(0x0000_0001_0000_0010));
        begin.truncate(5);
        assert_eq!(be_u64(&begin, 1), None);
    }
}

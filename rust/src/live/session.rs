//! One streaming replication session: `START_REPLICATION … LOGICAL` on a slot, pgoutput
//! decoded into change tables, batches cut at the consumer's limits.
//!
//! The session does the I/O: it reads XLogData and keepalives, feeds the decoder, sends
//! standby status updates and hands out batches. Which LSN a batch carries, what is
//! reported as flushed (only what the consumer acked, or a position confirmed on its
//! behalf while it was idle), when a status update goes out and when a batch is cut is
//! decided by [`super::progress`], from what the session tells it.
//!
//! A batch ends inside a transaction when it reaches its limits there; its LSN is still
//! the end of the last complete transaction. After a restart such a partly acked
//! transaction comes again in full (at-least-once); its rows keep their
//! `(_commit_lsn, _tx_ordinal)`, and none has a `_commit_lsn` at or below an acked LSN.
//! Within one run, a new session skips the rows an earlier one already handed out
//! ([`StartOptions::skip_through`]).
//!
//! A committed streamed or prepared transaction (millions of rows, perhaps held on disk,
//! see [`crate::decoder`]) is delivered a chunk at a time between the batch checks, not in
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

use super::progress::{Outstanding, Progress};
use crate::arrow::{ArrowSink, Segment};
use crate::decoder::SpillConfig;
use crate::decoder::{Decoder, DecoderConfig};
use crate::error::{DecodeError, FeedError, MessageKind, Reason};
use crate::pg::{ConnParams, Connection, PgError, ReplicationMessage, ReplicationStream};
use crate::protocol;
use crate::relation::BaseType;
use crate::sink::{EventMeta, EventRef, EventSink};

pub use super::progress::{BatchLimits, Stop, IDLE_POSITION_INTERVAL};

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
    /// earlier session of this run, or the slot's confirmed position); sent in a status
    /// update as soon as streaming starts.
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
    /// Logical decoding messages with one of these prefixes are handed to the consumer
    /// with the batch they arrive in ([`Polled::notes`]): records written into the WAL
    /// for the consumer, such as `pgwire_cdc`'s copy state and the DDL that its event
    /// triggers capture.
    pub note_prefixes: Vec<String>,
}

/// A logical decoding message handed to the consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The message's own LSN.
    pub lsn: u64,
    pub prefix: String,
    pub content: Vec<u8>,
    /// A transactional message's place among its transaction's data events: the commit
    /// LSN and its `tx_ordinal` (the rows' `_commit_lsn` / `_tx_ordinal`), which put it
    /// between the rows before and after it. `None` for a non-transactional message.
    pub place: Option<(u64, u64)>,
}

/// One poll's result: the rows cut into a batch (empty for `Pending`) and its LSN.
#[derive(Debug)]
pub struct Polled {
    pub segments: Vec<Segment>,
    pub lsn: u64,
    pub stop: Stop,
    /// Messages with one of [`StartOptions::note_prefixes`] received since the last batch,
    /// in the order they were decoded.
    pub notes: Vec<Note>,
}

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(transparent)]
    Pg(#[from] PgError),
    #[error(transparent)]
    Decode(FeedError),
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
    /// Messages whose prefix is one of `note_prefixes` go to `notes`.
    note_prefixes: &'a [String],
    notes: &'a mut Vec<Note>,
}

impl<'a> Tracker<'a> {
    fn new(
        sink: &'a mut ArrowSink,
        value_errors: &'a mut Vec<DecodeError>,
        last_row: &'a mut Option<(u64, u64)>,
        skip_through: Option<(u64, u64)>,
        note_prefixes: &'a [String],
        notes: &'a mut Vec<Note>,
    ) -> Self {
        Self {
            sink,
            value_errors,
            finished: None,
            last_row,
            skip_through,
            note_prefixes,
            notes,
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
            EventRef::Message(m) if self.note_prefixes.iter().any(|p| p == m.prefix) => {
                let place = if m.transactional {
                    meta.commit_lsn.map(|commit| (commit, meta.tx_ordinal))
                } else {
                    None
                };
                self.notes.push(Note {
                    lsn: m.lsn,
                    prefix: m.prefix.to_owned(),
                    content: m.content.to_vec(),
                    place,
                });
            }
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
    /// LSNs, status updates, batch and time-out bookkeeping.
    progress: Progress,
    /// See [`StartOptions::skip_through`].
    skip_through: Option<(u64, u64)>,
    /// `(commit_lsn, tx_ordinal)` of the last row appended.
    last_row: Option<(u64, u64)>,
    /// The last batch ended inside a transaction, after this row.
    partial: Option<(u64, u64)>,
    /// See [`StartOptions::note_prefixes`].
    note_prefixes: Vec<String>,
    /// Notes received since the last batch.
    notes: Vec<Note>,
}

/// `"a","b"`: the `publication_names` option value (identifiers, each double-quoted).
fn quoted_names(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("\"{}\"", n.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(",")
}

/// The final LSN of the transaction `data` begins, when `data` is a whole Begin message
/// (a malformed one is left to the decoder to report).
fn begin_final_lsn(data: &[u8]) -> Option<u64> {
    // The tag is looked at first: this runs for every message while `until` is set.
    if protocol::message_kind(data) != Some(MessageKind::Begin) {
        return None;
    }
    protocol::parse_begin(data)
        .ok()
        .map(|begin| begin.final_lsn)
}

/// What `decoder` and `sink` hold right now (a function of the two fields, so it can be
/// called while a message borrowed from the stream is in hand).
fn outstanding(sink: &ArrowSink, decoder: &Decoder, notes: &[Note]) -> Outstanding {
    Outstanding {
        // A note not handed out yet counts as a row: the batch carrying it is due like
        // any other, and nothing is confirmed past it on the consumer's behalf.
        rows: sink.rows() + notes.len(),
        in_transaction: decoder.in_transaction(),
        pending_transactions: decoder.pending_transactions(),
        prepared_transactions: decoder.prepared_transactions(),
    }
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
        let mut session = Self {
            stream: Some(stream),
            decoder,
            sink: ArrowSink::new(options.binary),
            value_errors: Vec::new(),
            progress: Progress::new(
                options.start_lsn,
                options.acked_lsn,
                options.status_interval,
                options.stall_timeout,
                Instant::now(),
            ),
            skip_through: options.skip_through,
            last_row: None,
            partial: None,
            note_prefixes: options.note_prefixes.clone(),
            notes: Vec::new(),
        };
        if options.acked_lsn > 0 {
            // The acked position goes to the server at once, not at the first periodic
            // status update: an ack that a lost connection could not carry reaches the
            // slot now.
            session.send_status(false)?;
        }
        Ok(session)
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
        self.progress.delivered()
    }

    pub fn acked_lsn(&self) -> u64 {
        self.progress.acked()
    }

    /// The last row handed out, when the last batch ended inside a transaction (see
    /// [`StartOptions::skip_through`]).
    pub fn partial_transaction(&self) -> Option<(u64, u64)> {
        self.partial
    }

    /// What the decoder and the sink hold right now.
    fn outstanding(&self) -> Outstanding {
        outstanding(&self.sink, &self.decoder, &self.notes)
    }

    /// The stream failed (a read or a status update): the next `poll` reports it as a
    /// lost connection.
    fn connection_lost(&self) -> bool {
        self.stream
            .as_ref()
            .is_some_and(ReplicationStream::is_failed)
    }

    fn send_status(&mut self, reply_requested: bool) -> Result<(), LiveError> {
        let positions = self.progress.status();
        let stream = self.stream.as_mut().ok_or(LiveError::Closed)?;
        stream.send_status(
            positions.write,
            positions.flush,
            positions.apply,
            reply_requested,
        )?;
        self.progress.status_sent(Instant::now(), reply_requested);
        Ok(())
    }

    /// Drops the stream (a graceful end would wait on the dead socket) and reports it
    /// lost when the server has been silent too long (see [`Progress::stalled`]).
    fn check_stalled(&mut self, now: Instant) -> Result<(), LiveError> {
        if let Some(silent) = self.progress.stalled(now) {
            self.stream = None;
            return Err(LiveError::Pg(PgError::connect(format!(
                "no message from the server for {:.1} s, not even an answer to a status \
                 request: the connection is considered dead (stall_timeout)",
                silent.as_secs_f64()
            ))));
        }
        Ok(())
    }

    /// Sends a status update if none went out for `status_interval`: called from a
    /// keeper thread while the consumer works on a batch (nobody polls then), so the
    /// server's `wal_sender_timeout` does not end the connection under a slow consumer.
    pub fn keep_alive(&mut self) -> Result<(), LiveError> {
        if self.stream.is_some() && self.progress.status_due(Instant::now()) {
            self.send_status(false)?;
        }
        Ok(())
    }

    pub fn status_interval(&self) -> Duration {
        self.progress.status_interval()
    }

    /// The consumer made everything up to `lsn` durable (a batch LSN): the slot may
    /// advance there. Reported to the server at once.
    ///
    /// The position is recorded before anything is sent, and stays recorded: when the
    /// connection turns out to be lost (the walsender was terminated, the server closed
    /// the socket), the ack is not an error. The next `poll` fails with the lost
    /// connection, the caller reconnects, and the new session reports the position as
    /// soon as it starts ([`StartOptions::acked_lsn`]). Any other failure is returned.
    pub fn ack(&mut self, lsn: u64) -> Result<(), LiveError> {
        if !self.progress.ack(lsn) || self.stream.is_none() {
            return Ok(());
        }
        match self.send_status(false) {
            Err(LiveError::Pg(_)) if self.connection_lost() => Ok(()),
            other => other,
        }
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
        let lsn = self.progress.cut(Instant::now());
        Ok(Polled {
            segments,
            lsn,
            stop,
            notes: std::mem::take(&mut self.notes),
        })
    }

    /// Reads the stream until a batch is due, `until`/`idle_timeout` ends the stream, or
    /// `slice` passes (then returns `Stop::Pending` without cutting, so the caller can
    /// check for signals and call again).
    pub fn poll(&mut self, limits: &BatchLimits, slice: Duration) -> Result<Polled, LiveError> {
        let until = limits.until_lsn;
        let poll_start = Instant::now();
        self.progress.poll_started(poll_start);
        self.progress.limit_idle_confirm(limits.idle_confirm_limit);
        if self.progress.until_reached(until) {
            return self.cut(Stop::UntilLsn);
        }
        if until.is_some() {
            // Learn at once how far the server has got.
            self.send_status(true)?;
        }
        // When the last message (or replayed chunk) came: one clock read a message, which
        // the checks below take as the present (they run microseconds later).
        let mut now = Instant::now();
        loop {
            if let Some(stop) = self.progress.batch_due(now, limits, &self.outstanding()) {
                return self.cut(stop);
            }
            self.send_due_status(now, until)?;
            // Wake up for whichever deadline comes first.
            let Some(wait) = self.progress.read_wait(now, poll_start, slice, limits) else {
                return Ok(Polled {
                    segments: Vec::new(),
                    lsn: self.progress.pending_lsn(),
                    stop: Stop::Pending,
                    notes: Vec::new(),
                });
            };
            if self.progress.ping_due(now) {
                self.send_status(true)?;
            }
            let wait = self.progress.bounded_by_stall(now, wait);

            if self.decoder.replaying() {
                // A committed streamed or prepared transaction is being delivered: as much
                // of it as fits the batch, then the checks above again. The socket is not
                // read meanwhile, so the server waits (TCP backpressure).
                let room = limits.max_rows.max(1).saturating_sub(self.sink.rows());
                if self.replay_some(room.clamp(1, REPLAY_CHUNK), until)? {
                    return self.cut(Stop::UntilLsn);
                }
                now = Instant::now();
                continue;
            }

            let stream = self.stream.as_mut().ok_or(LiveError::Closed)?;
            let received = stream.recv(wait)?;
            now = Instant::now();
            let Some(message) = received else {
                self.progress.read_found_nothing();
                // Only after a read found nothing: a consumer that was busy with a batch
                // may find the server's answer waiting in the socket.
                self.check_stalled(now)?;
                continue;
            };
            self.progress.heard(now);
            match message {
                ReplicationMessage::Keepalive {
                    wal_end,
                    reply_requested,
                    ..
                } => {
                    self.progress.read_found_nothing();
                    if self.keepalive(wal_end, reply_requested, until)? {
                        return self.cut(Stop::UntilLsn);
                    }
                }
                ReplicationMessage::XLogData {
                    wal_start, data, ..
                } => {
                    // A Begin is parsed only when its final LSN matters.
                    let past_until = until.is_some()
                        && begin_final_lsn(data).is_some_and(|final_lsn| {
                            let held = outstanding(&self.sink, &self.decoder, &self.notes);
                            self.progress.begin_is_past_until(final_lsn, until, &held)
                        });
                    self.progress.xlog_data(wal_start, data.len(), now);
                    let mut tracker = Tracker::new(
                        &mut self.sink,
                        &mut self.value_errors,
                        &mut self.last_row,
                        self.skip_through,
                        &self.note_prefixes,
                        &mut self.notes,
                    );
                    self.decoder
                        .feed_bounded(data, wal_start, &mut tracker)
                        .map_err(LiveError::Decode)?;
                    let finished = tracker.finished;
                    let logical_message =
                        protocol::message_kind(data) == Some(MessageKind::Message);
                    if past_until || self.transaction_finished(finished, until) {
                        return self.cut(Stop::UntilLsn);
                    }
                    if logical_message
                        && self
                            .progress
                            .position_wanted_after_message(until, &self.outstanding())
                    {
                        self.send_status(true)?;
                    }
                }
            }
        }
    }

    /// The status updates due at `now`, in this order: the periodic one, a request for
    /// the server's position while idle, one while waiting for `until` on a quiet stream.
    fn send_due_status(&mut self, now: Instant, until: Option<u64>) -> Result<(), LiveError> {
        if self.progress.status_due(now) {
            self.send_status(false)?;
        }
        if self.progress.idle_position_due(now, &self.outstanding()) {
            self.send_status(true)?;
        }
        if self.progress.until_position_due(now, until) {
            self.send_status(true)?;
        }
        Ok(())
    }

    /// A primary keepalive: answered when it asks for a reply or the session confirmed a
    /// new position on the consumer's behalf. True when `until` is reached.
    fn keepalive(
        &mut self,
        wal_end: u64,
        reply_requested: bool,
        until: Option<u64>,
    ) -> Result<bool, LiveError> {
        let held = self.outstanding();
        let reply = self
            .progress
            .keepalive(wal_end, reply_requested, until, &held);
        if reply.send_status {
            self.send_status(false)?;
        }
        Ok(reply.until_reached)
    }

    /// A transaction ended (at `finished`, its end LSN): see
    /// [`Progress::transaction_finished`]. True when `until` is reached.
    fn transaction_finished(&mut self, finished: Option<u64>, until: Option<u64>) -> bool {
        let Some(end) = finished else {
            return false;
        };
        let held = self.outstanding();
        self.progress.transaction_finished(end, until, &held)
    }

    /// Delivers up to `max_messages` of the committed transaction being replayed.
    /// True when it finished and `until` is reached.
    fn replay_some(&mut self, max_messages: usize, until: Option<u64>) -> Result<bool, LiveError> {
        self.progress.replay_started(Instant::now());
        let mut tracker = Tracker::new(
            &mut self.sink,
            &mut self.value_errors,
            &mut self.last_row,
            self.skip_through,
            &self.note_prefixes,
            &mut self.notes,
        );
        let done = self
            .decoder
            .replay_some(&mut tracker, max_messages)
            .map_err(LiveError::Decode)?;
        let finished = tracker.finished;
        self.progress.replayed(done.bytes);
        Ok(self.transaction_finished(finished, until))
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
        begin.extend_from_slice(&42i64.to_be_bytes());
        begin.extend_from_slice(&7u32.to_be_bytes());
        assert_eq!(begin_final_lsn(&begin), Some(0x0000_0001_0000_0010));
        // Not a Begin, or not a whole one: no final LSN (the decoder reports the error).
        let mut commit = vec![b'C'];
        commit.extend_from_slice(begin.get(1..).unwrap_or_default());
        assert_eq!(begin_final_lsn(&commit), None);
        begin.truncate(9);
        assert_eq!(begin_final_lsn(&begin), None);
        assert_eq!(begin_final_lsn(&[]), None);
    }
}

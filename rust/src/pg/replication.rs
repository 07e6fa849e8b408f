//! Logical replication over a `replication=database` connection (protocol chapter,
//! "Streaming Replication Protocol").
//!
//! Commands: IDENTIFY_SYSTEM (system id, timeline, current WAL position, database),
//! CREATE_REPLICATION_SLOT (PostgreSQL 15 introduced the parenthesised option list; older
//! servers take `EXPORT_SNAPSHOT` / `NOEXPORT_SNAPSHOT` / `USE_SNAPSHOT` keywords),
//! DROP_REPLICATION_SLOT and START_REPLICATION, which switches the connection to COPY
//! BOTH mode. In that mode every server message is a CopyData holding either
//! * XLogData `w`: start LSN, end LSN, server clock, then the plugin's bytes (one pgoutput
//!   message), or
//! * Primary keepalive `k`: end LSN, server clock, and whether a reply is wanted now;
//!
//! and the client sends Standby status updates `r` (written / flushed / applied LSNs,
//! clock, reply-requested flag). The flushed LSN is what the slot's
//! `confirmed_flush_lsn` advances to. Clocks are microseconds since 2000-01-01 UTC.
//!
//! Identifiers are double-quoted (`"` doubled inside) and option values are single-quoted
//! string literals (`'` doubled; the replication grammar knows no backslash escapes).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use postgres_protocol::message::frontend;

use super::backend::{self, Cursor};
use super::connection::Connection;
use super::error::{ErrorObject, PgError};
use crate::lsn::{format_lsn, parse_lsn};

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 00:00:00 UTC).
const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;

/// The answer to IDENTIFY_SYSTEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemInfo {
    /// The cluster's unique system identifier (a 64-bit number, as text).
    pub system_id: String,
    pub timeline: u32,
    /// Current WAL flush position.
    pub xlogpos: u64,
    /// The database of a logical replication connection.
    pub dbname: Option<String>,
}

/// What CREATE_REPLICATION_SLOT does with the snapshot at the slot's consistent point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotAction {
    /// Export it: other sessions can `SET TRANSACTION SNAPSHOT` the returned name until
    /// this connection runs its next command.
    Export,
    /// Don't keep it.
    NoExport,
    /// Use it in the current transaction of this connection, which must have begun with
    /// `BEGIN READ ONLY ISOLATION LEVEL REPEATABLE READ` and run nothing yet (the way
    /// PostgreSQL's own table synchronisation copies the initial data).
    Use,
}

/// The answer to CREATE_REPLICATION_SLOT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotCreated {
    pub slot_name: String,
    /// First LSN from which the slot's changes are consistent.
    pub consistent_point: u64,
    pub snapshot_name: Option<String>,
    pub plugin: Option<String>,
}

/// `"name"`, with embedded double quotes doubled.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `'value'`, with embedded single quotes doubled.
pub(crate) fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// The START_REPLICATION command text.
pub(crate) fn start_replication_command(
    slot: &str,
    start_lsn: u64,
    options: &[(&str, String)],
) -> String {
    let mut sql = format!(
        "START_REPLICATION SLOT {} LOGICAL {}",
        quote_ident(slot),
        format_lsn(start_lsn)
    );
    if !options.is_empty() {
        let list: Vec<String> = options
            .iter()
            .map(|(name, value)| format!("{} {}", quote_ident(name), quote_literal(value)))
            .collect();
        sql.push_str(" (");
        sql.push_str(&list.join(", "));
        sql.push(')');
    }
    sql
}

/// The CREATE_REPLICATION_SLOT command text for a server version.
pub(crate) fn create_slot_command(
    name: &str,
    temporary: bool,
    snapshot: SnapshotAction,
    server_version_num: u32,
) -> String {
    let temporary = if temporary { " TEMPORARY" } else { "" };
    let snapshot = if server_version_num >= 150_000 {
        match snapshot {
            SnapshotAction::Export => " (SNAPSHOT 'export')",
            SnapshotAction::NoExport => " (SNAPSHOT 'nothing')",
            SnapshotAction::Use => " (SNAPSHOT 'use')",
        }
    } else {
        match snapshot {
            SnapshotAction::Export => " EXPORT_SNAPSHOT",
            SnapshotAction::NoExport => " NOEXPORT_SNAPSHOT",
            SnapshotAction::Use => " USE_SNAPSHOT",
        }
    };
    format!(
        "CREATE_REPLICATION_SLOT {}{temporary} LOGICAL pgoutput{snapshot}",
        quote_ident(name)
    )
}

fn lsn_field(value: Option<&Option<String>>, what: &str) -> Result<u64, PgError> {
    let text = value
        .and_then(Option::as_deref)
        .ok_or_else(|| PgError::protocol(format!("{what} missing from the server's answer")))?;
    parse_lsn(text).map_err(|_| PgError::protocol(format!("{what} is not an LSN")))
}

impl Connection {
    /// IDENTIFY_SYSTEM.
    pub fn identify_system(&mut self) -> Result<SystemInfo, PgError> {
        let rows = self.simple_query("IDENTIFY_SYSTEM")?;
        let row = rows
            .first()
            .ok_or_else(|| PgError::protocol("IDENTIFY_SYSTEM returned no row"))?;
        let system_id = row
            .first()
            .cloned()
            .flatten()
            .ok_or_else(|| PgError::protocol("IDENTIFY_SYSTEM without a system id"))?;
        let timeline = row
            .get(1)
            .and_then(Option::as_deref)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| PgError::protocol("IDENTIFY_SYSTEM without a valid timeline"))?;
        let xlogpos = lsn_field(row.get(2), "IDENTIFY_SYSTEM xlogpos")?;
        let dbname = row.get(3).cloned().flatten();
        Ok(SystemInfo {
            system_id,
            timeline,
            xlogpos,
            dbname,
        })
    }

    /// `CREATE_REPLICATION_SLOT "name" [TEMPORARY] LOGICAL pgoutput` with the new option
    /// syntax on PG15+ (`(SNAPSHOT 'export'|'nothing'|'use')`), the old keywords before.
    pub fn create_logical_slot(
        &mut self,
        name: &str,
        temporary: bool,
        snapshot: SnapshotAction,
    ) -> Result<SlotCreated, PgError> {
        let sql = create_slot_command(name, temporary, snapshot, self.server_version_num());
        let rows = self
            .simple_query(&sql)
            .map_err(|e| e.about(ErrorObject::ReplicationSlot))?;
        let row = rows
            .first()
            .ok_or_else(|| PgError::protocol("CREATE_REPLICATION_SLOT returned no row"))?;
        Ok(SlotCreated {
            slot_name: row
                .first()
                .cloned()
                .flatten()
                .unwrap_or_else(|| name.to_owned()),
            consistent_point: lsn_field(row.get(1), "consistent_point")?,
            snapshot_name: row.get(2).cloned().flatten(),
            plugin: row.get(3).cloned().flatten(),
        })
    }

    /// `DROP_REPLICATION_SLOT "name" [WAIT]` (WAIT: block while another session uses it
    /// instead of failing).
    pub fn drop_slot(&mut self, name: &str, wait: bool) -> Result<(), PgError> {
        let wait = if wait { " WAIT" } else { "" };
        self.simple_query(&format!(
            "DROP_REPLICATION_SLOT {}{wait}",
            quote_ident(name)
        ))
        .map_err(|e| e.about(ErrorObject::ReplicationSlot))?;
        Ok(())
    }

    /// START_REPLICATION SLOT "slot" LOGICAL X/Y ("option" 'value', ...). The connection
    /// becomes the stream; [`ReplicationStream::finish`] gives it back.
    pub fn start_logical_replication(
        mut self,
        slot: &str,
        start_lsn: u64,
        options: &[(&str, String)],
    ) -> Result<ReplicationStream, PgError> {
        let sql = start_replication_command(slot, start_lsn, options);
        self.send_query(&sql)?;
        loop {
            let frame = self.wire.frame()?;
            let body = self.wire.body(&frame)?;
            match frame.tag {
                backend::COPY_BOTH_RESPONSE => break,
                backend::ERROR_RESPONSE => {
                    // Refused before the stream began: the slot could not be used
                    // (missing, active elsewhere, invalidated). A publication is only
                    // looked at once decoding runs, in the stream.
                    let err = PgError::from_server(backend::error_fields(body)?, false)
                        .about(ErrorObject::ReplicationSlot);
                    // The command failed; ReadyForQuery follows.
                    self.read_until_ready()?;
                    return Err(err);
                }
                tag if backend::is_asynchronous(tag) => {}
                tag => {
                    return Err(PgError::protocol(format!(
                        "unexpected {} in answer to START_REPLICATION",
                        backend::tag_name(tag)
                    )))
                }
            }
        }
        Ok(ReplicationStream {
            conn: self,
            server_done: false,
            failed: None,
        })
    }

    /// Skips to ReadyForQuery (after an error or the end of a stream).
    fn read_until_ready(&mut self) -> Result<(), PgError> {
        let mut error = None;
        loop {
            let frame = self.wire.frame()?;
            let body = self.wire.body(&frame)?;
            match frame.tag {
                backend::READY_FOR_QUERY => {
                    return match error {
                        Some(e) => Err(e),
                        None => Ok(()),
                    }
                }
                backend::ERROR_RESPONSE => {
                    error = Some(PgError::from_server(backend::error_fields(body)?, false));
                }
                _ => {}
            }
        }
    }
}

/// One message of the replication stream, borrowing the read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicationMessage<'a> {
    /// WAL data: `data` is one pgoutput message starting at `wal_start`.
    XLogData {
        wal_start: u64,
        wal_end: u64,
        server_clock: i64,
        data: &'a [u8],
    },
    /// The server's heartbeat; `reply_requested` asks for a status update now (or the
    /// walsender will time the connection out).
    Keepalive {
        wal_end: u64,
        server_clock: i64,
        reply_requested: bool,
    },
}

/// A connection in COPY BOTH mode after START_REPLICATION.
#[derive(Debug)]
pub struct ReplicationStream {
    conn: Connection,
    /// The server sent CopyDone: it will send nothing more on this stream.
    server_done: bool,
    /// An error ended the stream (ErrorResponse, I/O), described here; only dropping it
    /// is left.
    failed: Option<String>,
}

impl ReplicationStream {
    pub fn server_version_num(&self) -> u32 {
        self.conn.server_version_num()
    }

    /// The next CopyData of the stream; `Ok(None)` when `timeout` passed with nothing
    /// complete to read (bytes already received stay buffered for the next call).
    /// An ErrorResponse (slot invalidated, walsender terminated) or a socket failure is an
    /// `Err`, and the stream is then finished.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<ReplicationMessage<'_>>, PgError> {
        if let Some(err) = self.already_failed() {
            return Err(err);
        }
        if self.server_done {
            return Err(PgError::connect("the server ended the replication stream"));
        }
        // The clock is read only when the buffer holds no complete message: most calls
        // find one there (a read brings in many), and a clock read costs as much as
        // framing the message.
        let mut deadline = None;
        let frame = loop {
            let next = match self.conn.wire.buffered_frame() {
                Ok(Some(frame)) => Ok(Some(frame)),
                Ok(None) => {
                    match *deadline.get_or_insert_with(|| Instant::now().checked_add(timeout)) {
                        Some(d) => self.conn.wire.next_frame(Some(d)),
                        // A timeout too large for the clock: wait without a deadline.
                        None => self.conn.wire.frame().map(Some),
                    }
                }
                Err(e) => Err(e),
            };
            let frame = match next {
                Ok(Some(frame)) => frame,
                Ok(None) => return Ok(None),
                Err(e) => return Err(self.fail(e)),
            };
            match frame.tag {
                backend::COPY_DATA => break frame,
                backend::ERROR_RESPONSE => {
                    let err = match self.conn.wire.body(&frame).and_then(backend::error_fields) {
                        Ok(fields) => PgError::from_server(fields, false),
                        Err(e) => e,
                    };
                    return Err(self.fail(err));
                }
                backend::COPY_DONE => {
                    self.server_done = true;
                    return Err(PgError::connect("the server ended the replication stream"));
                }
                // A walsender that shuts down once the client has confirmed everything
                // sent ends the COPY with CommandComplete and exits (WalSndDone).
                backend::COMMAND_COMPLETE => {
                    return Err(self.fail(PgError::connect(
                        "the server ended the replication stream (it is shutting down)",
                    )));
                }
                tag if backend::is_asynchronous(tag) => {}
                tag => {
                    let err = PgError::protocol(format!(
                        "unexpected {} in the replication stream",
                        backend::tag_name(tag)
                    ));
                    return Err(self.fail(err));
                }
            }
        };
        // The header is checked first, so that a malformed message can mark the stream
        // failed before the payload is borrowed for the caller.
        let header = match self.conn.wire.body(&frame).and_then(parse_header) {
            Ok(header) => header,
            Err(e) => return Err(self.fail(e)),
        };
        let body = self.conn.wire.body(&frame)?;
        Ok(Some(header.message(body)))
    }

    fn fail(&mut self, err: PgError) -> PgError {
        self.failed = Some(err.to_string());
        self.conn.broken = Some("the replication stream failed");
        err
    }

    /// An error ended the stream earlier (a read, or a status update that could not be
    /// sent): nothing more can be read or sent, and the next `recv` reports it.
    pub fn is_failed(&self) -> bool {
        self.failed.is_some()
    }

    /// The error of any use of a stream that failed earlier: the connection is lost (a
    /// connection error, so that the caller reconnects), for the reason it failed.
    fn already_failed(&self) -> Option<PgError> {
        self.failed
            .as_ref()
            .map(|why| PgError::connect(format!("the replication stream failed earlier: {why}")))
    }

    /// Standby status update ('r'): write/flush/apply LSNs, clock = now in PostgreSQL
    /// epoch microseconds.
    pub fn send_status(
        &mut self,
        write: u64,
        flush: u64,
        apply: u64,
        reply_requested: bool,
    ) -> Result<(), PgError> {
        if let Some(err) = self.already_failed() {
            return Err(err);
        }
        let mut payload = [0u8; 34];
        let clock = pg_now_micros();
        let fields = [b'r']
            .iter()
            .copied()
            .chain(write.to_be_bytes())
            .chain(flush.to_be_bytes())
            .chain(apply.to_be_bytes())
            .chain(clock.to_be_bytes())
            .chain([u8::from(reply_requested)]);
        for (slot, byte) in payload.iter_mut().zip(fields) {
            *slot = byte;
        }
        let data = frontend::CopyData::new(&payload[..])
            .map_err(|e| PgError::protocol(format!("cannot encode a status update: {e}")))?;
        data.write(&mut self.conn.wire.out);
        // A send that fails (the server closed the connection) ends the stream like a
        // failed read: the next `recv` reports it.
        self.conn.wire.flush().map_err(|e| self.fail(e))
    }

    /// CopyDone, then reads until the server's CopyDone / CommandComplete /
    /// ReadyForQuery, returning the connection for further commands. Messages still in
    /// flight are discarded.
    pub fn finish(mut self) -> Result<Connection, PgError> {
        if let Some(err) = self.already_failed() {
            return Err(err);
        }
        frontend::copy_done(&mut self.conn.wire.out);
        self.conn.wire.flush()?;
        let mut error = None;
        loop {
            let frame = self.conn.wire.frame()?;
            let body = self.conn.wire.body(&frame)?;
            match frame.tag {
                backend::READY_FOR_QUERY => break,
                backend::ERROR_RESPONSE => {
                    error = Some(PgError::from_server(backend::error_fields(body)?, false));
                }
                // CopyData still in flight, the server's CopyDone, CommandComplete(s).
                _ => {}
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok(self.conn),
        }
    }
}

/// The fixed part of a stream message; the XLogData payload follows it.
#[derive(Debug, Clone, Copy)]
enum Header {
    XLogData {
        wal_start: u64,
        wal_end: u64,
        server_clock: i64,
    },
    Keepalive {
        wal_end: u64,
        server_clock: i64,
        reply_requested: bool,
    },
}

/// Bytes before an XLogData payload: tag, two LSNs, the clock.
const XLOGDATA_HEADER: usize = 1 + 8 + 8 + 8;

impl Header {
    fn message(self, body: &[u8]) -> ReplicationMessage<'_> {
        match self {
            Header::XLogData {
                wal_start,
                wal_end,
                server_clock,
            } => ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                server_clock,
                data: body.get(XLOGDATA_HEADER..).unwrap_or_default(),
            },
            Header::Keepalive {
                wal_end,
                server_clock,
                reply_requested,
            } => ReplicationMessage::Keepalive {
                wal_end,
                server_clock,
                reply_requested,
            },
        }
    }
}

fn parse_header(body: &[u8]) -> Result<Header, PgError> {
    let mut c = Cursor::new(body, "replication CopyData");
    match c.u8()? {
        b'w' => Ok(Header::XLogData {
            wal_start: c.u64()?,
            wal_end: c.u64()?,
            server_clock: c.i64()?,
        }),
        b'k' => {
            let header = Header::Keepalive {
                wal_end: c.u64()?,
                server_clock: c.i64()?,
                reply_requested: c.u8()? != 0,
            };
            c.finish()?;
            Ok(header)
        }
        other => Err(PgError::protocol(format!(
            "unknown replication message type {:?}",
            char::from(other)
        ))),
    }
}

/// The payload of one CopyData of the stream (the fuzz targets' way in, and tests).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn parse_copy_data(body: &[u8]) -> Result<ReplicationMessage<'_>, PgError> {
    Ok(parse_header(body)?.message(body))
}

/// Now, in microseconds since 2000-01-01 UTC.
fn pg_now_micros() -> i64 {
    let since_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros();
    i64::try_from(since_unix)
        .unwrap_or(i64::MAX)
        .saturating_sub(PG_EPOCH_OFFSET_MICROS)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
    use super::*;

    #[test]
    fn commands_quote_identifiers_and_literals() {
        let options = [
            ("proto_version", "1".to_owned()),
            ("publication_names", "\"p\",\"it's\"".to_owned()),
        ];
        assert_eq!(
            start_replication_command("my\"slot", 0x1_0000_00A0, &options),
            "START_REPLICATION SLOT \"my\"\"slot\" LOGICAL 1/A0 \
             (\"proto_version\" '1', \"publication_names\" '\"p\",\"it''s\"')"
        );
        assert_eq!(
            start_replication_command("s", 0, &[]),
            "START_REPLICATION SLOT \"s\" LOGICAL 0/0"
        );
        assert_eq!(
            create_slot_command("s", true, SnapshotAction::Export, 150_004),
            "CREATE_REPLICATION_SLOT \"s\" TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')"
        );
        assert_eq!(
            create_slot_command("s", false, SnapshotAction::Use, 140_010),
            "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput USE_SNAPSHOT"
        );
        assert_eq!(
            create_slot_command("s", false, SnapshotAction::NoExport, 180_001),
            "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'nothing')"
        );
    }

    #[test]
    fn copy_data_messages() {
        let mut w = vec![b'w'];
        w.extend(1u64.to_be_bytes());
        w.extend(2u64.to_be_bytes());
        w.extend(3i64.to_be_bytes());
        w.extend(b"BEGIN");
        assert_eq!(
            parse_copy_data(&w).unwrap(),
            ReplicationMessage::XLogData {
                wal_start: 1,
                wal_end: 2,
                server_clock: 3,
                data: b"BEGIN"
            }
        );
        let mut k = vec![b'k'];
        k.extend(7u64.to_be_bytes());
        k.extend(8i64.to_be_bytes());
        k.push(1);
        assert_eq!(
            parse_copy_data(&k).unwrap(),
            ReplicationMessage::Keepalive {
                wal_end: 7,
                server_clock: 8,
                reply_requested: true
            }
        );
        for cut in 0..k.len() {
            assert!(parse_copy_data(&k[..cut]).is_err());
        }
        assert!(parse_copy_data(&w[..24]).is_err());
        k.push(0);
        assert!(parse_copy_data(&k).is_err());
        assert!(parse_copy_data(b"x").is_err());
    }

    #[test]
    fn clock_is_in_the_postgres_epoch() {
        // 2020-01-01 is 20 years (7305 days) after the PostgreSQL epoch.
        let twenty_years = 7305 * 86_400 * 1_000_000_i64;
        assert!(pg_now_micros() > twenty_years);
    }
}

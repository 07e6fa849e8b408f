//! [`Connection`]: a logged-in session, the simple-query protocol and `COPY ... TO
//! STDOUT` (protocol chapter, "Simple Query" and "COPY Operations").
//!
//! Simple query: one Query message; the server answers with, per statement,
//! RowDescription + DataRow* + CommandComplete (or EmptyQueryResponse, or an
//! ErrorResponse that ends the batch), then ReadyForQuery. Errors are collected while
//! reading up to ReadyForQuery, so the connection stays usable after a failed command.
//!
//! COPY TO STDOUT: CopyOutResponse, CopyData*, CopyDone, CommandComplete `COPY n`,
//! ReadyForQuery. Each CopyData payload is handed to the caller as a slice of the read
//! buffer.
//!
//! A `Connection` is made from what `connect.rs` hands over once the start-up is done
//! (the wire, the reported parameters, the backend's process id); this module does no
//! socket, TLS or login work of its own.

use postgres_protocol::message::frontend;

use super::backend;
use super::connect::{self, Established, Parameters};
use super::dsn::ConnParams;
use super::error::PgError;
use super::io::Wire;

/// A connection to PostgreSQL, in normal or logical-replication (`replication=database`)
/// mode.
pub struct Connection {
    pub(crate) wire: Wire,
    parameters: Parameters,
    server_version_num: u32,
    backend_pid: u32,
    /// Why the connection can no longer be used, once it cannot.
    pub(crate) broken: Option<&'static str>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("server_version_num", &self.server_version_num)
            .field("backend_pid", &self.backend_pid)
            .field("ssl_in_use", &self.ssl_in_use())
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Connects with `params` (environment variables, the password file and defaults
    /// applied as libpq does). `replication` opens a logical walsender connection.
    pub fn connect(params: &ConnParams, replication: bool) -> Result<Connection, PgError> {
        connect::connect(params, replication).map(Connection::new)
    }

    /// Reads the start-up messages after AuthenticationOk (the fuzz targets' way in).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn after_login(wire: Wire) -> Result<Connection, PgError> {
        connect::after_login(wire).map(Connection::new)
    }

    fn new(established: Established) -> Connection {
        let Established {
            wire,
            parameters,
            server_version_num,
            backend_pid,
        } = established;
        Connection {
            wire,
            parameters,
            server_version_num,
            backend_pid,
            broken: None,
        }
    }

    /// `server_version` as a number: 150004 for 15.4, 180001 for 18.1, 90603 for 9.6.3.
    pub fn server_version_num(&self) -> u32 {
        self.server_version_num
    }

    /// A run-time parameter the server reported (ParameterStatus), e.g. `server_version`,
    /// `client_encoding`, `TimeZone`, `integer_datetimes`.
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.parameters.get(name)
    }

    pub fn ssl_in_use(&self) -> bool {
        self.wire.stream().tls().is_some()
    }

    /// Process id of the server backend (for `pg_terminate_backend`, `pg_stat_activity`).
    pub fn backend_pid(&self) -> u32 {
        self.backend_pid
    }

    fn check_usable(&self) -> Result<(), PgError> {
        match self.broken {
            Some(why) => Err(PgError::protocol(format!(
                "the connection is unusable: {why}"
            ))),
            None => Ok(()),
        }
    }

    /// Marks the connection unusable when `result` is an error that leaves the protocol
    /// state unknown (I/O failure, protocol violation).
    fn guard<T>(&mut self, result: Result<T, PgError>) -> Result<T, PgError> {
        if let Err(e) = &result {
            if matches!(
                e,
                PgError::Connect { .. } | PgError::Protocol(_) | PgError::Tls(_)
            ) {
                self.broken
                    .get_or_insert("an earlier I/O or protocol error");
            }
        }
        result
    }

    pub(crate) fn send_query(&mut self, sql: &str) -> Result<(), PgError> {
        self.check_usable()?;
        frontend::query(sql, &mut self.wire.out)
            .map_err(|_| PgError::config("a query must not contain a NUL byte"))?;
        let result = self.wire.flush();
        self.guard(result)
    }

    /// Simple-query protocol; returns the rows of the last result set as text values.
    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, PgError> {
        self.send_query(sql)?;
        let result = self.read_query_result();
        self.guard(result)
    }

    fn read_query_result(&mut self) -> Result<Vec<Vec<Option<String>>>, PgError> {
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            let frame = self.wire.frame()?;
            let body = self.wire.body(&frame)?;
            match frame.tag {
                backend::ROW_DESCRIPTION => rows.clear(),
                backend::DATA_ROW => rows.push(backend::data_row(body)?),
                // A COPY TO STDOUT sent through simple_query: its data is dropped.
                backend::COMMAND_COMPLETE
                | backend::EMPTY_QUERY_RESPONSE
                | backend::COPY_OUT_RESPONSE
                | backend::COPY_DATA
                | backend::COPY_DONE => {}
                backend::ERROR_RESPONSE => {
                    error = Some(PgError::from_server(backend::error_fields(body)?, false));
                }
                backend::READY_FOR_QUERY => {
                    backend::ready_for_query(body)?;
                    return match error {
                        Some(e) => Err(e),
                        None => Ok(rows),
                    };
                }
                backend::COPY_IN_RESPONSE => {
                    // COPY FROM STDIN is not supported here: refuse it so the server
                    // ends the command with an error and a ReadyForQuery.
                    frontend::copy_fail(
                        "COPY FROM STDIN is not supported by simple_query",
                        &mut self.wire.out,
                    )
                    .map_err(|e| PgError::protocol(e.to_string()))?;
                    self.wire.flush()?;
                }
                backend::COPY_BOTH_RESPONSE => {
                    self.broken = Some("a replication stream was started with simple_query");
                    return Err(PgError::protocol(
                        "START_REPLICATION must be run with start_logical_replication",
                    ));
                }
                backend::PARAMETER_STATUS => {
                    // `SET TimeZone` and the like report the new value.
                    let (name, value) = backend::parameter_status(body)?;
                    self.parameters.set(name, value);
                }
                tag if backend::is_asynchronous(tag) => {}
                tag => {
                    return Err(PgError::protocol(format!(
                        "unexpected {} in a query result",
                        backend::tag_name(tag)
                    )))
                }
            }
        }
    }

    /// Runs a `COPY ... TO STDOUT` and hands every CopyData payload to `on_data` (a slice
    /// into the read buffer, no copy); returns the row count of CommandComplete.
    ///
    /// If `on_data` fails, its error is returned and the connection is left unusable
    /// (the rest of the COPY is not drained: it may be the rest of a large table).
    pub fn copy_out(
        &mut self,
        sql: &str,
        on_data: &mut dyn FnMut(&[u8]) -> Result<(), PgError>,
    ) -> Result<u64, PgError> {
        self.send_query(sql)?;
        let result = self.read_copy_out(on_data);
        self.guard(result)
    }

    fn read_copy_out(
        &mut self,
        on_data: &mut dyn FnMut(&[u8]) -> Result<(), PgError>,
    ) -> Result<u64, PgError> {
        let mut started = false;
        let mut count = None;
        let mut error = None;
        loop {
            let frame = self.wire.frame()?;
            let body = self.wire.body(&frame)?;
            match frame.tag {
                backend::COPY_DATA if started => {
                    if let Err(e) = on_data(body) {
                        self.broken = Some("a COPY was abandoned half-way");
                        return Err(e);
                    }
                }
                backend::COPY_OUT_RESPONSE => started = true,
                backend::COPY_DONE if started => {}
                backend::COMMAND_COMPLETE => {
                    let tag = backend::command_tag(body)?;
                    count = if tag.starts_with("COPY") {
                        backend::tag_row_count(&tag)
                    } else {
                        None
                    };
                }
                backend::ERROR_RESPONSE => {
                    error = Some(PgError::from_server(backend::error_fields(body)?, false));
                }
                backend::READY_FOR_QUERY => {
                    backend::ready_for_query(body)?;
                    if let Some(e) = error {
                        return Err(e);
                    }
                    // A misuse, not a broken stream: the connection stays usable.
                    return count.ok_or_else(|| {
                        PgError::config("copy_out needs a COPY ... TO STDOUT command")
                    });
                }
                backend::ROW_DESCRIPTION | backend::DATA_ROW | backend::EMPTY_QUERY_RESPONSE => {}
                tag if backend::is_asynchronous(tag) => {}
                tag => {
                    self.broken = Some("unexpected message during COPY");
                    return Err(PgError::protocol(format!(
                        "unexpected {} during COPY TO STDOUT",
                        backend::tag_name(tag)
                    )));
                }
            }
        }
    }

    /// Sends Terminate and closes the socket.
    pub fn close(mut self) {
        frontend::terminate(&mut self.wire.out);
        // The server may already be gone; closing must not fail.
        let _ = self.wire.flush();
    }
}

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

use std::time::Duration;

use postgres_protocol::message::frontend;

use super::backend;
use super::connect;
use super::dsn::ConnParams;
use super::error::PgError;
use super::io::Wire;

/// A connection to PostgreSQL, in normal or logical-replication (`replication=database`)
/// mode.
pub struct Connection {
    pub(crate) wire: Wire,
    parameters: Vec<(String, String)>,
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
        let env = super::config::Environment::from_process();
        let settings = super::config::resolve(params, &env)?;
        connect::connect(&settings, replication)
    }

    /// Reads the start-up messages after AuthenticationOk.
    pub(crate) fn after_login(mut wire: Wire) -> Result<Connection, PgError> {
        let mut parameters = Vec::new();
        let (backend_pid, _cancel_key) = connect::read_startup(&mut wire, |name, value| {
            set_parameter(&mut parameters, name, value);
        })?;
        let server_version_num = parameters
            .iter()
            .find(|(n, _)| n == "server_version")
            .and_then(|(_, v)| parse_server_version(v))
            .ok_or_else(|| {
                PgError::protocol("the server did not report a usable server_version")
            })?;
        Ok(Connection {
            wire,
            parameters,
            server_version_num,
            backend_pid,
            broken: None,
        })
    }

    pub(crate) fn set_timeouts(&mut self, timeout: Option<Duration>) -> Result<(), PgError> {
        self.wire.set_timeouts(timeout)
    }

    /// `server_version` as a number: 150004 for 15.4, 180001 for 18.1, 90603 for 9.6.3.
    pub fn server_version_num(&self) -> u32 {
        self.server_version_num
    }

    /// A run-time parameter the server reported (ParameterStatus), e.g. `server_version`,
    /// `client_encoding`, `TimeZone`, `integer_datetimes`.
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.parameters
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
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
                backend::COMMAND_COMPLETE | backend::EMPTY_QUERY_RESPONSE => {}
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
                backend::COPY_OUT_RESPONSE | backend::COPY_DATA | backend::COPY_DONE => {
                    // A COPY TO STDOUT sent through simple_query: its data is dropped.
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
                    set_parameter(&mut self.parameters, name, value);
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

fn set_parameter(parameters: &mut Vec<(String, String)>, name: String, value: String) {
    match parameters.iter_mut().find(|(n, _)| *n == name) {
        Some(entry) => entry.1 = value,
        None => parameters.push((name, value)),
    }
}

/// `server_version` to `server_version_num`: "15.4 (Debian 15.4-1)" -> 150004,
/// "18beta1" -> 180000, "9.6.3" -> 90603; `None` for a number beyond `u32`.
pub(crate) fn parse_server_version(text: &str) -> Option<u32> {
    let version = text.split_whitespace().next()?;
    let mut numbers = version.split('.').map(|part| {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok()
    });
    let major = numbers.next()??;
    let second = numbers.next().flatten().unwrap_or(0);
    let num = if major >= 10 {
        major.checked_mul(10_000)?.checked_add(second)?
    } else {
        let third = numbers.next().flatten().unwrap_or(0);
        (major * 10_000)
            .checked_add(second.checked_mul(100)?)?
            .checked_add(third)?
    };
    Some(num)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
    use super::parse_server_version;

    #[test]
    fn server_versions() {
        assert_eq!(
            parse_server_version("15.4 (Debian 15.4-1.pgdg120+1)"),
            Some(150_004)
        );
        assert_eq!(parse_server_version("18.1"), Some(180_001));
        assert_eq!(parse_server_version("18beta1"), Some(180_000));
        assert_eq!(parse_server_version("17devel"), Some(170_000));
        assert_eq!(parse_server_version("9.6.3"), Some(90_603));
        assert_eq!(parse_server_version(""), None);
        assert_eq!(parse_server_version("x"), None);
    }

    /// Found by the backend_messages fuzz target: a version number too large for u32
    /// overflowed (a panic in debug builds, a wrapped number in release builds).
    #[test]
    fn huge_server_versions_are_refused() {
        assert_eq!(parse_server_version("430000"), None);
        assert_eq!(parse_server_version("429496.7296"), None);
        assert_eq!(parse_server_version("429496.7295"), Some(u32::MAX));
        assert_eq!(parse_server_version("9.42949673.0"), None);
        assert_eq!(parse_server_version("9.0.4294967295"), None);
        assert_eq!(parse_server_version("4294967295"), None);
    }
}

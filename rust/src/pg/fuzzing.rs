//! The client's byte-level entry points, opened to the fuzz targets of `tests/fuzz/`.
//!
//! The parsers of backend message bodies, of the replication stream's CopyData payloads,
//! the framing of a socket's bytes into messages, the authentication exchange, percent
//! decoding and the password file are private to the crate. Each function here passes its
//! input straight to one of them, with plain types in and out, so that an integration test
//! can reach them. Hidden from the documentation and not part of the API.

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::auth::{self, Login};
use super::backend;
use super::connect;
use super::connection::Connection;
use super::dsn::{self, ChannelBindingMode};
use super::error::{PgError, ServerError};
use super::io::{Frame, Stream, Wire};
use super::pgpass::{self, PassKey};
use super::replication::{self, ReplicationMessage};
use super::uri;

pub use super::config::{resolve, Environment, Settings, Target, TargetAddr};

/// A socket read that waits longer than this is an error, so that a client stuck waiting
/// for bytes that will never come fails a fuzz case instead of hanging it.
pub const SOCKET_TIMEOUT: Duration = Duration::from_secs(20);

/// ErrorResponse / NoticeResponse body.
pub fn error_fields(body: &[u8]) -> Result<ServerError, PgError> {
    backend::error_fields(body)
}

/// ParameterStatus body: name and value.
pub fn parameter_status(body: &[u8]) -> Result<(String, String), PgError> {
    backend::parameter_status(body)
}

/// CommandComplete body: the command tag.
pub fn command_tag(body: &[u8]) -> Result<String, PgError> {
    backend::command_tag(body)
}

/// The row count at the end of a command tag.
pub fn tag_row_count(tag: &str) -> Option<u64> {
    backend::tag_row_count(tag)
}

/// DataRow body (text values).
pub fn data_row(body: &[u8]) -> Result<Vec<Option<String>>, PgError> {
    backend::data_row(body)
}

/// BackendKeyData body: process id and cancel key.
pub fn backend_key_data(body: &[u8]) -> Result<(u32, Vec<u8>), PgError> {
    backend::backend_key_data(body)
}

/// ReadyForQuery body: the transaction status byte.
pub fn ready_for_query(body: &[u8]) -> Result<u8, PgError> {
    backend::ready_for_query(body)
}

/// `server_version` text to `server_version_num`.
pub fn server_version_num(text: &str) -> Option<u32> {
    connect::parse_server_version(text)
}

/// One CopyData payload of the replication stream: XLogData or a primary keepalive.
pub fn replication_message(body: &[u8]) -> Result<ReplicationMessage<'_>, PgError> {
    replication::parse_copy_data(body)
}

/// The AuthenticationSASL body: the server's mechanism names.
pub fn sasl_mechanisms(data: &[u8]) -> Result<Vec<String>, PgError> {
    auth::sasl_mechanisms(data)
}

/// The keywords a connection string may set.
pub const KEYWORDS: &[&str] = dsn::KNOWN_KEYWORDS;

/// A keyword/value connection string split into its pairs.
pub fn keyword_value(input: &str) -> Result<Vec<(String, String)>, PgError> {
    dsn::parse_keyword_value(input)
}

/// Percent-decoding of one URI component.
pub fn percent_decode(text: &str) -> Result<String, PgError> {
    uri::decode(text, "component")
}

/// The password of the first line of a password file's `text` that matches.
pub fn pgpass_find(text: &str, host: &str, port: &str, dbname: &str, user: &str) -> Option<String> {
    pgpass::find(
        text,
        &PassKey {
            host,
            port,
            dbname,
            user,
        },
    )
}

fn wire(socket: UnixStream) -> Result<Wire, PgError> {
    let mut wire = Wire::new(Stream::Unix(socket));
    wire.set_timeouts(Some(SOCKET_TIMEOUT))?;
    Ok(wire)
}

/// Backend messages framed from whatever arrives on a socket, as the client reads them.
pub struct Frames {
    wire: Wire,
}

impl Frames {
    pub fn new(socket: UnixStream) -> Result<Self, PgError> {
        Ok(Frames {
            wire: wire(socket)?,
        })
    }

    /// The next complete message from what has arrived so far, without waiting.
    pub fn poll(&mut self) -> Result<Option<(u8, &[u8])>, PgError> {
        let frame = self.wire.next_frame(Some(Instant::now()))?;
        self.message(frame)
    }

    /// The next message, waiting for it (an error once the peer has closed).
    pub fn wait(&mut self) -> Result<(u8, &[u8]), PgError> {
        let frame = self.wire.frame()?;
        Ok((frame.tag, self.wire.body(&frame)?))
    }

    fn message(&self, frame: Option<Frame>) -> Result<Option<(u8, &[u8])>, PgError> {
        frame.map(|f| Ok((f.tag, self.wire.body(&f)?))).transpose()
    }
}

/// The login exchange after the startup packet, up to AuthenticationOk.
pub fn authenticate(
    socket: UnixStream,
    user: &str,
    password: Option<&str>,
    channel_binding: ChannelBindingMode,
) -> Result<(), PgError> {
    let mut wire = wire(socket)?;
    auth::authenticate(
        &mut wire,
        &Login {
            user,
            password,
            channel_binding,
        },
    )
}

/// A connection from the messages that follow AuthenticationOk (ParameterStatus,
/// BackendKeyData, ReadyForQuery); queries and replication then run over the socket.
pub fn connection(socket: UnixStream) -> Result<Connection, PgError> {
    Connection::after_login(wire(socket)?)
}

//! `PgError`: every way a connection, a login or a command can fail.
//!
//! Display strings are written for logs: they never contain the password (no variant
//! holds it) nor row values. A server error's DETAIL field is kept in
//! [`PgError::Server`] for callers that want it but is left out of `Display`, because
//! PostgreSQL puts row values there ("Key (id)=(42) already exists").

use std::fmt;

/// The error type of the PostgreSQL client.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// A connection string, option or environment variable is invalid, or a required
    /// setting (a root certificate for verify-ca/verify-full, a user name) is missing.
    #[error("invalid connection settings: {0}")]
    Config(String),
    /// The server could not be reached or the connection broke: I/O errors, time-outs,
    /// refused connections, the server closing the socket.
    #[error("{message}")]
    Connect {
        message: String,
        #[source]
        source: Option<std::io::Error>,
    },
    /// TLS could not be set up: handshake or certificate verification failed, or the
    /// server does not offer TLS although `sslmode` requires it.
    #[error("TLS error: {0}")]
    Tls(String),
    /// The login was refused: wrong password, no pg_hba.conf entry (SQLSTATE 28P01 /
    /// 28000), no password available, or an authentication method we cannot or may not
    /// use (channel binding required but not done).
    #[error("authentication failed: {message}")]
    Auth {
        sqlstate: Option<String>,
        message: String,
    },
    /// An ErrorResponse from the server for a command.
    #[error("{}", ServerDisplay(.0))]
    Server(Box<ServerError>),
    /// The server sent something the protocol does not allow at that point.
    #[error("protocol error: {0}")]
    Protocol(String),
}

/// The fields of an ErrorResponse that are safe to keep (see the module doc for DETAIL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// Five-character SQLSTATE code, e.g. `42704`.
    pub sqlstate: String,
    /// Non-localized severity: `ERROR`, `FATAL` or `PANIC`.
    pub severity: String,
    /// The primary message.
    pub message: String,
    /// The HINT field, when present.
    pub hint: Option<String>,
    /// The DETAIL field, when present. Not part of `Display`: it can contain row values.
    pub detail: Option<String>,
    /// What the failed command acted on, as the client knows it (the server's message is
    /// prose, localized, and never read for this).
    pub object: ErrorObject,
}

/// What a failed command acted on, set by the command that got the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorObject {
    /// A query, or the stream: nothing more is known.
    #[default]
    Unspecified,
    /// A replication slot: creating, dropping or starting to stream from one.
    ReplicationSlot,
}

struct ServerDisplay<'a>(&'a ServerError);

impl fmt::Display for ServerDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        write!(
            f,
            "server {}: {} (SQLSTATE {})",
            e.severity, e.message, e.sqlstate
        )?;
        if let Some(hint) = &e.hint {
            write!(f, "; hint: {hint}")?;
        }
        Ok(())
    }
}

impl PgError {
    /// The SQLSTATE of a server-reported error (also of a refused login), if any.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            PgError::Server(e) => Some(&e.sqlstate),
            PgError::Auth { sqlstate, .. } => sqlstate.as_deref(),
            _ => None,
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        PgError::Config(message.into())
    }

    pub(crate) fn protocol(message: impl Into<String>) -> Self {
        PgError::Protocol(message.into())
    }

    pub(crate) fn connect(message: impl Into<String>) -> Self {
        PgError::Connect {
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn io(context: &str, err: std::io::Error) -> Self {
        PgError::Connect {
            message: format!("{context}: {err}"),
            source: Some(err),
        }
    }

    pub(crate) fn auth(message: impl Into<String>) -> Self {
        PgError::Auth {
            sqlstate: None,
            message: message.into(),
        }
    }

    /// The error with a server error's object set: the command acted on `object`.
    #[must_use]
    pub(crate) fn about(mut self, object: ErrorObject) -> Self {
        if let PgError::Server(e) = &mut self {
            e.object = object;
        }
        self
    }

    /// An ErrorResponse: during the login a refusal of class 28 (invalid authorization)
    /// is an authentication failure; everything else stays a server error.
    pub(crate) fn from_server(err: ServerError, during_login: bool) -> Self {
        if during_login && err.sqlstate.starts_with("28") {
            return PgError::Auth {
                sqlstate: Some(err.sqlstate),
                message: err.message,
            };
        }
        PgError::Server(Box::new(err))
    }
}

/// The kind of failure an error is: what the user must fix (the Python binding maps each
/// to one `pgwire_cdc.errors` class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    Config,
    Slot,
    Connection,
}

impl PgError {
    /// The documented error mapping: configuration problems, slot problems, and
    /// everything that means "the connection failed or was lost".
    ///
    /// Server errors by SQLSTATE and by what the failed command acted on ([`ErrorObject`],
    /// never the message's wording): 55006 (object in use: the slot is active) is a slot
    /// error; 42704 (undefined object), 42710 (duplicate object) and 55000 (object not in
    /// prerequisite state: invalidated or lost) are slot errors from a command on a
    /// replication slot (creating, dropping, starting to stream); class 28 (authorization) is a
    /// connection error; classes 42, 0A and 55 otherwise are configuration errors (missing
    /// privileges or objects, unsupported features, wal_level); the rest (57P01 terminated
    /// by an administrator, 53300 too many connections, ...) are connection errors.
    pub fn class(&self) -> ErrorClass {
        match self {
            PgError::Config(_) => ErrorClass::Config,
            PgError::Connect { .. }
            | PgError::Tls(_)
            | PgError::Auth { .. }
            | PgError::Protocol(_) => ErrorClass::Connection,
            PgError::Server(e) => {
                let about_slot = e.object == ErrorObject::ReplicationSlot;
                match e.sqlstate.as_str() {
                    "55006" => ErrorClass::Slot,
                    "42704" | "42710" | "55000" if about_slot => ErrorClass::Slot,
                    code if code.starts_with("28") => ErrorClass::Connection,
                    code if ["42", "0A", "55"]
                        .iter()
                        .any(|class| code.starts_with(class)) =>
                    {
                        ErrorClass::Config
                    }
                    _ => ErrorClass::Connection,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
    use super::*;

    fn server(sqlstate: &str) -> ServerError {
        ServerError {
            sqlstate: sqlstate.into(),
            severity: "ERROR".into(),
            message: "duplicate key value violates unique constraint \"t_pkey\"".into(),
            hint: None,
            detail: Some("Key (id)=(4711) already exists.".into()),
            object: ErrorObject::Unspecified,
        }
    }

    fn about_slot(sqlstate: &str) -> PgError {
        PgError::Server(Box::new(server(sqlstate))).about(ErrorObject::ReplicationSlot)
    }

    #[test]
    fn errors_are_classed_by_sqlstate_and_object_never_by_wording() {
        let query = |code: &str| PgError::Server(Box::new(server(code)));
        let cases = [
            (about_slot("55006"), ErrorClass::Slot),
            (query("55006"), ErrorClass::Slot),
            (about_slot("42704"), ErrorClass::Slot),
            (query("42704"), ErrorClass::Config),
            (about_slot("42710"), ErrorClass::Slot),
            (query("42710"), ErrorClass::Config),
            (about_slot("55000"), ErrorClass::Slot),
            (query("55000"), ErrorClass::Config),
            (about_slot("42501"), ErrorClass::Config),
            (query("0A000"), ErrorClass::Config),
            (query("28P01"), ErrorClass::Connection),
            (query("57P01"), ErrorClass::Connection),
            (query("53300"), ErrorClass::Connection),
            (PgError::config("x"), ErrorClass::Config),
            (PgError::connect("x"), ErrorClass::Connection),
            (PgError::auth("x"), ErrorClass::Connection),
        ];
        for (err, class) in cases {
            assert_eq!(err.class(), class, "{err}");
        }
    }

    #[test]
    fn detail_is_not_displayed() {
        let e = PgError::from_server(server("23505"), false);
        let text = e.to_string();
        assert!(!text.contains("4711"), "{text}");
        assert!(text.contains("SQLSTATE 23505"), "{text}");
        assert_eq!(e.sqlstate(), Some("23505"));
    }

    #[test]
    fn login_refusals_are_auth_errors() {
        let e = PgError::from_server(server("28P01"), true);
        assert!(matches!(e, PgError::Auth { .. }));
        assert_eq!(e.sqlstate(), Some("28P01"));
        let e = PgError::from_server(server("28P01"), false);
        assert!(matches!(e, PgError::Server(_)));
        assert_eq!(PgError::config("x").sqlstate(), None);
    }
}

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

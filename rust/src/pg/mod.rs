//! A synchronous PostgreSQL client (frontend/backend protocol 3.0, PostgreSQL
//! documentation chapter "Frontend/Backend Protocol"), written for one job: to be the
//! replication connection of pgwire_cdc and to run the COPY of the initial snapshot.
//!
//! * [`ConnParams`]: libpq connection strings and URIs (`dsn.rs`, `uri.rs`), with libpq's
//!   environment variables, defaults and password file applied at connect time
//!   (`config.rs`, `pgpass.rs`).
//! * [`Connection`]: TLS via rustls (`tls.rs`), trust / password / md5 / SCRAM-SHA-256(-PLUS)
//!   logins (`auth.rs`), the start-up (`connect.rs`), simple queries and `COPY TO STDOUT`
//!   (`connection.rs`).
//! * [`replication`]: IDENTIFY_SYSTEM, slots, and the COPY BOTH stream of XLogData and
//!   keepalives.
//!
//! There is one way to connect, [`Connection::connect`]; it runs `connect::connect`,
//! which resolves the settings, opens the socket, negotiates TLS, logs in and reads the
//! start-up, and returns the pieces `Connection` holds. Dependencies run one way (every
//! module also uses `error`):
//!
//! ```text
//! replication -> connection, backend
//! connection  -> connect, backend, io, dsn
//! connect     -> auth, tls, config, backend, io, dsn
//! auth        -> tls, backend, io, dsn
//! tls         -> config, dsn
//! config      -> dsn, pgpass
//! dsn         -> uri
//! uri, io, backend -> (error only)
//! ```
//!
//! (`pgpass` uses nothing; `fuzzing` opens crate-private entry points to the fuzz
//! targets.) Passwords never reach a log: errors do not quote connection-string values, and every
//! `Debug` that could meet a password shows `<hidden>` instead (`dsn::masked`).
//!
//! Why not tokio-postgres or libpq: the stream must run inside a plain (GIL-releasing)
//! Python call without an async runtime, and the hot path (a million XLogData frames a
//! second) must not allocate per message. `postgres-protocol` (the protocol crate under
//! tokio-postgres) provides the parts that are easy to get subtly wrong — SCRAM with
//! SASLprep and channel binding, the MD5 hash — and the frontend message encoders. Backend
//! messages are framed and parsed here (`io.rs`, `backend.rs`) because its backend parser
//! hands out reference-counted `Bytes` per message, while ours borrows each body straight
//! from one reusable read buffer.

mod auth;
mod backend;
mod config;
mod connect;
pub mod connection;
pub mod dsn;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod io;
mod pgpass;
pub mod replication;
mod tls;
mod uri;

#[cfg(test)]
mod dsn_tests;
#[cfg(test)]
mod io_tests;

pub use connection::Connection;
pub use dsn::{ChannelBindingMode, ConnParams, SslMode};
pub use error::{ErrorClass, ErrorObject, PgError, ServerError};
pub use replication::{
    ReplicationMessage, ReplicationStream, SlotCreated, SnapshotAction, SystemInfo,
};

//! Fuzz targets on stable Rust (proptest), one per byte-level entry point. Decoding:
//!
//! * `parse_message`: arbitrary bytes, every protocol version, inside and outside streams;
//! * `decoder_feed`: whole golden captures with one message mutated (flipped, truncated,
//!   extended, spliced), so the state machine sees realistic, almost-valid input;
//! * `arrow_tables`: the same mutated captures into the Arrow change tables, whose batches
//!   must stay valid;
//! * `value_parsers`: arbitrary text and bytes into a column builder of every type OID the
//!   value layer maps (asked of it, so none is missed), scalar, array, range and
//!   multirange, with real and random type modifiers; the value's text form
//!   (`Raw::to_text`) must read back to the same entry;
//! * `value_formats`: send-format values of every mapped type, generated in shape (and the
//!   binary captures' real ones), sometimes mutated: binary and text must agree;
//!   in both of these, each value also goes through the in-place path of the usual types
//!   (`append_binary_fast`, `append_text_fast`), which must build what the general path
//!   builds;
//! * `parse_lsn`: arbitrary strings;
//! * `copy_binary`: COPY BINARY streams built from the golden captures' inserts (binary
//!   captures: real send-format values; text captures: output text, which the binary
//!   parsers mostly reject, exercising rejected rows), mutated and split at random points,
//!   into the snapshot's `CopyBinaryDecoder`.
//!
//! The PostgreSQL client (through `pgwire_cdc::pg::fuzzing`):
//!
//! * `backend_frames`: backend messages written to a socket in random pieces, framed by
//!   the client's reader; compared with the protocol's framing of the same bytes;
//! * `backend_messages`: every backend body parser (ErrorResponse, ParameterStatus,
//!   CommandComplete, DataRow, BackendKeyData, ReadyForQuery, replication CopyData,
//!   AuthenticationSASL) on mutated real bodies and arbitrary bytes, and `server_version`
//!   strings; what parses must encode back to the same bytes;
//! * `replication_copy_data`: the captures as XLogData and keepalives, one mutated, parsed
//!   and fed to the decoder;
//! * `client_session`: a scripted server (start-up, then a query, a COPY or a replication
//!   stream), sometimes mutated, against a real `Connection` over a socket: an unmutated
//!   script must give exactly its rows, data or messages;
//! * `auth_messages`: replayed (mutated) authentication requests against the login, checked
//!   against a model of which logins must succeed;
//! * `scram`: a SCRAM-SHA-256 server written from RFC 5802 against the client, its
//!   messages sometimes mutated: only an unchanged exchange with the right password logs
//!   in;
//! * `connection_strings`: generated keyword/value strings and URIs (which must parse to
//!   what they were made from), mutated real ones, arbitrary text; what parses must read the
//!   same written back as keyword/value, and resolve to one target per host;
//! * `pgpass`: generated password files (the first matching line must win) and mutated
//!   ones;
//! * `percent_decode`: URI components.
//!
//! Every target's first property: an `Ok` or a typed error, never a panic (nor a stalled
//! read); decode errors point inside their message (for COPY: inside the stream). By
//! default each target runs a few hundred to a few thousand cases (part of `make test`);
//! `make fuzz` runs each for `FUZZ_SECONDS` (600) in turn, with overflow checks on, and
//! prints its case count.
//!
//! The targets live in the modules of `tests/fuzz/`, one test binary (`fuzz`), by what
//! they feed:
//!
//! * `protocol.rs`: `parse_message` (arbitrary bytes and mutated captures) and `parse_lsn`;
//! * `decoder.rs`: `decoder_feed` (mutated captures, arbitrary sequences) and
//!   `arrow_tables`;
//! * `values.rs`: `value_parsers` and `value_formats`, with the send-format generators;
//! * `copy.rs`: `copy_binary`;
//! * `pg_backend.rs`: `backend_frames`, `backend_messages`, `replication_copy_data`;
//! * `pg_session.rs`: `client_session`;
//! * `pg_auth.rs`: `auth_messages`, and `scram` with its SCRAM-SHA-256 server;
//! * `pg_config.rs`: `connection_strings`, `pgpass`, `percent_decode`;
//!
//! and what they share: `harness.rs` (`run`, which gives each target its cases or its time
//! budget; the byte mutations; the inputs taken from the golden captures) and `pg_wire.rs`
//! (backend messages as the PostgreSQL protocol writes them, the protocol's framing, and
//! the check every client error must pass). The golden captures are loaded by
//! `tests/common/mod.rs`, as in the other Rust tests.
//!
//! `cargo test --test fuzz` runs every target briefly; `cargo test --test fuzz scram` runs
//! the targets whose name contains `scram`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

#[path = "../common/mod.rs"]
mod common;

mod harness;
mod pg_wire;

mod copy;
mod decoder;
mod pg_auth;
mod pg_backend;
mod pg_config;
mod pg_session;
mod protocol;
mod values;

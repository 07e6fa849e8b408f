//! pgwire_cdc: PostgreSQL logical replication (pgoutput) decoded in Rust.
//!
//! Layers, bottom up (each uses only layers above it; docs/development.md draws the
//! graph):
//! * [`lsn`]: LSN parsing and formatting (`X/Y`);
//! * [`error`]: what decoding fails with: a malformed message ([`DecodeError`]) or a
//!   held transaction that cannot be kept on disk ([`SpillError`]);
//! * [`wire`]: a bounds-checked cursor over one message's bytes, and the text checks;
//! * [`values`]: PostgreSQL values in text and binary format, parsed exactly;
//! * [`protocol`]: every pgoutput message of protocol versions 1 to 4, parsed without
//!   copying;
//! * [`relation`]: relation and type descriptions from Relation and Type messages;
//! * [`sink`]: the [`sink::EventSink`] trait the decoder feeds, with borrowed events and
//!   row images;
//! * [`decoder`]: transaction framing, streamed and two-phase transaction assembly (held
//!   in memory or in spill files until their commit), the relation cache and
//!   unchanged-TOAST reconstruction, feeding an [`sink::EventSink`];
//! * [`event`]: owned events (`pgwire_cdc.Event`'s model) for debugging and tests;
//! * [`event_log`]: events with their row images as delivered (for typed event values);
//! * [`arrow`]: change tables built from the events straight into Arrow builders;
//! * [`snapshot`]: `COPY … (FORMAT BINARY)` rows into change tables;
//! * [`pg`]: a synchronous PostgreSQL client (TLS, SCRAM, replication protocol, COPY);
//! * [`live`]: the streaming session and the parallel initial snapshot of `stream()`;
//! * [`merge`]: change tables reduced to one final change per key (the source of a
//!   lakehouse MERGE), and applied whole to a keyless table;
//! * [`delta`]: Delta Lake MERGEs by deletion vectors (the I/O behind feature `delta`);
//! * `python` (feature `python`): the PyO3 binding, `pgwire_cdc._native`.

pub mod arrow;
pub mod decoder;
pub mod delta;
pub mod error;
pub mod event;
pub mod event_log;
pub mod live;
pub mod lsn;
pub mod merge;
pub mod pg;
pub mod policy;
pub mod protocol;
pub mod relation;
pub mod sink;
pub mod snapshot;
pub mod values;
pub mod wire;

#[cfg(feature = "python")]
mod python;

pub use decoder::{Decoder, DecoderConfig, SpillConfig};
pub use error::{DecodeError, FeedError, MessageKind, Reason, SpillError};

/// The extension module's allocator. Each `take()` hands its Arrow buffers to Python and
/// the next batch builds new ones: glibc gives such large blocks back to the kernel when
/// they are freed and then faults in zeroed pages again, which cost a sixth of the decode
/// time; mimalloc keeps freed memory for a second before returning it.
#[cfg(feature = "python")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

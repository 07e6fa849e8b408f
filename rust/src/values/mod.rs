//! PostgreSQL column values, from the bytes pgoutput sends to the representations the
//! Arrow layer appends (one Arrow type per PostgreSQL type, chosen in `types.rs`).
//!
//! pgoutput sends a column either in text format (the type's output function, 't') or,
//! when the subscriber asked for binary and the type has a send function, in binary
//! format ('b') (PostgreSQL docs, "Logical Replication Message Formats", TupleData).
//! Every parser here reads one such value straight from the message bytes, returns the
//! same result for both formats of the same value, and allocates nothing except where
//! noted (a scratch buffer the caller owns, for values that must be rewritten).
//!
//! Text is expected as PostgreSQL prints it with our connection settings (DateStyle=ISO,
//! IntervalStyle=postgres, TimeZone=UTC, extra_float_digits=3, bytea_output=hex), but
//! every form those settings' siblings print is read too: any zone offset, BC dates,
//! five-digit years, every IntervalStyle, the escape form of bytea.
//!
//! | type | method of [`Raw`] | gives |
//! |---|---|---|
//! | bool | `bool` | `bool` |
//! | int2 / int4 / int8 | `int2` / `int4` / `int8` | `i16` / `i32` / `i64` |
//! | oid / xid / cid | `oid` / `xid` / `cid` | `i64` (unsigned 32-bit) |
//! | float4 / float8 | `float4` / `float8` | `f32` / `f64`, NaN and ±Infinity kept |
//! | numeric(p ≤ 38, s) | `numeric_decimal` | `i128` unscaled at scale s |
//! | numeric otherwise | `numeric_str` | exact `numeric_out` text |
//! | text, varchar, bpchar, name, xml, json, enum, citext | `text_str` | `&str` |
//! | jsonb | `jsonb` | `&str` |
//! | bytea | `bytea` | `&[u8]` |
//! | date | `date` | `i32` days since 1970-01-01 |
//! | time | `time` | `i64` µs since midnight |
//! | timetz | `timetz` | `timetz_out` text |
//! | timestamp / timestamptz | `timestamp` / `timestamptz` | `i64` µs since 1970-01-01 (UTC) |
//! | interval | `interval` | [`Interval`] (months, days, µs) |
//! | uuid | `uuid` | [`Uuid`], canonical lower-case text |
//! | inet, cidr, macaddr, macaddr8, money, tsvector, ranges, multiranges | same names | output-function text |
//! | one-dimensional arrays | `array` | [`Array`], elements as [`Raw`] again |
//!
//! Values a representation cannot hold are errors of a distinct [`ValueErrorKind`]
//! (numeric NaN/±Infinity/overflow, infinite dates and timestamps, time 24:00:00,
//! multi-dimensional arrays), for the Arrow layer's policy; [`Raw::to_text`] gives their
//! text for a text fallback.
//!
//! Binary values are printed with our connection settings: timestamptz in ranges with
//! TimeZone=UTC (`+00`), money as under lc_monetary=C (`-$1,234.56`; set it on the
//! replication connection for text and binary money to agree). An interval with every
//! field at its limit is PostgreSQL 17's ±infinity and is reported as infinite from both
//! formats, whatever the server version. Text with sub-microsecond digits (never printed
//! by PostgreSQL) is malformed rather than rounded.
//!
//! Not covered, as [`ValueErrorKind::Unsupported`] in [`Raw::to_text`] for binary values:
//! * the binary form of unknown types (enum, citext, domains, composites, extension
//!   types): the caller resolves text-like ones from the catalog and uses `text_str`;
//! * float4/float8 printed as text: PostgreSQL's shortest-digits printer (its Ryu port
//!   with `acceptBounds = false`) differs from Rust's in the last digit for values whose
//!   shortest form lies exactly half-way to a neighbour (about 0.3% of random floats), so
//!   matching it exactly needs a Ryu port of our own. Floats never need a text fallback.
//!
//! Modules depend one way: each line names what a module uses, and no module uses one
//! listed above it (`error` is used by all; `bytea`, `network`, `uuid`, `types` and `scan`
//! use nothing else):
//!
//! ```text
//! raw       -> array, range, numeric, datetime, interval, network, uuid, money,
//!              tsvector, bytea, text, binary, types
//! array     -> binary
//! range     -> binary, datetime, numeric, types
//! tsvector  -> binary
//! text      -> float
//! numeric   -> scan, types
//! interval, money, binary -> datetime
//! datetime, float -> scan
//! ```

pub mod array;
pub mod binary;
pub mod bytea;
pub mod datetime;
pub mod error;
mod float;
pub mod interval;
pub mod money;
pub mod network;
pub mod numeric;
pub mod range;
pub mod raw;
mod scan;
pub mod text;
pub mod tsvector;
pub mod types;
pub mod uuid;

#[cfg(test)]
mod tests;

pub use array::{Array, BinaryArray, Element, Elements, TextArray, TextElement};
pub use error::{ValueError, ValueErrorKind};
pub use interval::Interval;
pub use raw::Raw;
pub use types::{Decimal128Spec, NumericMod, PgType, RangeType, Scalar};
pub use uuid::Uuid;

//! Table-driven tests of the value layer. Expected binary encodings were produced by a
//! real PostgreSQL 15.18 server (`typsend(value::type)` with DateStyle=ISO,
//! IntervalStyle=postgres, TimeZone=UTC, extra_float_digits=3, lc_monetary=C,
//! bytea_output=hex); each table names the SQL it came from. Every table checks that the
//! text form (as the server printed it) and the binary form give the same result.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod arrays;
mod datetime;
mod interval;
mod numeric;
mod props;
mod ranges;
mod scalars;
mod strings;
mod types;

use super::raw::Raw;

/// Bytes from a hex string.
pub(super) fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).expect("test hex")
}

/// The text and binary forms of one value.
pub(super) fn both<'a>(text: &'a str, bin: &'a [u8]) -> [Raw<'a>; 2] {
    [Raw::Text(text), Raw::Binary(bin)]
}

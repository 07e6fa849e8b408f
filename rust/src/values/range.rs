//! Range and multirange types: text checked and passed through; binary written as
//! `range_out` / `multirange_out` print it.
//!
//! Range binary format (`range_send`):
//! ```text
//! Byte  flags   0x01 empty, 0x02 lower inclusive, 0x04 upper inclusive,
//!               0x08 lower unbounded, 0x10 upper unbounded (0x20/0x40/0x80 unused here)
//! if the lower bound is present: Int32 length, Byte[length] (subtype's send format)
//! if the upper bound is present: Int32 length, Byte[length]
//! ```
//! Text: `empty`, or `[`/`(`, the lower bound (nothing when unbounded), `,`, the upper
//! bound, `]`/`)`. A bound is double-quoted when it is empty or holds `"`, `\`, `(`, `)`,
//! `[`, `]`, `,` or white space, with `"` and `\` doubled inside: timestamps are quoted
//! (`["2020-01-01 00:00:00+00",infinity)`), numbers and dates are not. timestamptz bounds
//! print in UTC (`+00`), the TimeZone our connections use.
//!
//! Multirange binary (`multirange_send`): Int32 count, then per range Int32 length and
//! the range's binary form. Text: `{` ranges joined by `,` `}`.

use std::fmt::Write as _;

use super::binary::Reader;
use super::datetime::{fixed, write_date_pg, write_timestamp_pg};
use super::error::ValueError;
use super::numeric;
use super::types::RangeType;

const EMPTY: u8 = 0x01;
const LB_INC: u8 = 0x02;
const UB_INC: u8 = 0x04;
const LB_INF: u8 = 0x08;
const UB_INF: u8 = 0x10;

/// Range text: checked to be a well-formed range literal, passed through.
pub fn range_text(s: &str, ty: RangeType) -> Result<&str, ValueError> {
    let end = scan_range(s.as_bytes(), 0).ok_or(ValueError::malformed(ty.name()))?;
    if end != s.len() {
        return Err(ValueError::malformed(ty.name()));
    }
    Ok(s)
}

/// Multirange text: `{}` or `{range,range,...}`, checked and passed through.
pub fn multirange_text(s: &str, ty: RangeType) -> Result<&str, ValueError> {
    let malformed = || ValueError::malformed(ty.multirange_name());
    let b = s.as_bytes();
    let inner = b
        .strip_prefix(b"{")
        .and_then(|r| r.strip_suffix(b"}"))
        .ok_or_else(malformed)?;
    if inner.is_empty() {
        return Ok(s);
    }
    let mut pos = 0;
    loop {
        pos = scan_range(inner, pos).ok_or_else(malformed)?;
        match inner.get(pos) {
            None => return Ok(s),
            Some(b',') => pos += 1,
            Some(_) => return Err(malformed()),
        }
    }
}

/// Scans one range literal starting at `pos`; returns the offset just past it.
fn scan_range(b: &[u8], pos: usize) -> Option<usize> {
    let rest = b.get(pos..)?;
    if rest
        .get(..5)
        .is_some_and(|w| w.eq_ignore_ascii_case(b"empty"))
    {
        return Some(pos + 5);
    }
    if !matches!(rest.first(), Some(b'[' | b'(')) {
        return None;
    }
    let after_lower = scan_bound(b, pos + 1)?;
    if b.get(after_lower) != Some(&b',') {
        return None;
    }
    let after_upper = scan_bound(b, after_lower + 1)?;
    match b.get(after_upper) {
        Some(b']' | b')') => Some(after_upper + 1),
        _ => None,
    }
}

/// Scans a bound as `range_parse_bound` does: up to an unquoted `,`, `)` or `]`, with
/// `\` escaping the next byte and `""` a quote inside quotes.
fn scan_bound(b: &[u8], mut pos: usize) -> Option<usize> {
    let mut in_quotes = false;
    loop {
        let ch = *b.get(pos)?;
        if !in_quotes && matches!(ch, b',' | b')' | b']') {
            return Some(pos);
        }
        pos += 1;
        match ch {
            b'\\' => {
                b.get(pos)?;
                pos += 1;
            }
            b'"' if !in_quotes => in_quotes = true,
            b'"' if b.get(pos) == Some(&b'"') => pos += 1,
            b'"' => in_quotes = false,
            _ => {}
        }
    }
}

/// Range binary -> `range_out` text into `out` (cleared first).
pub fn range_binary(b: &[u8], ty: RangeType, out: &mut String) -> Result<(), ValueError> {
    out.clear();
    write_range(b, ty, out)
}

fn write_range(b: &[u8], ty: RangeType, out: &mut String) -> Result<(), ValueError> {
    let mut r = Reader::new(b, ty.name());
    let flags = r.u8()?;
    if flags & EMPTY != 0 {
        r.finish()?;
        out.push_str("empty");
        return Ok(());
    }
    out.push(if flags & LB_INC != 0 { '[' } else { '(' });
    if flags & LB_INF == 0 {
        let bound = r.counted()?.ok_or(ValueError::malformed(ty.name()))?;
        write_bound(bound, ty, out)?;
    }
    out.push(',');
    if flags & UB_INF == 0 {
        let bound = r.counted()?.ok_or(ValueError::malformed(ty.name()))?;
        write_bound(bound, ty, out)?;
    }
    out.push(if flags & UB_INC != 0 { ']' } else { ')' });
    r.finish()
}

/// Appends a bound in the subtype's text form, quoted as `range_bound_escape` quotes.
fn write_bound(b: &[u8], ty: RangeType, out: &mut String) -> Result<(), ValueError> {
    let start = out.len();
    match ty {
        RangeType::Int4 => {
            let _ = write!(out, "{}", i32::from_be_bytes(fixed(b, ty.name())?));
        }
        RangeType::Int8 => {
            let _ = write!(out, "{}", i64::from_be_bytes(fixed(b, ty.name())?));
        }
        RangeType::Numeric => numeric::write_binary(b, out)?,
        RangeType::Date => write_date_pg(out, i32::from_be_bytes(fixed(b, ty.name())?)),
        RangeType::Timestamp => {
            write_timestamp_pg(out, i64::from_be_bytes(fixed(b, ty.name())?), false);
        }
        RangeType::TimestampTz => {
            write_timestamp_pg(out, i64::from_be_bytes(fixed(b, ty.name())?), true);
        }
    }
    let bound = out.get(start..).unwrap_or_default();
    let needs_quotes = bound.is_empty()
        || bound.bytes().any(|c| {
            matches!(c, b'"' | b'\\' | b'(' | b')' | b'[' | b']' | b',')
                || c.is_ascii_whitespace()
                || c == 0x0b
        });
    if !needs_quotes {
        return Ok(());
    }
    if bound.bytes().any(|c| c == b'"' || c == b'\\') {
        let raw = out.split_off(start);
        out.push('"');
        for ch in raw.chars() {
            if ch == '"' || ch == '\\' {
                out.push(ch);
            }
            out.push(ch);
        }
    } else {
        out.insert(start, '"');
    }
    out.push('"');
    Ok(())
}

/// Multirange binary -> `multirange_out` text into `out` (cleared first).
pub fn multirange_binary(b: &[u8], ty: RangeType, out: &mut String) -> Result<(), ValueError> {
    let name = ty.multirange_name();
    let mut r = Reader::new(b, name);
    let count = r.i32()?;
    if count < 0 {
        return Err(ValueError::malformed(name));
    }
    out.clear();
    out.push('{');
    for i in 0..count {
        if i > 0 {
            out.push(',');
        }
        let range = r.counted()?.ok_or(ValueError::malformed(name))?;
        write_range(range, ty, out)?;
    }
    out.push('}');
    r.finish()
}

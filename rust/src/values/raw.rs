//! [`Raw`]: one value as pgoutput sent it, text or binary, with one method per
//! representation. Each method gives the same result for the text and the binary form
//! of the same value.
//!
//! The top of the value layer: every type module below it parses one type, and `array.rs`
//! reads an array's structure; the elements of an array come back here as `Raw` values
//! ([`Element::raw`]), so this module also holds what needs both, the text fallback of
//! binary arrays.

use std::fmt::Write as _;

use super::array::{self, Array, BinaryArray, Element, TextArray};
use super::binary::Reader;
use super::datetime::{self, MICROS_PER_DAY};
use super::error::{ValueError, ValueErrorKind};
use super::interval::{self, Interval};
use super::network::{self, NetKind};
use super::types::{Decimal128Spec, PgType, RangeType, Scalar};
use super::uuid::{self, Uuid};
use super::{binary, bytea, money, numeric, range, text, tsvector};

/// One non-NULL column value or array element, borrowed from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raw<'a> {
    /// Text format: the type's output function, already checked to be UTF-8.
    Text(&'a str),
    /// Binary format: the type's send function.
    Binary(&'a [u8]),
}

impl<'a> Raw<'a> {
    pub fn bool(self) -> Result<bool, ValueError> {
        match self {
            Self::Text(s) => text::bool(s),
            Self::Binary(b) => binary::bool(b),
        }
    }

    pub fn int2(self) -> Result<i16, ValueError> {
        match self {
            Self::Text(s) => text::int2(s),
            Self::Binary(b) => binary::int2(b),
        }
    }

    pub fn int4(self) -> Result<i32, ValueError> {
        match self {
            Self::Text(s) => text::int4(s),
            Self::Binary(b) => binary::int4(b),
        }
    }

    pub fn int8(self) -> Result<i64, ValueError> {
        match self {
            Self::Text(s) => text::int8(s),
            Self::Binary(b) => binary::int8(b),
        }
    }

    fn uint32(self, type_name: &'static str) -> Result<i64, ValueError> {
        match self {
            Self::Text(s) => text::uint32(s, type_name),
            Self::Binary(b) => binary::uint32(b, type_name),
        }
    }

    /// oid: unsigned 32-bit, as i64.
    pub fn oid(self) -> Result<i64, ValueError> {
        self.uint32("oid")
    }

    /// xid: unsigned 32-bit, as i64.
    pub fn xid(self) -> Result<i64, ValueError> {
        self.uint32("xid")
    }

    /// cid: unsigned 32-bit, as i64.
    pub fn cid(self) -> Result<i64, ValueError> {
        self.uint32("cid")
    }

    /// float4, NaN and ±Infinity included.
    pub fn float4(self) -> Result<f32, ValueError> {
        match self {
            Self::Text(s) => text::float4(s),
            Self::Binary(b) => binary::float4(b),
        }
    }

    /// float8, NaN and ±Infinity included.
    pub fn float8(self) -> Result<f64, ValueError> {
        match self {
            Self::Text(s) => text::float8(s),
            Self::Binary(b) => binary::float8(b),
        }
    }

    /// numeric as the unscaled integer of a decimal128 (`-12.30` at scale 2 is -1230).
    /// NaN, ±Infinity, too many digits and digits beyond the scale are distinct errors.
    pub fn numeric_decimal(self, spec: Decimal128Spec) -> Result<i128, ValueError> {
        match self {
            Self::Text(s) => numeric::text_to_decimal(s, spec),
            Self::Binary(b) => numeric::binary_to_decimal(b, spec),
        }
    }

    /// numeric as the exact text `numeric_out` prints (`1.500`, `-0.001`, `NaN`).
    /// Text is checked and returned as is; binary is written into `scratch`.
    pub fn numeric_str<'s>(self, scratch: &'s mut String) -> Result<&'s str, ValueError>
    where
        'a: 's,
    {
        match self {
            Self::Text(s) => numeric::text_to_str(s),
            Self::Binary(b) => {
                numeric::binary_to_text(b, scratch)?;
                Ok(scratch)
            }
        }
    }

    /// text, varchar, bpchar, name, xml, json and text-like user types (enum labels,
    /// citext): the string itself. `type_name` names the type in errors.
    pub fn text_str(self, type_name: &'static str) -> Result<&'a str, ValueError> {
        match self {
            Self::Text(s) => Ok(s),
            Self::Binary(b) => binary::text(b, type_name),
        }
    }

    /// jsonb: the JSON text.
    pub fn jsonb(self) -> Result<&'a str, ValueError> {
        match self {
            Self::Text(s) => Ok(s),
            Self::Binary(b) => binary::jsonb(b),
        }
    }

    /// bytea: the bytes. Text (hex or escape form) is decoded into `scratch`; binary is
    /// returned as is.
    pub fn bytea<'s>(self, scratch: &'s mut Vec<u8>) -> Result<&'s [u8], ValueError>
    where
        'a: 's,
    {
        match self {
            Self::Text(s) => {
                bytea::text(s, scratch)?;
                Ok(scratch)
            }
            Self::Binary(b) => Ok(b),
        }
    }

    /// date: days since 1970-01-01 (Arrow date32).
    pub fn date(self) -> Result<i32, ValueError> {
        match self {
            Self::Text(s) => datetime::date_text(s),
            Self::Binary(b) => datetime::date_binary(b),
        }
    }

    /// time: microseconds since midnight (Arrow `time64[us]`); `24:00:00` is
    /// [`ValueErrorKind::Time2400`].
    pub fn time(self) -> Result<i64, ValueError> {
        match self {
            Self::Text(s) => datetime::time_text(s),
            Self::Binary(b) => datetime::time_binary(b),
        }
    }

    /// timetz: the text `timetz_out` prints (`04:05:06.789+05:30`).
    pub fn timetz<'s>(self, scratch: &'s mut String) -> Result<&'s str, ValueError>
    where
        'a: 's,
    {
        match self {
            Self::Text(s) => datetime::timetz_text(s),
            Self::Binary(b) => {
                datetime::timetz_binary(b, scratch)?;
                Ok(scratch)
            }
        }
    }

    /// timestamp: microseconds since 1970-01-01 (Arrow `timestamp[us]`).
    pub fn timestamp(self) -> Result<i64, ValueError> {
        match self {
            Self::Text(s) => datetime::timestamp_text(s),
            Self::Binary(b) => datetime::timestamp_binary(b),
        }
    }

    /// timestamptz: microseconds since 1970-01-01 UTC (Arrow timestamp[us, UTC]).
    pub fn timestamptz(self) -> Result<i64, ValueError> {
        match self {
            Self::Text(s) => datetime::timestamptz_text(s),
            Self::Binary(b) => datetime::timestamptz_binary(b),
        }
    }

    /// interval: months, days, microseconds.
    pub fn interval(self) -> Result<Interval, ValueError> {
        match self {
            Self::Text(s) => interval::text(s),
            Self::Binary(b) => interval::binary(b),
        }
    }

    /// uuid: canonical lower-case text.
    pub fn uuid(self) -> Result<Uuid, ValueError> {
        match self {
            Self::Text(s) => uuid::text(s),
            Self::Binary(b) => uuid::binary(b),
        }
    }

    /// inet: `network_out` text (`192.168.1.5/24`, `10.0.0.1`, `::1`).
    pub fn inet<'s>(self, scratch: &'s mut String) -> Result<&'s str, ValueError>
    where
        'a: 's,
    {
        self.net(NetKind::Inet, scratch)
    }

    /// cidr: `network_out` text, always with `/bits`.
    pub fn cidr<'s>(self, scratch: &'s mut String) -> Result<&'s str, ValueError>
    where
        'a: 's,
    {
        self.net(NetKind::Cidr, scratch)
    }

    fn net<'s>(self, kind: NetKind, scratch: &'s mut String) -> Result<&'s str, ValueError>
    where
        'a: 's,
    {
        match self {
            Self::Text(s) => network::net_text(s, kind),
            Self::Binary(b) => {
                network::net_binary(b, kind, scratch)?;
                Ok(scratch)
            }
        }
    }

    /// macaddr: `08:00:2b:01:02:03`.
    pub fn macaddr<'s>(self, scratch: &'s mut String) -> Result<&'s str, ValueError>
    where
        'a: 's,
    {
        self.mac(6, scratch)
    }

    /// macaddr8: `08:00:2b:01:02:03:04:05`.
    pub fn macaddr8<'s>(self, scratch: &'s mut String) -> Result<&'s str, ValueError>
    where
        'a: 's,
    {
        self.mac(8, scratch)
    }

    fn mac<'s>(self, len: usize, scratch: &'s mut String) -> Result<&'s str, ValueError>
    where
        'a: 's,
    {
        match self {
            Self::Text(s) => network::mac_text(s, len),
            Self::Binary(b) => {
                network::mac_binary(b, len, scratch)?;
                Ok(scratch)
            }
        }
    }

    /// money: text as the server printed it; binary as `cash_out` prints under
    /// lc_monetary=C (`-$1,234.56`).
    pub fn money<'s>(self, scratch: &'s mut String) -> Result<&'s str, ValueError>
    where
        'a: 's,
    {
        match self {
            Self::Text(s) => money::text(s),
            Self::Binary(b) => {
                money::binary(b, scratch)?;
                Ok(scratch)
            }
        }
    }

    /// tsvector: `tsvectorout` text (`'a':1A,2 'b'`).
    pub fn tsvector<'s>(self, scratch: &'s mut String) -> Result<&'s str, ValueError>
    where
        'a: 's,
    {
        match self {
            Self::Text(s) => tsvector::text(s),
            Self::Binary(b) => {
                tsvector::binary(b, scratch)?;
                Ok(scratch)
            }
        }
    }

    /// A built-in range: `range_out` text (`[1,10)`, `empty`).
    pub fn range<'s>(self, ty: RangeType, scratch: &'s mut String) -> Result<&'s str, ValueError>
    where
        'a: 's,
    {
        match self {
            Self::Text(s) => range::range_text(s, ty),
            Self::Binary(b) => {
                range::range_binary(b, ty, scratch)?;
                Ok(scratch)
            }
        }
    }

    /// A built-in multirange: `multirange_out` text (`{[1,3),[5,7)}`).
    pub fn multirange<'s>(
        self,
        ty: RangeType,
        scratch: &'s mut String,
    ) -> Result<&'s str, ValueError>
    where
        'a: 's,
    {
        match self {
            Self::Text(s) => range::multirange_text(s, ty),
            Self::Binary(b) => {
                range::multirange_binary(b, ty, scratch)?;
                Ok(scratch)
            }
        }
    }

    /// A one-dimensional array, checked whole; iterate its elements and give each to
    /// the element type's method through [`super::array::Element::raw`].
    pub fn array(self) -> Result<Array<'a>, ValueError> {
        match self {
            Self::Text(s) => TextArray::parse(s).map(Array::Text),
            Self::Binary(b) => BinaryArray::parse(b).map(Array::Binary),
        }
    }

    /// The value as PostgreSQL's output function prints it (with our connection
    /// settings), for the string-mapped types and as a text fallback for values the
    /// natural representation cannot hold.
    ///
    /// * Text format: the string-mapped types are checked as their own methods check
    ///   them; every other type (arrays of any dimension included) passes through as is.
    /// * Binary format: formatted exactly as the output function would. Not available
    ///   (`Unsupported`) for float4/float8 and unknown types (see the module docs).
    pub fn to_text<'s>(self, ty: PgType, scratch: &'s mut String) -> Result<&'s str, ValueError>
    where
        'a: 's,
    {
        let scalar = match (ty, self) {
            (PgType::Scalar(scalar), _) => scalar,
            (PgType::Array(_) | PgType::Unknown(_), Self::Text(s)) => return Ok(s),
            (PgType::Array(element), Self::Binary(b)) => {
                // Elements are formatted one at a time into a buffer of their own.
                let mut element_scratch = String::new();
                array_binary_to_text(b, element, scratch, &mut element_scratch)?;
                return Ok(scratch);
            }
            (PgType::Unknown(_), Self::Binary(_)) => {
                return Err(ValueError::new(ty.name(), ValueErrorKind::Unsupported));
            }
        };
        match scalar {
            Scalar::Numeric(_) => self.numeric_str(scratch),
            Scalar::Text
            | Scalar::Varchar
            | Scalar::Bpchar
            | Scalar::Name
            | Scalar::Xml
            | Scalar::Json => self.text_str(scalar.name()),
            Scalar::Jsonb => self.jsonb(),
            Scalar::TimeTz => self.timetz(scratch),
            Scalar::Inet => self.inet(scratch),
            Scalar::Cidr => self.cidr(scratch),
            Scalar::MacAddr => self.macaddr(scratch),
            Scalar::MacAddr8 => self.macaddr8(scratch),
            Scalar::Money => self.money(scratch),
            Scalar::TsVector => self.tsvector(scratch),
            Scalar::Range(r) => self.range(r, scratch),
            Scalar::Multirange(r) => self.multirange(r, scratch),
            Scalar::Uuid => {
                let uuid = self.uuid()?;
                scratch.clear();
                scratch.push_str(uuid.as_str());
                Ok(scratch)
            }
            _ => match self {
                Self::Text(s) => Ok(s),
                Self::Binary(b) => {
                    scratch.clear();
                    write_binary_as_text(b, scalar, scratch)?;
                    Ok(scratch)
                }
            },
        }
    }
}

impl<'a> Element<'a> {
    /// The element as a value for the element type's parser (text elements with escapes
    /// are unescaped into `scratch`).
    pub fn raw<'s>(&self, scratch: &'s mut String) -> Raw<'s>
    where
        'a: 's,
    {
        match self {
            Self::Text(e) => Raw::Text(e.get(scratch)),
            Self::Binary(b) => Raw::Binary(b),
        }
    }
}

/// Binary array of any number of dimensions -> the text `array_out` prints, elements
/// printed by [`Raw::to_text`] for `element` (the text fallback for arrays a list
/// column cannot hold). Written into `out` (cleared first); `element_scratch` holds one
/// element's text at a time. The structure is read as `array.rs` reads it; only the
/// elements need this module.
fn array_binary_to_text(
    b: &[u8],
    element: Scalar,
    out: &mut String,
    element_scratch: &mut String,
) -> Result<(), ValueError> {
    let mut r = Reader::new(b, array::TY);
    let ndim = usize::try_from(r.i32()?).map_err(|_| array::malformed())?;
    let flags = r.i32()?;
    let _element_oid = r.u32()?;
    if ndim > array::MAX_DIMS || (flags != 0 && flags != 1) {
        return Err(array::malformed());
    }
    let mut dims = [(0usize, 0i32); array::MAX_DIMS];
    for slot in dims.iter_mut().take(ndim) {
        let size = r.i32()?;
        let lower = r.i32()?;
        // An upper bound beyond int4 has no text form.
        if size > 0 && lower.checked_add(size - 1).is_none() {
            return Err(array::malformed());
        }
        *slot = (
            usize::try_from(size).map_err(|_| array::malformed())?,
            lower,
        );
    }
    let dims = dims.get(..ndim).ok_or_else(array::malformed)?;
    let total = dims
        .iter()
        .try_fold(1usize, |acc, &(size, _)| acc.checked_mul(size))
        .ok_or_else(array::malformed)?;
    out.clear();
    if ndim == 0 || total == 0 {
        r.finish()?;
        out.push_str("{}");
        return Ok(());
    }
    if dims.iter().any(|&(_, lower)| lower != 1) {
        for &(size, lower) in dims {
            let upper = i64::from(lower) + size as i64 - 1;
            let _ = write!(out, "[{lower}:{upper}]");
        }
        out.push('=');
    }
    // span[d]: elements under one entry of dimension d-1, i.e. the product of the sizes
    // of dimensions d.. ; a level closes after every span[d] elements.
    let mut spans = [0usize; array::MAX_DIMS];
    let mut acc = 1usize;
    for (span, &(size, _)) in spans.iter_mut().zip(dims).rev() {
        acc = acc.saturating_mul(size);
        *span = acc;
    }
    let spans = spans.get(1..ndim).unwrap_or_default();
    let ty = PgType::Scalar(element);
    for _ in 0..ndim {
        out.push('{');
    }
    for index in 0..total {
        if index > 0 {
            let closing = spans.iter().filter(|&&span| index % span == 0).count();
            for _ in 0..closing {
                out.push('}');
            }
            out.push(',');
            for _ in 0..closing {
                out.push('{');
            }
        }
        match r.counted()? {
            None => out.push_str("NULL"),
            Some(bytes) => {
                let text = Raw::Binary(bytes).to_text(ty, element_scratch)?;
                array::write_quoted(out, text);
            }
        }
    }
    for _ in 0..ndim {
        out.push('}');
    }
    r.finish()
}

/// Output-function text of the binary value of a type that is not string-mapped.
fn write_binary_as_text(b: &[u8], scalar: Scalar, out: &mut String) -> Result<(), ValueError> {
    match scalar {
        Scalar::Bool => out.push(if binary::bool(b)? { 't' } else { 'f' }),
        Scalar::Int2 => write_display(out, binary::int2(b)?),
        Scalar::Int4 => write_display(out, binary::int4(b)?),
        Scalar::Int8 => write_display(out, binary::int8(b)?),
        Scalar::Oid | Scalar::Xid | Scalar::Cid => {
            write_display(out, binary::uint32(b, scalar.name())?);
        }
        Scalar::Bytea => {
            out.push_str("\\x");
            for byte in b {
                let _ = write!(out, "{byte:02x}");
            }
        }
        Scalar::Date => {
            let days = i32::from_be_bytes(datetime::fixed(b, "date")?);
            datetime::write_date_pg(out, days);
        }
        Scalar::Time => {
            let micros = match datetime::time_binary(b) {
                Err(e) if e.kind == ValueErrorKind::Time2400 => MICROS_PER_DAY,
                other => other?,
            };
            datetime::write_time(out, micros);
        }
        Scalar::Timestamp | Scalar::TimestampTz => {
            let micros = i64::from_be_bytes(datetime::fixed(b, scalar.name())?);
            datetime::write_timestamp_pg(out, micros, scalar == Scalar::TimestampTz);
        }
        Scalar::Interval => match interval::binary(b) {
            Ok(value) => interval::write_postgres(out, value),
            Err(ValueError {
                kind: ValueErrorKind::Infinite { negative },
                ..
            }) => out.push_str(if negative { "-infinity" } else { "infinity" }),
            Err(e) => return Err(e),
        },
        _ => return Err(ValueError::new(scalar.name(), ValueErrorKind::Unsupported)),
    }
    Ok(())
}

fn write_display(out: &mut String, value: impl std::fmt::Display) {
    let _ = write!(out, "{value}");
}

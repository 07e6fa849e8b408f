//! One Arrow column builder per published column, typed by the type mapping (docs/change-tables.md): values go
//! from the message bytes ([`Datum`]) through the value layer ([`Raw`]) into the builder,
//! with no per-value allocation (strings that must be rewritten, such as binary-format
//! inet or numeric, reuse one scratch buffer per column). The columns are plain vectors
//! ([`super::buffers`]) whose memory is reused batch after batch.

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Decimal128Builder};
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Time64MicrosecondType, TimestampMicrosecondType,
};
use arrow_array::{ArrayRef, ListArray, StructArray};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, TimeUnit};

use super::buffers::{room, Bytes, Fixed, OffsetOverflow, Recycler, Slot, Utf8, Validity};
use crate::protocol::Datum;
use crate::values::datetime::PG_EPOCH_MICROS;
use crate::values::{uuid, PgType, Raw, Scalar, ValueError, ValueErrorKind};
use crate::wire::utf8;

/// The Arrow type of a column of PostgreSQL type `oid` with modifier `typmod`.
pub fn arrow_type(oid: u32, typmod: i32) -> DataType {
    data_type(PgType::from_oid(oid, typmod))
}

fn data_type(ty: PgType) -> DataType {
    match ty {
        PgType::Scalar(s) => scalar_type(s),
        PgType::Array(s) => DataType::List(item_field(s)),
        PgType::Unknown(_) => DataType::Utf8,
    }
}

fn item_field(s: Scalar) -> FieldRef {
    Arc::new(Field::new("item", scalar_type(s), true))
}

/// The same values without a validity bitmap (for the non-nullable interval parts).
fn without_nulls<T: arrow_array::types::ArrowPrimitiveType>(array: ArrayRef) -> ArrayRef {
    match array
        .as_any()
        .downcast_ref::<arrow_array::PrimitiveArray<T>>()
    {
        Some(a) if arrow_array::Array::null_count(a) > 0 => Arc::new(
            arrow_array::PrimitiveArray::<T>::new(a.values().clone(), None)
                .with_data_type(arrow_array::Array::data_type(a).clone()),
        ),
        _ => array,
    }
}

fn interval_fields() -> Fields {
    Fields::from(vec![
        Field::new("months", DataType::Int32, false),
        Field::new("days", DataType::Int32, false),
        Field::new("microseconds", DataType::Int64, false),
    ])
}

fn scalar_type(s: Scalar) -> DataType {
    match s {
        Scalar::Bool => DataType::Boolean,
        Scalar::Int2 => DataType::Int16,
        Scalar::Int4 => DataType::Int32,
        Scalar::Int8 | Scalar::Oid | Scalar::Xid | Scalar::Cid => DataType::Int64,
        Scalar::Float4 => DataType::Float32,
        Scalar::Float8 => DataType::Float64,
        Scalar::Numeric(m) => match decimal_spec(m) {
            Some(spec) => DataType::Decimal128(spec.precision, spec.scale),
            None => DataType::Utf8,
        },
        Scalar::Bytea => DataType::Binary,
        Scalar::Date => DataType::Date32,
        Scalar::Time => DataType::Time64(TimeUnit::Microsecond),
        Scalar::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
        Scalar::TimestampTz => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        Scalar::Interval => DataType::Struct(interval_fields()),
        Scalar::Text
        | Scalar::Varchar
        | Scalar::Bpchar
        | Scalar::Name
        | Scalar::Xml
        | Scalar::Json
        | Scalar::Jsonb
        | Scalar::TimeTz
        | Scalar::Uuid
        | Scalar::Inet
        | Scalar::Cidr
        | Scalar::MacAddr
        | Scalar::MacAddr8
        | Scalar::Money
        | Scalar::TsVector
        | Scalar::Range(_)
        | Scalar::Multirange(_) => DataType::Utf8,
    }
}

/// The decimal128 type of a numeric column, when both PostgreSQL's modifier and Arrow's
/// rules allow one; otherwise the column is exact text.
fn decimal_spec(m: crate::values::NumericMod) -> Option<crate::values::Decimal128Spec> {
    m.decimal128().filter(|spec| {
        Decimal128Builder::new()
            .with_precision_and_scale(spec.precision, spec.scale)
            .is_ok()
    })
}

#[derive(Default)]
struct IntervalParts {
    months: Fixed<i32>,
    days: Fixed<i32>,
    micros: Fixed<i64>,
    valid: Validity,
}

struct ListParts {
    item: Box<ColumnBuilder>,
    field: FieldRef,
    /// Starts with 0.
    offsets: Slot<i32>,
    valid: Validity,
}

impl ListParts {
    /// Appends a one-dimensional array. An element that fails closes the entry as null
    /// (the elements already appended stay in the child array, masked).
    fn append(&mut self, raw: Raw<'_>, scratch: &mut String) -> Result<(), ValueError> {
        let array = match raw.array() {
            Ok(array) => array,
            Err(e) => {
                self.close(false);
                return Err(e);
            }
        };
        let mut result = Ok(());
        for element in &array {
            match element {
                None => self.item.append_null(),
                Some(e) => {
                    if let Err(err) = self.item.append_raw(e.raw(scratch)) {
                        result = Err(err);
                        break;
                    }
                }
            }
        }
        if i32::try_from(self.item.len()).is_err() {
            // More elements than a list array can address: drop this array's elements
            // by closing the entry at the previous offset is impossible once appended,
            // so report it; the row is dropped with the batch's failed rows.
            result = Err(ValueError::new("array", ValueErrorKind::OutOfRange));
        }
        self.close(result.is_ok());
        result
    }

    /// Ends the current entry (valid or null) at the child's current length.
    fn close(&mut self, valid: bool) {
        let end = i32::try_from(self.item.len()).unwrap_or(i32::MAX);
        self.offsets.values.push(end);
        self.valid.push(valid);
    }
}

// Builders differ in size; one column holds one of them, so boxing buys nothing.
#[allow(clippy::large_enum_variant)]
enum Kind {
    Bool(BooleanBuilder),
    Int16(Fixed<i16>),
    Int32(Fixed<i32>),
    Int64(Fixed<i64>),
    Float32(Fixed<f32>),
    Float64(Fixed<f64>),
    Decimal(Fixed<i128>, crate::values::Decimal128Spec),
    Utf8(Utf8),
    Binary(Bytes),
    Date32(Fixed<i32>),
    Time64(Fixed<i64>),
    Timestamp(Fixed<i64>),
    Interval(IntervalParts),
    List(ListParts),
}

/// Builds one column (or one array's elements) of a change table.
pub struct ColumnBuilder {
    /// The scalar type of the values (of the elements, for an array column); `None` for a
    /// type this layer does not know, read as text.
    scalar: Option<Scalar>,
    /// The Arrow type of the values (of the elements, for an array column).
    data_type: DataType,
    kind: Kind,
    /// How [`ColumnBuilder::append_binary_fast`] and [`ColumnBuilder::append_text_fast`]
    /// append a value of this column.
    fast: Fast,
    scratch: String,
    bytes: Vec<u8>,
}

/// The values of the usual types, which are appended in place without the layers of the
/// general path (that path also handles every other type and reports errors): chosen once
/// per column, so each value costs one branch to reach its parser and builder. Measured on
/// the benchmark table, the layers cost about 100 instructions a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fast {
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Bool,
    Date,
    Timestamp,
    TimestampTz,
    /// numeric into decimal128.
    Decimal,
    /// Text types whose text and send formats are the text itself (text, varchar, bpchar,
    /// name, json, xml): stored as sent (binary: when ASCII).
    Text,
    /// jsonb: the text as sent; binary: version byte 1, then the text.
    Jsonb,
    /// uuid: 16 bytes, or the canonical text as PostgreSQL prints it.
    Uuid,
    /// Everything else: the general path.
    No,
}

impl Fast {
    fn of(scalar: Scalar, kind: &Kind) -> Self {
        match (kind, scalar) {
            (Kind::Int16(_), _) => Self::Int2,
            (Kind::Int32(_), Scalar::Int4) => Self::Int4,
            (Kind::Int64(_), Scalar::Int8) => Self::Int8,
            (Kind::Float32(_), _) => Self::Float4,
            (Kind::Float64(_), _) => Self::Float8,
            (Kind::Bool(_), _) => Self::Bool,
            (Kind::Date32(_), _) => Self::Date,
            (Kind::Timestamp(_), Scalar::Timestamp) => Self::Timestamp,
            (Kind::Timestamp(_), Scalar::TimestampTz) => Self::TimestampTz,
            (Kind::Decimal(..), _) => Self::Decimal,
            (Kind::Utf8(_), Scalar::Jsonb) => Self::Jsonb,
            (Kind::Utf8(_), Scalar::Uuid) => Self::Uuid,
            // The types `text_of` passes on as sent.
            (
                Kind::Utf8(_),
                Scalar::Text
                | Scalar::Varchar
                | Scalar::Bpchar
                | Scalar::Name
                | Scalar::Xml
                | Scalar::Json,
            ) => Self::Text,
            _ => Self::No,
        }
    }
}

/// The builder of a [`Kind`] variant, which [`Fast`] implies: one comparison, then the
/// builder; the enclosing function returns false on a mismatch (never, by construction).
macro_rules! builder {
    ($kind:expr, $variant:ident) => {{
        let Kind::$variant(col) = &mut $kind else {
            return false;
        };
        col
    }};
}

/// Binary-format text (`textsend` sends the characters as they are: UTF-8 here) pushed in
/// place: checked as ASCII first, which most text is and which is cheapest to recognise,
/// then as UTF-8. Whether it was pushed (not UTF-8: left to the general path's error).
#[inline]
fn push_utf8(col: &mut Utf8, b: &[u8]) -> bool {
    match col.push_ascii(b) {
        Ok(true) => true,
        Ok(false) => utf8(b).is_some_and(|s| col.push(s).is_ok()),
        Err(_) => false,
    }
}

/// Pushes a parsed value; whether there was one.
// Measured hot path (every value of every row): kept forced-inline.
#[allow(clippy::inline_always)]
#[inline(always)]
fn push_parsed<T: arrow_buffer::ArrowNativeType>(
    col: &mut Fixed<T>,
    value: Result<T, ValueError>,
) -> bool {
    value.map(|v| col.push(v)).is_ok()
}

impl ColumnBuilder {
    pub fn new(oid: u32, typmod: i32) -> Self {
        Self::for_type(PgType::from_oid(oid, typmod))
    }

    fn for_type(ty: PgType) -> Self {
        match ty {
            PgType::Scalar(s) => Self::scalar(s),
            PgType::Array(s) => Self {
                scalar: Some(s),
                data_type: scalar_type(s),
                kind: Kind::List(ListParts {
                    item: Box::new(Self::scalar(s)),
                    field: item_field(s),
                    offsets: Slot::offsets(),
                    valid: Validity::default(),
                }),
                fast: Fast::No,
                scratch: String::new(),
                bytes: Vec::new(),
            },
            PgType::Unknown(_) => Self {
                scalar: None,
                data_type: DataType::Utf8,
                kind: Kind::Utf8(Utf8::default()),
                fast: Fast::No,
                scratch: String::new(),
                bytes: Vec::new(),
            },
        }
    }

    fn scalar(s: Scalar) -> Self {
        let data_type = scalar_type(s);
        let kind = match &data_type {
            DataType::Boolean => Kind::Bool(BooleanBuilder::new()),
            DataType::Int16 => Kind::Int16(Fixed::default()),
            DataType::Int32 => Kind::Int32(Fixed::default()),
            DataType::Int64 => Kind::Int64(Fixed::default()),
            DataType::Float32 => Kind::Float32(Fixed::default()),
            DataType::Float64 => Kind::Float64(Fixed::default()),
            &DataType::Decimal128(precision, scale) => Kind::Decimal(
                Fixed::default(),
                crate::values::Decimal128Spec { precision, scale },
            ),
            DataType::Binary => Kind::Binary(Bytes::default()),
            DataType::Date32 => Kind::Date32(Fixed::default()),
            DataType::Time64(_) => Kind::Time64(Fixed::default()),
            DataType::Timestamp(..) => Kind::Timestamp(Fixed::default()),
            DataType::Struct(_) => Kind::Interval(IntervalParts::default()),
            _ => Kind::Utf8(Utf8::default()),
        };
        Self {
            scalar: Some(s),
            data_type,
            fast: Fast::of(s, &kind),
            kind,
            scratch: String::new(),
            bytes: Vec::new(),
        }
    }

    /// Appends exactly one entry: the value as sent ('t' or 'b'), or null for NULL and
    /// unchanged-TOAST markers. A value that cannot be parsed or represented appends a
    /// null entry and returns the error (the table then drops the row).
    pub fn append(&mut self, datum: &Datum<'_>) -> Result<(), ValueError> {
        let raw = match datum {
            Datum::Text(s) => Raw::Text(s),
            Datum::Binary(b) => Raw::Binary(b),
            Datum::Null | Datum::UnchangedToast => {
                self.append_null();
                return Ok(());
            }
        };
        let result = self.append_raw(raw);
        // A list closes its entry itself, even on error; a scalar appends nothing then.
        if result.is_err() && !matches!(self.kind, Kind::List(_)) {
            self.append_null();
        }
        result
    }

    /// A binary value of the usual types ([`Fast`]) appended in place; whether it was.
    /// Anything else, including a wrong length, an infinite timestamp, non-ASCII text or a
    /// numeric the decimal cannot hold, is left to [`ColumnBuilder::append`], which also
    /// reports the error.
    // Measured hot path (every value of every row): kept forced-inline.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub fn append_binary_fast(&mut self, b: &[u8]) -> bool {
        let raw = Raw::Binary(b);
        // A switch on `fast`, then one comparison of the builder's kind: cheaper than one
        // switch on both (about 10 instructions a value fewer, callgrind).
        match self.fast {
            // The most common fixed-width values, decoded right here.
            Fast::Int8 => match b.try_into() {
                Ok(bytes) => builder!(self.kind, Int64).push(i64::from_be_bytes(bytes)),
                Err(_) => return false,
            },
            Fast::Float8 => match b.try_into() {
                Ok(bytes) => {
                    builder!(self.kind, Float64).push(f64::from_bits(u64::from_be_bytes(bytes)));
                }
                Err(_) => return false,
            },
            Fast::Bool => match b {
                // Any non-zero byte is true, as `boolrecv` reads it.
                &[byte] => builder!(self.kind, Bool).append_value(byte != 0),
                _ => return false,
            },
            Fast::Timestamp | Fast::TimestampTz => {
                let micros = match b.try_into() {
                    Ok(bytes) => i64::from_be_bytes(bytes),
                    Err(_) => return false,
                };
                // i64::MIN and i64::MAX are the infinities.
                match micros.checked_add(PG_EPOCH_MICROS) {
                    Some(m) if micros != i64::MAX && micros != i64::MIN => {
                        builder!(self.kind, Timestamp).push(m);
                    }
                    _ => return false,
                }
            }
            Fast::Int2 => return push_parsed(builder!(self.kind, Int16), raw.int2()),
            Fast::Int4 => return push_parsed(builder!(self.kind, Int32), raw.int4()),
            Fast::Float4 => return push_parsed(builder!(self.kind, Float32), raw.float4()),
            Fast::Date => return push_parsed(builder!(self.kind, Date32), raw.date()),
            Fast::Decimal => {
                let Kind::Decimal(col, spec) = &mut self.kind else {
                    return false;
                };
                return push_parsed(col, raw.numeric_decimal(*spec));
            }
            Fast::Text => return push_utf8(builder!(self.kind, Utf8), b),
            Fast::Jsonb => {
                return match b.split_first() {
                    Some((1, json)) => push_utf8(builder!(self.kind, Utf8), json),
                    _ => false,
                }
            }
            Fast::Uuid => {
                return match uuid::binary(b) {
                    Ok(uuid) => matches!(
                        builder!(self.kind, Utf8).push_ascii(uuid.as_bytes()),
                        Ok(true)
                    ),
                    Err(_) => false,
                }
            }
            Fast::No => return false,
        }
        true
    }

    /// A text value of the usual types ([`Fast`]) appended in place; whether it was.
    /// Anything else, including a value that does not parse or cannot be represented, is
    /// left to [`ColumnBuilder::append`], which also reports the error.
    // Measured hot path (every value of every row): kept forced-inline.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub fn append_text_fast(&mut self, s: &str) -> bool {
        let raw = Raw::Text(s);
        match self.fast {
            Fast::Int2 => push_parsed(builder!(self.kind, Int16), raw.int2()),
            Fast::Int4 => push_parsed(builder!(self.kind, Int32), raw.int4()),
            Fast::Int8 => push_parsed(builder!(self.kind, Int64), raw.int8()),
            Fast::Float4 => push_parsed(builder!(self.kind, Float32), raw.float4()),
            Fast::Float8 => push_parsed(builder!(self.kind, Float64), raw.float8()),
            Fast::Bool => {
                let col = builder!(self.kind, Bool);
                raw.bool().map(|v| col.append_value(v)).is_ok()
            }
            Fast::Date => push_parsed(builder!(self.kind, Date32), raw.date()),
            Fast::Timestamp => push_parsed(builder!(self.kind, Timestamp), raw.timestamp()),
            Fast::TimestampTz => push_parsed(builder!(self.kind, Timestamp), raw.timestamptz()),
            Fast::Decimal => {
                let Kind::Decimal(col, spec) = &mut self.kind else {
                    return false;
                };
                push_parsed(col, raw.numeric_decimal(*spec))
            }
            Fast::Text | Fast::Jsonb => builder!(self.kind, Utf8).push(s).is_ok(),
            // As PostgreSQL prints it: stored as it is.
            Fast::Uuid => uuid::is_canonical(s) && builder!(self.kind, Utf8).push(s).is_ok(),
            Fast::No => false,
        }
    }

    /// Appends one entry the way the change tables do: a value of the usual types in place
    /// ([`ColumnBuilder::append_binary_fast`], [`ColumnBuilder::append_text_fast`]),
    /// anything else (and whatever they leave) through [`ColumnBuilder::append`].
    /// `BINARY` is the stream's format: the tables' loop has one instance per format, so
    /// each tries only its own in-place path (2 % fewer instructions a binary row than
    /// deciding by the value).
    // Measured hot path (every value of every row): kept forced-inline.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub fn append_in_format<const BINARY: bool>(
        &mut self,
        datum: &Datum<'_>,
    ) -> Result<(), ValueError> {
        let in_place = match *datum {
            Datum::Binary(b) if BINARY => self.append_binary_fast(b),
            Datum::Text(t) if !BINARY => self.append_text_fast(t),
            _ => false,
        };
        if in_place {
            Ok(())
        } else {
            self.append(datum)
        }
    }

    /// [`ColumnBuilder::append_in_format`] in the value's own format.
    pub fn append_in_place_first(&mut self, datum: &Datum<'_>) -> Result<(), ValueError> {
        if matches!(datum, Datum::Binary(_)) {
            self.append_in_format::<true>(datum)
        } else {
            self.append_in_format::<false>(datum)
        }
    }

    /// Appends a non-NULL value. On error a scalar has appended nothing; a list has
    /// closed its entry as null.
    fn append_raw(&mut self, raw: Raw<'_>) -> Result<(), ValueError> {
        let Self {
            scalar,
            kind,
            scratch,
            bytes,
            ..
        } = self;
        let scalar = *scalar;
        match kind {
            Kind::List(list) => {
                return list.append(raw, scratch);
            }
            Kind::Bool(b) => b.append_value(raw.bool()?),
            Kind::Int16(b) => b.push(raw.int2()?),
            Kind::Int32(b) => b.push(raw.int4()?),
            Kind::Int64(b) => {
                let v = match scalar {
                    Some(Scalar::Oid) => raw.oid()?,
                    Some(Scalar::Xid) => raw.xid()?,
                    Some(Scalar::Cid) => raw.cid()?,
                    _ => raw.int8()?,
                };
                b.push(v);
            }
            Kind::Float32(b) => b.push(raw.float4()?),
            Kind::Float64(b) => b.push(raw.float8()?),
            Kind::Decimal(b, spec) => b.push(raw.numeric_decimal(*spec)?),
            Kind::Binary(b) => b
                .push(raw.bytea(bytes)?)
                .map_err(|OffsetOverflow| overflow("bytea"))?,
            Kind::Date32(b) => b.push(raw.date()?),
            Kind::Time64(b) => b.push(raw.time()?),
            Kind::Timestamp(b) => {
                let v = match scalar {
                    Some(Scalar::TimestampTz) => raw.timestamptz()?,
                    _ => raw.timestamp()?,
                };
                b.push(v);
            }
            Kind::Interval(p) => {
                let v = raw.interval()?;
                p.months.push(v.months);
                p.days.push(v.days);
                p.micros.push(v.microseconds);
                p.valid.push(true);
            }
            Kind::Utf8(b) => {
                let text = match scalar {
                    // The canonical text, in a buffer of its own: ASCII.
                    Some(Scalar::Uuid) => match raw {
                        // As PostgreSQL prints it: stored as it is.
                        Raw::Text(t) if uuid::is_canonical(t) => b.push(t),
                        // Otherwise the canonical text, in a buffer of its own: ASCII.
                        _ => {
                            let uuid = raw.uuid()?;
                            match b.push_ascii(uuid.as_bytes()) {
                                Ok(false) => b.push(uuid.as_str()),
                                pushed => pushed.map(drop),
                            }
                        }
                    },
                    Some(s) => match text_of(s, raw, scratch)? {
                        Text::Str(text) => b.push(text),
                        Text::Unchecked(bytes, type_name) => match b.push_ascii(bytes) {
                            Ok(false) => b.push(crate::values::binary::text(bytes, type_name)?),
                            pushed => pushed.map(drop),
                        },
                    },
                    // A type this layer does not know: its text form, as the contract asks.
                    None => match raw {
                        Raw::Text(s) => b.push(s),
                        Raw::Binary(_) => {
                            return Err(ValueError::new("user type", ValueErrorKind::Unsupported))
                        }
                    },
                };
                text.map_err(|OffsetOverflow| overflow("text"))?;
            }
        }
        Ok(())
    }

    /// Appends `n` nulls at once (the `_before` columns of rows without an old image).
    pub fn append_nulls(&mut self, n: usize) {
        match &mut self.kind {
            Kind::Bool(b) => b.append_nulls(n),
            Kind::Int16(b) => b.push_nulls(n),
            Kind::Int32(b) | Kind::Date32(b) => b.push_nulls(n),
            Kind::Int64(b) | Kind::Time64(b) | Kind::Timestamp(b) => b.push_nulls(n),
            Kind::Float32(b) => b.push_nulls(n),
            Kind::Float64(b) => b.push_nulls(n),
            Kind::Decimal(b, _) => b.push_nulls(n),
            Kind::Utf8(b) => b.push_nulls(n),
            Kind::Binary(b) => b.push_nulls(n),
            Kind::Interval(_) | Kind::List(_) => {
                for _ in 0..n {
                    self.append_null();
                }
            }
        }
    }

    pub fn append_null(&mut self) {
        match &mut self.kind {
            Kind::Bool(b) => b.append_null(),
            Kind::Int16(b) => b.push_null(),
            Kind::Int32(b) | Kind::Date32(b) => b.push_null(),
            Kind::Int64(b) | Kind::Time64(b) | Kind::Timestamp(b) => b.push_null(),
            Kind::Float32(b) => b.push_null(),
            Kind::Float64(b) => b.push_null(),
            Kind::Decimal(b, _) => b.push_null(),
            Kind::Utf8(b) => b.push_null(),
            Kind::Binary(b) => b.push_null(),
            Kind::Interval(p) => {
                p.months.push(0);
                p.days.push(0);
                p.micros.push(0);
                p.valid.push(false);
            }
            Kind::List(list) => {
                let end = list.offsets.values.last().copied().unwrap_or(0);
                list.offsets.values.push(end);
                list.valid.push(false);
            }
        }
    }

    /// Gives the builder memory for the next batch (see [`Recycler`]).
    pub fn refill(&mut self, recycler: &mut Recycler) {
        match &mut self.kind {
            Kind::Bool(_) => {}
            Kind::Int16(b) => b.refill(recycler),
            Kind::Int32(b) | Kind::Date32(b) => b.refill(recycler),
            Kind::Int64(b) | Kind::Time64(b) | Kind::Timestamp(b) => b.refill(recycler),
            Kind::Float32(b) => b.refill(recycler),
            Kind::Float64(b) => b.refill(recycler),
            Kind::Decimal(b, _) => b.refill(recycler),
            Kind::Utf8(b) => b.refill(recycler),
            Kind::Binary(b) => b.refill(recycler),
            Kind::Interval(p) => {
                p.months.refill(recycler);
                p.days.refill(recycler);
                p.micros.refill(recycler);
                p.valid.refill(recycler);
            }
            Kind::List(list) => {
                list.item.refill(recycler);
                list.offsets.refill(recycler, 1);
                list.valid.refill(recycler);
            }
        }
    }

    /// Values appended so far.
    fn len(&self) -> usize {
        use arrow_array::builder::ArrayBuilder;
        match &self.kind {
            Kind::Bool(b) => b.len(),
            Kind::Int16(b) => b.len(),
            Kind::Int32(b) | Kind::Date32(b) => b.len(),
            Kind::Int64(b) | Kind::Time64(b) | Kind::Timestamp(b) => b.len(),
            Kind::Float32(b) => b.len(),
            Kind::Float64(b) => b.len(),
            Kind::Decimal(b, _) => b.len(),
            Kind::Utf8(b) => b.len(),
            Kind::Binary(b) => b.len(),
            Kind::Interval(p) => p.valid.len(),
            Kind::List(list) => list.valid.len(),
        }
    }

    /// The values appended since the last call, as one array; the builder starts empty,
    /// and [`ColumnBuilder::refill`] gives it room for as many values as this batch held
    /// (the next batch is likely alike: no regrowth).
    pub fn finish(&mut self, recycler: &mut Recycler) -> Result<ArrayRef, ArrowError> {
        let dt = &self.data_type;
        Ok(match &mut self.kind {
            Kind::Bool(b) => {
                let array = b.finish();
                *b = BooleanBuilder::with_capacity(room(array.len()));
                Arc::new(array)
            }
            Kind::Int16(b) => b.finish::<Int16Type>(dt, recycler),
            Kind::Int32(b) => b.finish::<Int32Type>(dt, recycler),
            Kind::Int64(b) => b.finish::<Int64Type>(dt, recycler),
            Kind::Float32(b) => b.finish::<Float32Type>(dt, recycler),
            Kind::Float64(b) => b.finish::<Float64Type>(dt, recycler),
            Kind::Decimal(b, _) => b.finish::<Decimal128Type>(dt, recycler),
            Kind::Utf8(b) => b.finish(recycler),
            Kind::Binary(b) => b.finish_binary(recycler)?,
            Kind::Date32(b) => b.finish::<Date32Type>(dt, recycler),
            Kind::Time64(b) => b.finish::<Time64MicrosecondType>(dt, recycler),
            Kind::Timestamp(b) => b.finish::<TimestampMicrosecondType>(dt, recycler),
            Kind::Interval(p) => {
                // The parts are non-nullable fields: a null interval is null in the struct's
                // validity only (Parquet writers and Spark reject nulls in such fields).
                let children: Vec<ArrayRef> = vec![
                    without_nulls::<Int32Type>(
                        p.months.finish::<Int32Type>(&DataType::Int32, recycler),
                    ),
                    without_nulls::<Int32Type>(
                        p.days.finish::<Int32Type>(&DataType::Int32, recycler),
                    ),
                    without_nulls::<Int64Type>(
                        p.micros.finish::<Int64Type>(&DataType::Int64, recycler),
                    ),
                ];
                let nulls = p.valid.finish(recycler);
                // Same lengths by construction: every append touches all four parts.
                Arc::new(StructArray::try_new(interval_fields(), children, nulls)?)
            }
            Kind::List(list) => {
                let n = list.valid.len();
                let values = list.item.finish(recycler)?;
                let offsets =
                    OffsetBuffer::new(ScalarBuffer::new(list.offsets.lend(recycler), 0, n + 1));
                list.offsets.values.push(0);
                let nulls = list.valid.finish(recycler);
                Arc::new(ListArray::try_new(
                    Arc::clone(&list.field),
                    offsets,
                    values,
                    nulls,
                )?)
            }
        })
    }
}

fn overflow(type_name: &'static str) -> ValueError {
    ValueError::new(type_name, ValueErrorKind::OutOfRange)
}

/// The string form of a value of a type represented as Arrow string.
enum Text<'s> {
    Str(&'s str),
    /// Binary-format text (the type named), not yet checked to be UTF-8.
    Unchecked(&'s [u8], &'static str),
}

fn text_of<'s>(s: Scalar, raw: Raw<'s>, scratch: &'s mut String) -> Result<Text<'s>, ValueError> {
    let text = match (s, raw) {
        (Scalar::Jsonb, Raw::Binary(b)) => {
            return Ok(Text::Unchecked(
                crate::values::binary::jsonb_json(b)?,
                "jsonb",
            ))
        }
        (Scalar::Numeric(_), _) => raw.numeric_str(scratch)?,
        (Scalar::TimeTz, _) => raw.timetz(scratch)?,
        (Scalar::Inet, _) => raw.inet(scratch)?,
        (Scalar::Cidr, _) => raw.cidr(scratch)?,
        (Scalar::MacAddr, _) => raw.macaddr(scratch)?,
        (Scalar::MacAddr8, _) => raw.macaddr8(scratch)?,
        (Scalar::Money, _) => raw.money(scratch)?,
        (Scalar::TsVector, _) => raw.tsvector(scratch)?,
        (Scalar::Range(t), _) => raw.range(t, scratch)?,
        (Scalar::Multirange(t), _) => raw.multirange(t, scratch)?,
        (other, Raw::Binary(b)) => return Ok(Text::Unchecked(b, other.name())),
        // Text-format jsonb included: it is the JSON text already.
        (_, Raw::Text(t)) => t,
    };
    Ok(Text::Str(text))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The types [`Fast`] serves (oid, modifier), with a few that take the general path.
    /// The numerics: (12,2), (38,0), (5,4) and without modifier.
    const FAST_TYPES: [(u32, i32); 23] = [
        (20, -1),
        (701, -1),
        (16, -1),
        (1114, -1),
        (1184, -1),
        (23, -1),
        (26, -1),
        (21, -1),
        (700, -1),
        (1082, -1),
        (1700, (12 << 16 | 2) + 4),
        (1700, (38 << 16) + 4),
        (1700, (5 << 16 | 4) + 4),
        (1700, -1),
        (25, -1),
        (1043, 14),
        (1042, 9),
        (19, -1),
        (114, -1),
        (142, -1),
        (3802, -1),
        (2950, -1),
        (869, -1),
    ];

    fn fast_types() -> impl Strategy<Value = (u32, i32)> {
        proptest::sample::select(&FAST_TYPES[..])
    }

    /// Appends `data` to two columns of the type, one through the in-place path (the
    /// general one for what it leaves), one through the general path only: the same
    /// successes and failures, the same arrays.
    fn check_fast_path(oid: u32, typmod: i32, data: &[Datum<'_>]) -> Result<(), TestCaseError> {
        let mut fast = ColumnBuilder::new(oid, typmod);
        let mut general = ColumnBuilder::new(oid, typmod);
        for datum in data {
            let expected = general.append(datum);
            let got = fast.append_in_place_first(datum);
            prop_assert_eq!(got.is_ok(), expected.is_ok());
        }
        let mut recycler = Recycler::default();
        let (fast, general) = (fast.finish(&mut recycler), general.finish(&mut recycler));
        prop_assert!(fast.is_ok());
        prop_assert_eq!(fast.ok(), general.ok());
        Ok(())
    }

    /// numeric_send bytes: digit count, weight, sign, display scale, base-10000 digits.
    fn numeric(digits: &[u16], weight: i16, sign: u16, dscale: u16) -> Vec<u8> {
        let mut b = Vec::new();
        for part in [digits.len() as i16, weight, sign as i16, dscale as i16] {
            b.extend_from_slice(&part.to_be_bytes());
        }
        for d in digits {
            b.extend_from_slice(&d.to_be_bytes());
        }
        b
    }

    /// Binary values of every shape the in-place path meets: arbitrary bytes, ASCII and
    /// other UTF-8 text with and without jsonb's version byte, 16-byte uuids, 8-byte
    /// integers and their extremes, single bytes, numerics in and out of range.
    fn binary_values() -> impl Strategy<Value = Vec<Vec<u8>>> {
        proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..40),
                "[ -~]{0,40}".prop_map(String::into_bytes),
                "\\PC{0,12}".prop_map(String::into_bytes),
                (0_u8..3, "[ -~é☃]{0,40}").prop_map(|(v, s)| [&[v][..], s.as_bytes()].concat()),
                proptest::collection::vec(any::<u8>(), 16..=16),
                any::<i64>().prop_map(|v| v.to_be_bytes().to_vec()),
                Just(i64::MAX.to_be_bytes().to_vec()),
                Just(i64::MIN.to_be_bytes().to_vec()),
                Just((i64::MAX - 5).to_be_bytes().to_vec()),
                any::<u8>().prop_map(|b| vec![b]),
                (
                    proptest::collection::vec(0_u16..10_000, 0..5),
                    -3_i16..8,
                    0_u16..4
                )
                    .prop_map(|(d, w, s)| numeric(
                        &d,
                        w,
                        if s == 1 { 0x4000 } else { 0 },
                        s
                    )),
                Just(numeric(&[], 0, 0xC000, 0)),
                Just(numeric(&[1], 40, 0, 0)),
            ],
            0..20,
        )
    }

    /// Text values of every shape the in-place path meets: arbitrary text, and values of
    /// each type it parses, in range and out of it, in the forms PostgreSQL prints and
    /// others.
    fn text_values() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::vec(
            prop_oneof![
                "\\PC{0,20}",
                "[ -~]{0,12}",
                any::<i64>().prop_map(|v| v.to_string()),
                any::<i32>().prop_map(|v| v.to_string()),
                any::<i16>().prop_map(|v| v.to_string()),
                Just("32768".to_owned()),
                Just("9223372036854775808".to_owned()),
                any::<f64>().prop_map(|v| v.to_string()),
                any::<f32>().prop_map(|v| v.to_string()),
                prop_oneof![
                    Just("NaN"),
                    Just("Infinity"),
                    Just("-Infinity"),
                    Just("1e308"),
                    Just("1e400"),
                    Just("-0"),
                    Just("t"),
                    Just("f"),
                    Just("true"),
                    Just("yes"),
                    Just("2024-02-29"),
                    Just("2023-02-29"),
                    Just("0001-01-01 BC"),
                    Just("infinity"),
                    Just("-infinity"),
                    Just("5874897-12-31"),
                    Just("2024-01-01 12:34:56.123456"),
                    Just("2024-01-01 12:34:56+02"),
                    Just("2024-01-01 12:34:56.5-03:30"),
                    Just("294277-01-01 00:00:00"),
                    Just("2000-01-01 24:00:00"),
                    Just("12.34"),
                    Just("-0.01"),
                    Just("12.345"),
                    Just("99999999999.99"),
                    Just("{\"a\": 1}"),
                ]
                .prop_map(str::to_owned),
                (-10_000_000_000_i64..10_000_000_000, 0_u32..4).prop_map(|(v, scale)| {
                    let p = 10_i64.pow(scale);
                    let sign = if v < 0 { "-" } else { "" };
                    let (int, frac) = (v.unsigned_abs() / p as u64, v.unsigned_abs() % p as u64);
                    match scale {
                        0 => format!("{sign}{int}"),
                        _ => format!("{sign}{int}.{frac:0width$}", width = scale as usize),
                    }
                }),
                (any::<u128>(), any::<bool>()).prop_map(|(v, upper)| {
                    let h = format!("{v:032x}");
                    let u = format!(
                        "{}-{}-{}-{}-{}",
                        &h[..8],
                        &h[8..12],
                        &h[12..16],
                        &h[16..20],
                        &h[20..]
                    );
                    if upper {
                        u.to_uppercase()
                    } else {
                        u
                    }
                }),
            ],
            0..20,
        )
    }

    proptest! {
        /// The in-place path builds what the general path builds from the same values, in
        /// either format, or leaves them to it (errors included).
        #[test]
        fn fast_path_matches_the_general_path(
            (oid, typmod) in fast_types(),
            binary in binary_values(),
            text in text_values(),
        ) {
            let data: Vec<Datum<'_>> = binary.iter().map(|v| Datum::Binary(v)).collect();
            check_fast_path(oid, typmod, &data)?;
            let data: Vec<Datum<'_>> = text.iter().map(|v| Datum::Text(v)).collect();
            check_fast_path(oid, typmod, &data)?;
        }
    }
}

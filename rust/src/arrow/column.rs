//! One Arrow column builder per published column, typed by CONTRACT section 5: values go
//! from the message bytes ([`Datum`]) through the value layer ([`Raw`]) into the builder,
//! with no per-value allocation (strings that must be rewritten, such as binary-format
//! inet or numeric, reuse one scratch buffer per column).

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBufferBuilder, BooleanBuilder, Date32Builder, Decimal128Builder,
    Float32Builder, Float64Builder, Int16Builder, Int32Builder, Int64Builder, StringBuilder,
    Time64MicrosecondBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::builder::{GenericByteBuilder, PrimitiveBuilder};
use arrow_array::types::ByteArrayType;
use arrow_array::{Array, ArrayRef, ArrowPrimitiveType, ListArray, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, FieldRef, Fields, TimeUnit};

use crate::protocol::Datum;
use crate::values::{PgType, Raw, Scalar, ValueError, ValueErrorKind};

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

struct IntervalParts {
    months: Int32Builder,
    days: Int32Builder,
    micros: Int64Builder,
    valid: BooleanBufferBuilder,
}

struct ListParts {
    item: Box<ColumnBuilder>,
    field: FieldRef,
    offsets: Vec<i32>,
    valid: BooleanBufferBuilder,
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
        for element in array.iter() {
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
        self.offsets.push(end);
        self.valid.append(valid);
    }
}

// Builders differ in size; one column holds one of them, so boxing buys nothing.
#[allow(clippy::large_enum_variant)]
enum Kind {
    Bool(BooleanBuilder),
    Int16(Int16Builder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    Decimal(Decimal128Builder, crate::values::Decimal128Spec),
    Utf8(StringBuilder),
    Binary(BinaryBuilder),
    Date32(Date32Builder),
    Time64(Time64MicrosecondBuilder),
    Timestamp(TimestampMicrosecondBuilder),
    Interval(IntervalParts),
    List(ListParts),
}

/// Builds one column (or one array's elements) of a change table.
pub struct ColumnBuilder {
    /// The scalar type of the values (of the elements, for an array column); `None` for a
    /// type this layer does not know, read as text.
    scalar: Option<Scalar>,
    kind: Kind,
    scratch: String,
    bytes: Vec<u8>,
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
                kind: Kind::List(ListParts {
                    item: Box::new(Self::scalar(s)),
                    field: item_field(s),
                    offsets: vec![0],
                    valid: BooleanBufferBuilder::new(0),
                }),
                scratch: String::new(),
                bytes: Vec::new(),
            },
            PgType::Unknown(_) => Self {
                scalar: None,
                kind: Kind::Utf8(StringBuilder::new()),
                scratch: String::new(),
                bytes: Vec::new(),
            },
        }
    }

    fn scalar(s: Scalar) -> Self {
        let kind = match scalar_type(s) {
            DataType::Boolean => Kind::Bool(BooleanBuilder::new()),
            DataType::Int16 => Kind::Int16(Int16Builder::new()),
            DataType::Int32 => Kind::Int32(Int32Builder::new()),
            DataType::Int64 => Kind::Int64(Int64Builder::new()),
            DataType::Float32 => Kind::Float32(Float32Builder::new()),
            DataType::Float64 => Kind::Float64(Float64Builder::new()),
            DataType::Decimal128(precision, scale) => Kind::Decimal(
                Decimal128Builder::new()
                    .with_precision_and_scale(precision, scale)
                    .unwrap_or_default(),
                crate::values::Decimal128Spec { precision, scale },
            ),
            DataType::Binary => Kind::Binary(BinaryBuilder::new()),
            DataType::Date32 => Kind::Date32(Date32Builder::new()),
            DataType::Time64(_) => Kind::Time64(Time64MicrosecondBuilder::new()),
            DataType::Timestamp(_, Some(tz)) => {
                Kind::Timestamp(TimestampMicrosecondBuilder::new().with_timezone(tz))
            }
            DataType::Timestamp(_, None) => Kind::Timestamp(TimestampMicrosecondBuilder::new()),
            DataType::Struct(_) => Kind::Interval(IntervalParts {
                months: Int32Builder::new(),
                days: Int32Builder::new(),
                micros: Int64Builder::new(),
                valid: BooleanBufferBuilder::new(0),
            }),
            _ => Kind::Utf8(StringBuilder::new()),
        };
        Self {
            scalar: Some(s),
            kind,
            scratch: String::new(),
            bytes: Vec::new(),
        }
    }

    /// Appends exactly one entry: the value as sent ('t' or 'b'), or null for NULL and
    /// unchanged-TOAST markers. A value that cannot be parsed or represented appends a
    /// null entry and returns the error (the table then drops the row).
    pub fn append(&mut self, datum: &Datum<'_>, _binary: bool) -> Result<(), ValueError> {
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

    /// Appends a non-NULL value. On error a scalar has appended nothing; a list has
    /// closed its entry as null.
    fn append_raw(&mut self, raw: Raw<'_>) -> Result<(), ValueError> {
        let Self {
            scalar,
            kind,
            scratch,
            bytes,
        } = self;
        let scalar = *scalar;
        match kind {
            Kind::List(list) => {
                return list.append(raw, scratch);
            }
            Kind::Bool(b) => b.append_value(raw.bool()?),
            Kind::Int16(b) => b.append_value(raw.int2()?),
            Kind::Int32(b) => b.append_value(raw.int4()?),
            Kind::Int64(b) => {
                let v = match scalar {
                    Some(Scalar::Oid) => raw.oid()?,
                    Some(Scalar::Xid) => raw.xid()?,
                    Some(Scalar::Cid) => raw.cid()?,
                    _ => raw.int8()?,
                };
                b.append_value(v)
            }
            Kind::Float32(b) => b.append_value(raw.float4()?),
            Kind::Float64(b) => b.append_value(raw.float8()?),
            Kind::Decimal(b, spec) => b.append_value(raw.numeric_decimal(*spec)?),
            Kind::Binary(b) => b.append_value(raw.bytea(bytes)?),
            Kind::Date32(b) => b.append_value(raw.date()?),
            Kind::Time64(b) => b.append_value(raw.time()?),
            Kind::Timestamp(b) => {
                let v = match scalar {
                    Some(Scalar::TimestampTz) => raw.timestamptz()?,
                    _ => raw.timestamp()?,
                };
                b.append_value(v)
            }
            Kind::Interval(p) => {
                let v = raw.interval()?;
                p.months.append_value(v.months);
                p.days.append_value(v.days);
                p.micros.append_value(v.microseconds);
                p.valid.append(true);
            }
            Kind::Utf8(b) => {
                match scalar {
                    Some(Scalar::Uuid) => {
                        let uuid = raw.uuid()?;
                        match raw {
                            // Already canonical (as PostgreSQL prints it): the text as is.
                            Raw::Text(s)
                                if <&[u8; 36]>::try_from(s.as_bytes()).ok()
                                    == Some(uuid.as_bytes()) =>
                            {
                                b.append_value(s)
                            }
                            _ => b.append_value(uuid.as_str()),
                        }
                    }
                    Some(s) => b.append_value(text_of(s, raw, scratch)?),
                    // A type this layer does not know: its text form, as the contract asks.
                    None => match raw {
                        Raw::Text(s) => b.append_value(s),
                        Raw::Binary(_) => {
                            return Err(ValueError::new("user type", ValueErrorKind::Unsupported))
                        }
                    },
                }
            }
        }
        Ok(())
    }

    /// Appends `n` nulls at once (the `_before` columns of rows without an old image).
    pub fn append_nulls(&mut self, n: usize) {
        match &mut self.kind {
            Kind::Bool(b) => b.append_nulls(n),
            Kind::Int16(b) => b.append_nulls(n),
            Kind::Int32(b) => b.append_nulls(n),
            Kind::Int64(b) => b.append_nulls(n),
            Kind::Float32(b) => b.append_nulls(n),
            Kind::Float64(b) => b.append_nulls(n),
            Kind::Decimal(b, _) => b.append_nulls(n),
            Kind::Utf8(b) => b.append_nulls(n),
            Kind::Binary(b) => b.append_nulls(n),
            Kind::Date32(b) => b.append_nulls(n),
            Kind::Time64(b) => b.append_nulls(n),
            Kind::Timestamp(b) => b.append_nulls(n),
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
            Kind::Int16(b) => b.append_null(),
            Kind::Int32(b) => b.append_null(),
            Kind::Int64(b) => b.append_null(),
            Kind::Float32(b) => b.append_null(),
            Kind::Float64(b) => b.append_null(),
            Kind::Decimal(b, _) => b.append_null(),
            Kind::Utf8(b) => b.append_null(),
            Kind::Binary(b) => b.append_null(),
            Kind::Date32(b) => b.append_null(),
            Kind::Time64(b) => b.append_null(),
            Kind::Timestamp(b) => b.append_null(),
            Kind::Interval(p) => {
                p.months.append_value(0);
                p.days.append_value(0);
                p.micros.append_value(0);
                p.valid.append(false);
            }
            Kind::List(list) => {
                let end = list.offsets.last().copied().unwrap_or(0);
                list.offsets.push(end);
                list.valid.append(false);
            }
        }
    }

    /// Values appended so far.
    fn len(&self) -> usize {
        use arrow_array::builder::ArrayBuilder;
        match &self.kind {
            Kind::Bool(b) => b.len(),
            Kind::Int16(b) => b.len(),
            Kind::Int32(b) => b.len(),
            Kind::Int64(b) => b.len(),
            Kind::Float32(b) => b.len(),
            Kind::Float64(b) => b.len(),
            Kind::Decimal(b, _) => b.len(),
            Kind::Utf8(b) => b.len(),
            Kind::Binary(b) => b.len(),
            Kind::Date32(b) => b.len(),
            Kind::Time64(b) => b.len(),
            Kind::Timestamp(b) => b.len(),
            Kind::Interval(p) => p.valid.len(),
            Kind::List(list) => list.valid.len(),
        }
    }

    /// The values appended since the last call, as one array; the builder starts empty,
    /// with room for as many values as this batch held (the next batch is likely alike:
    /// no regrowth, no copying).
    pub fn finish(&mut self) -> ArrayRef {
        match &mut self.kind {
            Kind::Bool(b) => {
                let array = b.finish();
                *b = BooleanBuilder::with_capacity(room(array.len()));
                Arc::new(array)
            }
            Kind::Int16(b) => finish_primitive(b),
            Kind::Int32(b) => finish_primitive(b),
            Kind::Int64(b) => finish_primitive(b),
            Kind::Float32(b) => finish_primitive(b),
            Kind::Float64(b) => finish_primitive(b),
            Kind::Decimal(b, _) => finish_primitive(b),
            Kind::Utf8(b) => finish_bytes(b),
            Kind::Binary(b) => finish_bytes(b),
            Kind::Date32(b) => finish_primitive(b),
            Kind::Time64(b) => finish_primitive(b),
            Kind::Timestamp(b) => finish_primitive(b),
            Kind::Interval(p) => {
                let n = room(p.valid.len());
                let children: Vec<ArrayRef> = vec![
                    finish_primitive(&mut p.months),
                    finish_primitive(&mut p.days),
                    finish_primitive(&mut p.micros),
                ];
                let nulls = NullBuffer::new(p.valid.finish());
                p.valid = BooleanBufferBuilder::new(n);
                // Same lengths by construction: every append touches all four builders.
                Arc::new(StructArray::new(interval_fields(), children, Some(nulls)))
            }
            Kind::List(list) => {
                let n = room(list.valid.len());
                let values = list.item.finish();
                let mut next = Vec::with_capacity(n + 1);
                next.push(0);
                let offsets = std::mem::replace(&mut list.offsets, next);
                let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
                let nulls = NullBuffer::new(list.valid.finish());
                list.valid = BooleanBufferBuilder::new(n);
                Arc::new(ListArray::new(
                    Arc::clone(&list.field),
                    offsets,
                    values,
                    Some(nulls),
                ))
            }
        }
    }
}

/// Room for the next batch of a builder that held `n` values (or bytes): a little more,
/// so a slightly larger batch does not regrow.
pub(crate) fn room(n: usize) -> usize {
    n.saturating_add(n / 16).saturating_add(16)
}

/// Finishes a primitive builder and replaces it with one sized like the batch.
pub(crate) fn finish_primitive<T: ArrowPrimitiveType>(b: &mut PrimitiveBuilder<T>) -> ArrayRef {
    let array = b.finish();
    *b = PrimitiveBuilder::with_capacity(room(array.len()))
        .with_data_type(array.data_type().clone());
    Arc::new(array)
}

/// Finishes a string or binary builder and replaces it with one sized like the batch.
pub(crate) fn finish_bytes<T: ByteArrayType>(b: &mut GenericByteBuilder<T>) -> ArrayRef {
    let array = b.finish();
    *b = GenericByteBuilder::with_capacity(room(array.len()), room(array.value_data().len()));
    Arc::new(array)
}

/// The string form of a value of a type represented as Arrow string.
fn text_of<'s>(s: Scalar, raw: Raw<'s>, scratch: &'s mut String) -> Result<&'s str, ValueError> {
    match s {
        Scalar::Jsonb => raw.jsonb(),
        Scalar::Numeric(_) => raw.numeric_str(scratch),
        Scalar::TimeTz => raw.timetz(scratch),
        Scalar::Inet => raw.inet(scratch),
        Scalar::Cidr => raw.cidr(scratch),
        Scalar::MacAddr => raw.macaddr(scratch),
        Scalar::MacAddr8 => raw.macaddr8(scratch),
        Scalar::Money => raw.money(scratch),
        Scalar::TsVector => raw.tsvector(scratch),
        Scalar::Range(t) => raw.range(t, scratch),
        Scalar::Multirange(t) => raw.multirange(t, scratch),
        other => raw.text_str(other.name()),
    }
}

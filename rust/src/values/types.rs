//! Which parser a column needs: [`PgType`], resolved from the type OID and type modifier
//! that a pgoutput Relation message carries for each column.
//!
//! OIDs are the fixed ones of `pg_type.dat` (identical in every PostgreSQL release since
//! the types appeared; checked against a PostgreSQL 15 `pg_type`). Types outside this set
//! (enums, citext, domains, composites, extension types) resolve to [`PgType::Unknown`]:
//! the caller may resolve a domain to its base type or an enum to [`Scalar::Text`] from the
//! catalog and use that instead.

/// A column's type, as far as value decoding is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PgType {
    Scalar(Scalar),
    /// A (declared) array of the scalar. The column's type modifier applies to the
    /// elements, as in PostgreSQL (`numeric(10,2)[]`).
    Array(Scalar),
    /// Any other type OID: a string in text format.
    Unknown(u32),
}

/// The scalar types this layer decodes, in both formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scalar {
    Bool,
    Int2,
    Int4,
    Int8,
    Oid,
    Xid,
    Cid,
    Float4,
    Float8,
    Numeric(NumericMod),
    Text,
    Varchar,
    Bpchar,
    Name,
    Xml,
    Json,
    Jsonb,
    Bytea,
    Date,
    Time,
    TimeTz,
    Timestamp,
    TimestampTz,
    Interval,
    Uuid,
    Inet,
    Cidr,
    MacAddr,
    MacAddr8,
    Money,
    TsVector,
    Range(RangeType),
    Multirange(RangeType),
}

/// The built-in range types, named by their subtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RangeType {
    Int4,
    Int8,
    Numeric,
    Timestamp,
    TimestampTz,
    Date,
}

/// A numeric column's type modifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NumericMod {
    /// `numeric` without precision: any value, any number of digits.
    Unconstrained,
    /// `numeric(precision, scale)`; precision 1..=1000, scale -1000..=1000 (negative and
    /// larger-than-precision scales exist since PostgreSQL 15).
    Constrained { precision: u16, scale: i16 },
}

/// Precision and scale of an Arrow decimal128 column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decimal128Spec {
    pub precision: u8,
    pub scale: i8,
}

/// `VARHDRSZ`: numeric type modifiers are stored offset by it, and anything smaller means
/// "no modifier".
const VARHDRSZ: i32 = 4;

impl NumericMod {
    /// Decodes `pg_attribute.atttypmod` of a numeric column.
    pub fn from_typmod(typmod: i32) -> Self {
        if typmod < VARHDRSZ {
            return Self::Unconstrained;
        }
        let packed = typmod - VARHDRSZ;
        // Precision in the high 16 bits, scale as an 11-bit two's-complement number in
        // the low bits (PostgreSQL's numeric.c, NUMERIC_TYPMOD_PRECISION/SCALE).
        let precision = ((packed >> 16) & 0xffff) as u16;
        let scale = (((packed & 0x7ff) ^ 1024) - 1024) as i16;
        Self::Constrained { precision, scale }
    }

    /// The decimal128 type holding this column exactly, if there is one: precision at
    /// most 38 and a scale that Arrow accepts (at most the precision, within i8).
    /// `None` means the column is represented as exact text.
    pub fn decimal128(self) -> Option<Decimal128Spec> {
        match self {
            Self::Unconstrained => None,
            Self::Constrained { precision, scale } => {
                let precision = u8::try_from(precision)
                    .ok()
                    .filter(|p| (1..=38).contains(p))?;
                let scale = i8::try_from(scale).ok()?;
                if scale > 0 && scale.unsigned_abs() > precision {
                    return None;
                }
                Some(Decimal128Spec { precision, scale })
            }
        }
    }
}

impl RangeType {
    pub fn oid(self) -> u32 {
        match self {
            Self::Int4 => 3904,
            Self::Int8 => 3926,
            Self::Numeric => 3906,
            Self::Timestamp => 3908,
            Self::TimestampTz => 3910,
            Self::Date => 3912,
        }
    }

    pub fn array_oid(self) -> u32 {
        match self {
            Self::Int4 => 3905,
            Self::Int8 => 3927,
            Self::Numeric => 3907,
            Self::Timestamp => 3909,
            Self::TimestampTz => 3911,
            Self::Date => 3913,
        }
    }

    pub fn multirange_array_oid(self) -> u32 {
        match self {
            Self::Int4 => 6150,
            Self::Int8 => 6157,
            Self::Numeric => 6151,
            Self::Timestamp => 6152,
            Self::TimestampTz => 6153,
            Self::Date => 6155,
        }
    }

    pub fn multirange_oid(self) -> u32 {
        match self {
            Self::Int4 => 4451,
            Self::Int8 => 4536,
            Self::Numeric => 4532,
            Self::Timestamp => 4533,
            Self::TimestampTz => 4534,
            Self::Date => 4535,
        }
    }

    /// The subtype's OID (what a binary bound holds).
    pub fn subtype_oid(self) -> u32 {
        match self {
            Self::Int4 => 23,
            Self::Int8 => 20,
            Self::Numeric => 1700,
            Self::Timestamp => 1114,
            Self::TimestampTz => 1184,
            Self::Date => 1082,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Int4 => "int4range",
            Self::Int8 => "int8range",
            Self::Numeric => "numrange",
            Self::Timestamp => "tsrange",
            Self::TimestampTz => "tstzrange",
            Self::Date => "daterange",
        }
    }

    pub fn multirange_name(self) -> &'static str {
        match self {
            Self::Int4 => "int4multirange",
            Self::Int8 => "int8multirange",
            Self::Numeric => "nummultirange",
            Self::Timestamp => "tsmultirange",
            Self::TimestampTz => "tstzmultirange",
            Self::Date => "datemultirange",
        }
    }

    const ALL: [RangeType; 6] = [
        Self::Int4,
        Self::Int8,
        Self::Numeric,
        Self::Timestamp,
        Self::TimestampTz,
        Self::Date,
    ];
}

/// `(scalar, type OID, array type OID)` for every scalar except numeric and the ranges,
/// whose variants carry data.
const SIMPLE: [(Scalar, u32, u32); 30] = [
    (Scalar::Bool, 16, 1000),
    (Scalar::Bytea, 17, 1001),
    (Scalar::Name, 19, 1003),
    (Scalar::Int8, 20, 1016),
    (Scalar::Int2, 21, 1005),
    (Scalar::Int4, 23, 1007),
    (Scalar::Text, 25, 1009),
    (Scalar::Oid, 26, 1028),
    (Scalar::Xid, 28, 1011),
    (Scalar::Cid, 29, 1012),
    (Scalar::Json, 114, 199),
    (Scalar::Xml, 142, 143),
    (Scalar::Cidr, 650, 651),
    (Scalar::Float4, 700, 1021),
    (Scalar::Float8, 701, 1022),
    (Scalar::MacAddr8, 774, 775),
    (Scalar::Money, 790, 791),
    (Scalar::MacAddr, 829, 1040),
    (Scalar::Inet, 869, 1041),
    (Scalar::Bpchar, 1042, 1014),
    (Scalar::Varchar, 1043, 1015),
    (Scalar::Date, 1082, 1182),
    (Scalar::Time, 1083, 1183),
    (Scalar::Timestamp, 1114, 1115),
    (Scalar::TimestampTz, 1184, 1185),
    (Scalar::Interval, 1186, 1187),
    (Scalar::TimeTz, 1266, 1270),
    (Scalar::Uuid, 2950, 2951),
    (Scalar::TsVector, 3614, 3643),
    (Scalar::Jsonb, 3802, 3807),
];

const NUMERIC_OID: u32 = 1700;
const NUMERIC_ARRAY_OID: u32 = 1231;

impl PgType {
    /// Resolves a column's type from its OID and type modifier (`atttypmod`, -1 when
    /// none).
    pub fn from_oid(oid: u32, typmod: i32) -> Self {
        if let Some(scalar) = Scalar::from_oid(oid, typmod) {
            return Self::Scalar(scalar);
        }
        if oid == NUMERIC_ARRAY_OID {
            return Self::Array(Scalar::Numeric(NumericMod::from_typmod(typmod)));
        }
        if let Some(&(scalar, _, _)) = SIMPLE.iter().find(|(_, _, array)| *array == oid) {
            return Self::Array(scalar);
        }
        for range in RangeType::ALL {
            if oid == range.array_oid() {
                return Self::Array(Scalar::Range(range));
            }
            if oid == range.multirange_array_oid() {
                return Self::Array(Scalar::Multirange(range));
            }
        }
        Self::Unknown(oid)
    }

    /// Whether the value layer parses this type (both formats); an unknown type is only
    /// readable as text.
    pub fn is_known(self) -> bool {
        !matches!(self, Self::Unknown(_))
    }

    /// The type name for messages (`int4`, `_int4` for arrays, `unknown`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar(scalar) => scalar.name(),
            Self::Array(_) => "array",
            Self::Unknown(_) => "unknown",
        }
    }
}

impl Scalar {
    /// The scalar with this OID, if it is one of ours.
    pub fn from_oid(oid: u32, typmod: i32) -> Option<Self> {
        if oid == NUMERIC_OID {
            return Some(Self::Numeric(NumericMod::from_typmod(typmod)));
        }
        if let Some(&(scalar, _, _)) = SIMPLE.iter().find(|(_, o, _)| *o == oid) {
            return Some(scalar);
        }
        RangeType::ALL.iter().find_map(|&r| {
            if r.oid() == oid {
                Some(Self::Range(r))
            } else if r.multirange_oid() == oid {
                Some(Self::Multirange(r))
            } else {
                None
            }
        })
    }

    /// The type's OID (what a binary array header names as its element type).
    pub fn oid(self) -> u32 {
        match self {
            Self::Numeric(_) => NUMERIC_OID,
            Self::Range(r) => r.oid(),
            Self::Multirange(r) => r.multirange_oid(),
            other => SIMPLE
                .iter()
                .find(|(s, _, _)| *s == other)
                .map_or(0, |&(_, oid, _)| oid),
        }
    }

    /// The OID of the array type over this scalar.
    pub fn array_oid(self) -> u32 {
        match self {
            Self::Numeric(_) => NUMERIC_ARRAY_OID,
            Self::Range(r) => r.array_oid(),
            Self::Multirange(r) => r.multirange_array_oid(),
            other => SIMPLE
                .iter()
                .find(|(s, _, _)| *s == other)
                .map_or(0, |&(_, _, oid)| oid),
        }
    }

    /// The PostgreSQL type name, used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bool => "bool",
            Self::Int2 => "int2",
            Self::Int4 => "int4",
            Self::Int8 => "int8",
            Self::Oid => "oid",
            Self::Xid => "xid",
            Self::Cid => "cid",
            Self::Float4 => "float4",
            Self::Float8 => "float8",
            Self::Numeric(_) => "numeric",
            Self::Text => "text",
            Self::Varchar => "varchar",
            Self::Bpchar => "bpchar",
            Self::Name => "name",
            Self::Xml => "xml",
            Self::Json => "json",
            Self::Jsonb => "jsonb",
            Self::Bytea => "bytea",
            Self::Date => "date",
            Self::Time => "time",
            Self::TimeTz => "timetz",
            Self::Timestamp => "timestamp",
            Self::TimestampTz => "timestamptz",
            Self::Interval => "interval",
            Self::Uuid => "uuid",
            Self::Inet => "inet",
            Self::Cidr => "cidr",
            Self::MacAddr => "macaddr",
            Self::MacAddr8 => "macaddr8",
            Self::Money => "money",
            Self::TsVector => "tsvector",
            Self::Range(r) => r.name(),
            Self::Multirange(r) => r.multirange_name(),
        }
    }
}

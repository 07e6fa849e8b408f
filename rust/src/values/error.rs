//! The one error type of the value layer.
//!
//! A [`ValueError`] names the PostgreSQL type and what was wrong, as data the Arrow layer
//! can match on to apply its unrepresentable-value policy. It never carries the value's
//! text or bytes: errors end up in logs, and row values must not.

use std::fmt;

/// What was wrong with a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueErrorKind {
    /// Not a value of the type in this format (bad syntax, wrong length, a field out of
    /// its legal range, trailing bytes).
    Malformed,
    /// Text-like bytes that are not valid UTF-8.
    InvalidUtf8,
    /// numeric `NaN` where a decimal was asked for (float NaN is a value, not an error).
    NumericNaN,
    /// `infinity` / `-infinity` of numeric, date, timestamp, timestamptz or (PostgreSQL
    /// 17+) interval, where the representation has no infinity.
    Infinite { negative: bool },
    /// A numeric with more significant digits than the decimal's precision (at most 38).
    NumericOverflow,
    /// A numeric with non-zero digits beyond the decimal's scale: converting it would
    /// round, which this layer never does.
    InexactScale,
    /// A finite value outside what the representation holds (a date beyond date32, a
    /// timestamp beyond i64 microseconds since 1970, an interval field beyond i32/i64).
    OutOfRange,
    /// time `24:00:00`, legal in PostgreSQL but one microsecond past what Arrow time64
    /// holds. Its value is exactly [`crate::values::datetime::MICROS_PER_DAY`].
    Time2400,
    /// An array of more than one dimension: a list column holds one.
    MultiDimensionalArray,
    /// A value this layer does not decode in this format (see the module docs).
    Unsupported,
}

impl ValueErrorKind {
    fn describe(self) -> &'static str {
        match self {
            Self::Malformed => "malformed value",
            Self::InvalidUtf8 => "value is not valid UTF-8",
            Self::NumericNaN => "not-a-number has no decimal representation",
            Self::Infinite { .. } => "infinite value has no representation",
            Self::NumericOverflow => "value has more digits than the decimal precision",
            Self::InexactScale => "value has more fractional digits than the decimal scale",
            Self::OutOfRange => "value is out of the representable range",
            Self::Time2400 => "the end-of-day time does not fit time64",
            Self::MultiDimensionalArray => "multi-dimensional array does not fit a list",
            Self::Unsupported => "format not supported for this type",
        }
    }
}

/// A value that could not be turned into its representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ValueError {
    /// The PostgreSQL type name (`int4`, `timestamptz`, ...).
    pub type_name: &'static str,
    pub kind: ValueErrorKind,
}

impl ValueError {
    pub const fn new(type_name: &'static str, kind: ValueErrorKind) -> Self {
        Self { type_name, kind }
    }

    pub const fn malformed(type_name: &'static str) -> Self {
        Self::new(type_name, ValueErrorKind::Malformed)
    }
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.type_name, self.kind.describe())
    }
}

impl std::error::Error for ValueError {}

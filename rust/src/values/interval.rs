//! interval: months, days and microseconds, kept apart as PostgreSQL keeps them (a month
//! is not a fixed number of days, nor a day a fixed number of hours across DST).
//!
//! Binary format (`interval_send`): Int64 microseconds, Int32 days, Int32 months.
//! PostgreSQL 17 added ±infinity: all three fields at their maximum (minimum).
//!
//! Text format: whatever IntervalStyle the server prints with (`interval_out` /
//! `EncodeInterval`), all four of them:
//! * `postgres` (ours): `1 year 2 mons -3 days +04:05:06.789`, `00:00:00`, `-00:00:01`;
//!   each unit carries its own sign, the clock part one sign for all of it;
//! * `postgres_verbose`: `@ 1 year 2 mons 3 days 4 hours 5 mins 6.789 secs ago`, `@ 0`;
//!   `ago` negates everything;
//! * `iso_8601`: `P1Y2M3DT4H5M6.789S`, `PT0S`, `P-1Y-2M3DT-4H-5M-6S`;
//! * `sql_standard`: `1-2`, `3 4:05:06.789`, `-1-2`, `-3 4:05:06` (the leading sign
//!   applies to every field), `+1-2 -3 +4:05:06` (mixed signs: every field signed), `0`.
//!
//! Sub-microsecond digits never come from the server and are rejected rather than
//! rounded.

use super::datetime::{fixed, MICROS_PER_HOUR, MICROS_PER_MINUTE, MICROS_PER_SECOND};
use super::error::{ValueError, ValueErrorKind};

const TY: &str = "interval";

/// An interval's three independent fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Interval {
    pub months: i32,
    pub days: i32,
    pub microseconds: i64,
}

fn malformed() -> ValueError {
    ValueError::malformed(TY)
}

fn out_of_range() -> ValueError {
    ValueError::new(TY, ValueErrorKind::OutOfRange)
}

/// interval binary: i64 µs, i32 days, i32 months.
pub fn binary(b: &[u8]) -> Result<Interval, ValueError> {
    let bytes: [u8; 16] = fixed(b, TY)?;
    let (micros, rest) = bytes.split_at(8);
    let (days, months) = rest.split_at(4);
    classify(Interval {
        microseconds: i64::from_be_bytes(fixed(micros, TY)?),
        days: i32::from_be_bytes(fixed(days, TY)?),
        months: i32::from_be_bytes(fixed(months, TY)?),
    })
}

/// PostgreSQL 17's ±infinity: every field at its maximum (minimum). Older servers can
/// hold that combination as a finite value and print it in full; it is reported as
/// infinite from either format, so text and binary always agree.
fn classify(value: Interval) -> Result<Interval, ValueError> {
    match (value.months, value.days, value.microseconds) {
        (i32::MAX, i32::MAX, i64::MAX) => Err(ValueError::new(
            TY,
            ValueErrorKind::Infinite { negative: false },
        )),
        (i32::MIN, i32::MIN, i64::MIN) => Err(ValueError::new(
            TY,
            ValueErrorKind::Infinite { negative: true },
        )),
        _ => Ok(value),
    }
}

/// interval text in any IntervalStyle (see the module docs).
pub fn text(s: &str) -> Result<Interval, ValueError> {
    match s {
        "infinity" => {
            return Err(ValueError::new(
                TY,
                ValueErrorKind::Infinite { negative: false },
            ))
        }
        "-infinity" => {
            return Err(ValueError::new(
                TY,
                ValueErrorKind::Infinite { negative: true },
            ))
        }
        _ => {}
    }
    let value = if let Some(iso) = s.strip_prefix('P') {
        iso_8601(iso)?
    } else if s.bytes().any(|b| b.is_ascii_alphabetic() || b == b'@') {
        unit_words(s)?
    } else {
        sql_standard(s)?
    };
    classify(value)
}

/// Running totals, wider than the fields so that a value whose magnitude only fits
/// once negated (`... ago`, i64::MIN µs) is read; the fields are checked at the end.
#[derive(Default)]
struct Acc {
    months: i64,
    days: i64,
    micros: i128,
}

impl Acc {
    fn add_months(&mut self, n: i64) -> Result<(), ValueError> {
        self.months = self.months.checked_add(n).ok_or(out_of_range())?;
        Ok(())
    }

    fn add_days(&mut self, n: i64) -> Result<(), ValueError> {
        self.days = self.days.checked_add(n).ok_or(out_of_range())?;
        Ok(())
    }

    fn add_micros(&mut self, n: i128) -> Result<(), ValueError> {
        self.micros = self.micros.checked_add(n).ok_or(out_of_range())?;
        Ok(())
    }

    fn add_scaled(&mut self, n: i64, unit: i64) -> Result<(), ValueError> {
        self.add_micros(i128::from(n) * i128::from(unit))
    }

    fn negate(&mut self) -> Result<(), ValueError> {
        self.months = self.months.checked_neg().ok_or(out_of_range())?;
        self.days = self.days.checked_neg().ok_or(out_of_range())?;
        self.micros = self.micros.checked_neg().ok_or(out_of_range())?;
        Ok(())
    }

    fn finish(self) -> Result<Interval, ValueError> {
        Ok(Interval {
            months: i32::try_from(self.months).map_err(|_| out_of_range())?,
            days: i32::try_from(self.days).map_err(|_| out_of_range())?,
            microseconds: i64::try_from(self.micros).map_err(|_| out_of_range())?,
        })
    }
}

/// A sign prefix: `Some(true)` for `-`, `Some(false)` for `+`, `None` for none.
fn split_sign(s: &str) -> (Option<bool>, &str) {
    if let Some(rest) = s.strip_prefix('-') {
        (Some(true), rest)
    } else if let Some(rest) = s.strip_prefix('+') {
        (Some(false), rest)
    } else {
        (None, s)
    }
}

/// Unsigned decimal digits (at least one) as i64.
fn unsigned(s: &str) -> Result<i64, ValueError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed());
    }
    s.parse::<i64>().map_err(|_| out_of_range())
}

/// An optionally signed integer.
fn signed(s: &str) -> Result<i64, ValueError> {
    let (negative, digits) = split_sign(s);
    let n = unsigned(digits)?;
    Ok(if negative == Some(true) { -n } else { n })
}

/// An optionally signed number of seconds with up to six fraction digits, as µs.
fn seconds(s: &str) -> Result<i128, ValueError> {
    let (negative, body) = split_sign(s);
    let (whole, frac) = match body.split_once('.') {
        Some((w, f)) => (w, f),
        None => (body, ""),
    };
    let micros = i128::from(unsigned(whole)?) * i128::from(MICROS_PER_SECOND)
        + i128::from(fraction(frac, body.contains('.'))?);
    Ok(if negative == Some(true) {
        -micros
    } else {
        micros
    })
}

/// The digits after a point as µs (`5` is 500000); `present` says a point was there.
fn fraction(frac: &str, present: bool) -> Result<i64, ValueError> {
    if !present {
        return Ok(0);
    }
    if frac.is_empty() || frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed());
    }
    let digits = unsigned(frac)?;
    Ok(digits * 10_i64.pow(6 - frac.len() as u32))
}

/// A clock field `[+-]H:MM:SS[.ffffff]` (hours of any width, minutes and seconds of
/// two digits, as `%02d` prints them), as µs. A sign covers the whole field.
fn clock(s: &str) -> Result<i128, ValueError> {
    let (negative, body) = split_sign(s);
    let mut parts = body.splitn(3, ':');
    let (Some(h), Some(m), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(malformed());
    };
    let (sec, tail) = rest.split_at_checked(2).ok_or(malformed())?;
    let frac = match tail {
        "" => 0,
        t => fraction(t.strip_prefix('.').ok_or(malformed())?, true)?,
    };
    let (hours, minutes, secs) = (unsigned(h)?, unsigned(m)?, unsigned(sec)?);
    if m.len() != 2 || minutes > 59 || secs > 59 {
        return Err(malformed());
    }
    let micros = i128::from(hours) * i128::from(MICROS_PER_HOUR)
        + i128::from(minutes * MICROS_PER_MINUTE + secs * MICROS_PER_SECOND + frac);
    Ok(if negative == Some(true) {
        -micros
    } else {
        micros
    })
}

/// `postgres` and `postgres_verbose` styles: `<number> <unit>` pairs, an optional
/// clock field last, an optional leading `@` and trailing `ago`.
fn unit_words(s: &str) -> Result<Interval, ValueError> {
    let mut acc = Acc::default();
    let mut tokens = s.split(' ').peekable();
    let verbose = tokens.peek() == Some(&"@");
    if verbose {
        tokens.next();
    }
    let mut ago = false;
    let mut seen_any = false;
    while let Some(token) = tokens.next() {
        if ago {
            return Err(malformed());
        }
        if verbose && token == "ago" && seen_any {
            ago = true;
            continue;
        }
        if token.contains(':') {
            acc.add_micros(clock(token)?)?;
            seen_any = true;
            // The clock field is always last.
            if tokens.peek().is_some_and(|t| *t != "ago") {
                return Err(malformed());
            }
            continue;
        }
        let unit = match tokens.next() {
            Some(unit) => unit,
            // `@ 0`: verbose style's unitless zero.
            None if verbose && token == "0" && !seen_any => {
                seen_any = true;
                continue;
            }
            None => return Err(malformed()),
        };
        match unit {
            "year" | "years" => {
                acc.add_months(signed(token)?.checked_mul(12).ok_or(out_of_range())?)?;
            }
            "mon" | "mons" => acc.add_months(signed(token)?)?,
            "day" | "days" => acc.add_days(signed(token)?)?,
            "hour" | "hours" => acc.add_scaled(signed(token)?, MICROS_PER_HOUR)?,
            "min" | "mins" => acc.add_scaled(signed(token)?, MICROS_PER_MINUTE)?,
            "sec" | "secs" => acc.add_micros(seconds(token)?)?,
            _ => return Err(malformed()),
        }
        seen_any = true;
    }
    if !seen_any {
        return Err(malformed());
    }
    if ago {
        acc.negate()?;
    }
    acc.finish()
}

/// `sql_standard` style, in the shapes `interval_out` prints: `0` (a bare number alone
/// counts seconds), `Y-M`, `H:MM:SS`, `D H:MM:SS` and `Y-M D H:MM:SS`. A sign on the
/// first field covers the later fields that carry none.
fn sql_standard(s: &str) -> Result<Interval, ValueError> {
    let mut fields: [Option<&str>; 3] = [None; 3];
    let mut tokens = s.split(' ');
    for slot in &mut fields {
        *slot = tokens.next();
    }
    if tokens.next().is_some() {
        return Err(malformed());
    }
    let (year_month, day, clock_field, bare) = match fields {
        [Some(only), None, None] if only.contains(':') => (None, None, Some(only), None),
        [Some(only), None, None] if only.get(1..).is_some_and(|t| t.contains('-')) => {
            (Some(only), None, None, None)
        }
        [Some(only), None, None] => (None, None, None, Some(only)),
        [Some(day), Some(clock), None] => (None, Some(day), Some(clock), None),
        [Some(ym), Some(day), Some(clock)] => (Some(ym), Some(day), Some(clock), None),
        _ => return Err(malformed()),
    };
    let leading_negative = s.starts_with('-');
    let signed_field = |token| field_sign(token, leading_negative);
    let mut acc = Acc::default();
    if let Some(token) = year_month {
        let (negative, body) = signed_field(token);
        let (y, m) = body.split_once('-').ok_or(malformed())?;
        let (years, months) = (unsigned(y)?, unsigned(m)?);
        let months = years
            .checked_mul(12)
            .and_then(|y| y.checked_add(months))
            .ok_or(out_of_range())?;
        acc.add_months(if negative { -months } else { months })?;
    }
    if let Some(token) = day {
        let (negative, body) = signed_field(token);
        let days = unsigned(body)?;
        acc.add_days(if negative { -days } else { days })?;
    }
    if let Some(token) = clock_field {
        let (negative, body) = signed_field(token);
        let micros = clock(body)?;
        acc.add_micros(if negative { -micros } else { micros })?;
    }
    if let Some(token) = bare {
        let (negative, body) = signed_field(token);
        let seconds = unsigned(body)?;
        acc.add_scaled(if negative { -seconds } else { seconds }, MICROS_PER_SECOND)?;
    }
    acc.finish()
}

/// A sql_standard field's sign (its own, else the leading one) and digits.
fn field_sign(token: &str, leading_negative: bool) -> (bool, &str) {
    let (sign, body) = split_sign(token);
    (sign.map_or(leading_negative, |negative| negative), body)
}

/// `iso_8601` style after the `P`: `nY nM nW nD`, then `T` and `nH nM n.fS`.
fn iso_8601(s: &str) -> Result<Interval, ValueError> {
    let mut acc = Acc::default();
    let (date, time) = match s.split_once('T') {
        Some((_, "")) => return Err(malformed()),
        Some((d, t)) => (d, t),
        None => (s, ""),
    };
    let mut any = false;
    for field in Designated::new(date, b"YMWD") {
        let (number, designator) = field?;
        any = true;
        let n = signed(number)?;
        match designator {
            b'Y' => acc.add_months(n.checked_mul(12).ok_or(out_of_range())?)?,
            b'M' => acc.add_months(n)?,
            b'W' => acc.add_days(n.checked_mul(7).ok_or(out_of_range())?)?,
            _ => acc.add_days(n)?,
        }
    }
    for field in Designated::new(time, b"HMS") {
        let (number, designator) = field?;
        any = true;
        match designator {
            b'H' => acc.add_scaled(signed(number)?, MICROS_PER_HOUR)?,
            b'M' => acc.add_scaled(signed(number)?, MICROS_PER_MINUTE)?,
            _ => acc.add_micros(seconds(number)?)?,
        }
    }
    if !any {
        return Err(malformed());
    }
    acc.finish()
}

/// The `<number><designator>` fields of an ISO 8601 duration part, designators taken
/// from `order`, each at most once and in that order.
struct Designated<'a> {
    rest: &'a str,
    order: &'static [u8],
    failed: bool,
}

impl<'a> Designated<'a> {
    fn new(s: &'a str, order: &'static [u8]) -> Self {
        Self {
            rest: s,
            order,
            failed: false,
        }
    }
}

impl<'a> Iterator for Designated<'a> {
    type Item = Result<(&'a str, u8), ValueError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        let found = self
            .rest
            .bytes()
            .position(|b| b.is_ascii_alphabetic())
            .and_then(|at| {
                let designator = *self.rest.as_bytes().get(at)?;
                let next = self.order.iter().position(|&d| d == designator)?;
                let number = self.rest.get(..at).filter(|n| !n.is_empty())?;
                Some((number, designator, at, next))
            });
        if let Some((number, designator, at, next)) = found {
            self.rest = self.rest.get(at + 1..).unwrap_or_default();
            self.order = self.order.get(next + 1..).unwrap_or_default();
            Some(Ok((number, designator)))
        } else {
            self.failed = true;
            Some(Err(malformed()))
        }
    }
}

/// Appends an interval as `interval_out` prints it with IntervalStyle=postgres:
/// `1 year 2 mons -3 days +04:05:06.789`, `00:00:00`.
pub(crate) fn write_postgres(out: &mut String, value: Interval) {
    use std::fmt::Write as _;
    let mut is_zero = true;
    let mut is_before = false;
    let parts = [
        (value.months / 12, "year"),
        (value.months % 12, "mon"),
        (value.days, "day"),
    ];
    for (n, unit) in parts {
        if n == 0 {
            continue;
        }
        let space = if is_zero { "" } else { " " };
        let plus = if is_before && n > 0 { "+" } else { "" };
        let plural = if n == 1 { "" } else { "s" };
        let _ = write!(out, "{space}{plus}{n} {unit}{plural}");
        is_before = n < 0;
        is_zero = false;
    }
    let micros = value.microseconds;
    if is_zero || micros != 0 {
        let space = if is_zero { "" } else { " " };
        let sign = if micros < 0 {
            "-"
        } else if is_before {
            "+"
        } else {
            ""
        };
        let abs = micros.unsigned_abs();
        let hours = abs / MICROS_PER_HOUR.unsigned_abs();
        let minutes = abs / MICROS_PER_MINUTE.unsigned_abs() % 60;
        let seconds = abs / MICROS_PER_SECOND.unsigned_abs() % 60;
        let _ = write!(out, "{space}{sign}{hours:02}:{minutes:02}:{seconds:02}");
        let fraction = abs % MICROS_PER_SECOND.unsigned_abs();
        super::datetime::write_fraction(out, fraction as i64);
    }
}

//! date, time, timetz, timestamp and timestamptz: calendar arithmetic, the ISO text forms
//! PostgreSQL prints (DateStyle=ISO), and their binary send formats.
//!
//! PostgreSQL's calendar is the proleptic Gregorian one with astronomical year numbering
//! inside (year 0 = 1 BC) and `YYYY-MM-DD BC` outside; years print with at least four
//! digits and grow to five or more after 9999. Binary dates are days and binary
//! timestamps microseconds since 2000-01-01, with the extreme integers meaning
//! ±infinity (PostgreSQL docs, "Date/Time Types"; the server's `date_out`, `date_send`,
//! `timestamp_out` and `timestamp_send` functions).
//! Here dates become days and timestamps microseconds since 1970-01-01, Arrow's epoch.

use std::fmt::Write as _;

use super::error::{ValueError, ValueErrorKind};
use super::scan::{digits8, Scanner};

pub const MICROS_PER_SECOND: i64 = 1_000_000;
pub const MICROS_PER_MINUTE: i64 = 60 * MICROS_PER_SECOND;
pub const MICROS_PER_HOUR: i64 = 60 * MICROS_PER_MINUTE;
pub const MICROS_PER_DAY: i64 = 24 * MICROS_PER_HOUR;
/// 2000-01-01, PostgreSQL's epoch, in days since 1970-01-01.
pub const PG_EPOCH_DAYS: i32 = 10_957;
/// 2000-01-01 in microseconds since 1970-01-01.
pub const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS as i64 * MICROS_PER_DAY;
/// A timetz zone offset is less than 16 hours either way (`TZDISP_LIMIT`).
const TZ_LIMIT_SECONDS: i32 = 16 * 3600;

/// Days since 1970-01-01 of a proleptic Gregorian date (astronomical year).
/// After H. Hinnant's `days_from_civil`, in i64 so any year this layer accepts fits.
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date `days` after 1970-01-01: (astronomical year, month, day).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn is_leap(year: i64) -> bool {
    year.rem_euclid(4) == 0 && (year.rem_euclid(100) != 0 || year.rem_euclid(400) == 0)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => 31,
    }
}

/// Years with more digits are out of range before any arithmetic (PostgreSQL's own
/// limits are 5874897 AD for dates and 294276 AD for timestamps).
const MAX_YEAR_DIGITS: usize = 9;

fn special(s: &str) -> Option<bool> {
    match s {
        "infinity" => Some(false),
        "-infinity" => Some(true),
        _ => None,
    }
}

/// `YYYY-MM-DD` (year of four or more digits) as (year, month, day); the caller handles
/// the trailing ` BC`, which in timestamps follows the time and offset.
fn scan_date(sc: &mut Scanner<'_>, ty: &'static str) -> Result<(i64, u32, u32), ValueError> {
    let year_start = sc.pos();
    let year = sc.digits(1, 18).ok_or(ValueError::malformed(ty))?;
    if sc.pos() - year_start > MAX_YEAR_DIGITS {
        return Err(ValueError::new(ty, ValueErrorKind::OutOfRange));
    }
    sc.expect(b'-').ok_or(ValueError::malformed(ty))?;
    let month = sc.fixed_digits(2).ok_or(ValueError::malformed(ty))?;
    sc.expect(b'-').ok_or(ValueError::malformed(ty))?;
    let day = sc.fixed_digits(2).ok_or(ValueError::malformed(ty))?;
    if year == 0 || !(1..=12).contains(&month) {
        return Err(ValueError::malformed(ty));
    }
    Ok((year as i64, month as u32, day as u32))
}

/// Applies an optional ` BC` suffix and checks the day of month; returns days since 1970.
fn finish_date(
    sc: &mut Scanner<'_>,
    (year, month, day): (i64, u32, u32),
    ty: &'static str,
) -> Result<i64, ValueError> {
    // Year n BC is astronomical year 1 - n.
    let year = if sc.eat_str(" BC") { 1 - year } else { year };
    if day == 0 || day > days_in_month(year, month) {
        return Err(ValueError::malformed(ty));
    }
    Ok(days_from_civil(year, month, day))
}

/// `HH:MM:SS[.ffffff]` as microseconds; `max_hour` is 24 for time/timetz (where only
/// `24:00:00` may use it) and 23 inside timestamps.
fn scan_time(sc: &mut Scanner<'_>, max_hour: u64, ty: &'static str) -> Result<i64, ValueError> {
    let hour = sc.fixed_digits(2).ok_or(ValueError::malformed(ty))?;
    sc.expect(b':').ok_or(ValueError::malformed(ty))?;
    let minute = sc.fixed_digits(2).ok_or(ValueError::malformed(ty))?;
    sc.expect(b':').ok_or(ValueError::malformed(ty))?;
    let second = sc.fixed_digits(2).ok_or(ValueError::malformed(ty))?;
    let micros = scan_fraction(sc, ty)?;
    if hour > max_hour || minute > 59 || second > 59 {
        return Err(ValueError::malformed(ty));
    }
    if hour == 24 && (minute, second, micros) != (0, 0, 0) {
        return Err(ValueError::malformed(ty));
    }
    Ok(hour as i64 * MICROS_PER_HOUR
        + minute as i64 * MICROS_PER_MINUTE
        + second as i64 * MICROS_PER_SECOND
        + micros)
}

/// An optional `.f` to `.ffffff` (PostgreSQL prints at most microseconds and drops
/// trailing zeros). More digits never come from the server and would need rounding, so
/// they are malformed here.
fn scan_fraction(sc: &mut Scanner<'_>, ty: &'static str) -> Result<i64, ValueError> {
    if !sc.eat(b'.') {
        return Ok(0);
    }
    let start = sc.pos();
    // A run of more than six digits fails here.
    let digits = sc.digits(1, 6).ok_or(ValueError::malformed(ty))?;
    let scale = 10_i64.pow(6 - (sc.pos() - start) as u32);
    Ok(digits as i64 * scale)
}

/// A zone offset `+HH`, `-HH:MM` or `+HH:MM:SS`, as seconds EAST of UTC (as printed).
fn scan_offset(sc: &mut Scanner<'_>, ty: &'static str) -> Result<i32, ValueError> {
    let negative = match sc.next() {
        Some(b'+') => false,
        Some(b'-') => true,
        _ => return Err(ValueError::malformed(ty)),
    };
    let hours = sc.fixed_digits(2).ok_or(ValueError::malformed(ty))?;
    let mut minutes = 0;
    let mut seconds = 0;
    if sc.eat(b':') {
        minutes = sc.fixed_digits(2).ok_or(ValueError::malformed(ty))?;
        if sc.eat(b':') {
            seconds = sc.fixed_digits(2).ok_or(ValueError::malformed(ty))?;
        }
    }
    if minutes > 59 || seconds > 59 {
        return Err(ValueError::malformed(ty));
    }
    let total = (hours * 3600 + minutes * 60 + seconds) as i32;
    if total >= TZ_LIMIT_SECONDS {
        return Err(ValueError::malformed(ty));
    }
    Ok(if negative { -total } else { total })
}

fn to_date32(days: i64, ty: &'static str) -> Result<i32, ValueError> {
    i32::try_from(days).map_err(|_| ValueError::new(ty, ValueErrorKind::OutOfRange))
}

/// date text (`2020-01-31`, `0044-03-15 BC`, `12345-01-01`, `infinity`) -> days since
/// 1970-01-01.
pub fn date_text(s: &str) -> Result<i32, ValueError> {
    const TY: &str = "date";
    if let Some(negative) = special(s) {
        return Err(ValueError::new(TY, ValueErrorKind::Infinite { negative }));
    }
    let mut sc = Scanner::new(s);
    let ymd = scan_date(&mut sc, TY)?;
    let days = finish_date(&mut sc, ymd, TY)?;
    sc.end().ok_or(ValueError::malformed(TY))?;
    to_date32(days, TY)
}

/// date binary: i32 days since 2000-01-01, `i32::MIN`/`i32::MAX` for ∓infinity.
pub fn date_binary(b: &[u8]) -> Result<i32, ValueError> {
    const TY: &str = "date";
    let days = i32::from_be_bytes(fixed(b, TY)?);
    match days {
        i32::MAX => Err(ValueError::new(
            TY,
            ValueErrorKind::Infinite { negative: false },
        )),
        i32::MIN => Err(ValueError::new(
            TY,
            ValueErrorKind::Infinite { negative: true },
        )),
        d => d
            .checked_add(PG_EPOCH_DAYS)
            .ok_or(ValueError::new(TY, ValueErrorKind::OutOfRange)),
    }
}

/// time text `HH:MM:SS[.ffffff]` -> microseconds since midnight. `24:00:00` is
/// [`ValueErrorKind::Time2400`] (its value is [`MICROS_PER_DAY`]).
pub fn time_text(s: &str) -> Result<i64, ValueError> {
    const TY: &str = "time";
    let mut sc = Scanner::new(s);
    let micros = scan_time(&mut sc, 24, TY)?;
    sc.end().ok_or(ValueError::malformed(TY))?;
    check_time(micros, TY)
}

/// time binary: i64 microseconds since midnight, 0 to 24:00:00 inclusive.
pub fn time_binary(b: &[u8]) -> Result<i64, ValueError> {
    const TY: &str = "time";
    let micros = i64::from_be_bytes(fixed(b, TY)?);
    if !(0..=MICROS_PER_DAY).contains(&micros) {
        return Err(ValueError::malformed(TY));
    }
    check_time(micros, TY)
}

fn check_time(micros: i64, ty: &'static str) -> Result<i64, ValueError> {
    if micros == MICROS_PER_DAY {
        Err(ValueError::new(ty, ValueErrorKind::Time2400))
    } else {
        Ok(micros)
    }
}

/// timetz text (`04:05:06.789+05:30`): checked, then passed through unchanged — it is
/// already exactly what `timetz_out` prints.
pub fn timetz_text(s: &str) -> Result<&str, ValueError> {
    const TY: &str = "timetz";
    let mut sc = Scanner::new(s);
    scan_time(&mut sc, 24, TY)?;
    scan_offset(&mut sc, TY)?;
    sc.end().ok_or(ValueError::malformed(TY))?;
    Ok(s)
}

/// timetz binary: i64 microseconds since midnight, then i32 zone offset in seconds WEST
/// of UTC. Written as `timetz_out` prints it.
pub fn timetz_binary(b: &[u8], out: &mut String) -> Result<(), ValueError> {
    const TY: &str = "timetz";
    let bytes: [u8; 12] = fixed(b, TY)?;
    let (time, zone) = bytes.split_at(8);
    let time = i64::from_be_bytes(fixed(time, TY)?);
    let zone = i32::from_be_bytes(fixed(zone, TY)?);
    if !(0..=MICROS_PER_DAY).contains(&time)
        || zone.unsigned_abs() >= TZ_LIMIT_SECONDS.unsigned_abs()
    {
        return Err(ValueError::malformed(TY));
    }
    out.clear();
    write_time(out, time);
    write_offset(out, zone.saturating_neg());
    Ok(())
}

/// timestamp text (`2020-01-31 04:05:06.789`, `... BC`, `infinity`) -> microseconds
/// since 1970-01-01 (no time zone).
pub fn timestamp_text(s: &str) -> Result<i64, ValueError> {
    parse_timestamp(s, false, "timestamp")
}

/// timestamptz text (`2020-01-31 04:05:06.789+05:30`, `... +00 BC`) -> microseconds
/// since 1970-01-01 UTC. Any printed offset is applied, whatever the session TimeZone.
pub fn timestamptz_text(s: &str) -> Result<i64, ValueError> {
    parse_timestamp(s, true, "timestamptz")
}

fn parse_timestamp(s: &str, with_zone: bool, ty: &'static str) -> Result<i64, ValueError> {
    match usual_timestamp(s.as_bytes(), with_zone) {
        Some(micros) => Ok(micros),
        None => parse_any_timestamp(s, with_zone, ty),
    }
}

/// [`parse_timestamp`] for every form PostgreSQL prints, field by field.
fn parse_any_timestamp(s: &str, with_zone: bool, ty: &'static str) -> Result<i64, ValueError> {
    if let Some(negative) = special(s) {
        return Err(ValueError::new(ty, ValueErrorKind::Infinite { negative }));
    }
    let mut sc = Scanner::new(s);
    let ymd = scan_date(&mut sc, ty)?;
    if !(sc.eat(b' ') || sc.eat(b'T')) {
        return Err(ValueError::malformed(ty));
    }
    let time = scan_time(&mut sc, 23, ty)?;
    let offset = if with_zone {
        scan_offset(&mut sc, ty)?
    } else {
        0
    };
    let days = finish_date(&mut sc, ymd, ty)?;
    sc.end().ok_or(ValueError::malformed(ty))?;
    // Local wall time minus its offset east of UTC is UTC.
    let micros = i128::from(days) * i128::from(MICROS_PER_DAY) + i128::from(time)
        - i128::from(offset) * i128::from(MICROS_PER_SECOND);
    i64::try_from(micros).map_err(|_| ValueError::new(ty, ValueErrorKind::OutOfRange))
}

/// The form nearly every timestamp comes in, read at fixed positions:
/// `YYYY-MM-DD HH:MM:SS[.f…]` (a four-digit year AD), and with a zone `+HH` or `-HH:MM`.
/// `None` for anything else, valid or not ([`parse_timestamp`] reads it then); the same
/// microseconds as [`parse_timestamp`] otherwise.
fn usual_timestamp(b: &[u8], with_zone: bool) -> Option<i64> {
    // The high bit of each byte of a word.
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Microseconds per unit of a fraction of n digits.
    const SCALE: [i64; 7] = [0, 100_000, 10_000, 1_000, 100, 10, 1];
    let (head, mut rest) = b.split_first_chunk::<19>()?;
    let (date, time) = head.split_first_chunk::<8>()?;
    let (time, seconds) = time.split_first_chunk::<8>()?;
    // Two words XORed with the form they should have: digits become 0 to 9, the
    // separators 0; a word is right when its separator bytes are 0 and no byte is above
    // 9 (adding 0x76 sets the high bit of a byte above 9; a byte from 0x80 has it).
    let date = u64::from_le_bytes(*date) ^ u64::from_le_bytes(*b"0000-00-");
    let time = u64::from_le_bytes(*time) ^ u64::from_le_bytes(*b"00 00:00");
    let digits_only = |w: u64| (w | w.wrapping_add(0x7676_7676_7676_7676)) & HIGH == 0;
    let separators = (date & 0xff00_00ff_0000_0000) | (time & 0x0000_ff00_00ff_0000);
    if separators != 0 || !digits_only(date) || !digits_only(time) {
        return None;
    }
    // The digit in byte `i` of a word.
    let at = |w: u64, i: u32| i64::from((w >> (8 * i)) as u8);
    let two = |w: u64, i: u32| at(w, i) * 10 + at(w, i + 1);
    let year = two(date, 0) * 100 + two(date, 2);
    let (month, day) = (two(date, 5), two(time, 0));
    let (hour, minute) = (two(time, 3), two(time, 6));
    let second = match *seconds {
        [b':', s0, s1] => two_digits(s0, s1)?,
        _ => return None,
    };
    let month = u32::try_from(month).ok().filter(|m| (1..=12).contains(m))?;
    let day = u32::try_from(day).ok()?;
    // Every month has 28 days: the calendar is asked only about the days past them.
    if year == 0 || day == 0 || (day > 28 && day > days_in_month(year, month)) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut micros = 0;
    if let Some((b'.', fraction)) = rest.split_first() {
        // One to six digits, scaled to microseconds (a run of seven or eight has no scale).
        let (n, digits) = digits8(b, b.len() - fraction.len());
        micros = i64::try_from(digits).ok()? * *SCALE.get(n).filter(|&&s| s != 0)?;
        rest = fraction.get(n..)?;
    }
    let mut offset = 0;
    if with_zone {
        let (hours, minutes, sign) = match *rest {
            [sign, h0, h1] => (two_digits(h0, h1)?, 0, sign),
            [sign, h0, h1, b':', m0, m1] => (two_digits(h0, h1)?, two_digits(m0, m1)?, sign),
            _ => return None,
        };
        let seconds = hours * 3600 + minutes * 60;
        if minutes > 59 || seconds >= i64::from(TZ_LIMIT_SECONDS) {
            return None;
        }
        offset = seconds * MICROS_PER_SECOND;
        offset = match sign {
            b'+' => offset,
            b'-' => -offset,
            _ => return None,
        };
        rest = &[];
    }
    if !rest.is_empty() {
        return None;
    }
    let days = days_from_civil_ad(year as u32, month, day);
    let time = hour * MICROS_PER_HOUR + minute * MICROS_PER_MINUTE + second * MICROS_PER_SECOND;
    Some(days * MICROS_PER_DAY + time + micros - offset)
}

/// [`days_from_civil`] for years 1 to 9999 AD, in unsigned arithmetic: no negative years,
/// so no rounding towards minus infinity to correct for.
fn days_from_civil_ad(year: u32, month: u32, day: u32) -> i64 {
    let y = year - u32::from(month <= 2);
    let (era, yoe) = (y / 400, y % 400);
    let shifted_month = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * shifted_month + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    i64::from(era * 146_097 + doe) - 719_468
}

/// Two ASCII digits as a number.
fn two_digits(hi: u8, lo: u8) -> Option<i64> {
    let (hi, lo) = (hi.wrapping_sub(b'0'), lo.wrapping_sub(b'0'));
    (hi < 10 && lo < 10).then(|| i64::from(hi) * 10 + i64::from(lo))
}

/// timestamp / timestamptz binary: i64 microseconds since 2000-01-01 (UTC for
/// timestamptz), `i64::MIN`/`i64::MAX` for ∓infinity -> microseconds since 1970-01-01.
pub fn timestamp_binary(b: &[u8]) -> Result<i64, ValueError> {
    timestamp_binary_as(b, "timestamp")
}

/// See [`timestamp_binary`].
pub fn timestamptz_binary(b: &[u8]) -> Result<i64, ValueError> {
    timestamp_binary_as(b, "timestamptz")
}

fn timestamp_binary_as(b: &[u8], ty: &'static str) -> Result<i64, ValueError> {
    let micros = i64::from_be_bytes(fixed(b, ty)?);
    match micros {
        i64::MAX => Err(ValueError::new(
            ty,
            ValueErrorKind::Infinite { negative: false },
        )),
        i64::MIN => Err(ValueError::new(
            ty,
            ValueErrorKind::Infinite { negative: true },
        )),
        m => m
            .checked_add(PG_EPOCH_MICROS)
            .ok_or(ValueError::new(ty, ValueErrorKind::OutOfRange)),
    }
}

/// The exact-length byte array of a fixed-size binary value.
pub(crate) fn fixed<const N: usize>(b: &[u8], ty: &'static str) -> Result<[u8; N], ValueError> {
    <[u8; N]>::try_from(b).map_err(|_| ValueError::malformed(ty))
}

// ---- Output, as PostgreSQL's date_out / time_out / timestamp_out print with DateStyle=ISO.

/// `YYYY-MM-DD` with the year's sign handled by the caller (astronomical year in).
fn write_ymd(out: &mut String, year: i64, month: u32, day: u32) {
    let printed = if year <= 0 { 1 - year } else { year };
    let _ = write!(out, "{printed:04}-{month:02}-{day:02}");
}

fn write_bc(out: &mut String, year: i64) {
    if year <= 0 {
        out.push_str(" BC");
    }
}

/// `HH:MM:SS[.ffffff]`, fraction without trailing zeros (`AppendSeconds`).
pub(crate) fn write_time(out: &mut String, micros: i64) {
    let hour = micros / MICROS_PER_HOUR;
    let minute = micros / MICROS_PER_MINUTE % 60;
    let second = micros / MICROS_PER_SECOND % 60;
    let _ = write!(out, "{hour:02}:{minute:02}:{second:02}");
    write_fraction(out, micros % MICROS_PER_SECOND);
}

/// `.ffffff` without trailing zeros, nothing for zero (`micros` in 0..1_000_000).
pub(crate) fn write_fraction(out: &mut String, micros: i64) {
    if micros == 0 {
        return;
    }
    let mut digits = micros;
    let mut width = 6;
    while digits % 10 == 0 {
        digits /= 10;
        width -= 1;
    }
    let _ = write!(out, ".{digits:0width$}");
}

/// A zone offset as `EncodeTimezone` prints it: `+HH`, `+HH:MM` or `+HH:MM:SS` from
/// seconds EAST of UTC.
pub(crate) fn write_offset(out: &mut String, east: i32) {
    let sign = if east >= 0 { '+' } else { '-' };
    let total = east.unsigned_abs();
    let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60);
    let _ = write!(out, "{sign}{hours:02}");
    if seconds != 0 {
        let _ = write!(out, ":{minutes:02}:{seconds:02}");
    } else if minutes != 0 {
        let _ = write!(out, ":{minutes:02}");
    }
}

/// Appends a binary date (days since 2000-01-01) as `date_out` prints it.
pub(crate) fn write_date_pg(out: &mut String, pg_days: i32) {
    match pg_days {
        i32::MAX => out.push_str("infinity"),
        i32::MIN => out.push_str("-infinity"),
        d => {
            let (year, month, day) = civil_from_days(i64::from(d) + i64::from(PG_EPOCH_DAYS));
            write_ymd(out, year, month, day);
            write_bc(out, year);
        }
    }
}

/// Appends a binary timestamp (µs since 2000-01-01) as `timestamp_out` prints it, or
/// `timestamptz_out` with TimeZone=UTC when `utc` is set (suffix `+00`).
pub(crate) fn write_timestamp_pg(out: &mut String, pg_micros: i64, utc: bool) {
    match pg_micros {
        i64::MAX => out.push_str("infinity"),
        i64::MIN => out.push_str("-infinity"),
        m => {
            let days = m.div_euclid(MICROS_PER_DAY) + i64::from(PG_EPOCH_DAYS);
            let time = m.rem_euclid(MICROS_PER_DAY);
            let (year, month, day) = civil_from_days(days);
            write_ymd(out, year, month, day);
            out.push(' ');
            write_time(out, time);
            if utc {
                out.push_str("+00");
            }
            write_bc(out, year);
        }
    }
}

#[cfg(test)]
mod usual_form_tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The fixed-position reading gives what the field-by-field one gives, or leaves
        /// the text to it.
        #[test]
        fn usual_timestamps_read_like_any_timestamp(
            s in concat!(
                "[0-9]{4}-[01][0-9]-[0-3][0-9][ T][0-2][0-9]:[0-6][0-9]:[0-6][0-9]",
                "(\\.[0-9]{0,7})?([+-][0-9]{2}(:[0-9]{2}(:[0-9]{2})?)?)?( BC)?x?",
            ),
            with_zone in any::<bool>(),
        ) {
            if let Some(micros) = usual_timestamp(s.as_bytes(), with_zone) {
                prop_assert_eq!(Ok(micros), parse_any_timestamp(&s, with_zone, "timestamp"));
            }
        }

        /// The same after any one character of a usual timestamp is replaced by another.
        #[test]
        fn damaged_timestamps_read_like_any_timestamp(
            s in "[12][0-9]{3}-[01][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?[+-][01][0-9]",
            c in prop_oneof![any::<char>(), "[ -@T]".prop_map(|s| s.chars().next().unwrap_or('0'))],
            with_zone in any::<bool>(),
        ) {
            let chars: Vec<char> = s.chars().collect();
            for i in 0..chars.len() {
                let mut damaged = chars.clone();
                if let Some(slot) = damaged.get_mut(i) {
                    *slot = c;
                }
                let s: String = damaged.into_iter().collect();
                if let Some(micros) = usual_timestamp(s.as_bytes(), with_zone) {
                    prop_assert_eq!(Ok(micros), parse_any_timestamp(&s, with_zone, "timestamp"));
                }
            }
        }
    }

    #[test]
    fn days_of_years_ad() {
        for year in 1..=9999_u32 {
            for (month, day) in [(1, 1), (2, 28), (2, 29), (3, 1), (12, 31)] {
                assert_eq!(
                    days_from_civil_ad(year, month, day),
                    days_from_civil(i64::from(year), month, day),
                    "{year}-{month}-{day}"
                );
            }
        }
    }

    #[test]
    fn usual_timestamps() {
        for (text, with_zone, micros) in [
            (
                "2018-08-29 09:30:47.917065+00",
                true,
                Some(1_535_535_047_917_065),
            ),
            (
                "2018-08-29 09:30:47+05:30",
                true,
                Some(1_535_515_247_000_000),
            ),
            ("2000-01-01 00:00:00", false, Some(946_684_800_000_000)),
            ("2000-01-01 00:00:00.5-01", true, Some(946_688_400_500_000)),
            // Left to the field-by-field reading.
            ("2000-01-01 00:00:00+16", true, None),
            ("2000-02-30 00:00:00", false, None),
            ("0044-03-15 12:00:00 BC", false, None),
            ("12345-01-01 00:00:00", false, None),
            ("2000-01-01 00:00:00.1234567", false, None),
            ("infinity", false, None),
        ] {
            assert_eq!(
                usual_timestamp(text.as_bytes(), with_zone),
                micros,
                "{text}"
            );
        }
    }
}

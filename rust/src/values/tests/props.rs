//! Property tests: for any binary value, the text this layer prints for it (exactly the
//! output function's text, as the tables check against PostgreSQL) reads back to the
//! same result as the binary itself.

use proptest::prelude::*;

use crate::values::array::TextArray;
use crate::values::types::{Decimal128Spec, NumericMod, PgType, RangeType, Scalar};
use crate::values::Raw;

fn text_of(bin: &[u8], scalar: Scalar) -> String {
    let mut out = String::new();
    Raw::Binary(bin)
        .to_text(PgType::Scalar(scalar), &mut out)
        .unwrap()
        .to_owned()
}

/// PostgreSQL's timestamp range in µs since 2000-01-01: 4714-11-24 BC to 294276 AD.
const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;

proptest! {
    #[test]
    fn timestamps_round_trip(micros in MIN_TIMESTAMP..END_TIMESTAMP) {
        let bin = micros.to_be_bytes();
        let text = text_of(&bin, Scalar::Timestamp);
        prop_assert_eq!(Raw::Text(&text).timestamp(), Raw::Binary(&bin).timestamp());
        let text = text_of(&bin, Scalar::TimestampTz);
        prop_assert_eq!(Raw::Text(&text).timestamptz(), Raw::Binary(&bin).timestamptz());
    }

    #[test]
    fn dates_round_trip(days in -2_451_545_i32..2_145_031_949) {
        let bin = days.to_be_bytes();
        let text = text_of(&bin, Scalar::Date);
        prop_assert_eq!(Raw::Text(&text).date(), Raw::Binary(&bin).date());
    }

    #[test]
    fn times_round_trip(micros in 0_i64..=86_400_000_000) {
        let bin = micros.to_be_bytes();
        let text = text_of(&bin, Scalar::Time);
        prop_assert_eq!(Raw::Text(&text).time(), Raw::Binary(&bin).time());
    }

    #[test]
    fn intervals_round_trip(months: i32, days: i32, micros: i64) {
        let mut bin = micros.to_be_bytes().to_vec();
        bin.extend(days.to_be_bytes());
        bin.extend(months.to_be_bytes());
        let text = text_of(&bin, Scalar::Interval);
        prop_assert_eq!(Raw::Text(&text).interval(), Raw::Binary(&bin).interval());
    }

    #[test]
    fn numerics_round_trip(
        digits in proptest::collection::vec(0_u16..10_000, 0..12),
        weight in -12_i16..12,
        negative: bool,
        dscale in 0_u16..40,
        scale in -4_i8..30,
    ) {
        let mut bin = Vec::new();
        bin.extend((digits.len() as i16).to_be_bytes());
        bin.extend(weight.to_be_bytes());
        bin.extend(if negative { 0x4000_u16 } else { 0 }.to_be_bytes());
        bin.extend(dscale.to_be_bytes());
        for d in &digits {
            bin.extend(d.to_be_bytes());
        }
        let text = text_of(&bin, Scalar::Numeric(NumericMod::Unconstrained));
        let mut scratch = String::new();
        prop_assert_eq!(Raw::Text(&text).numeric_str(&mut scratch).unwrap(), text.as_str());
        let spec = Decimal128Spec { precision: 38, scale };
        prop_assert_eq!(
            Raw::Text(&text).numeric_decimal(spec),
            Raw::Binary(&bin).numeric_decimal(spec)
        );
    }

    #[test]
    fn text_arrays_round_trip(
        elements in proptest::collection::vec(
            proptest::option::of("[a-zA-Z0-9 ,{}\"\\\\\t\né☃]{0,6}"),
            0..8,
        )
    ) {
        // array_send of a text[] with these elements.
        let mut bin = Vec::new();
        bin.extend(1_i32.to_be_bytes());
        bin.extend(i32::from(elements.contains(&None)).to_be_bytes());
        bin.extend(25_u32.to_be_bytes());
        bin.extend((elements.len() as i32).to_be_bytes());
        bin.extend(1_i32.to_be_bytes());
        for e in &elements {
            match e {
                None => bin.extend((-1_i32).to_be_bytes()),
                Some(s) => {
                    bin.extend((s.len() as i32).to_be_bytes());
                    bin.extend(s.as_bytes());
                }
            }
        }
        let mut text = String::new();
        Raw::Binary(&bin).to_text(PgType::Array(Scalar::Text), &mut text).unwrap();
        let array = TextArray::parse(&text).unwrap();
        let mut scratch = String::new();
        let back: Vec<Option<String>> = array
            .iter()
            .map(|e| e.map(|e| e.get(&mut scratch).to_owned()))
            .collect();
        prop_assert_eq!(back, elements);
    }

    #[test]
    fn inet_text_is_accepted_back(v6: bool, addr: [u8; 16], bits in 0_u8..=128, cidr: bool) {
        let (family, len, max) = if v6 { (3, 16, 128) } else { (2, 4, 32) };
        let bits = bits.min(max);
        let mut bin = vec![family, bits, u8::from(cidr), len as u8];
        bin.extend(&addr[..len]);
        let scalar = if cidr { Scalar::Cidr } else { Scalar::Inet };
        let text = text_of(&bin, scalar);
        let address = text.split('/').next().unwrap();
        if v6 {
            let parsed: std::net::Ipv6Addr = address.parse().unwrap();
            prop_assert_eq!(parsed.octets(), addr);
        } else {
            let parsed: std::net::Ipv4Addr = address.parse().unwrap();
            prop_assert_eq!(&parsed.octets()[..], &addr[..4]);
        }
        let mut scratch = String::new();
        prop_assert_eq!(Raw::Text(&text).to_text(PgType::Scalar(scalar), &mut scratch).unwrap(), text.as_str());
    }

    #[test]
    fn ranges_round_trip(lower: Option<i32>, upper: Option<i32>, flags in 0_u8..8) {
        // range_send of an int4range: flags, then the bounds present.
        let mut f = flags & 0x06;
        if lower.is_none() { f |= 0x08; }
        if upper.is_none() { f |= 0x10; }
        let mut bin = vec![f];
        for b in [lower, upper].into_iter().flatten() {
            bin.extend(4_i32.to_be_bytes());
            bin.extend(b.to_be_bytes());
        }
        let mut scratch = String::new();
        let text = Raw::Binary(&bin).range(RangeType::Int4, &mut scratch).unwrap().to_owned();
        prop_assert_eq!(Raw::Text(&text).range(RangeType::Int4, &mut scratch).unwrap(), text.as_str());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let raw = Raw::Binary(&bytes);
        let mut s = String::new();
        let mut b = Vec::new();
        let _ = raw.numeric_str(&mut s);
        let _ = raw.numeric_decimal(Decimal128Spec { precision: 38, scale: 4 });
        let _ = raw.interval();
        let _ = raw.timetz(&mut s);
        let _ = raw.inet(&mut s);
        let _ = raw.tsvector(&mut s);
        let _ = raw.range(RangeType::Numeric, &mut s);
        let _ = raw.multirange(RangeType::TimestampTz, &mut s);
        let _ = raw.array().map(|a| a.iter().count());
        let _ = raw.to_text(PgType::Array(Scalar::Interval), &mut s);
        let _ = raw.bytea(&mut b);
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let raw = Raw::Text(text);
            let _ = raw.interval();
            let _ = raw.timestamptz();
            let _ = raw.date();
            let _ = raw.numeric_decimal(Decimal128Spec { precision: 38, scale: 4 });
            let _ = raw.array().map(|a| a.iter().count());
            let _ = raw.bytea(&mut b);
            let _ = raw.range(RangeType::Int4, &mut s);
            let _ = raw.multirange(RangeType::Int4, &mut s);
            let _ = raw.uuid();
            let _ = raw.bool();
        }
    }

    #[test]
    fn arbitrary_text_never_panics(text in "[-+0-9 :.,@a-zPTYMDHS{}\\[\\]()\"\\\\=]{0,40}") {
        let raw = Raw::Text(&text);
        let mut s = String::new();
        let _ = raw.interval();
        let _ = raw.timestamp();
        let _ = raw.timestamptz();
        let _ = raw.time();
        let _ = raw.timetz(&mut s);
        let _ = raw.date();
        let _ = raw.numeric_str(&mut s);
        let _ = raw.array().map(|a| a.iter().count());
        let _ = raw.range(RangeType::Date, &mut s);
        let _ = raw.inet(&mut s);
    }
}

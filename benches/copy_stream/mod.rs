//! A synthetic COPY BINARY stream of the `bench` table (see `benches/capture_stream.py`):
//!
//! ```sql
//! create table bench (id bigint primary key, name text, amount numeric(12,2),
//!                     ts timestamptz, flag bool, score float8, doc jsonb, uid uuid)
//! ```
//!
//! Values follow the capture's distributions (name: hex text of 8..64 chars, 3 % NULL;
//! amount: ±1,000,000 with cents; ts: 2015-01-01 + up to 3650 days; doc: the capture's
//! nested jsonb object, 2 % NULL; uid: random), each written in its type's send format
//! exactly as PostgreSQL writes it (numeric in base-10000 digits with leading and trailing
//! zero digits stripped, jsonb as version 1 + text in jsonb's key order). One chunk per
//! tuple, as the COPY transport delivers them, the header with the first.

use std::fmt::Write as _;
use std::ops::Range;
use std::sync::Arc;

use pgwire_cdc::relation::{Column, Relation};
use pgwire_cdc::snapshot::frame::SIGNATURE;

pub struct CopyStream {
    pub relation: Arc<Relation>,
    pub data: Vec<u8>,
    pub chunks: Vec<Range<usize>>,
    pub rows: usize,
    /// `amount` of each row in hundredths, to check the decoded values against.
    pub amounts: Vec<i64>,
}

impl CopyStream {
    pub fn chunks(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.chunks.iter().filter_map(|r| self.data.get(r.clone()))
    }
}

pub fn bench_relation() -> Relation {
    let column = |name: &str, type_oid: u32, type_modifier: i32| Column {
        name: name.to_owned(),
        type_oid,
        base_type_oid: type_oid,
        type_modifier,
        base_type_modifier: type_modifier,
        is_key: name == "id",
    };
    Relation::from_catalog(
        16_385,
        "public",
        "bench",
        b'd',
        vec![
            column("id", 20, -1),
            column("name", 25, -1),
            column("amount", 1700, ((12 << 16) | 2) + 4),
            column("ts", 1184, -1),
            column("flag", 16, -1),
            column("score", 701, -1),
            column("doc", 3802, -1),
            column("uid", 2950, -1),
        ],
    )
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn hex(&mut self, len: usize) -> String {
        let mut s = String::with_capacity(len);
        while s.len() < len {
            let _ = write!(s, "{:016x}", self.next());
        }
        s.truncate(len);
        s
    }
}

/// numeric_send of `units` hundredths with dscale 2.
fn numeric(units: i64, out: &mut Vec<u8>) {
    let abs = units.unsigned_abs();
    let (mut whole, cents) = (abs / 100, abs % 100);
    let mut groups = Vec::new();
    while whole > 0 {
        groups.push((whole % 10_000) as i16);
        whole /= 10_000;
    }
    groups.reverse();
    let mut weight = groups.len() as i16 - 1;
    groups.push((cents * 100) as i16);
    // No leading or trailing zero digits (PostgreSQL strips them).
    while groups.first() == Some(&0) {
        groups.remove(0);
        weight -= 1;
    }
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    let sign: u16 = if units < 0 { 0x4000 } else { 0 };
    out.extend((groups.len() as i16).to_be_bytes());
    out.extend(weight.to_be_bytes());
    out.extend(sign.to_be_bytes());
    out.extend(2u16.to_be_bytes());
    for g in groups {
        out.extend(g.to_be_bytes());
    }
}

fn field(out: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        Some(v) => {
            out.extend((v.len() as i32).to_be_bytes());
            out.extend(v);
        }
        None => out.extend((-1i32).to_be_bytes()),
    }
}

/// Microseconds from 2000-01-01 (PostgreSQL's epoch) to 2015-01-01.
const TS_2015: i64 = 473_385_600_000_000;
const DAY_US: f64 = 86_400_000_000.0;

pub fn generate(rows: usize) -> CopyStream {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut data = SIGNATURE.to_vec();
    data.extend(0u32.to_be_bytes());
    data.extend(0u32.to_be_bytes());
    let mut chunks = Vec::with_capacity(rows + 1);
    let mut amounts = Vec::with_capacity(rows);
    let mut start = 0;
    let mut value = Vec::new();
    for id in 1..=rows as i64 {
        data.extend(8i16.to_be_bytes());
        field(&mut data, Some(&id.to_be_bytes()));
        let name = (rng.below(100) >= 3).then(|| {
            let len = 8 + rng.below(57) as usize;
            rng.hex(len)
        });
        field(&mut data, name.as_deref().map(str::as_bytes));
        let amount = rng.below(200_000_001) as i64 - 100_000_000;
        amounts.push(amount);
        value.clear();
        numeric(amount, &mut value);
        field(&mut data, Some(&value));
        let ts = TS_2015 + (rng.unit() * 3650.0 * DAY_US) as i64;
        field(&mut data, Some(&ts.to_be_bytes()));
        field(&mut data, Some(&[u8::from(rng.below(2) == 0)]));
        field(
            &mut data,
            Some(&(rng.unit() * 1000.0).to_bits().to_be_bytes()),
        );
        let doc = (rng.below(100) >= 2).then(|| {
            // jsonb prints keys shortest first, then bytewise.
            format!(
                "\u{1}{{\"ok\": {}, \"qty\": {}, \"seq\": {id}, \"tag\": \"{}\", \"meta\": \
                 {{\"w\": {}, \"src\": \"bench\"}}, \"tags\": [\"{}\", \"{}\"], \"price\": {}.{:02}}}",
                rng.below(10) < 9,
                rng.below(101),
                rng.hex(12),
                rng.unit(),
                rng.hex(6),
                rng.hex(6),
                rng.below(500),
                rng.below(100),
            )
        });
        field(&mut data, doc.as_deref().map(str::as_bytes));
        let uid = (u128::from(rng.next()) << 64) | u128::from(rng.next());
        field(&mut data, Some(&uid.to_be_bytes()));
        chunks.push(start..data.len());
        start = data.len();
    }
    data.extend((-1i16).to_be_bytes());
    chunks.push(start..data.len());
    CopyStream {
        relation: Arc::new(bench_relation()),
        data,
        chunks,
        rows,
        amounts,
    }
}

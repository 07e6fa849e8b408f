//! The string-mapped types (uuid, inet, cidr, macaddr, macaddr8, money, tsvector,
//! bytea): a binary value formats to exactly the text the server prints, through the
//! type's own method and through `Raw::to_text`, and text passes through checked.

use super::{both, unhex};
use crate::values::types::{PgType, Scalar};
use crate::values::{Raw, ValueErrorKind};

/// Checks that binary formats to the server's text and that text passes through,
/// through the named method of `Raw` and through `Raw::to_text` for the scalar.
macro_rules! check_string_type {
    ($table:expr, $method:ident, $scalar:expr) => {{
        let mut scratch = String::new();
        let mut fallback = String::new();
        for &(text, hex) in $table.iter() {
            let bin = unhex(hex);
            for raw in both(text, &bin) {
                let got = raw
                    .$method(&mut scratch)
                    .unwrap_or_else(|e| panic!("{raw:?}: {e}"));
                assert_eq!(got, text, "{raw:?}");
                let ty = PgType::Scalar($scalar);
                assert_eq!(raw.to_text(ty, &mut fallback).unwrap(), text, "{raw:?}");
            }
        }
    }};
}

/// `SELECT format('%s', v::uuid), uuid_send(v::uuid)`
#[test]
fn uuid_canonical_lower_case() {
    let table = [
        (
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
        ),
        (
            "00000000-0000-0000-0000-000000000000",
            "00000000000000000000000000000000",
        ),
        (
            "ffffffff-ffff-ffff-ffff-ffffffffffff",
            "ffffffffffffffffffffffffffffffff",
        ),
    ];
    for (text, hex) in table {
        let bin = unhex(hex);
        for raw in both(text, &bin) {
            assert_eq!(raw.uuid().unwrap().as_str(), text);
        }
    }
    let upper = Raw::Text("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11")
        .uuid()
        .unwrap();
    assert_eq!(upper.as_str(), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
    assert_eq!(upper.to_string(), upper.as_str());
    for bad in [
        "a0eebc999c0b4ef8bb6d6bb9bd380a11",
        "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g",
        "a0eebc99+9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ",
    ] {
        assert_eq!(
            Raw::Text(bad).uuid().unwrap_err().kind,
            ValueErrorKind::Malformed,
            "{bad}"
        );
    }
    assert!(Raw::Binary(&[0; 15]).uuid().is_err());
}

/// `SELECT format('%s', v::inet), inet_send(v::inet)`: IPv6 compression as
/// PostgreSQL's inet_net_ntop does it, `/32` and `/128` left out for hosts.
const INET: [(&str, &str); 23] = [
    ("192.168.1.5/24", "02180004c0a80105"),
    ("10.0.0.1", "022000040a000001"),
    ("0.0.0.0/0", "0200000400000000"),
    ("255.255.255.255", "02200004ffffffff"),
    ("::1", "0380001000000000000000000000000000000001"),
    ("::", "0380001000000000000000000000000000000000"),
    ("::2", "0380001000000000000000000000000000000002"),
    ("::ffff:1.2.3.4", "0380001000000000000000000000ffff01020304"),
    ("::1.2.3.4", "0380001000000000000000000000000001020304"),
    ("1:0:0:2::3", "0380001000010000000000020000000000000003"),
    ("2001:db8::1/64", "0340001020010db8000000000000000000000001"),
    ("fe80::1:2:3:4", "03800010fe800000000000000001000200030004"),
    (
        "1:2:3:4:5:6:7:8",
        "0380001000010002000300040005000600070008",
    ),
    ("1::", "0380001000010000000000000000000000000000"),
    ("1::/16", "0310001000010000000000000000000000000000"),
    ("::1:0:0", "0380001000000000000000000000000100000000"),
    (
        "::ffff:0.0.0.0/96",
        "0360001000000000000000000000ffff00000000",
    ),
    ("1:0:0:1::1", "0380001000010000000000010000000000000001"),
    (
        "2001:db8::1:0:0:1",
        "0380001020010db8000000000001000000000001",
    ),
    ("::ffff", "038000100000000000000000000000000000ffff"),
    ("::1:0:0:0", "0380001000000000000000000001000000000000"),
    ("0:0:1::", "0380001000000000000100000000000000000000"),
    ("10.1.2.3/8", "020800040a010203"),
];

/// `SELECT format('%s', v::cidr), cidr_send(v::cidr)`: always with `/bits`.
const CIDR: [(&str, &str); 9] = [
    ("10.0.0.0/8", "020801040a000000"),
    ("192.168.1.0/24", "02180104c0a80100"),
    ("10.1.2.3/32", "022001040a010203"),
    ("0.0.0.0/0", "0200010400000000"),
    ("::/0", "0300011000000000000000000000000000000000"),
    ("fe80::/64", "03400110fe800000000000000000000000000000"),
    ("2001:db8::/32", "0320011020010db8000000000000000000000000"),
    ("::1/128", "0380011000000000000000000000000000000001"),
    (
        "::ffff:1.2.3.0/120",
        "0378011000000000000000000000ffff01020300",
    ),
];

#[test]
fn inet_and_cidr_print_like_network_out() {
    check_string_type!(INET, inet, Scalar::Inet);
    check_string_type!(CIDR, cidr, Scalar::Cidr);
    let mut scratch = String::new();
    for bad in [
        "",
        "1.2.3",
        "1.2.3.4/33",
        "1.2.3.4/",
        "::1/129",
        "1.2.3.4/x",
        "01.2.3.4",
        "host",
    ] {
        assert!(Raw::Text(bad).inet(&mut scratch).is_err(), "{bad:?}");
    }
    // cidr text always carries its mask length.
    assert!(Raw::Text("10.0.0.0").cidr(&mut scratch).is_err());
    for hex in [
        "",
        "0218000401020304ff",                       // trailing byte
        "0221000401020304",                         // 33 bits
        "0418000401020304",                         // unknown family
        "0218001001020304",                         // IPv4 with a 16-byte length
        "0381001000000000000000000000000000000001", // 129 bits
    ] {
        assert!(
            Raw::Binary(&unhex(hex)).inet(&mut scratch).is_err(),
            "{hex}"
        );
    }
}

/// `SELECT format('%s', v::macaddr), macaddr_send(v::macaddr)` (and macaddr8)
#[test]
fn mac_addresses() {
    check_string_type!(
        [
            ("08:00:2b:01:02:03", "08002b010203"),
            ("ff:ff:ff:ff:ff:ff", "ffffffffffff"),
            ("00:00:00:00:00:00", "000000000000"),
        ],
        macaddr,
        Scalar::MacAddr
    );
    check_string_type!(
        [
            ("08:00:2b:01:02:03:04:05", "08002b0102030405"),
            ("08:00:2b:ff:fe:01:02:03", "08002bfffe010203"),
        ],
        macaddr8,
        Scalar::MacAddr8
    );
    let mut scratch = String::new();
    assert!(Raw::Text("08:00:2b:01:02").macaddr(&mut scratch).is_err());
    assert!(Raw::Text("08:00:2b:01:02:03")
        .macaddr8(&mut scratch)
        .is_err());
    assert!(Raw::Text("08-00-2b-01-02-03")
        .macaddr(&mut scratch)
        .is_err());
    assert!(Raw::Binary(&[0; 8]).macaddr(&mut scratch).is_err());
    assert!(Raw::Binary(&[0; 6]).macaddr8(&mut scratch).is_err());
}

/// `SET lc_monetary = 'C'; SELECT format('%s', v::money), cash_send(v::money)`
#[test]
fn money_prints_like_cash_out_in_c_locale() {
    check_string_type!(
        [
            ("$1,234.56", "000000000001e240"),
            ("-$1,234.56", "fffffffffffe1dc0"),
            ("$0.00", "0000000000000000"),
            ("$0.01", "0000000000000001"),
            ("-$0.50", "ffffffffffffffce"),
            ("$100.00", "0000000000002710"),
            ("$999.99", "000000000001869f"),
            ("$1,000.00", "00000000000186a0"),
            ("-$1,000,000.00", "fffffffffa0a1f00"),
            ("$92,233,720,368,547,758.07", "7fffffffffffffff"),
            ("-$92,233,720,368,547,758.08", "8000000000000000"),
            ("$12.30", "00000000000004ce"),
        ],
        money,
        Scalar::Money
    );
    let mut scratch = String::new();
    assert!(Raw::Binary(&[0; 4]).money(&mut scratch).is_err());
    // Text in another locale's form passes through untouched.
    assert_eq!(
        Raw::Text("1.234,56 €").money(&mut scratch).unwrap(),
        "1.234,56 €"
    );
}

/// `SELECT format('%s', v::tsvector), tsvectorsend(v::tsvector)`: quotes and
/// backslashes doubled, weights A-C, D printed as nothing.
#[test]
fn tsvector_prints_like_tsvectorout() {
    check_string_type!(
        [
            (
                r"'a':1A,2 'b' 'back\\sl':5C 'c':3 'd''''e':4B",
                "0000000561000002c0010002620000006261636b5c736c0000014005630000010003642727650000018004",
            ),
            ("", "00000000"),
            ("'x'", "0000000178000000"),
            (
                "'with space':1,2,3 'z':16383A",
                "00000002776974682073706163650000030001000200037a000001ffff",
            ),
            ("'über':7 '☃'", "00000002c3bc6265720000010007e29883000000"),
        ],
        tsvector,
        Scalar::TsVector
    );
    let mut scratch = String::new();
    for hex in [
        "",
        "ffffffff",           // negative count
        "0000000178",         // unterminated lexeme
        "000000017800000100", // position count without positions
        "000000017800000000", // trailing byte
        "00000001ff000000",   // lexeme not UTF-8
    ] {
        assert!(
            Raw::Binary(&unhex(hex)).tsvector(&mut scratch).is_err(),
            "{hex}"
        );
    }
}

/// `SELECT format('%s', v::bytea), byteasend(v::bytea)` with bytea_output = hex and
/// with bytea_output = escape.
#[test]
fn bytea_in_both_output_forms() {
    let table = [
        (r"\x", ""),
        (r"\x00ff7f5c22", "00ff7f5c22"),
        (r"\x616263", "616263"),
        (r"\x00015c", "00015c"),
        // bytea_output = escape
        ("", ""),
        (r#"\000\377\177\\""#, "00ff7f5c22"),
        ("abc", "616263"),
        (r"\000\001\\", "00015c"),
        (r"\012\015\011\342\230\203", "0a0d09e29883"),
    ];
    let mut scratch = Vec::new();
    for (text, hex) in table {
        let bin = unhex(hex);
        for raw in both(text, &bin) {
            assert_eq!(raw.bytea(&mut scratch).unwrap(), bin.as_slice(), "{raw:?}");
        }
    }
    // byteain skips white space between hex pairs and takes upper-case digits.
    assert_eq!(
        Raw::Text("\\x0A 0b\n0C").bytea(&mut scratch).unwrap(),
        &[10, 11, 12]
    );
    for bad in [r"\x0", r"\x0g", r"\x0 a", r"\400", r"\08", r"\", r"a\b"] {
        assert_eq!(
            Raw::Text(bad).bytea(&mut scratch).unwrap_err().kind,
            ValueErrorKind::Malformed,
            "{bad:?}"
        );
    }
    // The text fallback of binary bytea is the hex form.
    let mut text = String::new();
    assert_eq!(
        Raw::Binary(&unhex("00ff7f5c22"))
            .to_text(PgType::Scalar(Scalar::Bytea), &mut text)
            .unwrap(),
        r"\x00ff7f5c22"
    );
}

//! Table-driven tests on hand-built byte vectors, one per message layout of the
//! PostgreSQL documentation, plus the malformed cases.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use super::*;
use crate::error::{MessageKind, Reason};

/// A little builder for message bytes.
#[derive(Default)]
pub(crate) struct Bytes(pub Vec<u8>);

impl Bytes {
    pub fn tag(t: u8) -> Self {
        Self(vec![t])
    }
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    pub fn i16(mut self, v: i16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn s(mut self, v: &str) -> Self {
        self.0.extend_from_slice(v.as_bytes());
        self.0.push(0);
        self
    }
    pub fn text(self, v: &str) -> Self {
        let b = self.u8(b't').i32(v.len() as i32);
        let mut b = b;
        b.0.extend_from_slice(v.as_bytes());
        b
    }
    pub fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}

const V1: ParseContext = ParseContext {
    proto_version: 1,
    in_stream: false,
};
const V4: ParseContext = ParseContext {
    proto_version: 4,
    in_stream: false,
};
const V4_STREAM: ParseContext = ParseContext {
    proto_version: 4,
    in_stream: true,
};

fn parse(b: &Bytes, ctx: ParseContext) -> Result<Message<'_>, DecodeError> {
    parse_message(&b.0, ctx)
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a table of byte vectors, one per message layout"
)]
fn parses_every_message_layout() {
    let relation = Bytes::tag(b'R')
        .i32(16384)
        .s("public")
        .s("t")
        .u8(b'd')
        .i16(2)
        .u8(1)
        .s("id")
        .i32(23)
        .i32(-1)
        .u8(0)
        .s("name")
        .i32(25)
        .i32(-1);
    let insert = Bytes::tag(b'I')
        .i32(16384)
        .u8(b'N')
        .i16(2)
        .text("1")
        .u8(b'n');
    let update = Bytes::tag(b'U')
        .i32(16384)
        .u8(b'O')
        .i16(2)
        .text("1")
        .u8(b'u')
        .u8(b'N')
        .i16(2)
        .text("1")
        .u8(b'b')
        .i32(2)
        .raw(&[0, 1]);
    let cases: Vec<(Bytes, ParseContext, Message<'static>)> = vec![
        (
            Bytes::tag(b'B').u64(0x0100).u64(5).i32(7),
            V1,
            Message::Begin(Begin {
                final_lsn: 0x100,
                timestamp: 5,
                xid: 7,
            }),
        ),
        (
            Bytes::tag(b'C').u8(0).u64(1).u64(2).u64(3),
            V1,
            Message::Commit(Commit {
                flags: 0,
                commit_lsn: 1,
                end_lsn: 2,
                timestamp: 3,
            }),
        ),
        (
            Bytes::tag(b'O').u64(9).s("node_a"),
            V1,
            Message::Origin(Origin {
                origin_lsn: 9,
                name: "node_a",
            }),
        ),
        (
            Bytes::tag(b'Y').i32(99).s("public").s("mood"),
            V1,
            Message::Type(TypeMsg {
                xid: None,
                oid: 99,
                namespace: "public",
                name: "mood",
            }),
        ),
        (
            Bytes::tag(b'T').i32(2).u8(3).i32(10).i32(11),
            V1,
            Message::Truncate(Truncate {
                xid: None,
                options: 3,
                relations: vec![10, 11],
            }),
        ),
        (
            Bytes::tag(b'M').u8(1).u64(77).s("p").i32(3).raw(b"a\0b"),
            V1,
            Message::Message(LogicalMessage {
                xid: None,
                transactional: true,
                lsn: 77,
                prefix: "p",
                content: b"a\0b",
            }),
        ),
        (
            Bytes::tag(b'S').i32(700).u8(1),
            V4,
            Message::StreamStart(StreamStart {
                xid: 700,
                first_segment: true,
            }),
        ),
        (Bytes::tag(b'E'), V4, Message::StreamStop),
        (
            Bytes::tag(b'c').i32(700).u8(0).u64(1).u64(2).u64(3),
            V4,
            Message::StreamCommit(StreamCommit {
                xid: 700,
                flags: 0,
                commit_lsn: 1,
                end_lsn: 2,
                timestamp: 3,
            }),
        ),
        (
            Bytes::tag(b'A').i32(700).i32(701),
            V4,
            Message::StreamAbort(StreamAbort {
                xid: 700,
                subxid: 701,
                abort_lsn: None,
                abort_timestamp: None,
            }),
        ),
        (
            Bytes::tag(b'A').i32(700).i32(700).u64(5).u64(6),
            V4,
            Message::StreamAbort(StreamAbort {
                xid: 700,
                subxid: 700,
                abort_lsn: Some(5),
                abort_timestamp: Some(6),
            }),
        ),
        (
            Bytes::tag(b'b').u64(1).u64(2).u64(3).i32(4).s("g"),
            V4,
            Message::BeginPrepare(PrepareInfo {
                flags: 0,
                prepare_lsn: 1,
                end_lsn: 2,
                timestamp: 3,
                xid: 4,
                gid: "g",
            }),
        ),
        (
            Bytes::tag(b'P').u8(0).u64(1).u64(2).u64(3).i32(4).s("g"),
            V4,
            Message::Prepare(PrepareInfo {
                flags: 0,
                prepare_lsn: 1,
                end_lsn: 2,
                timestamp: 3,
                xid: 4,
                gid: "g",
            }),
        ),
        (
            Bytes::tag(b'p').u8(0).u64(1).u64(2).u64(3).i32(4).s("g"),
            V4,
            Message::StreamPrepare(PrepareInfo {
                flags: 0,
                prepare_lsn: 1,
                end_lsn: 2,
                timestamp: 3,
                xid: 4,
                gid: "g",
            }),
        ),
        (
            Bytes::tag(b'K').u8(0).u64(1).u64(2).u64(3).i32(4).s("g"),
            V4,
            Message::CommitPrepared(CommitPrepared {
                flags: 0,
                commit_lsn: 1,
                end_lsn: 2,
                timestamp: 3,
                xid: 4,
                gid: "g",
            }),
        ),
        (
            Bytes::tag(b'r')
                .u8(0)
                .u64(1)
                .u64(2)
                .u64(3)
                .u64(4)
                .i32(5)
                .s("g"),
            V4,
            Message::RollbackPrepared(RollbackPrepared {
                flags: 0,
                prepare_end_lsn: 1,
                rollback_end_lsn: 2,
                prepare_timestamp: 3,
                rollback_timestamp: 4,
                xid: 5,
                gid: "g",
            }),
        ),
    ];
    for (bytes, ctx, expected) in &cases {
        assert_eq!(&parse(bytes, *ctx).unwrap(), expected, "{:?}", bytes.0);
    }

    let Message::Relation(r) = parse(&relation, V1).unwrap() else {
        panic!()
    };
    assert_eq!(
        (r.oid, r.namespace, r.name, r.replica_identity),
        (16384, "public", "t", b'd')
    );
    assert_eq!(r.columns.len(), 2);
    assert_eq!(
        (r.columns[0].flags, r.columns[0].name, r.columns[0].type_oid),
        (1, "id", 23)
    );
    assert_eq!(r.columns[1].type_modifier, -1);

    let Message::Insert(i) = parse(&insert, V1).unwrap() else {
        panic!()
    };
    assert_eq!(i.new, vec![Datum::Text("1"), Datum::Null]);

    let Message::Update(u) = parse(&update, V1).unwrap() else {
        panic!()
    };
    assert_eq!(
        u.old,
        Some((OldKind::Full, vec![Datum::Text("1"), Datum::UnchangedToast]))
    );
    assert_eq!(u.new, vec![Datum::Text("1"), Datum::Binary(&[0, 1])]);
}

#[test]
fn streamed_changes_carry_an_xid_prefix() {
    let insert = Bytes::tag(b'I')
        .i32(701)
        .i32(16384)
        .u8(b'N')
        .i16(1)
        .text("x");
    let Message::Insert(i) = parse(&insert, V4_STREAM).unwrap() else {
        panic!()
    };
    assert_eq!((i.xid, i.relation), (Some(701), 16384));
    // The same bytes outside a stream are read as relation 701 with a bad marker.
    assert!(parse(&insert, V4).is_err());
    let delete = Bytes::tag(b'D').i32(5).i32(16384).u8(b'K').i16(1).text("x");
    let Message::Delete(d) = parse(&delete, V4_STREAM).unwrap() else {
        panic!()
    };
    assert_eq!((d.xid, d.old.0), (Some(5), OldKind::Key));
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a table of malformed byte vectors and the error each must give"
)]
fn malformed_messages_name_kind_and_offset() {
    let err = |b: Bytes, ctx| parse_message(&b.0, ctx).unwrap_err();
    let cases: Vec<(DecodeError, MessageKind, usize, Reason)> = vec![
        (
            err(Bytes::default(), V1),
            MessageKind::Unknown,
            0,
            Reason::Truncated {
                field: "tag",
                needed: 1,
            },
        ),
        (
            err(Bytes::tag(b'X'), V1),
            MessageKind::Unknown,
            0,
            Reason::UnknownTag(b'X'),
        ),
        (
            err(Bytes::tag(b'B').u64(1), V1),
            MessageKind::Begin,
            9,
            Reason::Truncated {
                field: "commit timestamp",
                needed: 8,
            },
        ),
        (
            err(Bytes::tag(b'C').u8(0).u64(1).u64(2).u64(3).u8(9), V1),
            MessageKind::Commit,
            26,
            Reason::TrailingBytes(1),
        ),
        (
            err(Bytes::tag(b'I').i32(1).u8(b'N').i16(1).u8(b't').i32(-5), V1),
            MessageKind::Insert,
            9,
            Reason::BadLength {
                field: "column value length",
                length: -5,
            },
        ),
        (
            err(
                Bytes::tag(b'I')
                    .i32(1)
                    .u8(b'N')
                    .i16(1)
                    .u8(b't')
                    .i32(i32::MAX),
                V1,
            ),
            MessageKind::Insert,
            9,
            Reason::BadLength {
                field: "column value length",
                length: i64::from(i32::MAX),
            },
        ),
        (
            err(Bytes::tag(b'I').i32(1).u8(b'N').i16(-1), V1),
            MessageKind::Insert,
            6,
            Reason::BadLength {
                field: "column count",
                length: -1,
            },
        ),
        (
            err(Bytes::tag(b'I').i32(1).u8(b'N').i16(30000).u8(b'n'), V1),
            MessageKind::Insert,
            6,
            Reason::BadLength {
                field: "column count",
                length: 30000,
            },
        ),
        (
            err(Bytes::tag(b'I').i32(1).u8(b'N').i16(1).u8(b'x'), V1),
            MessageKind::Insert,
            8,
            Reason::UnknownColumnKind(b'x'),
        ),
        (
            err(Bytes::tag(b'I').i32(1).u8(b'X'), V1),
            MessageKind::Insert,
            5,
            Reason::UnexpectedMarker {
                expected: "'N' (new tuple)",
                found: b'X',
            },
        ),
        (
            err(
                Bytes::tag(b'I')
                    .i32(1)
                    .u8(b'N')
                    .i16(1)
                    .u8(b't')
                    .i32(2)
                    .raw(&[b'a', 0xff]),
                V1,
            ),
            MessageKind::Insert,
            14,
            Reason::InvalidUtf8 {
                field: "text column value",
            },
        ),
        (
            err(
                Bytes::tag(b'R')
                    .i32(1)
                    .s("public")
                    .raw(&[b't', 0xc3, 0x28, 0]),
                V1,
            ),
            MessageKind::Relation,
            13,
            Reason::InvalidUtf8 {
                field: "relation name",
            },
        ),
        (
            err(Bytes::tag(b'R').i32(1).raw(b"public"), V1),
            MessageKind::Relation,
            5,
            Reason::UnterminatedString { field: "namespace" },
        ),
        (
            err(Bytes::tag(b'R').i32(1).s("s").s("t").u8(b'z'), V1),
            MessageKind::Relation,
            9,
            Reason::BadValue {
                field: "replica identity",
            },
        ),
        (
            err(Bytes::tag(b'R').i32(1).s("s").s("t").u8(b'd').i16(-3), V1),
            MessageKind::Relation,
            10,
            Reason::BadLength {
                field: "column count",
                length: -3,
            },
        ),
        (
            err(Bytes::tag(b'T').i32(-1).u8(0), V1),
            MessageKind::Truncate,
            1,
            Reason::BadLength {
                field: "relation count",
                length: -1,
            },
        ),
        (
            err(Bytes::tag(b'T').i32(1_000_000).u8(0).i32(1), V1),
            MessageKind::Truncate,
            1,
            Reason::BadLength {
                field: "relation count",
                length: 1_000_000,
            },
        ),
        (
            err(Bytes::tag(b'S').i32(1).u8(1), V1),
            MessageKind::StreamStart,
            0,
            Reason::NeedsProtocol {
                needed: 2,
                configured: 1,
            },
        ),
        (
            err(
                Bytes::tag(b'K').u8(0),
                ParseContext {
                    proto_version: 2,
                    in_stream: false,
                },
            ),
            MessageKind::CommitPrepared,
            0,
            Reason::NeedsProtocol {
                needed: 3,
                configured: 2,
            },
        ),
        (
            err(Bytes::tag(b'A').i32(1).i32(1).u64(5), V4),
            MessageKind::StreamAbort,
            17,
            Reason::Truncated {
                field: "abort timestamp",
                needed: 8,
            },
        ),
        (
            err(
                Bytes::tag(b'A').i32(1).i32(1).u64(5).u64(6),
                ParseContext {
                    proto_version: 3,
                    in_stream: false,
                },
            ),
            MessageKind::StreamAbort,
            9,
            Reason::TrailingBytes(16),
        ),
        (
            err(Bytes::tag(b'M').u8(0).u64(1).s("p").i32(10).raw(b"abc"), V1),
            MessageKind::Message,
            12,
            Reason::BadLength {
                field: "content length",
                length: 10,
            },
        ),
    ];
    for (i, (e, kind, offset, reason)) in cases.into_iter().enumerate() {
        assert_eq!(
            (e.kind, e.offset, &e.reason),
            (kind, offset, &reason),
            "case {i}: {e}"
        );
        let text = e.to_string();
        assert!(
            text.contains(kind.name()) && text.contains(&format!("byte {offset}")),
            "{text}"
        );
    }
}

#[test]
fn every_truncation_of_a_valid_message_is_an_error() {
    let update = Bytes::tag(b'U')
        .i32(16384)
        .u8(b'K')
        .i16(2)
        .text("1")
        .u8(b'n')
        .u8(b'N')
        .i16(2)
        .text("1")
        .text("two");
    assert!(parse(&update, V1).is_ok());
    for len in 0..update.0.len() {
        let e = parse_message(&update.0[..len], V1).unwrap_err();
        assert!(
            e.offset <= len,
            "offset {} past the {len} bytes present",
            e.offset
        );
    }
}

mod insert_fast_path {
    use proptest::prelude::*;

    use super::*;

    fn column() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(b"n".to_vec()),
            Just(b"u".to_vec()),
            (
                prop_oneof![Just(b't'), Just(b'b')],
                proptest::collection::vec(any::<u8>(), 0..20)
            )
                .prop_map(|(kind, value)| {
                    let mut c = vec![kind];
                    c.extend((value.len() as i32).to_be_bytes());
                    c.extend(value);
                    c
                }),
        ]
    }

    proptest! {
        /// Inserts read by the fast path are read as the general path reads them, errors
        /// (kind, offset, reason) included, whatever the damage.
        #[test]
        fn inserts_read_like_the_general_path(
            oid in any::<u32>(),
            columns in proptest::collection::vec(column(), 0..6),
            damage in proptest::option::of((any::<prop::sample::Index>(), any::<u8>())),
            cut in proptest::option::of(any::<prop::sample::Index>()),
            extra in proptest::collection::vec(any::<u8>(), 0..2),
            proto_version in 0_u32..=4,
            in_stream in any::<bool>(),
        ) {
            let mut bytes = vec![b'I'];
            bytes.extend(oid.to_be_bytes());
            bytes.push(b'N');
            bytes.extend((columns.len() as i16).to_be_bytes());
            for c in &columns {
                bytes.extend(c);
            }
            bytes.extend(extra);
            if let Some((at, byte)) = damage {
                let i = at.index(bytes.len());
                if let Some(b) = bytes.get_mut(i) {
                    *b = byte;
                }
            }
            if let Some(at) = cut {
                bytes.truncate(at.index(bytes.len() + 1));
            }
            let ctx = ParseContext { proto_version, in_stream };
            prop_assert_eq!(
                parse_message_into(&bytes, ctx, Vec::new()),
                parse_any_message(&bytes, ctx, Vec::new())
            );
        }
    }
}

/// `parse_begin` reads a Begin as `parse_message` does in every context, and refuses
/// anything else; `message_kind` names a message by its tag alone.
#[test]
fn begin_is_parsed_on_its_own() {
    let begin = Bytes::tag(b'B').u64(0x0100).u64(5).i32(7);
    let expected = Begin {
        final_lsn: 0x100,
        timestamp: 5,
        xid: 7,
    };
    assert_eq!(parse_begin(&begin.0), Ok(expected.clone()));
    for ctx in [V1, V4, V4_STREAM] {
        assert_eq!(parse(&begin, ctx), Ok(Message::Begin(expected.clone())));
    }
    assert_eq!(message_kind(&begin.0), Some(MessageKind::Begin));

    let short = Bytes::tag(b'B').u64(1);
    assert_eq!(
        parse_begin(&short.0),
        parse(&short, V1).map(|_| expected.clone())
    );
    let long = Bytes::tag(b'B').u64(1).u64(5).i32(7).u8(0);
    assert_eq!(
        parse_begin(&long.0).unwrap_err().reason,
        Reason::TrailingBytes(1)
    );

    let commit = Bytes::tag(b'C').u8(0).u64(1).u64(2).u64(3);
    assert_eq!(message_kind(&commit.0), Some(MessageKind::Commit));
    let err = parse_begin(&commit.0).unwrap_err();
    assert_eq!((err.kind, err.offset), (MessageKind::Commit, 0));
    assert_eq!(message_kind(&[]), None);
    assert_eq!(message_kind(b"X"), None);
    assert_eq!(parse_begin(&[]).unwrap_err().kind, MessageKind::Unknown);
}

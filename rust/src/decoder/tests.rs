//! State-machine tests of the decoder on hand-built messages: transaction framing, the
//! relation cache, streamed and prepared transactions, unchanged TOAST, bad sequences.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use super::*;
use crate::error::MessageKind;
use crate::event::{EventBody, EventCollector, OldRow, UpdatedRow, Value};
use crate::protocol::tests::Bytes;

const REL: i32 = 16384;

fn relation(xid: Option<i32>, ident: u8, cols: &[(&str, bool)]) -> Vec<u8> {
    let mut b = Bytes::tag(b'R');
    if let Some(x) = xid {
        b = b.i32(x);
    }
    b = b
        .i32(REL)
        .s("public")
        .s("t")
        .u8(ident)
        .i16(cols.len() as i16);
    for (name, key) in cols {
        b = b.u8(u8::from(*key)).s(name).i32(25).i32(-1);
    }
    b.0
}

fn insert(xid: Option<i32>, values: &[&str]) -> Vec<u8> {
    let mut b = Bytes::tag(b'I');
    if let Some(x) = xid {
        b = b.i32(x);
    }
    b = b.i32(REL).u8(b'N').i16(values.len() as i16);
    for v in values {
        b = b.text(v);
    }
    b.0
}

fn begin(final_lsn: u64, xid: i32) -> Vec<u8> {
    Bytes::tag(b'B').u64(final_lsn).u64(1_000_000).i32(xid).0
}

fn commit(lsn: u64) -> Vec<u8> {
    Bytes::tag(b'C')
        .u8(0)
        .u64(lsn)
        .u64(lsn + 8)
        .u64(1_000_000)
        .0
}

struct Run {
    dec: Decoder,
    out: EventCollector,
}

impl Run {
    fn new(proto_version: u32) -> Self {
        Self {
            dec: Decoder::new(DecoderConfig {
                proto_version,
                binary: false,
            }),
            out: EventCollector::default(),
        }
    }
    /// Feeds one message. Nothing here outgrows memory, so a failure is a `DecodeError`.
    fn feed(&mut self, bytes: &[u8], lsn: u64) -> Result<(), DecodeError> {
        self.dec
            .feed(bytes, lsn, &mut self.out)
            .map_err(|e| match e {
                FeedError::Decode(e) => e,
                FeedError::Spill(e) => panic!("nothing should be spilled here: {e}"),
            })
    }
    fn ok(&mut self, bytes: impl AsRef<[u8]>, lsn: u64) -> &mut Self {
        self.feed(bytes.as_ref(), lsn).unwrap();
        self
    }
    fn kinds(&self) -> Vec<&'static str> {
        self.out.events.iter().map(|e| e.body.kind()).collect()
    }
    fn inserted(&self) -> Vec<String> {
        self.out
            .events
            .iter()
            .filter_map(|e| match &e.body {
                EventBody::Insert { row, .. } => match &row[0] {
                    Value::Text(s) => Some(s.clone()),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }
}

#[test]
fn plain_transaction_numbers_changes_and_carries_the_commit_lsn() {
    let mut r = Run::new(1);
    r.ok(begin(0x500, 9), 0x100)
        .ok(relation(None, b'd', &[("id", true), ("v", false)]), 0x110)
        .ok(insert(None, &["1", "a"]), 0x120)
        .ok(insert(None, &["2", "b"]), 0x130)
        .ok(commit(0x500), 0x500);
    assert_eq!(
        r.kinds(),
        ["begin", "relation", "insert", "insert", "commit"]
    );
    let ev = &r.out.events;
    assert!(ev
        .iter()
        .all(|e| e.meta.commit_lsn == Some(0x500) && e.meta.xid == Some(9)));
    let ordinals: Vec<u64> = ev.iter().map(|e| e.meta.tx_ordinal).collect();
    assert_eq!(ordinals, [0, 0, 0, 1, 2]);
    assert_eq!(ev[3].meta.start_lsn, 0x130);
}

#[test]
fn unknown_relation_and_column_count_fail_without_changing_state() {
    let mut r = Run::new(1);
    r.ok(begin(0x500, 9), 1);
    let e = r.feed(&insert(None, &["1"]), 2).unwrap_err();
    assert_eq!(e.reason, Reason::UnknownRelation(REL as u32));
    assert_eq!((e.kind, e.offset), (MessageKind::Insert, 1));
    r.ok(relation(None, b'd', &[("id", true), ("v", false)]), 3);
    let e = r.feed(&insert(None, &["1"]), 4).unwrap_err();
    assert_eq!(
        e.reason,
        Reason::ColumnCountMismatch {
            relation: REL as u32,
            expected: 2,
            found: 1
        }
    );
    r.ok(insert(None, &["1", "x"]), 5).ok(commit(0x500), 6);
    assert_eq!(r.kinds(), ["begin", "relation", "insert", "commit"]);
    assert_eq!(r.out.events[2].meta.tx_ordinal, 0);
}

#[test]
fn out_of_sequence_messages_are_errors() {
    let mut r = Run::new(4);
    assert!(matches!(
        r.feed(&Bytes::tag(b'E').0, 1).unwrap_err().reason,
        Reason::OutOfSequence(_)
    ));
    r.ok(begin(0x500, 9), 1);
    assert!(r.feed(&begin(0x600, 10), 2).is_err());
    assert!(r.feed(&Bytes::tag(b'S').i32(5).u8(1).0, 3).is_err());
    r.ok(commit(0x500), 4);
    r.ok(Bytes::tag(b'S').i32(5).u8(1).0, 5);
    assert!(r.feed(&Bytes::tag(b'S').i32(6).u8(1).0, 6).is_err());
    assert!(r
        .feed(&Bytes::tag(b'c').i32(5).u8(0).u64(1).u64(2).u64(3).0, 7)
        .is_err());
}

#[test]
fn messages_that_settle_a_whole_transaction_are_refused_inside_one() {
    let inside = [
        (
            begin(0x600, 10),
            "Begin inside an open transaction or streamed block",
        ),
        (
            Bytes::tag(b'S').i32(5).u8(1).0,
            "Stream Start inside an open transaction or stream",
        ),
        (
            Bytes::tag(b'c').i32(5).u8(0).u64(1).u64(2).u64(3).0,
            "Stream Commit inside an open transaction or stream",
        ),
        (
            Bytes::tag(b'A').i32(5).i32(5).0,
            "Stream Abort inside an open transaction or stream",
        ),
        (
            Bytes::tag(b'b').u64(1).u64(2).u64(3).i32(5).s("g").0,
            "Begin Prepare inside an open transaction or stream",
        ),
        (
            Bytes::tag(b'p').u8(0).u64(1).u64(2).u64(3).i32(5).s("g").0,
            "Stream Prepare inside an open transaction or stream",
        ),
        (
            Bytes::tag(b'K').u8(0).u64(1).u64(2).u64(3).i32(5).s("g").0,
            "Commit Prepared inside an open transaction or stream",
        ),
        (
            Bytes::tag(b'r')
                .u8(0)
                .u64(1)
                .u64(2)
                .u64(3)
                .u64(4)
                .i32(5)
                .s("g")
                .0,
            "Rollback Prepared inside an open transaction or stream",
        ),
    ];
    let mut r = Run::new(4);
    r.ok(begin(0x500, 9), 1);
    for (message, text) in &inside {
        let e = r.feed(message, 2).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("malformed {} message at byte 0: {text}", e.kind)
        );
        assert_eq!((e.offset, e.reason), (0, Reason::OutOfSequence(text)));
    }
    // Nothing changed: the transaction is still open and commits.
    r.ok(commit(0x500), 3);
    assert_eq!(r.kinds(), ["begin", "commit"]);
    // Commit and Stream Stop have their own checks.
    assert_eq!(
        r.feed(&commit(0x500), 4).unwrap_err().reason,
        Reason::OutOfSequence("Commit without Begin")
    );
    assert_eq!(
        r.feed(&Bytes::tag(b'E').0, 5).unwrap_err().reason,
        Reason::OutOfSequence("Stream Stop without Stream Start")
    );
    assert_eq!(
        r.feed(&relation(None, b'd', &[("id", true)]), 6)
            .unwrap_err()
            .reason,
        Reason::OutOfSequence("change outside a transaction (no Begin)")
    );
}

#[test]
fn a_spill_file_that_cannot_be_made_is_a_spill_error_not_a_decode_error() {
    let missing = std::env::temp_dir().join("pgwire_cdc-decoder-tests-no-such-dir/below");
    let mut dec = Decoder::new(DecoderConfig {
        proto_version: 3,
        binary: false,
    })
    .with_spill(SpillConfig {
        memory_limit: 0,
        dir: Some(missing),
    });
    let begin_prepare = Bytes::tag(b'b').u64(1).u64(2).u64(3).i32(5).s("g").0;
    let err = dec
        .feed(&begin_prepare, 1, &mut EventCollector::default())
        .unwrap_err();
    let FeedError::Spill(spill) = &err else {
        panic!("expected a spill error, got {err:?}");
    };
    assert_eq!(spill.io_kind, std::io::ErrorKind::NotFound);
    assert!(spill
        .problem
        .contains("pgwire_cdc-decoder-tests-no-such-dir"));
    assert_eq!(
        err.to_string(),
        format!(
            "holding a streamed or prepared transaction on disk failed: {} (give spill_dir a \
             writable directory with room for the largest transaction, or raise \
             spill_threshold)",
            spill.problem
        )
    );
    // The Begin Prepare was not taken: the decoder is still between transactions.
    assert!(!dec.in_transaction());
    assert_eq!(dec.held_in_memory(), 0);
}

#[test]
fn streamed_transaction_is_delivered_once_at_commit_without_aborted_subtransactions() {
    let mut r = Run::new(2);
    let start = |xid: i32, first: u8| Bytes::tag(b'S').i32(xid).u8(first).0;
    let stop = || Bytes::tag(b'E').0;
    r.ok(start(700, 1), 1)
        .ok(relation(Some(700), b'd', &[("id", true)]), 2)
        .ok(insert(Some(700), &["1"]), 3)
        .ok(insert(Some(701), &["2"]), 4) // in subtransaction 701
        .ok(stop(), 5);
    // A plain transaction commits while 700 is still open.
    r.ok(begin(0x300, 800), 6)
        .ok(relation(None, b'd', &[("id", true)]), 7)
        .ok(insert(None, &["10"]), 8)
        .ok(commit(0x300), 9);
    r.ok(start(700, 0), 10)
        .ok(insert(Some(702), &["3"]), 11)
        .ok(stop(), 12);
    r.ok(Bytes::tag(b'A').i32(700).i32(701).0, 13); // ROLLBACK TO SAVEPOINT
    assert_eq!(r.inserted(), ["10"]);
    assert_eq!(r.dec.pending_transactions(), 1);
    r.ok(
        Bytes::tag(b'c')
            .i32(700)
            .u8(0)
            .u64(0x900)
            .u64(0x908)
            .u64(5)
            .0,
        14,
    );
    assert_eq!(r.inserted(), ["10", "1", "3"]);
    let streamed: Vec<_> = r
        .out
        .events
        .iter()
        .filter(|e| e.meta.commit_lsn == Some(0x900))
        .collect();
    let kinds: Vec<_> = streamed.iter().map(|e| e.body.kind()).collect();
    assert_eq!(kinds, ["relation", "insert", "insert", "stream_commit"]);
    let ordinals: Vec<_> = streamed.iter().map(|e| e.meta.tx_ordinal).collect();
    assert_eq!(ordinals, [0, 0, 1, 2]);
    assert!(streamed.iter().all(|e| e.meta.xid == Some(700)));
    assert_eq!(r.dec.pending_transactions(), 0);
}

#[test]
fn aborted_streamed_transaction_leaves_nothing_and_its_schema_stays_private() {
    let mut r = Run::new(2);
    r.ok(begin(0x100, 1), 1)
        .ok(relation(None, b'd', &[("id", true)]), 2)
        .ok(commit(0x100), 3)
        .ok(Bytes::tag(b'S').i32(700).u8(1).0, 4)
        .ok(
            relation(Some(700), b'd', &[("id", true), ("extra", false)]),
            5,
        )
        .ok(insert(Some(700), &["1", "x"]), 6)
        .ok(Bytes::tag(b'E').0, 7)
        .ok(Bytes::tag(b'A').i32(700).i32(700).0, 8);
    assert!(r.inserted().is_empty());
    // Outside the aborted stream the relation still has one column.
    r.ok(begin(0x200, 2), 9)
        .ok(insert(None, &["5"]), 10)
        .ok(commit(0x200), 11);
    assert_eq!(r.inserted(), ["5"]);
}

#[test]
fn prepared_transaction_waits_for_commit_prepared_and_rollback_drops_it() {
    let mut r = Run::new(3);
    let bp = |gid: &str| {
        Bytes::tag(b'b')
            .u64(0x100)
            .u64(0x108)
            .u64(1)
            .i32(9)
            .s(gid)
            .0
    };
    let p = |gid: &str| {
        Bytes::tag(b'P')
            .u8(0)
            .u64(0x100)
            .u64(0x108)
            .u64(1)
            .i32(9)
            .s(gid)
            .0
    };
    r.ok(bp("g1"), 1)
        .ok(relation(None, b'd', &[("id", true)]), 2)
        .ok(insert(None, &["1"]), 3)
        .ok(p("g1"), 4)
        .ok(bp("g2"), 5)
        .ok(insert(None, &["2"]), 6)
        .ok(p("g2"), 7);
    assert!(r.out.events.is_empty());
    r.ok(
        Bytes::tag(b'r')
            .u8(0)
            .u64(1)
            .u64(2)
            .u64(3)
            .u64(4)
            .i32(9)
            .s("g2")
            .0,
        8,
    );
    assert_eq!(r.kinds(), ["rollback_prepared"]);
    r.ok(
        Bytes::tag(b'K')
            .u8(0)
            .u64(0x400)
            .u64(0x408)
            .u64(5)
            .i32(9)
            .s("g1")
            .0,
        9,
    );
    assert_eq!(
        r.kinds(),
        [
            "rollback_prepared",
            "begin_prepare",
            "relation",
            "insert",
            "prepare",
            "commit_prepared"
        ]
    );
    assert_eq!(r.inserted(), ["1"]);
    assert!(r.out.events[1..]
        .iter()
        .all(|e| e.meta.commit_lsn == Some(0x400)));
    // Prepare must name the GID Begin Prepare announced.
    r.ok(bp("g3"), 10);
    assert!(r.feed(&p("other"), 11).is_err());
}

fn update(old: Option<(u8, &[Option<&str>])>, new: &[Option<&str>]) -> Vec<u8> {
    // None = unchanged TOAST; Some("\0") = NULL.
    let tuple = |mut b: Bytes, vals: &[Option<&str>]| {
        b = b.i16(vals.len() as i16);
        for v in vals {
            b = match v {
                None => b.u8(b'u'),
                Some("\0") => b.u8(b'n'),
                Some(s) => b.text(s),
            };
        }
        b
    };
    let mut b = Bytes::tag(b'U').i32(REL);
    if let Some((marker, vals)) = old {
        b = tuple(b.u8(marker), vals);
    }
    tuple(b.u8(b'N'), new).0
}

fn single_update(ident: u8, cols: &[(&str, bool)], msg: Vec<u8>) -> EventBody {
    let mut r = Run::new(1);
    r.ok(begin(0x100, 1), 1)
        .ok(relation(None, ident, cols), 2)
        .ok(msg, 3);
    r.out.events.pop().unwrap().body
}

#[test]
fn unchanged_toast_is_filled_only_where_the_seed_allows() {
    let t = |s: &str| Value::Text(s.to_owned());
    let cols = [("id", true), ("note", false), ("big", false)];
    // No old image: partial, column 2 missing.
    let EventBody::Update { new, old, .. } =
        single_update(b'd', &cols, update(None, &[Some("1"), Some("b"), None]))
    else {
        panic!()
    };
    assert_eq!(
        new,
        UpdatedRow::Partial {
            values: vec![t("1"), t("b")],
            missing_column_indexes: vec![2],
            total_columns: 3
        }
    );
    assert_eq!(old, None);
    // Key image: the key column (0) can be filled, the others cannot.
    let EventBody::Update { new, old, .. } = single_update(
        b'd',
        &cols,
        update(
            Some((b'K', &[Some("1"), Some("\0"), Some("\0")])),
            &[None, Some("b"), None],
        ),
    ) else {
        panic!()
    };
    assert_eq!(
        new,
        UpdatedRow::Partial {
            values: vec![t("1"), t("b")],
            missing_column_indexes: vec![2],
            total_columns: 3
        }
    );
    assert_eq!(old, Some(OldRow::Key(vec![t("1")])));
    // Full image: everything can be filled.
    let all = [("id", true), ("note", true), ("big", true)];
    let EventBody::Update { new, old, .. } = single_update(
        b'f',
        &all,
        update(
            Some((b'O', &[Some("1"), Some("a"), Some("BIG")])),
            &[Some("1"), Some("b"), None],
        ),
    ) else {
        panic!()
    };
    assert_eq!(new, UpdatedRow::Full(vec![t("1"), t("b"), t("BIG")]));
    assert_eq!(old, Some(OldRow::Full(vec![t("1"), t("a"), t("BIG")])));
    // A full image that itself lacks the value cannot supply it.
    let EventBody::Update { new, .. } = single_update(
        b'f',
        &all,
        update(
            Some((b'O', &[Some("1"), Some("a"), None])),
            &[Some("1"), Some("b"), None],
        ),
    ) else {
        panic!()
    };
    assert!(
        matches!(new, UpdatedRow::Partial { ref missing_column_indexes, .. } if missing_column_indexes == &[2])
    );
}

#[test]
fn key_images_are_densely_packed_in_column_order() {
    let cols = [("a", false), ("k2", true), ("b", false), ("k4", true)];
    let mut r = Run::new(1);
    r.ok(begin(0x100, 1), 1).ok(relation(None, b'i', &cols), 2);
    let delete = Bytes::tag(b'D')
        .i32(REL)
        .u8(b'K')
        .i16(4)
        .u8(b'n')
        .text("x")
        .u8(b'n')
        .text("y")
        .0;
    r.ok(delete, 3);
    let EventBody::Delete { old, .. } = &r.out.events[2].body else {
        panic!()
    };
    assert_eq!(
        old,
        &OldRow::Key(vec![Value::Text("x".into()), Value::Text("y".into())])
    );
}

#[test]
fn relation_resent_after_ddl_changes_how_later_rows_are_read() {
    let mut r = Run::new(1);
    r.ok(begin(0x100, 1), 1)
        .ok(relation(None, b'd', &[("id", true)]), 2)
        .ok(insert(None, &["1"]), 3)
        .ok(commit(0x100), 4)
        .ok(begin(0x200, 2), 5)
        .ok(relation(None, b'd', &[("id", true), ("added", false)]), 6)
        .ok(insert(None, &["2", "x"]), 7)
        .ok(commit(0x200), 8);
    assert!(r.feed(&insert(None, &["3"]), 9).is_err());
    assert_eq!(r.dec.relation(REL as u32).unwrap().columns.len(), 2);
}

/// The tuple allocation an Insert leaves behind is the one the next Insert parses into.
#[test]
fn insert_tuples_reuse_one_allocation() {
    let text = String::from("abc");
    let mut tuple = Vec::with_capacity(8);
    tuple.push(Datum::Text(&text));
    let ptr = tuple.as_ptr() as usize;
    let spare = empty_tuple(tuple);
    assert!(spare.is_empty());
    assert!(spare.capacity() >= 8);
    assert_eq!(spare.as_ptr() as usize, ptr);
}

#[test]
fn a_snapshot_decodes_what_follows_as_the_decoder_does() {
    let mut r = Run::new(2);
    r.ok(begin(0x100, 700), 1)
        .ok(relation(None, b'd', &[("id", true)]), 2)
        .ok(insert(None, &["1"]), 3);
    // Inside a plain transaction, with a relation known: copied.
    let mut copy = Run {
        dec: r
            .dec
            .snapshot()
            .expect("a plain transaction is cheap to copy"),
        out: EventCollector::default(),
    };
    let rest = [insert(None, &["2"]), commit(0x100), begin(0x200, 701)];
    for (i, m) in rest.iter().enumerate() {
        r.feed(m, 10 + i as u64).unwrap();
        copy.feed(m, 10 + i as u64).unwrap();
    }
    let tail = &r.out.events[r.out.events.len() - copy.out.events.len()..];
    assert_eq!(copy.out.events, tail);
    assert_eq!(copy.kinds(), ["insert", "commit", "begin"]);
    // The copy is on its own: the original moves on without it.
    r.ok(insert(None, &["3"]), 20);
    assert!(copy.dec.in_transaction());
    // A streamed transaction held: not cheap, no snapshot.
    r.ok(commit(0x200), 21)
        .ok(Bytes::tag(b'S').i32(900).u8(1).0, 22)
        .ok(insert(Some(900), &["4"]), 23)
        .ok(Bytes::tag(b'E').0, 24);
    assert_eq!(r.dec.pending_transactions(), 1);
    assert!(r.dec.snapshot().is_none());
}

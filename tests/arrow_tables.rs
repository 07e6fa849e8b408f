//! Arrow change tables from the golden captures: one row per change event, text and
//! binary captures of the same rows give equal data columns.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::collections::HashMap;

use arrow_array::{Array, RecordBatch, StringArray};
use pgwire_cdc::arrow::{ArrowSink, Segment};
use pgwire_cdc::event::{EventBody, EventCollector};
use pgwire_cdc::sink::{EventMeta, EventRef, EventSink};
use pgwire_cdc::{DecodeError, Decoder, DecoderConfig, FeedError, Reason};

struct Both {
    events: EventCollector,
    tables: ArrowSink,
}

impl EventSink for Both {
    fn event(&mut self, meta: &EventMeta, event: EventRef<'_, '_>) -> Result<(), DecodeError> {
        self.events.event(meta, event)?;
        self.tables.event(meta, event)
    }
}

/// Decodes a capture into events and tables. Values Arrow cannot hold (the
/// unrepresentable-value policy: an error naming table and column) are counted per table
/// and decoding goes on; the failing row is not in the table.
fn decode(
    c: &common::Capture,
) -> (
    Vec<pgwire_cdc::event::Event>,
    Vec<Segment>,
    HashMap<String, usize>,
) {
    let mut dec = Decoder::new(DecoderConfig {
        proto_version: c.proto_version,
        binary: c.binary,
    });
    let mut out = Both {
        events: EventCollector::default(),
        tables: ArrowSink::new(c.binary),
    };
    let mut rejected: HashMap<String, usize> = HashMap::new();
    for (lsn, bytes) in &c.messages {
        match dec.feed(bytes, *lsn, &mut out) {
            Ok(()) => {}
            Err(FeedError::Decode(DecodeError {
                reason: Reason::Value { table, .. },
                ..
            })) => {
                *rejected.entry(table).or_default() += 1;
            }
            Err(e) => panic!("{}: {e}", c.path.display()),
        }
    }
    let segments = out.tables.take().unwrap();
    (out.events.events, segments, rejected)
}

#[test]
fn every_change_event_is_one_row_of_its_table() {
    for c in common::captures() {
        let (events, segments, rejected) = decode(&c);
        let mut expected: HashMap<String, usize> = HashMap::new();
        for e in &events {
            match &e.body {
                EventBody::Insert { relation, .. }
                | EventBody::Update { relation, .. }
                | EventBody::Delete { relation, .. } => {
                    *expected.entry(relation.qualified_name.clone()).or_default() += 1;
                }
                EventBody::Truncate { relations, .. } => {
                    for r in relations {
                        *expected.entry(r.qualified_name.clone()).or_default() += 1;
                    }
                }
                _ => {}
            }
        }
        for (table, n) in rejected {
            *expected.entry(table).or_default() -= n;
        }
        let mut got: HashMap<String, usize> = HashMap::new();
        for s in &segments {
            *got.entry(s.table.clone()).or_default() += s.batch.num_rows();
            let kinds = s.batch.column_by_name("_change_type").unwrap();
            let kinds = kinds.as_any().downcast_ref::<StringArray>().unwrap();
            assert_eq!(kinds.null_count(), 0);
        }
        assert_eq!(got, expected, "{}", c.path.display());
    }
}

fn data_columns(batch: &RecordBatch) -> Vec<(String, arrow_data::ArrayData)> {
    batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .filter(|(f, _)| !f.name().starts_with('_'))
        .map(|(f, a)| (f.name().clone(), a.to_data()))
        .collect()
}

#[test]
fn text_and_binary_captures_give_equal_values() {
    let all = common::captures();
    for text in all.iter().filter(|c| c.scenario == "text_types") {
        let server = text.path.parent().unwrap();
        let binary = all
            .iter()
            .find(|c| c.scenario == "binary_types" && c.path.parent().unwrap() == server)
            .expect("binary_types capture beside text_types");
        assert!(binary.binary && !text.binary);
        let (_, t, _) = decode(text);
        let (_, b, _) = decode(binary);
        assert_eq!(t.len(), b.len());
        for (ts, bs) in t.iter().zip(&b) {
            assert_eq!(ts.table, bs.table);
            assert_eq!(
                data_columns(&ts.batch),
                data_columns(&bs.batch),
                "{}",
                server.display()
            );
        }
    }
}

/// The metadata columns of every row are its event's: `_lsn`, `_commit_lsn`,
/// `_tx_ordinal`, `_commit_ts` (moved to the Unix epoch) and `_xid`, whatever the
/// transactions and batches the rows come in.
#[test]
fn metadata_columns_are_the_events() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int64Type, TimestampMicrosecondType};
    const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;
    type Meta = (i64, Option<i64>, i64, Option<i64>, Option<i64>);
    let mut compared = 0;
    for c in common::captures() {
        let (events, segments, rejected) = decode(&c);
        let mut expected: HashMap<String, Vec<Meta>> = HashMap::new();
        for e in &events {
            let m = &e.meta;
            let meta = (
                m.start_lsn as i64,
                m.commit_lsn.map(|l| l as i64),
                m.tx_ordinal as i64,
                m.commit_timestamp.map(|t| t + PG_EPOCH_OFFSET_MICROS),
                m.xid.map(i64::from),
            );
            let tables: Vec<&str> = match &e.body {
                EventBody::Insert { relation, .. }
                | EventBody::Update { relation, .. }
                | EventBody::Delete { relation, .. } => vec![&relation.qualified_name],
                EventBody::Truncate { relations, .. } => relations
                    .iter()
                    .map(|r| r.qualified_name.as_str())
                    .collect(),
                _ => vec![],
            };
            for t in tables {
                expected.entry(t.to_owned()).or_default().push(meta);
            }
        }
        let mut got: HashMap<String, Vec<Meta>> = HashMap::new();
        for s in &segments {
            let b = &s.batch;
            let int = |name: &str| b.column_by_name(name).unwrap().as_primitive::<Int64Type>();
            let (lsn, commit_lsn, ordinal, xid) = (
                int("_lsn"),
                int("_commit_lsn"),
                int("_tx_ordinal"),
                int("_xid"),
            );
            let ts = b
                .column_by_name("_commit_ts")
                .unwrap()
                .as_primitive::<TimestampMicrosecondType>();
            let rows = got.entry(s.table.clone()).or_default();
            for i in 0..b.num_rows() {
                rows.push((
                    lsn.value(i),
                    commit_lsn.is_valid(i).then(|| commit_lsn.value(i)),
                    ordinal.value(i),
                    ts.is_valid(i).then(|| ts.value(i)),
                    xid.is_valid(i).then(|| xid.value(i)),
                ));
            }
        }
        for (table, rows) in &expected {
            // Rejected rows are left out of the table: nothing to line up there.
            if rejected.contains_key(table) {
                continue;
            }
            assert_eq!(got.get(table), Some(rows), "{} {table}", c.path.display());
            compared += rows.len();
        }
    }
    assert!(compared > 100, "{compared} rows compared");
}

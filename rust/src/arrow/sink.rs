//! [`ArrowSink`]: the decoder's events into change-table segments.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::ArrowError;

use super::table::{ChangeKind, ChangeTable, ColumnError, RowMeta};
use crate::error::{DecodeError, MessageKind, Reason};
use crate::relation::Relation;
use crate::sink::{EventMeta, EventRef, EventSink};

/// The rows of one relation under one schema, finished.
#[derive(Debug)]
pub struct Segment {
    /// `schema.table`.
    pub table: String,
    pub batch: RecordBatch,
}

/// Builds change tables from events. Segments are kept in the order they started; a
/// relation gets a new segment when a Relation message changes its columns.
pub struct ArrowSink {
    binary: bool,
    segments: Vec<ChangeTable>,
    /// Relation OID -> index of its current segment.
    current: HashMap<u32, usize>,
    /// The segment the last row went to (always `current`'s entry for its OID).
    last: Option<usize>,
    /// Tables finished by the last `take`, kept with their builders sized like that
    /// batch: a relation's next segment reuses its table instead of growing a new one.
    spare: HashMap<u32, ChangeTable>,
}

impl ArrowSink {
    pub fn new(binary: bool) -> Self {
        Self {
            binary,
            segments: Vec::new(),
            current: HashMap::new(),
            last: None,
            spare: HashMap::new(),
        }
    }

    /// Rows appended since the last `take`.
    pub fn rows(&self) -> usize {
        self.segments.iter().map(ChangeTable::rows).sum()
    }

    fn table(&mut self, relation: &Arc<Relation>) -> &mut ChangeTable {
        let index = match self.last.filter(|&i| {
            self.segments
                .get(i)
                .is_some_and(|t| Arc::ptr_eq(&t.relation, relation))
        }) {
            Some(i) => i,
            None => self.lookup(relation),
        };
        self.last = Some(index);
        // `index` is valid: it was just found or pushed.
        #[allow(clippy::indexing_slicing)]
        &mut self.segments[index]
    }

    fn lookup(&mut self, relation: &Arc<Relation>) -> usize {
        let reuse = self.current.get(&relation.oid).copied().filter(|&i| {
            self.segments.get(i).is_some_and(|t| {
                Arc::ptr_eq(&t.relation, relation) || same_shape(&t.relation, relation)
            })
        });
        if let Some(i) = reuse {
            // A Relation message that repeats the table's relation exactly (pgoutput
            // resends relations, e.g. in each new decoding session) changes nothing the
            // table derives from it: adopt it, so later rows take the fast path in `table`.
            if let Some(t) = self.segments.get_mut(i) {
                adopt_if_equal(t, relation);
            }
            i
        } else {
            // Equal relations give equal tables: reuse the spare's builders, sized
            // like the last batch, instead of growing fresh ones.
            let table = match self.spare.remove(&relation.oid) {
                Some(mut t) => {
                    if adopt_if_equal(&mut t, relation) {
                        t
                    } else {
                        ChangeTable::new(Arc::clone(relation), self.binary)
                    }
                }
                None => ChangeTable::new(Arc::clone(relation), self.binary),
            };
            self.segments.push(table);
            let i = self.segments.len() - 1;
            self.current.insert(relation.oid, i);
            i
        }
    }

    /// Finishes and returns every segment that holds rows, oldest first; the sink starts
    /// empty again (relations stay known).
    pub fn take(&mut self) -> Result<Vec<Segment>, ArrowError> {
        let mut out = Vec::new();
        let mut finished = Vec::with_capacity(self.segments.len());
        for table in &mut self.segments {
            finished.push(table.rows() > 0);
            if table.rows() > 0 {
                out.push(Segment {
                    table: table.relation.qualified_name.clone(),
                    batch: table.finish()?,
                });
            }
        }
        self.spare.clear();
        for (table, finished) in self.segments.drain(..).zip(finished) {
            if finished {
                self.spare.insert(table.relation.oid, table);
            }
        }
        self.current.clear();
        self.last = None;
        Ok(out)
    }
}

/// Makes `relation` the table's relation when the two are equal (the table, its schema
/// and its batches are derived from the relation's contents only); whether they were.
fn adopt_if_equal(table: &mut ChangeTable, relation: &Arc<Relation>) -> bool {
    if Arc::ptr_eq(&table.relation, relation) {
        return true;
    }
    if *table.relation == **relation {
        table.relation = Arc::clone(relation);
        return true;
    }
    false
}

/// Same columns, same types, same identity flags: rows can share a batch.
fn same_shape(a: &Relation, b: &Relation) -> bool {
    a.qualified_name == b.qualified_name
        && a.columns.len() == b.columns.len()
        && a.columns.iter().zip(&b.columns).all(|(x, y)| {
            x.name == y.name
                && x.type_oid == y.type_oid
                && x.type_modifier == y.type_modifier
                && x.base_type_oid == y.base_type_oid
                && x.base_type_modifier == y.base_type_modifier
                && x.is_key == y.is_key
        })
}

fn row_meta(meta: &EventMeta) -> RowMeta {
    RowMeta {
        lsn: meta.start_lsn,
        commit_lsn: meta.commit_lsn,
        tx_ordinal: meta.tx_ordinal,
        commit_timestamp: meta.commit_timestamp,
        xid: meta.xid,
    }
}

fn value_error(
    kind: MessageKind,
    relation: &Relation,
    meta: &EventMeta,
    e: ColumnError,
) -> DecodeError {
    DecodeError::new(
        kind,
        0,
        Reason::Value {
            table: relation.qualified_name.clone(),
            column: e.column,
            lsn: meta.start_lsn,
            problem: e.error.to_string(),
        },
    )
}

impl EventSink for ArrowSink {
    fn event(&mut self, meta: &EventMeta, event: EventRef<'_, '_>) -> Result<(), DecodeError> {
        let row = row_meta(meta);
        match event {
            EventRef::Insert {
                relation,
                row: values,
            } => self
                .table(relation)
                .append(ChangeKind::Insert, &row, Some(values), None)
                .map_err(|e| value_error(MessageKind::Insert, relation, meta, e)),
            EventRef::Update { relation, new, old } => self
                .table(relation)
                .append(
                    ChangeKind::Update,
                    &row,
                    Some(new),
                    old.map(|o| (o.kind, o.values)),
                )
                .map_err(|e| value_error(MessageKind::Update, relation, meta, e)),
            EventRef::Delete { relation, old } => self
                .table(relation)
                .append(
                    ChangeKind::Delete,
                    &row,
                    Some(old.values),
                    Some((old.kind, old.values)),
                )
                .map_err(|e| value_error(MessageKind::Delete, relation, meta, e)),
            EventRef::Truncate { relations, .. } => {
                for relation in relations {
                    self.table(relation)
                        .append(ChangeKind::Truncate, &row, None, None)
                        .map_err(|e| value_error(MessageKind::Truncate, relation, meta, e))?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Datum;
    use crate::relation::Column;

    fn relation(oid: u32, name: &str) -> Arc<Relation> {
        let column = |name: &str, type_oid: u32, type_modifier: i32| Column {
            name: name.to_owned(),
            type_oid,
            base_type_oid: type_oid,
            type_modifier,
            base_type_modifier: type_modifier,
            is_key: name == "id",
        };
        Arc::new(Relation {
            oid,
            namespace: "public".to_owned(),
            name: name.to_owned(),
            qualified_name: format!("public.{name}"),
            replica_identity: b'd',
            columns: vec![
                column("id", 20, -1),
                column("name", 25, -1),
                // numeric(12,2)
                column("amount", 1700, (12 << 16 | 2) + 4),
                column("tags", 1009, -1),
            ],
        })
    }

    fn feed(sink: &mut ArrowSink, rel: &Arc<Relation>, from: usize, to: usize) {
        for i in from..to {
            let id = i.to_string();
            let name = "x".repeat(i % 7);
            let amount = format!("{i}.25");
            let row = [
                Datum::Text(&id),
                if i % 3 == 0 {
                    Datum::Null
                } else {
                    Datum::Text(&name)
                },
                Datum::Text(&amount),
                Datum::Text("{a,NULL,b}"),
            ];
            let meta = EventMeta {
                start_lsn: i as u64,
                commit_lsn: Some(1000),
                tx_ordinal: i as u64,
                xid: Some(7),
                commit_timestamp: Some(0),
            };
            let event = EventRef::Insert {
                relation: rel,
                row: &row,
            };
            assert!(sink.event(&meta, event).is_ok());
        }
    }

    /// A relation resent unchanged (a new `Arc`, equal contents), mid-batch or between
    /// batches, gives exactly the batches one unchanging relation gives; a resent relation
    /// that differs gets a table of its own schema.
    #[test]
    fn resent_relations_give_the_same_batches() {
        let mut resent = ArrowSink::new(false);
        let mut same = ArrowSink::new(false);
        let a = relation(1, "a");
        let mut out = Vec::new();
        let mut expected = Vec::new();
        for n in [40, 7, 90] {
            feed(&mut resent, &relation(1, "a"), 0, n);
            feed(&mut resent, &relation(1, "a"), n, 2 * n);
            out.extend(resent.take().unwrap_or_default());
            feed(&mut same, &a, 0, 2 * n);
            expected.extend(same.take().unwrap_or_default());
        }
        assert_eq!(out.len(), expected.len());
        for (x, y) in out.iter().zip(&expected) {
            assert_eq!(x.table, y.table);
            assert_eq!(x.batch, y.batch);
        }
        let mut full = Relation::clone(&a);
        full.replica_identity = b'f';
        let full = Arc::new(full);
        feed(&mut resent, &full, 0, 5);
        let taken = resent.take().unwrap_or_default();
        assert_eq!(taken.len(), 1);
        let mut fresh = ArrowSink::new(false);
        feed(&mut fresh, &full, 0, 5);
        let fresh = fresh.take().unwrap_or_default();
        assert_eq!(
            taken.first().map(|s| &s.batch),
            fresh.first().map(|s| &s.batch)
        );
        assert_eq!(
            taken.first().and_then(|s| s
                .batch
                .schema()
                .metadata()
                .get("pg_replica_identity")
                .cloned()),
            Some("f".to_owned())
        );
    }

    /// Tables kept across `take` (with their builders sized like the last batch) give
    /// exactly the batches fresh tables give.
    #[test]
    fn reused_tables_give_the_same_batches() {
        let a = relation(1, "a");
        let b = relation(2, "b");
        let mut reused = ArrowSink::new(false);
        let mut out = Vec::new();
        let mut fresh = Vec::new();
        for (round, n) in [100, 3, 250, 0].into_iter().enumerate() {
            // Order of first rows alternates: the segments must follow it.
            let (first, second) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
            feed(&mut reused, first, 0, n);
            feed(&mut reused, second, 0, n / 2 + 1);
            let taken = reused.take();
            assert!(taken.is_ok());
            out.extend(taken.unwrap_or_default());
            let mut new = ArrowSink::new(false);
            feed(&mut new, first, 0, n);
            feed(&mut new, second, 0, n / 2 + 1);
            fresh.extend(new.take().unwrap_or_default());
        }
        assert_eq!(out.len(), fresh.len());
        for (x, y) in out.iter().zip(&fresh) {
            assert_eq!(x.table, y.table);
            assert_eq!(x.batch, y.batch);
        }
    }

    /// Found by the arrow_tables fuzz target: a table without columns (`CREATE TABLE t ()`
    /// can be published; its rows are empty tuples) failed every batch it was in, since
    /// Arrow cannot tell the length of a struct array without fields (`_before`).
    #[test]
    fn tables_without_columns_give_batches() {
        let mut empty = Relation::clone(&relation(3, "empty"));
        empty.columns.clear();
        let empty = Arc::new(empty);
        let mut sink = ArrowSink::new(false);
        let meta = |i: u64| EventMeta {
            start_lsn: i,
            commit_lsn: Some(1000),
            tx_ordinal: i,
            xid: Some(7),
            commit_timestamp: Some(0),
        };
        let old = crate::sink::OldImage {
            kind: crate::protocol::OldKind::Full,
            values: &[],
        };
        let events = [
            EventRef::Insert {
                relation: &empty,
                row: &[],
            },
            EventRef::Update {
                relation: &empty,
                new: &[],
                old: Some(old),
            },
            EventRef::Update {
                relation: &empty,
                new: &[],
                old: None,
            },
            EventRef::Delete {
                relation: &empty,
                old,
            },
        ];
        for (i, event) in events.into_iter().enumerate() {
            assert!(sink.event(&meta(i as u64), event).is_ok());
        }
        let taken = sink.take();
        assert!(taken.is_ok(), "{:?}", taken.err());
        let taken = taken.unwrap_or_default();
        assert_eq!(taken.iter().map(|s| s.batch.num_rows()).sum::<usize>(), 4);
        // Only deletes or only inserts: the all-null _before and a _before with values.
        for event in [events[0], events[3]] {
            assert!(sink.event(&meta(9), event).is_ok());
            let taken = sink.take();
            assert!(taken.is_ok(), "{:?}", taken.err());
        }
    }
}

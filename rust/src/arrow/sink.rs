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
}

impl ArrowSink {
    pub fn new(binary: bool) -> Self {
        Self {
            binary,
            segments: Vec::new(),
            current: HashMap::new(),
        }
    }

    /// Rows appended since the last `take`.
    pub fn rows(&self) -> usize {
        self.segments.iter().map(ChangeTable::rows).sum()
    }

    fn table(&mut self, relation: &Arc<Relation>) -> &mut ChangeTable {
        let reuse = self.current.get(&relation.oid).copied().filter(|&i| {
            self.segments.get(i).is_some_and(|t| {
                Arc::ptr_eq(&t.relation, relation) || same_shape(&t.relation, relation)
            })
        });
        let index = match reuse {
            Some(i) => i,
            None => {
                self.segments
                    .push(ChangeTable::new(Arc::clone(relation), self.binary));
                let i = self.segments.len() - 1;
                self.current.insert(relation.oid, i);
                i
            }
        };
        // `index` is valid: it was just found or pushed.
        #[allow(clippy::indexing_slicing)]
        &mut self.segments[index]
    }

    /// Finishes and returns every segment that holds rows, oldest first; the sink starts
    /// empty again (relations stay known).
    pub fn take(&mut self) -> Result<Vec<Segment>, ArrowError> {
        let mut out = Vec::new();
        for table in &mut self.segments {
            if table.rows() > 0 {
                out.push(Segment {
                    table: table.relation.qualified_name.clone(),
                    batch: table.finish()?,
                });
            }
        }
        self.segments.clear();
        self.current.clear();
        Ok(out)
    }
}

/// Same columns, same types, same identity flags: rows can share a batch.
fn same_shape(a: &Relation, b: &Relation) -> bool {
    a.qualified_name == b.qualified_name
        && a.columns.len() == b.columns.len()
        && a.columns.iter().zip(&b.columns).all(|(x, y)| {
            x.name == y.name
                && x.type_oid == y.type_oid
                && x.type_modifier == y.type_modifier
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

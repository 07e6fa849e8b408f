//! One change table segment: builders for a relation's columns and the metadata columns.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBufferBuilder, Int64Builder, ListBuilder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, BooleanArray, RecordBatch, StructArray};
use arrow_buffer::NullBuffer;
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use super::column::{arrow_type, finish_bytes, finish_primitive, room, ColumnBuilder};
use crate::protocol::{Datum, Lsn, OldKind, PgTimestamp};
use crate::relation::Relation;
use crate::values::ValueError;

/// Microseconds from 1970-01-01 (Arrow) to 2000-01-01 (PostgreSQL).
const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;

/// What kind of change a row records (`_change_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// A row of the initial snapshot (COPY), not a change from the stream.
    Read,
    Insert,
    Update,
    Delete,
    Truncate,
}

impl ChangeKind {
    /// The `_change_type` value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Insert => "insert",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::Truncate => "truncate",
        }
    }
}

/// Where a row comes from: its transaction and position.
#[derive(Debug, Clone, Copy)]
pub struct RowMeta {
    pub lsn: Lsn,
    pub commit_lsn: Option<Lsn>,
    pub tx_ordinal: u64,
    pub commit_timestamp: Option<PgTimestamp>,
    pub xid: Option<u32>,
}

fn data_fields(relation: &Relation) -> Fields {
    relation
        .columns
        .iter()
        .map(|c| {
            let metadata = [
                ("pg_type_oid".to_owned(), c.type_oid.to_string()),
                ("pg_base_type_oid".to_owned(), c.base_type_oid.to_string()),
                ("pg_type_modifier".to_owned(), c.type_modifier.to_string()),
                (
                    "pg_base_type_modifier".to_owned(),
                    c.base_type_modifier.to_string(),
                ),
                ("pg_replica_identity".to_owned(), c.is_key.to_string()),
            ];
            Field::new(
                &c.name,
                arrow_type(c.base_type_oid, c.base_type_modifier),
                true,
            )
            .with_metadata(metadata.into_iter().collect())
        })
        .collect()
}

/// The Arrow schema of a relation's change table (CONTRACT section 3).
pub fn change_table_schema(relation: &Relation) -> SchemaRef {
    let data = data_fields(relation);
    let mut fields: Vec<Field> = data.iter().map(|f| f.as_ref().clone()).collect();
    fields.extend([
        Field::new("_change_type", DataType::Utf8, false),
        Field::new("_lsn", DataType::Int64, false),
        Field::new("_commit_lsn", DataType::Int64, true),
        Field::new("_tx_ordinal", DataType::Int64, false),
        Field::new(
            "_commit_ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("_xid", DataType::Int64, true),
        Field::new("_before", DataType::Struct(data), true),
        Field::new("_before_kind", DataType::Utf8, true),
        Field::new(
            "_unchanged",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            false,
        ),
    ]);
    let metadata = [
        ("pg_relation_oid".to_owned(), relation.oid.to_string()),
        ("pg_schema".to_owned(), relation.namespace.clone()),
        ("pg_table".to_owned(), relation.name.clone()),
        (
            "pg_replica_identity".to_owned(),
            char::from(relation.replica_identity).to_string(),
        ),
    ];
    Arc::new(Schema::new_with_metadata(
        fields,
        metadata.into_iter().collect(),
    ))
}

/// A value that could not be appended, with the column it belongs to.
#[derive(Debug)]
pub struct ColumnError {
    pub column: String,
    pub error: ValueError,
}

pub struct ChangeTable {
    pub relation: Arc<Relation>,
    schema: SchemaRef,
    binary: bool,
    columns: Vec<ColumnBuilder>,
    before: Vec<ColumnBuilder>,
    before_valid: BooleanBufferBuilder,
    change_type: StringBuilder,
    lsn: Int64Builder,
    commit_lsn: Int64Builder,
    tx_ordinal: Int64Builder,
    commit_ts: TimestampMicrosecondBuilder,
    xid: Int64Builder,
    before_kind: StringBuilder,
    unchanged: ListBuilder<StringBuilder>,
    rows: usize,
    /// Rows whose values could not all be parsed: dropped at `finish`.
    failed_rows: Vec<usize>,
    /// Null `_before` entries not yet appended to its child builders.
    before_pending_nulls: usize,
}

impl ChangeTable {
    pub fn new(relation: Arc<Relation>, binary: bool) -> Self {
        let builders = || -> Vec<ColumnBuilder> {
            relation
                .columns
                .iter()
                .map(|c| ColumnBuilder::new(c.base_type_oid, c.base_type_modifier))
                .collect()
        };
        Self {
            schema: change_table_schema(&relation),
            binary,
            columns: builders(),
            before: builders(),
            before_valid: BooleanBufferBuilder::new(0),
            change_type: StringBuilder::new(),
            lsn: Int64Builder::new(),
            commit_lsn: Int64Builder::new(),
            tx_ordinal: Int64Builder::new(),
            commit_ts: TimestampMicrosecondBuilder::new().with_timezone("UTC"),
            xid: Int64Builder::new(),
            before_kind: StringBuilder::new(),
            unchanged: ListBuilder::new(StringBuilder::new()),
            rows: 0,
            failed_rows: Vec::new(),
            before_pending_nulls: 0,
            relation,
        }
    }

    /// Rows appended since the last `finish`, including rows `finish` will leave out.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The schema of every batch `finish` returns.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Appends one change. `new` holds the data columns (a remaining `UnchangedToast`
    /// is a column whose value is unknown: null, named in `_unchanged`); `old` the old-side
    /// image for `_before`.
    ///
    /// Values are parsed once, straight into the builders. When one cannot be parsed, the
    /// rest of the row is filled with nulls to keep the columns aligned, the row is marked
    /// and left out of the finished batch, and the error is returned.
    pub fn append(
        &mut self,
        kind: ChangeKind,
        meta: &RowMeta,
        new: Option<&[Datum<'_>]>,
        old: Option<(OldKind, &[Datum<'_>])>,
    ) -> Result<(), ColumnError> {
        let mut first_error: Option<ColumnError> = None;
        let mut unchanged: Vec<&str> = Vec::new();
        let relation = &self.relation;
        let binary = self.binary;
        let mut put = |builder: &mut ColumnBuilder, i: usize, datum: Option<&Datum<'_>>| match datum
        {
            Some(d @ (Datum::Text(_) | Datum::Binary(_))) if first_error.is_none() => {
                // On error the builder has appended a null entry: the columns stay aligned.
                if let Err(error) = builder.append(d, binary) {
                    first_error = Some(ColumnError {
                        column: column_name(relation, i),
                        error,
                    });
                }
            }
            _ => builder.append_null(),
        };
        for (i, builder) in self.columns.iter_mut().enumerate() {
            let datum = new.and_then(|row| row.get(i));
            if let Some(Datum::UnchangedToast) = datum {
                if let Some(col) = relation.columns.get(i) {
                    unchanged.push(&col.name);
                }
            }
            put(builder, i, datum);
        }
        // Most rows have no old image: their `_before` nulls are appended in bulk, when the
        // next row with one comes or at `finish`.
        if let Some((_, values)) = old {
            flush_nulls(&mut self.before, &mut self.before_pending_nulls);
            for (i, builder) in self.before.iter_mut().enumerate() {
                put(builder, i, values.get(i));
            }
        } else {
            self.before_pending_nulls += 1;
        }
        self.before_valid.append(old.is_some());
        self.before_kind.append_option(old.map(|(k, _)| match k {
            OldKind::Full => "full",
            OldKind::Key => "key",
        }));
        self.change_type.append_value(kind.name());
        self.lsn.append_value(meta.lsn as i64);
        self.commit_lsn
            .append_option(meta.commit_lsn.map(|l| l as i64));
        self.tx_ordinal.append_value(meta.tx_ordinal as i64);
        self.commit_ts.append_option(
            meta.commit_timestamp
                .map(|t| t.saturating_add(PG_EPOCH_OFFSET_MICROS)),
        );
        self.xid.append_option(meta.xid.map(i64::from));
        let names = self.unchanged.values();
        for name in unchanged {
            names.append_value(name);
        }
        self.unchanged.append(true);
        self.rows += 1;
        match first_error {
            None => Ok(()),
            Some(e) => {
                self.failed_rows.push(self.rows - 1);
                Err(e)
            }
        }
    }

    /// Finishes the rows appended so far into one record batch; the table starts empty again.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        flush_nulls(&mut self.before, &mut self.before_pending_nulls);
        let n = room(self.rows);
        let mut arrays: Vec<ArrayRef> = self.columns.iter_mut().map(|b| b.finish()).collect();
        let before_arrays: Vec<ArrayRef> = self.before.iter_mut().map(|b| b.finish()).collect();
        let nulls = NullBuffer::new(self.before_valid.finish());
        self.before_valid = BooleanBufferBuilder::new(n);
        let before = StructArray::try_new(data_fields(&self.relation), before_arrays, Some(nulls))?;
        let unchanged = Arc::new(self.unchanged.finish());
        self.unchanged = ListBuilder::with_capacity(StringBuilder::new(), n);
        arrays.extend([
            finish_bytes(&mut self.change_type),
            finish_primitive(&mut self.lsn),
            finish_primitive(&mut self.commit_lsn),
            finish_primitive(&mut self.tx_ordinal),
            finish_primitive(&mut self.commit_ts),
            finish_primitive(&mut self.xid),
            Arc::new(before),
            finish_bytes(&mut self.before_kind),
            unchanged,
        ]);
        self.rows = 0;
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), arrays)?;
        if self.failed_rows.is_empty() {
            return Ok(batch);
        }
        let mut keep = BooleanBufferBuilder::new(batch.num_rows());
        keep.append_n(batch.num_rows(), true);
        for row in self.failed_rows.drain(..) {
            if row < keep.len() {
                keep.set_bit(row, false);
            }
        }
        arrow_select::filter::filter_record_batch(&batch, &BooleanArray::new(keep.finish(), None))
    }
}

fn flush_nulls(builders: &mut [ColumnBuilder], pending: &mut usize) {
    if *pending > 0 {
        for b in builders {
            b.append_nulls(*pending);
        }
        *pending = 0;
    }
}

fn column_name(relation: &Relation, i: usize) -> String {
    relation
        .columns
        .get(i)
        .map(|c| c.name.clone())
        .unwrap_or_default()
}

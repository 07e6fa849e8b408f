//! One change table segment: builders for a relation's columns and the metadata columns.

use std::sync::Arc;

use arrow_array::builder::BooleanBufferBuilder;
use arrow_array::types::{Int64Type, TimestampMicrosecondType};
use arrow_array::{new_null_array, ArrayRef, BooleanArray, ListArray, RecordBatch, StructArray};
use arrow_buffer::{BooleanBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};

use super::buffers::{room, Fixed, OffsetOverflow, Recycler, Slot, Utf8};
use super::column::{arrow_type, ColumnBuilder};
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

fn commit_ts_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

fn unchanged_item() -> FieldRef {
    Arc::new(Field::new("item", DataType::Utf8, true))
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

/// The metadata columns of every change table, after the table's own columns, in this
/// order (docs/change-tables.md); the names exist only here (`_native.METADATA_COLUMNS`).
pub mod meta {
    pub const CHANGE_TYPE: &str = "_change_type";
    pub const LSN: &str = "_lsn";
    pub const COMMIT_LSN: &str = "_commit_lsn";
    pub const TX_ORDINAL: &str = "_tx_ordinal";
    pub const COMMIT_TS: &str = "_commit_ts";
    pub const XID: &str = "_xid";
    pub const BEFORE: &str = "_before";
    pub const BEFORE_KIND: &str = "_before_kind";
    pub const UNCHANGED: &str = "_unchanged";
    /// All of them, in order.
    pub const ALL: [&str; 9] = [
        CHANGE_TYPE,
        LSN,
        COMMIT_LSN,
        TX_ORDINAL,
        COMMIT_TS,
        XID,
        BEFORE,
        BEFORE_KIND,
        UNCHANGED,
    ];
}

/// The Arrow schema of a relation's change table (docs/change-tables.md).
pub fn change_table_schema(relation: &Relation) -> SchemaRef {
    let data = data_fields(relation);
    let mut fields: Vec<Field> = data.iter().map(|f| f.as_ref().clone()).collect();
    fields.extend([
        Field::new(meta::CHANGE_TYPE, DataType::Utf8, false),
        Field::new(meta::LSN, DataType::Int64, false),
        Field::new(meta::COMMIT_LSN, DataType::Int64, true),
        Field::new(meta::TX_ORDINAL, DataType::Int64, false),
        Field::new(meta::COMMIT_TS, commit_ts_type(), true),
        Field::new(meta::XID, DataType::Int64, true),
        Field::new(meta::BEFORE, DataType::Struct(data), true),
        Field::new(meta::BEFORE_KIND, DataType::Utf8, true),
        Field::new(meta::UNCHANGED, DataType::List(unchanged_item()), false),
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

/// A row's `_commit_lsn`, `_commit_ts` and `_xid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TxColumns {
    commit_lsn: Option<i64>,
    commit_ts: Option<i64>,
    xid: Option<i64>,
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
    before_fields: Fields,
    /// Each row's old image kind (`_before_kind`; `None`: `_before` is null), turned into
    /// the two columns at `finish`.
    before_kinds: Vec<Option<OldKind>>,
    /// Each row's change kind, turned into `_change_type` at `finish`.
    change_kinds: Vec<ChangeKind>,
    change_type: Utf8,
    /// A `_change_type` column of one kind, shared by the batches whose rows are all of
    /// that kind (sliced to length).
    same_change_type: Option<(ChangeKind, ArrayRef)>,
    lsn: Fixed<i64>,
    commit_lsn: Fixed<i64>,
    /// `_commit_lsn`, `_commit_ts` and `_xid` of the last rows, not yet appended: the same
    /// for every row of a transaction, so they go in a run at a time.
    pending_tx: Option<(TxColumns, usize)>,
    tx_ordinal: Fixed<i64>,
    commit_ts: Fixed<i64>,
    xid: Fixed<i64>,
    before_kind: Utf8,
    /// Rows with an old image since the last `finish`.
    old_images: usize,
    /// All-null `_before` and `_before_kind` columns, shared by batches without old images.
    null_before: Option<(ArrayRef, ArrayRef)>,
    /// `_unchanged`: the list offsets (starting with 0) and the names.
    unchanged: Slot<i32>,
    unchanged_names: Utf8,
    /// The memory of the batches handed out, for the next ones.
    recycler: Recycler,
    /// The builders have handed their memory out and get it back at the next row.
    refill: bool,
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
            before_fields: data_fields(&relation),
            before_kinds: Vec::new(),
            change_kinds: Vec::new(),
            change_type: Utf8::default(),
            same_change_type: None,
            lsn: Fixed::default(),
            commit_lsn: Fixed::default(),
            pending_tx: None,
            tx_ordinal: Fixed::default(),
            commit_ts: Fixed::default(),
            xid: Fixed::default(),
            before_kind: Utf8::default(),
            old_images: 0,
            null_before: None,
            unchanged: Slot::offsets(),
            unchanged_names: Utf8::default(),
            recycler: Recycler::default(),
            refill: false,
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

    /// Rows appended since the last `finish` that `finish` will leave out (a value failed).
    pub fn failed_rows(&self) -> usize {
        self.failed_rows.len()
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
        if self.refill {
            self.refill_builders();
        }
        let append = if self.binary {
            append_values::<true>
        } else {
            append_values::<false>
        };
        let (mut failed, unchanged) = append(&mut self.columns, new);
        // Most rows have no old image: their `_before` nulls are appended in bulk, when the
        // next row with one comes or at `finish`.
        if let Some((_, values)) = old {
            flush_nulls(&mut self.before, &mut self.before_pending_nulls);
            let (before_failed, _) = append(&mut self.before, Some(values));
            failed = failed.or(before_failed);
            self.old_images += 1;
        } else {
            self.before_pending_nulls += 1;
        }
        if unchanged {
            // The rows since the last one with names have none: their entries end where
            // its entry ended.
            let offsets = &mut self.unchanged.values;
            let end = offsets.last().copied().unwrap_or(0);
            offsets.resize(self.rows + 1, end);
            let row = new.unwrap_or_default();
            for (datum, column) in row.iter().zip(&self.relation.columns) {
                if datum.is_unchanged() {
                    push_name(&mut self.unchanged_names, &column.name);
                }
            }
            let names = i32::try_from(self.unchanged_names.len()).unwrap_or(i32::MAX);
            self.unchanged.values.push(names);
        }
        self.before_kinds.push(old.map(|(k, _)| k));
        self.change_kinds.push(kind);
        self.lsn.push(meta.lsn as i64);
        self.tx_ordinal.push(meta.tx_ordinal as i64);
        let tx = TxColumns {
            commit_lsn: meta.commit_lsn.map(|l| l as i64),
            commit_ts: meta
                .commit_timestamp
                .map(|t| t.saturating_add(PG_EPOCH_OFFSET_MICROS)),
            xid: meta.xid.map(i64::from),
        };
        match &mut self.pending_tx {
            Some((pending, n)) if *pending == tx => *n += 1,
            _ => {
                self.flush_tx();
                self.pending_tx = Some((tx, 1));
            }
        }
        self.rows += 1;
        match failed {
            None => Ok(()),
            Some((i, error)) => {
                self.failed_rows.push(self.rows - 1);
                Err(ColumnError {
                    column: column_name(&self.relation, i),
                    error,
                })
            }
        }
    }

    /// Finishes the rows appended so far into one record batch; the table starts empty again.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        self.flush_tx();
        let rows = std::mem::take(&mut self.rows);
        self.refill = true;
        let mut arrays = Vec::with_capacity(self.columns.len() + 9);
        for b in &mut self.columns {
            arrays.push(b.finish(&mut self.recycler)?);
        }
        let (before, before_kind) = self.finish_before(rows)?;
        let change_type = self.finish_change_type();
        let recycler = &mut self.recycler;
        let names = self.unchanged_names.finish(recycler);
        let end = self.unchanged.values.last().copied().unwrap_or(0);
        self.unchanged.values.resize(rows + 1, end);
        let offsets = OffsetBuffer::new(ScalarBuffer::new(
            self.unchanged.lend(recycler),
            0,
            rows + 1,
        ));
        self.unchanged.values.push(0);
        let unchanged = ListArray::try_new(unchanged_item(), offsets, names, None)?;
        arrays.extend([
            change_type,
            self.lsn.finish::<Int64Type>(&DataType::Int64, recycler),
            self.commit_lsn
                .finish::<Int64Type>(&DataType::Int64, recycler),
            self.tx_ordinal
                .finish::<Int64Type>(&DataType::Int64, recycler),
            self.commit_ts
                .finish::<TimestampMicrosecondType>(&commit_ts_type(), recycler),
            self.xid.finish::<Int64Type>(&DataType::Int64, recycler),
            before,
            before_kind,
            Arc::new(unchanged),
        ]);
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

impl ChangeTable {
    /// Appends the pending run of transaction columns.
    fn flush_tx(&mut self) {
        if let Some((tx, n)) = self.pending_tx.take() {
            self.commit_lsn.push_option_n(tx.commit_lsn, n);
            self.commit_ts.push_option_n(tx.commit_ts, n);
            self.xid.push_option_n(tx.xid, n);
        }
    }

    /// Gives every builder memory for this batch: what the last batches handed out and the
    /// consumer has released since, or new memory.
    fn refill_builders(&mut self) {
        self.refill = false;
        let recycler = &mut self.recycler;
        recycler.begin();
        for b in self.columns.iter_mut().chain(&mut self.before) {
            b.refill(recycler);
        }
        for b in [
            &mut self.lsn,
            &mut self.commit_lsn,
            &mut self.tx_ordinal,
            &mut self.commit_ts,
            &mut self.xid,
        ] {
            b.refill(recycler);
        }
        for b in [
            &mut self.change_type,
            &mut self.before_kind,
            &mut self.unchanged_names,
        ] {
            b.refill(recycler);
        }
        self.unchanged.refill(recycler, 1);
        recycler.end();
    }

    /// `_change_type`.
    fn finish_change_type(&mut self) -> ArrayRef {
        let kinds = &mut self.change_kinds;
        let rows = kinds.len();
        let uniform = kinds
            .first()
            .copied()
            .filter(|&k| kinds.iter().all(|&x| x == k));
        let Some(kind) = uniform else {
            for kind in kinds.drain(..) {
                push_name(&mut self.change_type, kind.name());
            }
            return self.change_type.finish(&mut self.recycler);
        };
        kinds.clear();
        let same = match self.same_change_type.take() {
            Some((k, array)) if k == kind && array.len() >= rows => array,
            _ => {
                let mut column = Utf8::default();
                for _ in 0..room(rows) {
                    push_name(&mut column, kind.name());
                }
                column.finish(&mut Recycler::default())
            }
        };
        let sliced = same.slice(0, rows);
        self.same_change_type = Some((kind, same));
        sliced
    }

    /// `_before` and `_before_kind`.
    fn finish_before(&mut self, rows: usize) -> Result<(ArrayRef, ArrayRef), ArrowError> {
        let recycler = &mut self.recycler;
        let kinds = &mut self.before_kinds;
        if std::mem::take(&mut self.old_images) == 0 {
            // No row had an old image (inserts): all-null columns. Their content depends on
            // nothing but the length, so batches share one pair (Arrow arrays are
            // immutable), sliced to length.
            self.before_pending_nulls = 0;
            kinds.clear();
            let nulls = match self.null_before.take() {
                Some(pair) if pair.0.len() >= rows => pair,
                _ => (
                    null_column(&DataType::Struct(self.before_fields.clone()), room(rows))?,
                    new_null_array(&DataType::Utf8, room(rows)),
                ),
            };
            let sliced = (nulls.0.slice(0, rows), nulls.1.slice(0, rows));
            self.null_before = Some(nulls);
            return Ok(sliced);
        }
        flush_nulls(&mut self.before, &mut self.before_pending_nulls);
        let mut children = Vec::with_capacity(self.before.len());
        for b in &mut self.before {
            children.push(b.finish(recycler)?);
        }
        let kinds_len = kinds.len();
        let valid =
            BooleanBuffer::collect_bool(kinds_len, |i| kinds.get(i).is_some_and(Option::is_some));
        for kind in kinds.drain(..) {
            match kind {
                None => self.before_kind.push_null(),
                Some(k) => push_name(&mut self.before_kind, before_kind_name(k)),
            }
        }
        // With the length given: a table without columns has a `_before` without fields.
        let before = StructArray::try_new_with_length(
            self.before_fields.clone(),
            children,
            Some(NullBuffer::new(valid)),
            kinds_len,
        )?;
        Ok((Arc::new(before), self.before_kind.finish(recycler)))
    }
}

/// The `_before_kind` value.
fn before_kind_name(kind: OldKind) -> &'static str {
    match kind {
        OldKind::Full => "full",
        OldKind::Key => "key",
    }
}

/// Appends a name the metadata columns hold (a change kind, a column name): far below
/// the 2 GiB a column's offsets address in any batch that fits in memory.
fn push_name(column: &mut Utf8, name: &str) {
    if let Err(OffsetOverflow) = column.push(name) {
        column.push_null();
    }
}

/// Appends one entry to each builder: the row's value, or null where the row holds none
/// (NULL, an unchanged-TOAST marker, no row). After a value that fails (its builder has
/// appended a null, so the columns stay aligned) the rest are nulls. Which one failed,
/// and whether the row holds an unchanged-TOAST marker.
///
/// Each value goes through [`ColumnBuilder::append_in_format`] (the usual types in place,
/// anything else through the general path); `BINARY` is the stream's format.
fn append_values<const BINARY: bool>(
    builders: &mut [ColumnBuilder],
    row: Option<&[Datum<'_>]>,
) -> (Option<(usize, ValueError)>, bool) {
    let row = row.unwrap_or_default();
    let mut failed = None;
    let mut unchanged = false;
    for (i, builder) in builders.iter_mut().enumerate() {
        match row.get(i) {
            Some(d @ (Datum::Text(_) | Datum::Binary(_))) if failed.is_none() => {
                if let Err(error) = builder.append_in_format::<BINARY>(d) {
                    failed = Some((i, error));
                }
            }
            other => {
                unchanged |= other.is_some_and(Datum::is_unchanged);
                builder.append_null();
            }
        }
    }
    (failed, unchanged)
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

/// An all-null column whose non-nullable struct fields (the interval's parts) hold values,
/// not nulls: `new_null_array` puts nulls there too, which Parquet writers and Spark
/// reject.
fn null_column(data_type: &DataType, len: usize) -> Result<ArrayRef, ArrowError> {
    let DataType::Struct(fields) = data_type else {
        return Ok(new_null_array(data_type, len));
    };
    let children = fields
        .iter()
        .map(|f| match (f.is_nullable(), f.data_type()) {
            (false, DataType::Int32) => {
                Ok(Arc::new(arrow_array::Int32Array::from(vec![0; len])) as ArrayRef)
            }
            (false, DataType::Int64) => {
                Ok(Arc::new(arrow_array::Int64Array::from(vec![0; len])) as ArrayRef)
            }
            (_, dt) => null_column(dt, len),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(StructArray::try_new_with_length(
        fields.clone(),
        children,
        Some(NullBuffer::new_null(len)),
        len,
    )?))
}

//! `apply_changes`: a table's rows after one change table (see the module documentation).

use std::collections::HashMap;

use ahash::RandomState;
use arrow_array::cast::AsArray;
use arrow_array::{new_null_array, Array, ArrayRef, RecordBatch, StringArray, StructArray};
use arrow_row::{Row, RowConverter, Rows, SortField};
use arrow_schema::{ArrowError, SchemaRef};
use arrow_select::interleave::interleave;

use crate::arrow::meta;

/// How rows are matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyMode {
    /// One row per value of these columns (indexes into the table's schema).
    Unique(Vec<usize>),
    /// Rows are matched on every column; equal rows may repeat.
    Multiset,
}

/// What one apply did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyStats {
    /// `read` and `insert` rows.
    pub inserted: u64,
    pub updated: u64,
    pub deleted: u64,
    /// `truncate` rows.
    pub truncated: u64,
    /// Updates and deletes whose old row the table did not hold (an update is then
    /// applied as an insert).
    pub missing_rows: u64,
    /// Unchanged-TOAST values neither the stream nor the table knew: left null.
    pub unknown_values: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("the change table does not fit the table: {0}")]
    Schema(String),
    #[error(transparent)]
    Arrow(#[from] ArrowError),
}

/// Where one value of the new table comes from: (source array, row). Source arrays are the
/// base batches, then the change batches, then a one-row null array.
pub(super) type Src = (u32, u32);

/// One row of the new table: every column from `src`, except the patched ones.
#[derive(Debug, Clone)]
pub(super) struct RowVersion {
    pub(super) src: Src,
    pub(super) patches: Option<Box<[(usize, Src)]>>,
}

impl RowVersion {
    pub(super) fn source_of(&self, column: usize) -> Src {
        self.patches
            .as_deref()
            .and_then(|p| p.iter().find(|(c, _)| *c == column))
            .map_or(self.src, |(_, s)| *s)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Upsert,
    Update,
    Delete,
    Truncate,
}

/// The columns of one change batch the apply reads.
pub(super) struct ChangeColumns<'a> {
    pub(super) data: Vec<ArrayRef>,
    pub(super) kinds: Vec<Kind>,
    pub(super) before: Option<&'a StructArray>,
    pub(super) unchanged: Option<&'a arrow_array::ListArray>,
}

/// The table's rows after applying `changes` (in order) to `base`. `schema` is the
/// table's schema; every base batch has it, and every change batch has its columns
/// by name (same types), followed by the metadata columns.
#[allow(
    clippy::too_many_lines,
    reason = "one pass over the base rows and the changes: the index and the row versions borrow the same key rows, so its parts would need them all"
)]
pub fn apply_changes(
    schema: &SchemaRef,
    base: &[RecordBatch],
    changes: &[RecordBatch],
    key: &KeyMode,
) -> Result<(RecordBatch, ApplyStats), ApplyError> {
    let width = schema.fields().len();
    let key_columns: Vec<usize> = match key {
        KeyMode::Unique(cols) => cols.clone(),
        KeyMode::Multiset => (0..width).collect(),
    };
    if key_columns.is_empty() || key_columns.iter().any(|&c| c >= width) {
        return Err(ApplyError::Schema("no usable key columns".into()));
    }
    let unique = matches!(key, KeyMode::Unique(_));
    for b in base {
        if b.schema().fields().len() != width
            || b.schema()
                .fields()
                .iter()
                .zip(schema.fields())
                .any(|(a, f)| a.data_type() != f.data_type())
        {
            return Err(ApplyError::Schema(
                "a table batch has another schema".into(),
            ));
        }
    }
    let parsed: Vec<ChangeColumns<'_>> = changes
        .iter()
        .map(|c| change_columns(schema, c))
        .collect::<Result<_, _>>()?;

    let converter = key_converter(schema, &key_columns)?;
    let pick = |columns: &[ArrayRef]| -> Vec<ArrayRef> {
        key_columns
            .iter()
            .filter_map(|&c| columns.get(c).cloned())
            .collect()
    };
    let base_keys: Vec<Rows> = base
        .iter()
        .map(|b| converter.convert_columns(&pick(b.columns())))
        .collect::<Result<_, _>>()?;
    let mut new_keys: Vec<Rows> = Vec::with_capacity(parsed.len());
    let mut before_keys: Vec<Option<Rows>> = Vec::with_capacity(parsed.len());
    for c in &parsed {
        new_keys.push(converter.convert_columns(&pick(&c.data))?);
        before_keys.push(match c.before {
            Some(before) => {
                let columns: Vec<ArrayRef> = key_columns
                    .iter()
                    .map(|&k| {
                        let name = schema.field(k).name();
                        before.column_by_name(name).cloned().ok_or_else(|| {
                            ApplyError::Schema(format!("_before has no column {name:?}"))
                        })
                    })
                    .collect::<Result<_, _>>()?;
                Some(converter.convert_columns(&columns)?)
            }
            None => None,
        });
    }

    let base_rows: usize = base.iter().map(RecordBatch::num_rows).sum();
    let mut rows: Vec<Option<RowVersion>> = Vec::with_capacity(base_rows);
    let mut index: HashMap<Row<'_>, Vec<u32>, RandomState> =
        HashMap::with_capacity_and_hasher(base_rows, RandomState::new());
    let mut stats = ApplyStats::default();

    for (b, keys) in base_keys.iter().enumerate() {
        for r in 0..keys.num_rows() {
            let at = to_u32(rows.len())?;
            rows.push(Some(RowVersion {
                src: (to_u32(b)?, to_u32(r)?),
                patches: None,
            }));
            let slot = index.entry(keys.row(r)).or_default();
            if unique {
                for old in slot.drain(..) {
                    if let Some(v) = rows.get_mut(old as usize) {
                        *v = None;
                    }
                }
            }
            slot.push(at);
        }
    }

    let null_source = to_u32(base.len() + changes.len())?;
    for (ci, c) in parsed.iter().enumerate() {
        let source = to_u32(base.len() + ci)?;
        let (Some(new_k), Some(before_k)) = (new_keys.get(ci), before_keys.get(ci)) else {
            continue;
        };
        for (i, kind) in c.kinds.iter().enumerate() {
            let here = (source, to_u32(i)?);
            let old_key = || -> Row<'_> {
                match (c.before, before_k) {
                    (Some(before), Some(bk)) if before.is_valid(i) => bk.row(i),
                    _ => new_k.row(i),
                }
            };
            match kind {
                Kind::Truncate => {
                    stats.truncated += 1;
                    rows.fill_with(|| None);
                    index.clear();
                }
                Kind::Delete => {
                    stats.deleted += 1;
                    if take_one(&mut index, &mut rows, old_key()).is_none() {
                        stats.missing_rows += 1;
                    }
                }
                Kind::Upsert | Kind::Update => {
                    let mut version = RowVersion {
                        src: here,
                        patches: None,
                    };
                    if *kind == Kind::Update {
                        stats.updated += 1;
                        let previous = take_one(&mut index, &mut rows, old_key());
                        if previous.is_none() {
                            stats.missing_rows += 1;
                        }
                        let unchanged = unchanged_columns(schema, c.unchanged, i)?;
                        if !unchanged.is_empty() {
                            let patches: Vec<(usize, Src)> = unchanged
                                .into_iter()
                                .map(|col| {
                                    let from = if let Some(p) = &previous {
                                        p.source_of(col)
                                    } else {
                                        stats.unknown_values += 1;
                                        (null_source, 0)
                                    };
                                    (col, from)
                                })
                                .collect();
                            version.patches = Some(patches.into_boxed_slice());
                        }
                    } else {
                        stats.inserted += 1;
                    }
                    let at = to_u32(rows.len())?;
                    rows.push(Some(version));
                    let slot = index.entry(new_k.row(i)).or_default();
                    if unique {
                        for old in slot.drain(..) {
                            if let Some(v) = rows.get_mut(old as usize) {
                                *v = None;
                            }
                        }
                    }
                    slot.push(at);
                }
            }
        }
    }

    let live: Vec<&RowVersion> = rows.iter().flatten().collect();
    let mut columns = Vec::with_capacity(width);
    for (col, field) in schema.fields().iter().enumerate() {
        let nulls = new_null_array(field.data_type(), 1);
        let mut sources: Vec<&dyn Array> = Vec::with_capacity(base.len() + parsed.len() + 1);
        for b in base {
            sources.push(b.column(col).as_ref());
        }
        for c in &parsed {
            let array = c
                .data
                .get(col)
                .ok_or_else(|| ApplyError::Schema("missing column".into()))?;
            sources.push(array.as_ref());
        }
        sources.push(nulls.as_ref());
        let picks: Vec<(usize, usize)> = live
            .iter()
            .map(|v| {
                let (a, r) = v.source_of(col);
                (a as usize, r as usize)
            })
            .collect();
        columns.push(interleave(&sources, &picks)?);
    }
    let batch = if columns.is_empty() {
        RecordBatch::new_empty(schema.clone())
    } else {
        RecordBatch::try_new(schema.clone(), columns)?
    };
    Ok((batch, stats))
}

/// Byte-comparable keys of `key_columns` (indexes into `schema`).
pub(super) fn key_converter(
    schema: &SchemaRef,
    key_columns: &[usize],
) -> Result<RowConverter, ApplyError> {
    let fields: Vec<SortField> = key_columns
        .iter()
        .filter_map(|&c| schema.fields().get(c))
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    Ok(RowConverter::new(fields)?)
}

/// Removes one row stored under `key` and returns it.
fn take_one<'k>(
    index: &mut HashMap<Row<'k>, Vec<u32>, RandomState>,
    rows: &mut [Option<RowVersion>],
    key: Row<'k>,
) -> Option<RowVersion> {
    let slot = index.get_mut(&key)?;
    let at = slot.pop()?;
    if slot.is_empty() {
        index.remove(&key);
    }
    rows.get_mut(at as usize).and_then(Option::take)
}

pub(super) fn to_u32(n: usize) -> Result<u32, ApplyError> {
    u32::try_from(n).map_err(|_| ApplyError::Schema("more than 2^32 rows in one apply".into()))
}

/// The table's columns of one change batch, and its metadata columns, checked.
pub(super) fn change_columns<'a>(
    schema: &SchemaRef,
    batch: &'a RecordBatch,
) -> Result<ChangeColumns<'a>, ApplyError> {
    let mut data = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let array = batch.column_by_name(field.name()).ok_or_else(|| {
            ApplyError::Schema(format!("the change table has no column {:?}", field.name()))
        })?;
        if array.data_type() != field.data_type() {
            return Err(ApplyError::Schema(format!(
                "column {:?} is {} in the change table but {} in the table",
                field.name(),
                array.data_type(),
                field.data_type()
            )));
        }
        data.push(array.clone());
    }
    let kinds = change_kinds(
        batch
            .column_by_name(meta::CHANGE_TYPE)
            .ok_or_else(|| ApplyError::Schema("no _change_type column".into()))?
            .as_ref(),
    )?;
    let before = match batch.column_by_name(meta::BEFORE) {
        Some(a) => Some(
            a.as_struct_opt()
                .ok_or_else(|| ApplyError::Schema("_before is not a struct".into()))?,
        ),
        None => None,
    };
    let unchanged = match batch.column_by_name(meta::UNCHANGED) {
        Some(a) => Some(
            a.as_list_opt::<i32>()
                .ok_or_else(|| ApplyError::Schema("_unchanged is not a list".into()))?,
        ),
        None => None,
    };
    Ok(ChangeColumns {
        data,
        kinds,
        before,
        unchanged,
    })
}

fn kind_of(name: Option<&str>) -> Result<Kind, ApplyError> {
    match name {
        Some("read" | "insert") => Ok(Kind::Upsert),
        Some("update") => Ok(Kind::Update),
        Some("delete") => Ok(Kind::Delete),
        Some("truncate") => Ok(Kind::Truncate),
        Some(other) => Err(ApplyError::Schema(format!(
            "unknown _change_type {other:?}"
        ))),
        None => Err(ApplyError::Schema("null _change_type".into())),
    }
}

/// `_change_type` as plain or dictionary-encoded strings.
fn change_kinds(array: &dyn Array) -> Result<Vec<Kind>, ApplyError> {
    if let Some(strings) = array.as_string_opt::<i32>() {
        return strings.iter().map(kind_of).collect();
    }
    let dict = array
        .as_any_dictionary_opt()
        .ok_or_else(|| ApplyError::Schema("_change_type is not a string column".into()))?;
    let names: &StringArray = dict
        .values()
        .as_string_opt::<i32>()
        .ok_or_else(|| ApplyError::Schema("_change_type values are not strings".into()))?;
    let table: Vec<Kind> = names.iter().map(kind_of).collect::<Result<_, _>>()?;
    let keys = dict.keys();
    dict.normalized_keys()
        .into_iter()
        .enumerate()
        .map(|(i, k)| {
            table
                .get(k)
                .copied()
                .filter(|_| keys.is_valid(i))
                .ok_or_else(|| ApplyError::Schema("null _change_type".into()))
        })
        .collect()
}

/// The table columns named in `_unchanged` of row `i`.
pub(super) fn unchanged_columns(
    schema: &SchemaRef,
    unchanged: Option<&arrow_array::ListArray>,
    i: usize,
) -> Result<Vec<usize>, ApplyError> {
    let Some(list) = unchanged else {
        return Ok(Vec::new());
    };
    if list.is_null(i) {
        return Ok(Vec::new());
    }
    let names = list.value(i);
    let Some(names) = names.as_string_opt::<i32>() else {
        return Err(ApplyError::Schema(
            "_unchanged is not a list of strings".into(),
        ));
    };
    names
        .iter()
        .flatten()
        .map(|name| {
            schema.index_of(name).map_err(|_| {
                ApplyError::Schema(format!("_unchanged names an unknown column {name:?}"))
            })
        })
        .collect()
}

//! `reduce_changes`: one final change per key, the source of a MERGE (see the module
//! documentation).

use std::collections::HashMap;
use std::sync::Arc;

use ahash::RandomState;
use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::{
    new_null_array, Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, StructArray,
};
use arrow_buffer::NullBuffer;
use arrow_row::{Row, Rows};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use arrow_select::interleave::interleave;

use crate::arrow::meta;

use super::apply::{
    change_columns, key_converter, to_u32, unchanged_columns, ApplyError, ApplyStats,
    ChangeColumns, Kind, RowVersion, Src,
};

/// The MERGE source of one change table, and what the changes did.
#[derive(Debug)]
pub struct Reduced {
    /// The table's columns, then `_delete` (bool: the key's row goes), `_unchanged`
    /// (list<string>: columns whose value the table row keeps) and `_from` (struct of the
    /// key columns, or null: the key of the table row holding the `_unchanged` values when
    /// it is not the row's own key).
    pub batch: RecordBatch,
    /// A `truncate` came: every table row not named by `batch` goes.
    pub truncated: bool,
    pub stats: ApplyStats,
}

/// The final change of one key.
#[derive(Clone)]
enum Final {
    Row {
        version: RowVersion,
        /// Columns no change of the batch supplied (sorted).
        unknown: Vec<usize>,
        /// Where the table holds them, when not under this row's key.
        from: Option<Src>,
    },
    Deleted {
        /// The old key's values.
        key: Src,
    },
    /// A `truncate` (in a history only): every row of the table goes.
    Truncated,
}

/// Reduces `changes` (change batches of one table whose columns include `schema`'s, by
/// name, followed by the metadata columns) to one final change per value of the
/// `key_columns` (indexes into `schema`), in three phases: the rows' keys, the fold of
/// every change into the final one of its key, and the output batch picked from the
/// sources.
pub fn reduce_changes(
    schema: &SchemaRef,
    changes: &[RecordBatch],
    key_columns: &[usize],
) -> Result<Reduced, ApplyError> {
    let parsed = parse(schema, changes, key_columns)?;
    let keyed = Keyed::new(schema, &parsed, key_columns)?;
    let folded = fold(schema, &parsed, &keyed, None)?;
    let live: Vec<&Final> = folded.finals.iter().flatten().collect();
    let columns = assemble(schema, &parsed, &keyed, key_columns, &live)?;
    Ok(Reduced {
        batch: RecordBatch::try_new(columns.0, columns.1)?,
        truncated: folded.truncated,
        stats: folded.stats,
    })
}

/// The history of the rows `changes` touch: like [`reduce_changes`], but one change per
/// key **and source transaction** — the row as that transaction left it (or its delete)
/// — in commit order, each followed by the `_commit_lsn`, `_commit_ts` and `_xid` of its
/// transaction, and a `truncate` as a row of its own (`_truncate` true, the key null).
/// Columns listed in `_unchanged` are those no change of the batch supplied: the row's
/// version before the batch holds them (under `_from` when the row moved).
pub fn history_changes(
    schema: &SchemaRef,
    changes: &[RecordBatch],
    key_columns: &[usize],
) -> Result<Reduced, ApplyError> {
    let parsed = parse(schema, changes, key_columns)?;
    let keyed = Keyed::new(schema, &parsed, key_columns)?;
    let column = |batch: &RecordBatch, name: &str| -> Result<ArrayRef, ApplyError> {
        batch
            .column_by_name(name)
            .cloned()
            .ok_or_else(|| ApplyError::Schema(format!("the change table has no {name}")))
    };
    let commits: Vec<Int64Array> = changes
        .iter()
        .map(|c| {
            column(c, meta::COMMIT_LSN)?
                .as_any()
                .downcast_ref::<Int64Array>()
                .cloned()
                .ok_or_else(|| ApplyError::Schema("_commit_lsn is not int64".into()))
        })
        .collect::<Result<_, _>>()?;
    let folded = fold(schema, &parsed, &keyed, Some(&commits))?;
    let live: Vec<&Final> = folded.emitted.iter().map(|(f, _)| f).collect();
    let (schema_out, mut columns) = assemble(schema, &parsed, &keyed, key_columns, &live)?;
    let mut fields: Vec<Arc<Field>> = schema_out.fields().iter().cloned().collect();
    let truncates: BooleanArray = live
        .iter()
        .map(|f| Some(matches!(f, Final::Truncated)))
        .collect();
    fields.push(Arc::new(Field::new("_truncate", DataType::Boolean, false)));
    columns.push(Arc::new(truncates));
    let picks: Vec<(usize, usize)> = folded
        .emitted
        .iter()
        .map(|(_, s)| (s.0 as usize, s.1 as usize))
        .collect();
    for name in [meta::COMMIT_LSN, meta::COMMIT_TS, meta::XID] {
        let arrays: Vec<ArrayRef> = changes
            .iter()
            .map(|c| column(c, name))
            .collect::<Result<_, _>>()?;
        let refs: Vec<&dyn Array> = arrays.iter().map(AsRef::as_ref).collect();
        let picked = interleave(&refs, &picks)?;
        fields.push(Arc::new(Field::new(name, picked.data_type().clone(), true)));
        columns.push(picked);
    }
    Ok(Reduced {
        batch: RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?,
        truncated: folded.truncated,
        stats: folded.stats,
    })
}

/// The change batches' columns, after checking the key columns.
fn parse<'a>(
    schema: &SchemaRef,
    changes: &'a [RecordBatch],
    key_columns: &[usize],
) -> Result<Vec<ChangeColumns<'a>>, ApplyError> {
    let width = schema.fields().len();
    if key_columns.is_empty() || key_columns.iter().any(|&c| c >= width) {
        return Err(ApplyError::Schema("no usable key columns".into()));
    }
    changes.iter().map(|c| change_columns(schema, c)).collect()
}

/// Phase one: the keys of every change, in the row format that compares them.
struct Keyed {
    /// How many change batches: sources of a value are change batch `ci` row `r` as
    /// `(ci, r)`, its `_before` image as `(n + ci, r)`, the null as `(2n, 0)`.
    n: usize,
    null: Src,
    /// Per change batch: the new row's key.
    new_keys: Vec<Rows>,
    /// Per change batch: the old row's key (from `_before`), when it has old images.
    before_keys: Vec<Option<Rows>>,
    /// Per change batch and column: the `_before` image's column.
    before_columns: Vec<Vec<Option<ArrayRef>>>,
}

impl Keyed {
    fn new(
        schema: &SchemaRef,
        parsed: &[ChangeColumns<'_>],
        key_columns: &[usize],
    ) -> Result<Self, ApplyError> {
        let n = parsed.len();
        let width = schema.fields().len();
        let converter = key_converter(schema, key_columns)?;
        let mut new_keys: Vec<Rows> = Vec::with_capacity(n);
        let mut before_keys: Vec<Option<Rows>> = Vec::with_capacity(n);
        let mut before_columns: Vec<Vec<Option<ArrayRef>>> = Vec::with_capacity(n);
        for c in parsed {
            let data: Vec<ArrayRef> = key_columns
                .iter()
                .filter_map(|&k| c.data.get(k).cloned())
                .collect();
            new_keys.push(converter.convert_columns(&data)?);
            let columns: Vec<Option<ArrayRef>> = (0..width)
                .map(|col| {
                    let name = schema.field(col).name();
                    c.before.and_then(|b| b.column_by_name(name).cloned())
                })
                .collect();
            before_keys.push(match c.before {
                Some(_) => {
                    let keys: Vec<ArrayRef> = key_columns
                        .iter()
                        .map(|&k| {
                            columns.get(k).cloned().flatten().ok_or_else(|| {
                                ApplyError::Schema(format!(
                                    "_before has no column {:?}",
                                    schema.field(k).name()
                                ))
                            })
                        })
                        .collect::<Result<_, _>>()?;
                    Some(converter.convert_columns(&keys)?)
                }
                None => None,
            });
            before_columns.push(columns);
        }
        Ok(Self {
            n,
            null: (to_u32(2 * n)?, 0),
            new_keys,
            before_keys,
            before_columns,
        })
    }
}

/// Phase two's result: the final change of each key (in first-seen order; `None` where
/// a key's change was replaced or a truncate cleared it).
struct Folded {
    finals: Vec<Option<Final>>,
    /// In a history: each transaction's changes, with a change row of the transaction.
    emitted: Vec<(Final, Src)>,
    stats: ApplyStats,
    truncated: bool,
}

/// A history's bookkeeping while folding: the final changes the current transaction
/// touched, emitted when the next transaction starts.
#[derive(Default)]
struct Transactions {
    emitted: Vec<(Final, Src)>,
    touched: Vec<usize>,
    /// Whether a change was met yet, and its transaction's commit LSN.
    started: bool,
    commit: Option<i64>,
    last: Src,
}

impl Transactions {
    /// Called before the change at `here`, of the transaction committed at `commit`.
    fn at(&mut self, commit: Option<i64>, here: Src, finals: &[Option<Final>]) {
        if self.started && self.commit != commit {
            self.flush(finals);
        }
        self.started = true;
        self.commit = commit;
        self.last = here;
    }

    /// The current transaction's touched keys, as it left them (in slot order: versions
    /// of one transaction have no order among themselves).
    fn flush(&mut self, finals: &[Option<Final>]) {
        self.touched.sort_unstable();
        self.touched.dedup();
        for &at in &self.touched {
            if let Some(Some(f)) = finals.get(at) {
                self.emitted.push((f.clone(), self.last));
            }
        }
        self.touched.clear();
    }
}

/// Phase two: every change folded, in commit order, into the final change of its key.
fn fold(
    schema: &SchemaRef,
    parsed: &[ChangeColumns<'_>],
    keyed: &Keyed,
    commits: Option<&[Int64Array]>,
) -> Result<Folded, ApplyError> {
    let mut finals: Vec<Option<Final>> = Vec::new();
    let mut index: HashMap<Row<'_>, usize, RandomState> = HashMap::with_hasher(RandomState::new());
    let mut stats = ApplyStats::default();
    let mut truncated = false;
    let mut txns = Transactions::default();
    for (ci, c) in parsed.iter().enumerate() {
        let (Some(new_k), Some(before_k)) = (keyed.new_keys.get(ci), keyed.before_keys.get(ci))
        else {
            continue;
        };
        for (i, kind) in c.kinds.iter().enumerate() {
            let here: Src = (to_u32(ci)?, to_u32(i)?);
            if let Some(lsns) = commits.and_then(|c| c.get(ci)) {
                let commit = lsns.is_valid(i).then(|| lsns.value(i));
                txns.at(commit, here, &finals);
            }
            let (old_key, old_src) = match (c.before, before_k) {
                (Some(before), Some(bk)) if before.is_valid(i) => {
                    (bk.row(i), (to_u32(keyed.n + ci)?, to_u32(i)?))
                }
                _ => (new_k.row(i), here),
            };
            match kind {
                Kind::Truncate => {
                    stats.truncated += 1;
                    truncated = true;
                    finals.clear();
                    index.clear();
                    txns.touched.clear();
                    if commits.is_some() {
                        txns.emitted.push((Final::Truncated, here));
                    }
                }
                Kind::Delete => {
                    stats.deleted += 1;
                    if take(&mut index, &mut finals, old_key).is_none() {
                        stats.missing_rows += 1;
                    }
                    txns.touched.push(place(
                        &mut index,
                        &mut finals,
                        old_key,
                        Final::Deleted { key: old_src },
                    ));
                }
                Kind::Upsert => {
                    stats.inserted += 1;
                    let row = Final::Row {
                        version: RowVersion {
                            src: here,
                            patches: None,
                        },
                        unknown: Vec::new(),
                        from: None,
                    };
                    txns.touched
                        .push(place(&mut index, &mut finals, new_k.row(i), row));
                }
                Kind::Update => {
                    stats.updated += 1;
                    let prior = take(&mut index, &mut finals, old_key);
                    let moved = old_key != new_k.row(i);
                    if moved {
                        txns.touched.push(place(
                            &mut index,
                            &mut finals,
                            old_key,
                            Final::Deleted { key: old_src },
                        ));
                    }
                    let unchanged = unchanged_columns(schema, c.unchanged, i)?;
                    let moved_from = moved.then_some(old_src);
                    let row = updated(prior.as_ref(), unchanged, here, moved_from, keyed.null);
                    txns.touched
                        .push(place(&mut index, &mut finals, new_k.row(i), row));
                }
            }
        }
    }
    txns.flush(&finals);
    Ok(Folded {
        finals,
        emitted: txns.emitted,
        stats,
        truncated,
    })
}

/// The final change of an update at `here` after `prior` (the key's final change so
/// far): its `unchanged` columns take the value an earlier change of the batch gave them,
/// else stay unknown, to be kept from the table row — found under `moved_from` when the
/// update moved the row to a new key and no earlier change said where it was.
fn updated(
    prior: Option<&Final>,
    unchanged: Vec<usize>,
    here: Src,
    moved_from: Option<Src>,
    null: Src,
) -> Final {
    let mut patches = Vec::new();
    let mut unknown = Vec::new();
    for col in unchanged {
        match prior {
            Some(Final::Row {
                version,
                unknown: before,
                ..
            }) if !before.contains(&col) => {
                patches.push((col, version.source_of(col)));
            }
            _ => {
                patches.push((col, null));
                unknown.push(col);
            }
        }
    }
    unknown.sort_unstable();
    let mut from = None;
    if !unknown.is_empty() {
        // The table row holding them: where the prior change found it, else under the
        // key this update found the row by.
        from = match prior {
            Some(Final::Row { from, .. }) => *from,
            _ => None,
        };
        if from.is_none() {
            from = moved_from;
        }
    }
    Final::Row {
        version: RowVersion {
            src: here,
            patches: (!patches.is_empty()).then(|| patches.into_boxed_slice()),
        },
        unknown,
        from,
    }
}

/// Phase three: the output batch (see [`Reduced::batch`]), each column picked from the
/// change batches, their `_before` images and the null.
fn assemble(
    schema: &SchemaRef,
    parsed: &[ChangeColumns<'_>],
    keyed: &Keyed,
    key_columns: &[usize],
    live: &[&Final],
) -> Result<(SchemaRef, Vec<ArrayRef>), ApplyError> {
    let width = schema.fields().len();
    let null = keyed.null;
    let is_key = |col: usize| key_columns.contains(&col);
    // Every value source of column `col`, indexed as `Src` is.
    let sources = |col: usize| -> Result<Vec<ArrayRef>, ApplyError> {
        let field = schema.field(col);
        let nulls = new_null_array(field.data_type(), 1);
        let mut out = Vec::with_capacity(2 * keyed.n + 1);
        for c in parsed {
            out.push(
                c.data
                    .get(col)
                    .cloned()
                    .ok_or_else(|| ApplyError::Schema("missing column".into()))?,
            );
        }
        for columns in &keyed.before_columns {
            out.push(match columns.get(col).cloned().flatten() {
                Some(a) if is_key(col) => a,
                _ => nulls.clone(),
            });
        }
        out.push(nulls);
        Ok(out)
    };
    let pick_all =
        |arrays: &[ArrayRef], picks: &[(usize, usize)]| -> Result<ArrayRef, ApplyError> {
            let refs: Vec<&dyn Array> = arrays.iter().map(AsRef::as_ref).collect();
            Ok(interleave(&refs, picks)?)
        };
    let at = |s: Src| (s.0 as usize, s.1 as usize);

    let mut columns: Vec<ArrayRef> = Vec::with_capacity(width + 3);
    for col in 0..width {
        let picks: Vec<(usize, usize)> = live
            .iter()
            .map(|f| match f {
                Final::Row { version, .. } => at(version.source_of(col)),
                Final::Deleted { key } if is_key(col) => at(*key),
                Final::Deleted { .. } | Final::Truncated => at(null),
            })
            .collect();
        columns.push(pick_all(&sources(col)?, &picks)?);
    }
    let deletes: BooleanArray = live
        .iter()
        .map(|f| Some(matches!(f, Final::Deleted { .. } | Final::Truncated)))
        .collect();
    columns.push(Arc::new(deletes));
    let mut unchanged = ListBuilder::new(StringBuilder::new());
    for f in live {
        if let Final::Row { unknown, .. } = f {
            for &col in unknown {
                unchanged.values().append_value(schema.field(col).name());
            }
        }
        unchanged.append(true);
    }
    columns.push(Arc::new(unchanged.finish()));
    let from_fields: Fields = key_columns
        .iter()
        .map(|&k| Arc::new(schema.field(k).clone().with_nullable(true)))
        .collect();
    let mut from_columns = Vec::with_capacity(key_columns.len());
    for &k in key_columns {
        let picks: Vec<(usize, usize)> = live
            .iter()
            .map(|f| match f {
                Final::Row { from: Some(s), .. } => at(*s),
                _ => at(null),
            })
            .collect();
        from_columns.push(pick_all(&sources(k)?, &picks)?);
    }
    let valid: NullBuffer = live
        .iter()
        .map(|f| matches!(f, Final::Row { from: Some(_), .. }))
        .collect::<Vec<bool>>()
        .into();
    let from = StructArray::try_new(from_fields.clone(), from_columns, Some(valid))?;
    columns.push(Arc::new(from));

    let mut fields: Vec<Arc<Field>> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new("_delete", DataType::Boolean, false)));
    fields.push(Arc::new(Field::new(
        meta::UNCHANGED,
        DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        false,
    )));
    fields.push(Arc::new(Field::new(
        "_from",
        DataType::Struct(from_fields),
        true,
    )));
    Ok((Arc::new(Schema::new(fields)), columns))
}

/// Removes the final change stored under `key` and returns it.
fn take<'k>(
    index: &mut HashMap<Row<'k>, usize, RandomState>,
    finals: &mut [Option<Final>],
    key: Row<'k>,
) -> Option<Final> {
    let at = index.remove(&key)?;
    finals.get_mut(at).and_then(Option::take)
}

/// Makes `value` the final change of `key`.
fn place<'k>(
    index: &mut HashMap<Row<'k>, usize, RandomState>,
    finals: &mut Vec<Option<Final>>,
    key: Row<'k>,
    value: Final,
) -> usize {
    if let Some(&at) = index.get(&key) {
        if let Some(slot) = finals.get_mut(at) {
            *slot = Some(value);
            return at;
        }
    }
    let at = finals.len();
    index.insert(key, at);
    finals.push(Some(value));
    at
}

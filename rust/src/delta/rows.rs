//! The rows a deletion-vector MERGE writes: the source's upserts, each column listed in
//! the row's `_unchanged` (unchanged TOAST the stream could not fill in) taken from the
//! table row the upsert retires, as `WHEN MATCHED THEN UPDATE SET c = CASE WHEN
//! array_contains(s._unchanged, 'c') THEN t.c ELSE s.c END` does. An upsert that retires
//! no row keeps the source's value, as `WHEN NOT MATCHED THEN INSERT` does.

use std::collections::{BTreeSet, HashMap};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BooleanArray, ListArray};
use arrow_schema::ArrowError;
use arrow_select::filter::filter;
use arrow_select::interleave::interleave;

/// A MERGE source's metadata columns: which rows delete their key, and which columns
/// each row leaves unchanged.
pub struct SourceMeta<'a> {
    pub delete: &'a BooleanArray,
    pub unchanged: &'a ListArray,
}

impl SourceMeta<'_> {
    /// The columns some upsert leaves unchanged.
    pub fn unchanged_names(&self) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for row in 0..self.unchanged.len() {
            if self.is_upsert(row) {
                names.extend(self.unchanged_of(row));
            }
        }
        names
    }

    /// Whether source row `row` upserts (rather than deletes) its key.
    pub fn is_upsert(&self, row: usize) -> bool {
        !(self.delete.is_valid(row) && self.delete.value(row))
    }

    /// The columns source row `row` leaves unchanged.
    pub fn unchanged_of(&self, row: usize) -> Vec<String> {
        if self.unchanged.is_null(row) {
            return Vec::new();
        }
        let values = self.unchanged.value(row);
        match values.as_string_opt::<i32>() {
            Some(names) => names.iter().flatten().map(str::to_owned).collect(),
            None => Vec::new(),
        }
    }
}

/// The retired rows' values of the columns upserts leave unchanged: `columns` by name,
/// each one row per retired row fetched, of the source column's type; `row_of[r]`: the
/// fetched row that source row `r` takes its unchanged values from (its retired row), if
/// any.
pub struct Retained<'a> {
    pub columns: &'a HashMap<String, ArrayRef>,
    pub row_of: &'a [Option<u32>],
}

/// The new rows of a MERGE: the upserts of the source (`columns`, named `names`), with
/// the unchanged columns taken from `retained`.
pub fn new_rows(
    names: &[String],
    columns: &[ArrayRef],
    meta: &SourceMeta<'_>,
    retained: &Retained<'_>,
) -> Result<Vec<ArrayRef>, ArrowError> {
    let rows = meta.delete.len();
    let unchanged: Vec<Vec<String>> = (0..rows).map(|r| meta.unchanged_of(r)).collect();
    let keep = BooleanArray::from((0..rows).map(|r| meta.is_upsert(r)).collect::<Vec<_>>());
    let mut out = Vec::with_capacity(columns.len());
    for (name, column) in names.iter().zip(columns) {
        let merged = match retained.columns.get(name) {
            Some(old) => {
                let indices: Vec<(usize, usize)> = (0..rows)
                    .map(|r| match retained.row_of.get(r).copied().flatten() {
                        Some(at) if unchanged.get(r).is_some_and(|u| u.contains(name)) => {
                            (1, at as usize)
                        }
                        _ => (0, r),
                    })
                    .collect();
                interleave(&[column.as_ref(), old.as_ref()], &indices)?
            }
            None => column.clone(),
        };
        out.push(filter(merged.as_ref(), &keep)?);
    }
    Ok(out)
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test data that is known good"
)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{ListBuilder, StringBuilder};
    use arrow_array::{Int64Array, StringArray};

    use super::*;

    fn unchanged(rows: &[&[&str]]) -> ListArray {
        let mut builder = ListBuilder::new(StringBuilder::new());
        for names in rows {
            for n in *names {
                builder.values().append_value(n);
            }
            builder.append(true);
        }
        builder.finish()
    }

    #[test]
    fn upserts_keep_the_retired_rows_values_of_their_unchanged_columns() {
        let names = vec!["id".to_string(), "doc".to_string()];
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
            Arc::new(StringArray::from(vec![None, Some("new"), None, None])),
        ];
        let delete = BooleanArray::from(vec![false, false, true, false]);
        // Row 0 keeps doc (retired row found), row 1 sets it, row 2 deletes, row 3 keeps
        // doc but retires no row: the source's null stays, as an INSERT would write.
        let meta = SourceMeta {
            delete: &delete,
            unchanged: &unchanged(&[&["doc"], &[], &["doc"], &["doc"]]),
        };
        assert_eq!(
            meta.unchanged_names().into_iter().collect::<Vec<_>>(),
            ["doc"]
        );
        let old: HashMap<String, ArrayRef> = HashMap::from([(
            "doc".to_string(),
            Arc::new(StringArray::from(vec!["kept", "other"])) as ArrayRef,
        )]);
        let row_of = [Some(0), Some(1), Some(1), None];
        let rows = new_rows(
            &names,
            &columns,
            &meta,
            &Retained {
                columns: &old,
                row_of: &row_of,
            },
        )
        .unwrap();
        assert_eq!(
            rows[0]
                .as_primitive::<arrow_array::types::Int64Type>()
                .values(),
            &[1, 2, 4]
        );
        let doc: Vec<Option<&str>> = rows[1].as_string::<i32>().iter().collect();
        assert_eq!(doc, [Some("kept"), Some("new"), None]);
    }
}

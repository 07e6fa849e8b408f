//! Which rows of a data file a MERGE retires: the live rows whose key the batch names.
//!
//! A MERGE source holds one final change per key (`crate::merge::reduce_changes`). Every
//! key it names, deleted or upserted, retires the table row holding that key: a delete
//! ends it, an upsert replaces it with a new row written to a new file. The retired rows
//! are found by reading only the key columns of the data files whose statistics can hold
//! a named key, and are recorded by row position (the row's index in its file) in the
//! file's deletion vector.

use std::collections::HashMap;

use ahash::RandomState;
use arrow_array::{Array, ArrayRef, Int16Array, Int32Array, Int64Array, Int8Array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{ArrowError, DataType};
use roaring::RoaringTreemap;

/// The keys a MERGE source names, indexed for lookups of table rows' keys.
pub struct SourceKeys {
    converter: RowConverter,
    /// Row-format key -> the source row naming it.
    index: HashMap<Box<[u8]>, u32, RandomState>,
    /// When the key is one integer column without nulls: its keys in order, each with
    /// the source row naming it (for file pruning and the file key index, `super::index`).
    sorted_ints: Option<Vec<(i64, u32)>>,
    /// One 64-bit integer key column: key -> source row, probed without the row format
    /// (the table side of a MERGE is millions of keys, the source side thousands).
    int_index: Option<HashMap<i64, u32, RandomState>>,
}

/// One retired table row: where it is and which source row named its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired {
    /// The row's index in its data file.
    pub position: u64,
    /// The source row whose key matched.
    pub source_row: u32,
}

impl SourceKeys {
    /// Indexes the key columns of a MERGE source (one array per key column, one row per
    /// source row). Keys are unique in a MERGE source; a repeated key keeps its first row.
    pub fn new(keys: &[ArrayRef]) -> Result<Self, ArrowError> {
        let fields = keys
            .iter()
            .map(|k| SortField::new(k.data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields)?;
        let rows = converter.convert_columns(keys)?;
        let mut index = HashMap::with_capacity_and_hasher(rows.num_rows(), RandomState::new());
        for (i, row) in rows.iter().enumerate() {
            index.entry(row.as_ref().into()).or_insert(i as u32);
        }
        let ints = match keys {
            [only] => int_values(only),
            _ => None,
        };
        let int_index = match (keys, &ints) {
            ([only], Some(values)) if *only.data_type() == DataType::Int64 => {
                let mut map = HashMap::with_capacity_and_hasher(values.len(), RandomState::new());
                for (i, &v) in values.iter().enumerate() {
                    map.entry(v).or_insert(i as u32);
                }
                Some(map)
            }
            _ => None,
        };
        let sorted_ints = ints.map(|v| {
            let mut pairs: Vec<(i64, u32)> = v.into_iter().zip(0..).collect();
            pairs.sort_unstable();
            // A repeated key keeps its first row, as the hash indexes do.
            pairs.dedup_by_key(|p| p.0);
            pairs
        });
        Ok(Self {
            converter,
            index,
            sorted_ints,
            int_index,
        })
    }

    /// The source row naming the key of `keys` (arrays of the source's key types) at
    /// `row`.
    pub fn lookup(&self, keys: &[ArrayRef], row: usize) -> Result<Option<u32>, ArrowError> {
        let sliced: Vec<ArrayRef> = keys.iter().map(|k| k.slice(row, 1)).collect();
        let rows = self.converter.convert_columns(&sliced)?;
        Ok(self.index.get(rows.row(0).as_ref()).copied())
    }

    /// Whether a file whose single integer key column lies within `[min, max]` (its
    /// statistics) can hold a named key. Without such statistics, or for other keys, it
    /// can.
    pub fn may_hold(&self, min: Option<i64>, max: Option<i64>) -> bool {
        match (&self.sorted_ints, min, max) {
            (Some(keys), Some(min), Some(max)) => {
                let from = keys.partition_point(|&(k, _)| k < min);
                keys.get(from).is_some_and(|&(k, _)| k <= max)
            }
            _ => true,
        }
    }

    /// The keys in order with the source row naming each, when the key is one integer
    /// column without nulls.
    pub fn sorted_ints(&self) -> Option<&[(i64, u32)]> {
        self.sorted_ints.as_deref()
    }

    /// The rows of one stretch of a data file that the source retires: `keys` are the
    /// stretch's key columns, cast to the source's key types; its first row is the file's
    /// row `first_position`; rows whose position `deleted` holds are gone already and
    /// rows with a null key never match.
    pub fn matches(
        &self,
        keys: &[ArrayRef],
        first_position: u64,
        deleted: &RoaringTreemap,
    ) -> Result<Vec<Retired>, ArrowError> {
        if let (Some(index), [only]) = (&self.int_index, keys) {
            if let Some(values) = only.as_any().downcast_ref::<Int64Array>() {
                return Ok(int_matches(index, values, first_position, deleted));
            }
        }
        let rows = self.converter.convert_columns(keys)?;
        let mut found = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            if let Some(&source_row) = self.index.get(row.as_ref()) {
                let position = first_position + i as u64;
                if deleted.contains(position) || keys.iter().any(|k| k.is_null(i)) {
                    continue;
                }
                found.push(Retired {
                    position,
                    source_row,
                });
            }
        }
        Ok(found)
    }
}

/// [`SourceKeys::matches`] for one 64-bit integer key column.
fn int_matches(
    index: &HashMap<i64, u32, RandomState>,
    values: &Int64Array,
    first_position: u64,
    deleted: &RoaringTreemap,
) -> Vec<Retired> {
    let mut found = Vec::new();
    for (i, &v) in values.values().iter().enumerate() {
        if let Some(&source_row) = index.get(&v) {
            let position = first_position + i as u64;
            if values.is_valid(i) && !deleted.contains(position) {
                found.push(Retired {
                    position,
                    source_row,
                });
            }
        }
    }
    found
}

/// The values of an integer key column (none when it holds nulls or is not an integer).
fn int_values(array: &ArrayRef) -> Option<Vec<i64>> {
    if array.null_count() > 0 {
        return None;
    }
    let any = array.as_any();
    match array.data_type() {
        DataType::Int8 => any
            .downcast_ref::<Int8Array>()
            .map(|a| a.values().iter().map(|&v| i64::from(v)).collect()),
        DataType::Int16 => any
            .downcast_ref::<Int16Array>()
            .map(|a| a.values().iter().map(|&v| i64::from(v)).collect()),
        DataType::Int32 => any
            .downcast_ref::<Int32Array>()
            .map(|a| a.values().iter().map(|&v| i64::from(v)).collect()),
        DataType::Int64 => any
            .downcast_ref::<Int64Array>()
            .map(|a| a.values().to_vec()),
        _ => None,
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test data that is known good"
)]
mod tests {
    use std::sync::Arc;

    use arrow_array::StringArray;

    use super::*;

    fn ints(v: &[i64]) -> ArrayRef {
        Arc::new(Int64Array::from(v.to_vec()))
    }

    #[test]
    fn a_file_row_is_retired_when_its_key_is_named_and_its_row_is_live() {
        let source = SourceKeys::new(&[ints(&[7, 3, 11])]).unwrap();
        let mut deleted = RoaringTreemap::new();
        // Rows 100..105 of a file: keys 1, 3, 5, 7, 3. Position 104 (the second 3) is
        // live, position 101 (the first 3) already deleted.
        deleted.insert(101);
        let found = source
            .matches(&[ints(&[1, 3, 5, 7, 3])], 100, &deleted)
            .unwrap();
        assert_eq!(
            found,
            vec![
                Retired {
                    position: 103,
                    source_row: 0
                },
                Retired {
                    position: 104,
                    source_row: 1
                },
            ]
        );
    }

    #[test]
    fn composite_keys_match_on_every_column() {
        let source = SourceKeys::new(&[
            ints(&[1, 1]),
            Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef,
        ])
        .unwrap();
        let file = [
            ints(&[1, 2, 1]),
            Arc::new(StringArray::from(vec![Some("b"), Some("a"), None])) as ArrayRef,
        ];
        let found = source.matches(&file, 0, &RoaringTreemap::new()).unwrap();
        assert_eq!(
            found,
            vec![Retired {
                position: 0,
                source_row: 1
            }]
        );
        assert_eq!(source.lookup(&file, 0).unwrap(), Some(1));
        assert_eq!(source.lookup(&file, 1).unwrap(), None);
    }

    #[test]
    fn integer_statistics_prune_files_that_cannot_hold_a_named_key() {
        let source = SourceKeys::new(&[ints(&[50, 10, 900])]).unwrap();
        assert!(source.may_hold(Some(0), Some(10)));
        assert!(source.may_hold(Some(40), Some(60)));
        assert!(!source.may_hold(Some(11), Some(49)));
        assert!(!source.may_hold(Some(901), Some(2000)));
        // No statistics: the file is read.
        assert!(source.may_hold(None, Some(5)));
        let strings = SourceKeys::new(&[Arc::new(StringArray::from(vec!["x"])) as ArrayRef]);
        assert!(strings.unwrap().may_hold(Some(0), Some(1)));
    }
}

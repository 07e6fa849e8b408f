//! The keys of a table's data files, kept in memory between MERGEs.
//!
//! Data files never change once written (a MERGE retires their rows by deletion vectors;
//! a compaction replaces whole files), so a table kept open by a stream reads each file's
//! key column once and keeps it sorted, with each key's row position. A MERGE then finds
//! the rows its batch retires by searching those sorted keys — time that follows the
//! batch, not the table — and reads Parquet only for files it has not seen. A file's
//! deletion vector still decides which of its rows are live, so an index stays right as
//! the file's rows are retired.
//!
//! Only a key of one integer column is indexed (8 bytes a row, 12 when the file's rows
//! are not in key order); other keys are matched by reading the key columns
//! ([`super::retire`]). The index is bounded in bytes: files past the bound are read each
//! time, and files no longer in the table are dropped.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use roaring::RoaringTreemap;

use super::retire::Retired;
#[cfg(doc)]
use super::retire::SourceKeys;

/// One data file's keys in order, with their row positions.
#[derive(Debug)]
pub struct FileKeys {
    keys: Vec<i64>,
    /// The row position of each key; none when the file's keys are in order already (the
    /// position of `keys[i]` is `i`: files written from a table's key order, or sorted).
    positions: Option<Vec<u32>>,
}

impl FileKeys {
    /// The index of a file's key column, one value per row in file order (a null key
    /// never matches and is left out); none for a file of more than `u32::MAX` rows.
    pub fn new(values: impl IntoIterator<Item = Option<i64>>) -> Option<Self> {
        let mut pairs: Vec<(i64, u32)> = Vec::new();
        let mut in_order = true;
        for (position, value) in values.into_iter().enumerate() {
            let position = u32::try_from(position).ok()?;
            if let Some(key) = value {
                in_order &= pairs.last().map_or(true, |&(last, _)| last <= key);
                pairs.push((key, position));
            }
        }
        // In order with every row present: the positions are the indices.
        if in_order
            && pairs
                .last()
                .map_or(true, |&(_, p)| p as usize + 1 == pairs.len())
        {
            let mut keys: Vec<i64> = pairs.into_iter().map(|(k, _)| k).collect();
            keys.shrink_to_fit();
            return Some(Self {
                keys,
                positions: None,
            });
        }
        pairs.sort_unstable();
        let (keys, positions): (Vec<i64>, Vec<u32>) = pairs.into_iter().unzip();
        Some(Self {
            keys,
            positions: Some(positions),
        })
    }

    /// The memory the index holds.
    pub fn bytes(&self) -> usize {
        self.keys.capacity() * size_of::<i64>()
            + self
                .positions
                .as_ref()
                .map_or(0, |p| p.capacity() * size_of::<u32>())
    }

    /// The live rows of the file (those `deleted` does not hold) whose key `source` (keys
    /// in order, each with its source row) names, in position order: what
    /// [`SourceKeys::matches`] finds reading the file.
    pub fn matches(&self, source: &[(i64, u32)], deleted: &RoaringTreemap) -> Vec<Retired> {
        let mut found = Vec::new();
        let mut retire = |i: usize, source_row: u32| {
            let position = match &self.positions {
                Some(p) => p.get(i).map_or(u64::MAX, |&p| u64::from(p)),
                None => i as u64,
            };
            if !deleted.contains(position) {
                found.push(Retired {
                    position,
                    source_row,
                });
            }
        };
        // Search the longer list for each entry of the shorter: a small batch against a
        // big file, or a small file against a big batch, costs the shorter one's length
        // times a binary search.
        let keys = self.keys.as_slice();
        if source.len() <= keys.len() {
            let mut from = 0;
            for &(key, source_row) in source {
                from += keys
                    .get(from..)
                    .unwrap_or_default()
                    .partition_point(|&k| k < key);
                let mut i = from;
                while keys.get(i) == Some(&key) {
                    retire(i, source_row);
                    i += 1;
                }
            }
        } else {
            let mut from = 0;
            for (i, &key) in keys.iter().enumerate() {
                from += source
                    .get(from..)
                    .unwrap_or_default()
                    .partition_point(|&(k, _)| k < key);
                if let Some(&(k, source_row)) = source.get(from) {
                    if k == key {
                        retire(i, source_row);
                    }
                }
            }
        }
        found.sort_unstable_by_key(|r| r.position);
        found
    }
}

/// The file indexes of one table, by data file path, within a memory bound.
#[derive(Debug)]
pub struct KeyIndex {
    files: HashMap<String, Arc<FileKeys>>,
    bytes: usize,
    limit: usize,
}

impl KeyIndex {
    /// An empty index that holds at most `limit` bytes of keys.
    pub fn new(limit: usize) -> Self {
        Self {
            files: HashMap::new(),
            bytes: 0,
            limit,
        }
    }

    /// The index of the file at `path`, if it is kept.
    pub fn get(&self, path: &str) -> Option<Arc<FileKeys>> {
        self.files.get(path).cloned()
    }

    /// Keeps the index of the file at `path` if it fits within the bound; whether it
    /// does.
    pub fn insert(&mut self, path: &str, keys: FileKeys) -> bool {
        let size = keys.bytes();
        if self.files.contains_key(path) || self.bytes + size > self.limit {
            return false;
        }
        self.bytes += size;
        self.files.insert(path.to_string(), Arc::new(keys));
        true
    }

    /// Drops the files that are no longer in the table (`live`: its data files' paths).
    pub fn retain(&mut self, live: &HashSet<String>) {
        self.files.retain(|path, keys| {
            let keep = live.contains(path);
            if !keep {
                self.bytes -= keys.bytes();
            }
            keep
        });
    }

    /// How many files and bytes the index holds.
    pub fn size(&self) -> (usize, usize) {
        (self.files.len(), self.bytes)
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

    use arrow_array::{ArrayRef, Int64Array};
    use proptest::prelude::*;

    use super::*;
    use crate::delta::retire::SourceKeys;

    fn ints(v: &[Option<i64>]) -> ArrayRef {
        Arc::new(Int64Array::from(v.to_vec()))
    }

    #[test]
    fn keys_in_order_need_no_positions() {
        let sorted = FileKeys::new([Some(1), Some(2), Some(2), Some(9)]).unwrap();
        assert!(sorted.positions.is_none());
        assert_eq!(sorted.bytes(), 4 * 8);
        // A null key leaves a gap: positions are kept.
        let gap = FileKeys::new([Some(1), None, Some(3)]).unwrap();
        assert_eq!(gap.positions.as_deref(), Some(&[0, 2][..]));
        let shuffled = FileKeys::new([Some(5), Some(1), Some(3)]).unwrap();
        assert_eq!(shuffled.keys, vec![1, 3, 5]);
        assert_eq!(shuffled.positions.as_deref(), Some(&[1, 2, 0][..]));
    }

    #[test]
    fn a_live_row_with_a_named_key_is_retired() {
        // Keys 7, 3, 11 named by source rows 0, 1, 2.
        let source = SourceKeys::new(&[ints(&[Some(7), Some(3), Some(11)])]).unwrap();
        let file = [Some(1), Some(3), Some(5), Some(7), Some(3)];
        let mut deleted = RoaringTreemap::new();
        deleted.insert(1);
        let found = FileKeys::new(file)
            .unwrap()
            .matches(source.sorted_ints().unwrap(), &deleted);
        assert_eq!(
            found,
            vec![
                Retired {
                    position: 3,
                    source_row: 0
                },
                Retired {
                    position: 4,
                    source_row: 1
                },
            ]
        );
    }

    #[test]
    fn the_index_keeps_files_within_its_bound_and_drops_removed_ones() {
        let mut index = KeyIndex::new(100);
        assert!(index.insert("a", FileKeys::new((0..10).map(Some)).unwrap()));
        assert!(!index.insert("b", FileKeys::new((0..5).map(Some)).unwrap()));
        assert!(index.get("a").is_some() && index.get("b").is_none());
        assert_eq!(index.size(), (1, 80));
        index.retain(&HashSet::from(["b".to_string()]));
        assert_eq!(index.size(), (0, 0));
        assert!(index.insert("b", FileKeys::new((0..5).map(Some)).unwrap()));
    }

    proptest! {
        /// The index finds exactly what reading the file finds, whichever side is longer,
        /// with repeated and null keys and deleted rows.
        #[test]
        fn the_index_matches_as_reading_the_file_does(
            file in prop::collection::vec(prop::option::weighted(0.95, -20i64..20), 0..60),
            source in prop::collection::vec(-25i64..25, 1..40),
            deleted in prop::collection::vec(0u64..60, 0..10),
        ) {
            let source = SourceKeys::new(&[ints(&source.into_iter().map(Some).collect::<Vec<_>>())]).unwrap();
            let deleted: RoaringTreemap = deleted.into_iter().collect();
            let read = source.matches(&[ints(&file)], 0, &deleted).unwrap();
            let indexed = FileKeys::new(file)
                .unwrap()
                .matches(source.sorted_ints().unwrap(), &deleted);
            prop_assert_eq!(read, indexed);
        }
    }
}

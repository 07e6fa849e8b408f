//! Which data files a compaction rewrites.
//!
//! A table kept by deletion vectors wears in two ways as batches go by. Each batch adds a
//! small file of new row images, so small files pile up (every reader opens each one);
//! and rows retired from the big files stay on disk behind deletion vectors (every reader
//! reads them and drops them again: a file with a share `r` of its rows deleted costs a
//! full scan `1 / (1 - r)` times what its live rows would). A compaction rewrites the
//! files it picks into new files of live rows only.
//!
//! An explicit compaction ([`Policy::everything`]) picks every small file and every file
//! with a deletion vector. The one a stream runs after its own MERGEs
//! ([`Policy::automatic`], after Delta's auto compaction) must cost little per batch: it
//! rewrites the small files once there are enough of them to be worth a commit, and the
//! most worn big files only past a share of deleted rows and up to a byte budget, most
//! worn first, so a table whose files all wear at once (random keys) is rewritten over
//! several batches rather than in one stall.

/// What a compaction knows of a data file, from its `add` action.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FileFacts {
    /// Rows in the file (its `numRecords` statistic), when known.
    pub rows: Option<u64>,
    /// Rows its deletion vector retires (the vector's cardinality, 0 without one).
    pub deleted: u64,
    /// The file's size in bytes.
    pub bytes: u64,
}

/// When a file is rewritten.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// A file with fewer rows than this is small.
    pub min_file_rows: u64,
    /// Small files are rewritten only when there are at least this many.
    pub min_small_files: usize,
    /// A file that is not small is rewritten when more than this share of its rows is
    /// deleted (0: any deleted row).
    pub max_deleted_ratio: f64,
    /// At most this many bytes of files that are not small per compaction (at least one
    /// such file when any is picked); none: no bound.
    pub max_worn_bytes: Option<u64>,
}

impl Policy {
    /// Every small file and every file with a deleted row (`compact()`).
    pub fn everything(min_file_rows: u64) -> Self {
        Policy {
            min_file_rows,
            min_small_files: 1,
            max_deleted_ratio: 0.0,
            max_worn_bytes: None,
        }
    }

    /// A stream's compaction after its MERGE: `min_small_files` small files at once, and
    /// up to `max_worn_bytes` of the files with more than `max_deleted_ratio` of their
    /// rows deleted.
    pub fn automatic(
        min_file_rows: u64,
        min_small_files: usize,
        max_deleted_ratio: f64,
        max_worn_bytes: u64,
    ) -> Self {
        Policy {
            min_file_rows,
            min_small_files: min_small_files.max(1),
            max_deleted_ratio,
            max_worn_bytes: Some(max_worn_bytes),
        }
    }

    fn is_small(&self, file: &FileFacts) -> bool {
        file.rows.is_some_and(|rows| rows < self.min_file_rows)
    }

    /// The share of the file's rows that are deleted; a file of unknown size with a
    /// deletion vector counts as fully worn.
    fn worn(file: &FileFacts) -> f64 {
        match file.rows {
            Some(0) | None => 1.0,
            Some(rows) => file.deleted as f64 / rows as f64,
        }
    }

    /// The positions in `files` of the files to rewrite, in the order given; empty when
    /// nothing is worth a commit (also when the one file picked would be written again
    /// as it is: a lone small file without deleted rows).
    pub fn pick(&self, files: &[FileFacts]) -> Vec<usize> {
        let small: Vec<usize> = files
            .iter()
            .enumerate()
            .filter(|(_, f)| self.is_small(f))
            .map(|(i, _)| i)
            .collect();
        let mut worn: Vec<(usize, &FileFacts)> = files
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                !self.is_small(f) && f.deleted > 0 && Self::worn(f) > self.max_deleted_ratio
            })
            .collect();
        // Most worn first, then the order given (a stable sort).
        worn.sort_by(|(_, a), (_, b)| Self::worn(b).total_cmp(&Self::worn(a)));
        if let Some(budget) = self.max_worn_bytes {
            let mut spent = 0u64;
            let mut kept = 0;
            for (_, f) in &worn {
                if kept > 0 && spent.saturating_add(f.bytes) > budget {
                    break;
                }
                spent = spent.saturating_add(f.bytes);
                kept += 1;
            }
            worn.truncate(kept);
        }
        let mut picked: Vec<usize> = worn.into_iter().map(|(i, _)| i).collect();
        if small.len() >= self.min_small_files {
            picked.extend(&small);
        }
        // A lone file without deleted rows would be written again as it is.
        if let [only] = picked.as_slice() {
            if files.get(*only).is_some_and(|f| f.deleted == 0) {
                picked.clear();
            }
        }
        picked.sort_unstable();
        picked
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, reason = "test data that is known good")]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn file(rows: u64, deleted: u64, bytes: u64) -> FileFacts {
        FileFacts {
            rows: Some(rows),
            deleted,
            bytes,
        }
    }

    #[test]
    fn everything_picks_small_files_and_files_with_deleted_rows() {
        let files = [
            file(1_000_000, 0, 100),
            file(1_000_000, 1, 100),
            file(500, 0, 1),
            file(700, 3, 1),
        ];
        assert_eq!(Policy::everything(100_000).pick(&files), vec![1, 2, 3]);
    }

    #[test]
    fn a_lone_file_without_deleted_rows_is_left_alone() {
        let p = Policy::everything(100_000);
        assert!(p
            .pick(&[file(500, 0, 1), file(1_000_000, 0, 100)])
            .is_empty());
        assert_eq!(p.pick(&[file(500, 2, 1)]), vec![0]);
        assert!(p.pick(&[]).is_empty());
    }

    #[test]
    fn automatic_waits_for_enough_small_files() {
        let p = Policy::automatic(100_000, 3, 0.2, 1 << 30);
        let mut files = vec![file(1_000_000, 0, 100), file(500, 10, 1), file(500, 0, 1)];
        assert!(p.pick(&files).is_empty());
        files.push(file(800, 0, 1));
        assert_eq!(p.pick(&files), vec![1, 2, 3]);
    }

    #[test]
    fn automatic_rewrites_the_most_worn_big_files_within_its_budget() {
        let p = Policy::automatic(100, 50, 0.2, 250);
        let files = [
            file(1_000, 100, 100), // 10 %: not worn enough
            file(1_000, 300, 100), // 30 %
            file(1_000, 900, 100), // 90 %
            file(1_000, 500, 100), // 50 %
            file(10, 0, 1),        // small, too few of them
        ];
        // 90 % and 50 % fit in 250 bytes; 30 % would make 300.
        assert_eq!(p.pick(&files), vec![2, 3]);
        // One file is always taken, even past the budget.
        let p = Policy::automatic(100, 50, 0.2, 10);
        assert_eq!(p.pick(&files), vec![2]);
    }

    #[test]
    fn a_file_without_row_count_and_a_deletion_vector_counts_as_worn() {
        let files = [FileFacts {
            rows: None,
            deleted: 1,
            bytes: 10,
        }];
        assert_eq!(Policy::automatic(100, 50, 0.9, 1).pick(&files), vec![0]);
    }

    proptest! {
        #[test]
        fn picks_are_distinct_sorted_and_follow_the_rules(
            files in prop::collection::vec((0u64..2_000, 0u64..2_000, 1u64..500), 0..40),
            min_small in 1usize..10,
            ratio in 0.0f64..1.0,
            budget in 1u64..5_000,
        ) {
            let files: Vec<FileFacts> = files
                .into_iter()
                .map(|(rows, deleted, bytes)| file(rows, deleted.min(rows), bytes))
                .collect();
            let p = Policy::automatic(1_000, min_small, ratio, budget);
            let picked = p.pick(&files);
            prop_assert!(picked.windows(2).all(|w| w[0] < w[1]));
            let small = files.iter().filter(|f| p.is_small(f)).count();
            let mut worn_bytes = 0;
            let mut worn = 0;
            for &i in &picked {
                let f = &files[i];
                if p.is_small(f) {
                    prop_assert!(small >= min_small);
                } else {
                    prop_assert!(f.deleted > 0 && Policy::worn(f) > ratio);
                    worn_bytes += f.bytes;
                    worn += 1;
                }
            }
            prop_assert!(worn <= 1 || worn_bytes <= budget);
            if picked.len() == 1 {
                prop_assert!(files[picked[0]].deleted > 0);
            }
            // Nothing eligible is left out, except what the budget held back.
            if small >= min_small {
                prop_assert!(files.iter().enumerate().all(|(i, f)| !p.is_small(f) || picked.contains(&i) || picked.is_empty()));
            }
        }
    }
}

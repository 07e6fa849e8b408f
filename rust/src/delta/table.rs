//! One MERGE into a Delta table by deletion vectors: the table's I/O and its commit.
//!
//! Per batch ([`DvTable::merge`]):
//! 1. the data files whose statistics can hold a key the batch names are matched against
//!    the batch's keys, live rows only (those their deletion vector does not hold): from
//!    the table's key index when an earlier MERGE read the file ([`super::index`]), else
//!    by reading the file's key columns only ([`super::retire`]), which indexes it;
//! 2. the columns upserts leave unchanged are read from the matched rows alone (a row
//!    selection), and the upserts are written as new data files ([`super::rows`]);
//! 3. each touched file's deletion vector, the old one plus the retired positions, goes
//!    into one new `deletion_vector_<uuid>.bin` (the kernel's writer: version byte, then
//!    per vector its size, the RoaringBitmapArray magic and portable 64-bit roaring
//!    bitmap, and a CRC-32);
//! 4. one commit, made by the deltalake crate's transaction machinery (put-if-absent of
//!    the next log entry, conflict checks against commits that won the race, checkpoints):
//!    per touched file a `remove` of the file as it was and an `add` of the same file with
//!    its new deletion vector (or the `remove` alone when no row is left), the `add`s of
//!    the new files, and the stream position as a `txn` action.
//!
//! [`DvTable::compact`] rewrites the files holding deleted rows or too small, without the
//! deleted rows, in a commit that changes no data (`dataChange: false`); a MERGE and a
//! compaction that race both commit at the next version only, so the loser fails: the
//! MERGE runs again on the new snapshot, the compaction gives up until its next run.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::{new_null_array, Array, ArrayRef, BooleanArray, RecordBatch};
use arrow_cast::cast;
use arrow_schema::{ArrowError, DataType, SchemaRef};
use arrow_select::concat::{concat, concat_batches};
use delta_kernel::actions::deletion_vector_writer::{
    KernelDeletionVector, StreamingDeletionVectorWriter,
};
use delta_kernel::table_features::{ColumnMappingMode, TableFeature};
use delta_kernel::table_properties::TableProperties;
use deltalake_core::kernel::transaction::{
    CommitBuilder, CommitProperties, TableReference, TransactionError,
};
use deltalake_core::kernel::{
    Action, AddCDCFile, DeletionVectorDescriptor, EagerSnapshot, LogicalFileView, Metadata,
    Protocol, StorageType, Transaction,
};
use deltalake_core::protocol::{DeltaOperation, MergePredicate};
use deltalake_core::table::state::DeltaTableState;
use deltalake_core::writer::{DeltaWriter, RecordBatchWriter};
use deltalake_core::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
#[allow(
    deprecated,
    reason = "parquet's own object-store reader; a hand-written AsyncFileReader would only repeat it"
)]
use parquet::arrow::async_reader::ParquetObjectReader;
use parquet::arrow::{ArrowWriter, ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use roaring::RoaringTreemap;

use super::change_feed::change_rows;
use super::compaction::{FileFacts, Policy};
use super::index::{FileKeys, KeyIndex};
use super::retire::{Retired, SourceKeys};
use super::rows::{new_rows, Retained, SourceMeta};

/// What a deletion-vector MERGE or compaction fails with.
#[derive(Debug, thiserror::Error)]
pub enum DvError {
    #[error("{0}")]
    Delta(#[from] DeltaTableError),
    #[error("reading a data file: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("{0}")]
    Arrow(#[from] ArrowError),
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    #[error("deletion vector: {0}")]
    Kernel(#[from] delta_kernel::Error),
    /// The table cannot take deletion vectors from this writer (the reason).
    #[error("{0}")]
    Unsupported(String),
    /// The MERGE source or a data file is not what the table says.
    #[error("{0}")]
    Schema(String),
}

/// How many files are read at once.
const READ_AHEAD: usize = 8;
/// How many times a MERGE that lost a conflict to a concurrent commit (a compaction) is
/// run again from the new table version.
const CONFLICT_RETRIES: usize = 5;
/// How many concurrent commits a compaction rebases itself over: none. The deltalake
/// crate's conflict check can let a compaction's `remove` of a file through after a MERGE
/// retired rows of that file in a deletion vector (the rows then came back, rewritten by
/// the compaction), so a compaction that loses the race to any commit gives up, as a MERGE
/// does; the next one starts from the new snapshot (it changes no data: giving up is safe).
const COMPACT_RETRIES: usize = 0;
/// The RoaringBitmapArray magic number (little-endian) that starts a stored vector.
const PORTABLE_MAGIC: u32 = 1681511377;

/// The async runtime the extension's Delta I/O runs on (two workers: file reads and
/// decoding go in parallel).
pub fn runtime() -> Result<&'static tokio::runtime::Runtime, DvError> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("pgwire-cdc-delta")
        .enable_all()
        .build()
        .map_err(|e| DvError::Unsupported(format!("cannot start the Delta I/O runtime: {e}")))?;
    Ok(RUNTIME.get_or_init(|| rt))
}

/// The stream position a commit records (`txn` appId → version) and its `userMetadata`.
#[derive(Debug, Clone)]
pub struct Position {
    pub app_id: String,
    pub version: i64,
    pub metadata: Option<String>,
}

/// What one MERGE did, and where its time went (milliseconds).
#[derive(Debug, Default, Clone)]
pub struct MergeStats {
    pub version: i64,
    pub files: usize,
    pub files_read: usize,
    /// Of the files read, those matched from the key index instead of their Parquet.
    pub files_indexed: usize,
    pub rows_read: u64,
    pub retired: u64,
    pub written: u64,
    pub files_removed: usize,
    pub deletion_vectors: usize,
    pub conflicts: usize,
    pub load_ms: f64,
    pub scan_ms: f64,
    pub write_ms: f64,
    pub commit_ms: f64,
    /// The key index after the MERGE: files and bytes.
    pub index_files: usize,
    pub index_bytes: usize,
}

/// What one compaction did.
#[derive(Debug, Default, Clone)]
pub struct CompactStats {
    pub version: Option<i64>,
    pub files_removed: usize,
    pub files_added: usize,
    pub rows_purged: u64,
    pub rows_kept: u64,
}

/// A Delta table kept open between MERGEs (each brings it up to date first).
pub struct DvTable {
    table: DeltaTable,
    /// The keys of the data files read so far ([`super::index`]).
    keys: KeyIndex,
    /// The deletion vectors read so far, by data file path: the descriptor they were read
    /// by and the rows they delete (a file's vector changes only with a new descriptor).
    vectors: HashMap<String, (String, Arc<RoaringTreemap>)>,
}

/// Deletion vectors by data file path, with their descriptor's identity.
type KnownVectors = Vec<(String, (String, Arc<RoaringTreemap>))>;

/// One data file of the table as the MERGE found it.
struct Touched {
    view: LogicalFileView,
    old: Arc<RoaringTreemap>,
    retired: Vec<Retired>,
}

/// What matching one data file against a MERGE's keys found.
struct Scanned {
    view: LogicalFileView,
    /// Its deletion vector, and whether it was read now (not known already).
    old: Arc<RoaringTreemap>,
    vector_read: bool,
    retired: Vec<Retired>,
    /// Whether it was matched from the key index (no Parquet read).
    from_index: bool,
    /// Rows read from its Parquet.
    rows_read: u64,
    /// The index of its keys, when they were read now and can be indexed.
    keys: Option<FileKeys>,
}

impl DvTable {
    /// Opens the Delta table at `uri` (a path or URL), with deltalake's
    /// `storage_options`, keeping up to `key_index_bytes` of its files' keys in memory.
    pub async fn open(
        uri: &str,
        storage_options: HashMap<String, String>,
        key_index_bytes: usize,
    ) -> Result<Self, DvError> {
        let url = deltalake_core::ensure_table_uri(uri)?;
        let table = DeltaTableBuilder::from_url(url)?
            .with_storage_options(storage_options)
            .load()
            .await?;
        Ok(Self {
            table,
            keys: KeyIndex::new(key_index_bytes),
            vectors: HashMap::new(),
        })
    }

    /// Why this writer cannot keep the table by deletion vectors, if it cannot: the table
    /// lacks the `deletionVectors` feature, maps column names, or is partitioned.
    pub fn unsupported(&self) -> Result<Option<String>, DvError> {
        let state = self.table.snapshot()?;
        let has_dv = state
            .protocol()
            .writer_features()
            .is_some_and(|f| f.contains(&TableFeature::DeletionVectors));
        if !has_dv {
            return Ok(Some("the table has no deletionVectors feature".into()));
        }
        self.unwritable()
    }

    /// Why this writer cannot write the table's files and commits at all (deletion
    /// vectors aside), if it cannot.
    fn unwritable(&self) -> Result<Option<String>, DvError> {
        let state = self.table.snapshot()?;
        if state
            .table_config()
            .column_mapping_mode
            .is_some_and(|m| m != ColumnMappingMode::None)
        {
            return Ok(Some("the table maps column names (column mapping)".into()));
        }
        if !state.metadata().partition_columns().is_empty() {
            return Ok(Some("the table is partitioned".into()));
        }
        if defines_invariants(state)? {
            return Ok(Some("the table's schema defines invariants".into()));
        }
        let kept: Vec<String> = state
            .protocol()
            .writer_features()
            .unwrap_or_default()
            .iter()
            .filter(|f| !KEPT_WRITER_FEATURES.contains(f) && **f != TableFeature::Invariants)
            .map(ToString::to_string)
            .collect();
        if !kept.is_empty() {
            return Ok(Some(format!(
                "the table has writer features this writer does not keep: {}",
                kept.join(", ")
            )));
        }
        Ok(None)
    }

    /// One MERGE of `source` (a reduced change table: the table's columns, then
    /// `_delete`, `_unchanged` and `_from`; see `crate::merge::reduce_changes`) matched on
    /// the columns `keys`, committed with `position`.
    pub async fn merge(
        &mut self,
        source: &RecordBatch,
        keys: &[String],
        position: &Position,
    ) -> Result<MergeStats, DvError> {
        let mut conflicts = 0;
        loop {
            let started = Instant::now();
            self.table.update_incremental(None).await?;
            if let Some(why) = self.unsupported()? {
                return Err(DvError::Unsupported(why));
            }
            let load_ms = ms(started);
            match self.merge_once(source, keys, position).await {
                Err(DvError::Delta(
                    DeltaTableError::Transaction {
                        source:
                            TransactionError::CommitConflict(_) | TransactionError::MaxCommitAttempts(_),
                    }
                    | DeltaTableError::VersionAlreadyExists(_),
                )) if conflicts < CONFLICT_RETRIES => conflicts += 1,
                Ok(mut stats) => {
                    stats.conflicts = conflicts;
                    stats.load_ms = load_ms;
                    return Ok(stats);
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn merge_once(
        &mut self,
        source: &RecordBatch,
        keys: &[String],
        position: &Position,
    ) -> Result<MergeStats, DvError> {
        let mut stats = MergeStats::default();
        let started = Instant::now();
        let parts = Source::of(source, keys)?;
        let source_keys = Arc::new(SourceKeys::new(&parts.keys)?);
        let key_types: Arc<Vec<DataType>> =
            Arc::new(parts.keys.iter().map(|k| k.data_type().clone()).collect());
        let touched = self
            .find_retired(keys, &source_keys, &key_types, &mut stats)
            .await?;
        stats.scan_ms = ms(started);

        let started = Instant::now();
        let retained = self.retained(&parts, &source_keys, &touched).await?;
        let rows = new_rows(
            &parts.names,
            &parts.columns,
            &parts.meta(),
            &Retained {
                columns: &retained.0,
                row_of: &retained.1,
            },
        )?;
        let schema = RecordBatchWriter::for_table(&self.table)?.arrow_schema();
        let written = in_schema(&schema, &parts.names, &rows)?;
        let mut actions = self.write_rows(&written, &mut stats).await?;
        if self
            .table
            .snapshot()?
            .table_config()
            .enable_change_data_feed
            == Some(true)
        {
            actions.extend(
                self.write_changes(&schema, &parts, &touched, &written)
                    .await?,
            );
        }
        let (dv_actions, vectors) = self.write_deletion_vectors(&touched, &mut stats).await?;
        actions.extend(dv_actions);
        stats.write_ms = ms(started);

        let started = Instant::now();
        let on = keys
            .iter()
            .map(|k| format!("t.`{0}` = s.`{0}`", k.replace('`', "``")))
            .collect::<Vec<_>>()
            .join(" AND ");
        let operation = DeltaOperation::Merge {
            predicate: None,
            merge_predicate: Some(on),
            matched_predicates: vec![
                MergePredicate {
                    action_type: "delete".into(),
                    predicate: Some("s._delete".into()),
                },
                MergePredicate {
                    action_type: "update".into(),
                    predicate: None,
                },
            ],
            not_matched_predicates: vec![MergePredicate {
                action_type: "insert".into(),
                predicate: Some("NOT s._delete".into()),
            }],
            not_matched_by_source_predicates: vec![],
        };
        // No commit may come between the version read and this one: the deltalake
        // crate lets a MERGE's `remove` of a file pass when a compaction (`dataChange:
        // false`) removed it meanwhile, which would bring the file's rows back beside
        // their compacted copy. Any concurrent commit makes the MERGE run again instead.
        let version = self.commit(actions, operation, Some(position), 0).await?;
        // The vectors just written are known: the next MERGE need not read them back.
        self.vectors.extend(vectors);
        stats.version = version;
        stats.commit_ms = ms(started);
        Ok(stats)
    }

    /// The data files holding live rows whose key the MERGE source names, with those
    /// rows: files its statistics rule out are skipped, indexed files are searched in
    /// memory, the others' key columns read (and indexed).
    async fn find_retired(
        &mut self,
        keys: &[String],
        source_keys: &Arc<SourceKeys>,
        key_types: &Arc<Vec<DataType>>,
        stats: &mut MergeStats,
    ) -> Result<Vec<Touched>, DvError> {
        let snapshot = self.table.snapshot()?;
        let views: Vec<LogicalFileView> = snapshot.log_data().iter().collect();
        stats.files = views.len();
        // Files gone from the table (retired whole, compacted) leave the caches.
        let live: HashSet<String> = views.iter().map(|v| v.path().to_string()).collect();
        self.keys.retain(&live);
        self.vectors.retain(|path, _| live.contains(path));
        let single_key = match keys {
            [only] => Some(only.clone()),
            _ => None,
        };
        let candidates: Vec<LogicalFileView> = views
            .into_iter()
            .filter(|v| {
                let (min, max) = single_key
                    .as_deref()
                    .map_or((None, None), |k| int_bounds(v.stats().as_deref(), k));
                source_keys.may_hold(min, max)
            })
            .collect();
        stats.files_read = candidates.len();
        let store = self.table.object_store();
        let root = self.table.table_url().clone();
        let key_names: Arc<Vec<String>> = Arc::new(keys.to_vec());
        let indexable = source_keys.sorted_ints().is_some();
        let scans: Vec<Scanned> = futures::stream::iter(candidates)
            .map(|view| {
                let path = view.path().to_string();
                let job = FileJob {
                    store: store.clone(),
                    root: root.clone(),
                    indexed: indexable.then(|| self.keys.get(&path)).flatten(),
                    known: vector_id(&view).and_then(|id| {
                        self.vectors
                            .get(&path)
                            .filter(|(at, _)| *at == id)
                            .map(|(_, dv)| dv.clone())
                    }),
                    view,
                    source_keys: source_keys.clone(),
                    key_names: key_names.clone(),
                    key_types: key_types.clone(),
                };
                tokio::spawn(job.run())
            })
            .buffer_unordered(READ_AHEAD)
            .map(|joined| joined.map_err(|e| DvError::Schema(format!("file scan: {e}")))?)
            .try_collect()
            .await?;
        let mut touched = Vec::new();
        for scan in scans {
            let path = scan.view.path().to_string();
            stats.rows_read += scan.rows_read;
            stats.files_indexed += usize::from(scan.from_index);
            if let Some(keys) = scan.keys {
                self.keys.insert(&path, keys);
            }
            if scan.vector_read {
                match vector_id(&scan.view) {
                    Some(id) => {
                        self.vectors.insert(path, (id, scan.old.clone()));
                    }
                    None => {
                        self.vectors.remove(&path);
                    }
                }
            }
            if !scan.retired.is_empty() {
                touched.push(Touched {
                    view: scan.view,
                    old: scan.old,
                    retired: scan.retired,
                });
            }
        }
        (stats.index_files, stats.index_bytes) = self.keys.size();
        Ok(touched)
    }

    /// The unchanged columns' values of the rows upserts retire: per column, one row per
    /// fetched table row, and per source row the fetched row it takes them from (its own
    /// key's retired row, or the row under `_from` when it moved).
    async fn retained(
        &self,
        parts: &Source,
        source_keys: &SourceKeys,
        touched: &[Touched],
    ) -> Result<(HashMap<String, ArrayRef>, Vec<Option<u32>>), DvError> {
        let meta = parts.meta();
        let names: Vec<String> = meta.unchanged_names().into_iter().collect();
        let rows = parts.columns.first().map_or(0, Array::len);
        let mut row_of = vec![None; rows];
        if names.is_empty() {
            return Ok((HashMap::new(), row_of));
        }
        // Where each source row's key was retired.
        let mut at: HashMap<u32, (usize, u64)> = HashMap::new();
        for (f, t) in touched.iter().enumerate() {
            for r in &t.retired {
                at.entry(r.source_row).or_insert((f, r.position));
            }
        }
        // The source row whose retired row holds each upsert's unchanged values.
        let mut wanted: BTreeMap<usize, Vec<(u64, usize)>> = BTreeMap::new();
        for row in 0..rows {
            if !meta.is_upsert(row) || meta.unchanged_of(row).is_empty() {
                continue;
            }
            let holder = match &parts.from {
                Some((valid, columns)) if valid.is_valid(row) => {
                    source_keys.lookup(columns, row)?
                }
                _ => Some(row as u32),
            };
            if let Some(&(file, position)) = holder.and_then(|h| at.get(&h)) {
                wanted.entry(file).or_default().push((position, row));
            }
        }
        let store = self.table.object_store();
        let types: HashMap<&str, &DataType> = parts
            .names
            .iter()
            .zip(&parts.columns)
            .map(|(n, c)| (n.as_str(), c.data_type()))
            .collect();
        let mut pieces: HashMap<String, Vec<ArrayRef>> = HashMap::new();
        let mut fetched = 0u32;
        for (file, mut wants) in wanted {
            wants.sort_unstable();
            let mut positions: Vec<u64> = wants.iter().map(|w| w.0).collect();
            positions.dedup();
            let view = &touched
                .get(file)
                .ok_or_else(|| DvError::Schema("lost a touched file".into()))?
                .view;
            let batch = read_rows(&store, view, &names, &positions).await?;
            for name in &names {
                let want = types
                    .get(name.as_str())
                    .ok_or_else(|| DvError::Schema(format!("no source column {name:?}")))?;
                let column = match batch.column_by_name(name) {
                    Some(c) => cast(c, want)?,
                    None => new_null_array(want, batch.num_rows()),
                };
                pieces.entry(name.clone()).or_default().push(column);
            }
            for (position, row) in wants {
                let index = positions.binary_search(&position).unwrap_or_default() as u32;
                if let Some(slot) = row_of.get_mut(row) {
                    *slot = Some(fetched + index);
                }
            }
            fetched += positions.len() as u32;
        }
        let mut columns = HashMap::new();
        for (name, parts) in pieces {
            let refs: Vec<&dyn Array> = parts.iter().map(AsRef::as_ref).collect();
            columns.insert(name, concat(&refs)?);
        }
        Ok((columns, row_of))
    }

    /// Writes the new rows (in the table's columns) as data files of the table; their
    /// `add` actions.
    async fn write_rows(
        &self,
        rows: &RecordBatch,
        stats: &mut MergeStats,
    ) -> Result<Vec<Action>, DvError> {
        if rows.num_rows() == 0 {
            return Ok(Vec::new());
        }
        let mut writer = RecordBatchWriter::for_table(&self.table)?;
        writer.write(rows.clone()).await?;
        stats.written = rows.num_rows() as u64;
        Ok(writer.flush().await?.into_iter().map(Action::Add).collect())
    }

    /// For a table with a change data feed: the MERGE's changes ([`super::change_feed`])
    /// written as one change data file under `_change_data/`; its `cdc` action (none when
    /// the MERGE changed no row). The retired rows are read whole for their pre-images.
    async fn write_changes(
        &self,
        schema: &SchemaRef,
        parts: &Source,
        touched: &[Touched],
        written: &RecordBatch,
    ) -> Result<Vec<Action>, DvError> {
        let store = self.table.object_store();
        let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let mut retired = Vec::with_capacity(touched.len());
        let mut retired_source = Vec::new();
        for t in touched {
            let mut rows: Vec<(u64, u32)> = t
                .retired
                .iter()
                .map(|r| (r.position, r.source_row))
                .collect();
            rows.sort_unstable();
            let positions: Vec<u64> = rows.iter().map(|r| r.0).collect();
            let batch = read_rows(&store, &t.view, &names, &positions).await?;
            let columns: Vec<ArrayRef> = names
                .iter()
                .map(|n| batch.column_by_name(n).cloned())
                .zip(schema.fields())
                .map(|(c, f)| match c {
                    Some(c) => cast(&c, f.data_type()),
                    None => Ok(new_null_array(f.data_type(), batch.num_rows())),
                })
                .collect::<Result<_, _>>()?;
            retired.push(RecordBatch::try_new(schema.clone(), columns)?);
            retired_source.extend(rows.iter().map(|r| r.1));
        }
        let retired = concat_batches(schema, &retired)?;
        let meta = parts.meta();
        let written_source: Vec<u32> = (0..meta.delete.len())
            .filter(|&r| meta.is_upsert(r))
            .map(|r| r as u32)
            .collect();
        let Some(changes) = change_rows(
            schema,
            &retired,
            &retired_source,
            written,
            &written_source,
            |r| !meta.is_upsert(r as usize),
        )?
        else {
            return Ok(Vec::new());
        };
        let properties = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build();
        let mut bytes = Vec::new();
        {
            let mut writer = ArrowWriter::try_new(&mut bytes, changes.schema(), Some(properties))?;
            writer.write(&changes)?;
            writer.close()?;
        }
        let path = format!(
            "_change_data/cdc-00000-{}.c000.snappy.parquet",
            uuid::Uuid::new_v4()
        );
        let size = bytes.len() as i64;
        store.put(&Path::from(path.as_str()), bytes.into()).await?;
        Ok(vec![Action::Cdc(AddCDCFile {
            path,
            size,
            partition_values: HashMap::new(),
            data_change: false,
            tags: None,
        })])
    }

    /// Writes the touched files' new deletion vectors into one file; the `remove` and
    /// `add` actions that put them in place, and the new vectors by data file path (with
    /// their descriptor's identity, as [`DvTable::vectors`] keeps them).
    async fn write_deletion_vectors(
        &self,
        touched: &[Touched],
        stats: &mut MergeStats,
    ) -> Result<(Vec<Action>, KnownVectors), DvError> {
        let mut actions = Vec::new();
        let mut bytes = Vec::new();
        let mut results = Vec::new();
        {
            let mut writer = StreamingDeletionVectorWriter::new(&mut bytes);
            for t in touched {
                let mut bitmap = (*t.old).clone();
                bitmap.extend(t.retired.iter().map(|r| r.position));
                stats.retired += bitmap.len() - t.old.len();
                let remove = t.view.remove_action(true);
                if t.view
                    .num_records()
                    .is_some_and(|n| n as u64 == bitmap.len())
                {
                    // No row is left: the file goes.
                    actions.push(Action::Remove(remove));
                    stats.files_removed += 1;
                    continue;
                }
                let mut dv = KernelDeletionVector::new();
                dv.add_deleted_row_indexes(bitmap.iter());
                let written = writer.write_deletion_vector(dv)?;
                results.push((remove, t, written, bitmap));
            }
            writer.finalize()?;
        }
        let mut vectors = Vec::new();
        if results.is_empty() {
            return Ok((actions, vectors));
        }
        let uuid = uuid::Uuid::new_v4();
        let path = Path::from(format!("deletion_vector_{uuid}.bin"));
        self.table.object_store().put(&path, bytes.into()).await?;
        let encoded = z85::encode(uuid.as_bytes());
        for (remove, t, written, bitmap) in results {
            #[allow(
                deprecated,
                reason = "the add as the log holds it (tags included), with a new vector"
            )]
            let mut add = t.view.add_action();
            add.data_change = true;
            add.stats = add.stats.as_deref().map(loose_bounds);
            let descriptor = DeletionVectorDescriptor {
                storage_type: StorageType::UuidRelativePath,
                path_or_inline_dv: encoded.clone(),
                offset: Some(written.offset),
                size_in_bytes: written.size_in_bytes,
                cardinality: written.cardinality,
            };
            vectors.push((
                t.view.path().to_string(),
                (descriptor_id(&descriptor), Arc::new(bitmap)),
            ));
            add.deletion_vector = Some(descriptor);
            actions.push(Action::Remove(remove));
            actions.push(Action::Add(add));
            stats.deletion_vectors += 1;
        }
        Ok((actions, vectors))
    }

    /// Commits `actions` through the deltalake crate, with `position` as a `txn` action
    /// and the commit's `userMetadata`; the new version.
    async fn commit(
        &mut self,
        actions: Vec<Action>,
        operation: DeltaOperation,
        position: Option<&Position>,
        retries: usize,
    ) -> Result<i64, DvError> {
        let mut properties = CommitProperties::default().with_max_retries(retries);
        if let Some(p) = position {
            properties =
                properties.with_application_transaction(Transaction::new(&p.app_id, p.version));
            if let Some(meta) = &p.metadata {
                properties = properties.with_metadata([(
                    "userMetadata".to_string(),
                    serde_json::Value::String(meta.clone()),
                )]);
            }
        }
        let state = self.table.snapshot()?;
        let checked = Checked::of(state)?;
        let finalized = CommitBuilder::from(properties)
            .with_actions(actions)
            .build(Some(&checked), self.table.log_store(), operation)
            .await?;
        let version = finalized.version as i64;
        self.table.state = Some(finalized.snapshot);
        Ok(version)
    }

    /// Rewrites the files `policy` picks ([`super::compaction`]), without their deleted
    /// rows, into files of up to `target_file_size` bytes, in one commit that changes no
    /// data.
    pub async fn compact(
        &mut self,
        policy: &Policy,
        target_file_size: u64,
    ) -> Result<CompactStats, DvError> {
        self.table.update_incremental(None).await?;
        let mut stats = CompactStats::default();
        let snapshot = self.table.snapshot()?;
        // A table without deletion vectors can still have its small files compacted.
        if let Some(why) = self.unwritable()? {
            return Err(DvError::Unsupported(why));
        }
        let files: Vec<LogicalFileView> = snapshot.log_data().iter().collect();
        let facts: Vec<FileFacts> = files
            .iter()
            .map(|v| FileFacts {
                rows: v.num_records().map(|n| n as u64),
                deleted: v
                    .deletion_vector_descriptor()
                    .map_or(0, |d| d.cardinality.max(1) as u64),
                bytes: v.size() as u64,
            })
            .collect();
        let picked: Vec<&LogicalFileView> = policy
            .pick(&facts)
            .into_iter()
            .filter_map(|i| files.get(i))
            .collect();
        if picked.is_empty() {
            return Ok(stats);
        }
        let store = self.table.object_store();
        let root = self.table.table_url().clone();
        let mut writer =
            RecordBatchWriter::for_table(&self.table)?.with_target_file_size(target_file_size);
        let schema = writer.arrow_schema();
        let mut actions = Vec::new();
        for view in picked.iter().copied() {
            let deleted = read_deletion_vector(&store, &root, view).await?;
            stats.rows_purged += deleted.len();
            let batch = read_live_rows(&store, view, &deleted).await?;
            stats.rows_kept += batch.num_rows() as u64;
            if batch.num_rows() > 0 {
                let columns = schema
                    .fields()
                    .iter()
                    .map(|f| match batch.column_by_name(f.name()) {
                        Some(c) => cast(c, f.data_type()),
                        None => Ok(new_null_array(f.data_type(), batch.num_rows())),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                writer
                    .write(RecordBatch::try_new(schema.clone(), columns)?)
                    .await?;
            }
            actions.push(Action::Remove(view.remove_action(false)));
        }
        stats.files_removed = picked.len();
        for mut add in writer.flush().await? {
            add.data_change = false;
            stats.files_added += 1;
            actions.push(Action::Add(add));
        }
        let operation = DeltaOperation::Optimize {
            predicate: None,
            target_size: target_file_size as i64,
        };
        // Any commit since the snapshot it read (a MERGE) wins the race: this one fails.
        stats.version = Some(
            self.commit(actions, operation, None, COMPACT_RETRIES)
                .await?,
        );
        Ok(stats)
    }
}

/// The writer features a commit of this writer keeps: those the deltalake crate commits
/// to without DataFusion, and `invariants` when the schema defines none.
const KEPT_WRITER_FEATURES: [TableFeature; 7] = [
    TableFeature::AppendOnly,
    TableFeature::ChangeDataFeed,
    TableFeature::DeletionVectors,
    TableFeature::TimestampWithoutTimezone,
    TableFeature::V2Checkpoint,
    TableFeature::VariantType,
    TableFeature::VariantTypePreview,
];

/// Whether a column of the table's schema carries a `delta.invariants` expression.
fn defines_invariants(state: &DeltaTableState) -> Result<bool, DvError> {
    let schema = serde_json::to_string(state.schema().as_ref())
        .map_err(|e| DvError::Schema(format!("the table's schema: {e}")))?;
    Ok(schema.contains("delta.invariants"))
}

/// The writer features the crate's protocol check is not shown ([`Checked`]).
const HIDDEN_FROM_CHECK: [&str; 2] = ["invariants", "changeDataFeed"];

/// The table as the deltalake crate's protocol check sees it at commit time. Delta Spark
/// and delta-rs list the `invariants` writer feature on every table with table features
/// (a version 2 writer's implied feature), and the crate, built without DataFusion,
/// refuses to commit to such a table because it cannot evaluate invariant expressions.
/// A schema that defines none ([`DvTable::unsupported`] checks) leaves nothing to
/// evaluate, so the check is shown the protocol without it; the commit itself, its
/// conflict checks and the new snapshot use the table's own protocol. Likewise the
/// `changeDataFeed` feature, which the crate refuses without DataFusion (it writes change
/// data files from DataFusion plans): this writer writes its own
/// ([`DvTable::write_changes`]).
struct Checked<'a> {
    state: &'a DeltaTableState,
    protocol: Protocol,
}

impl<'a> Checked<'a> {
    fn of(state: &'a DeltaTableState) -> Result<Self, DvError> {
        let mut raw = serde_json::to_value(state.protocol())
            .map_err(|e| DvError::Schema(format!("the table's protocol: {e}")))?;
        if let Some(features) = raw
            .get_mut("writerFeatures")
            .and_then(serde_json::Value::as_array_mut)
        {
            features.retain(|f| !HIDDEN_FROM_CHECK.contains(&f.as_str().unwrap_or_default()));
        }
        let protocol = serde_json::from_value(raw)
            .map_err(|e| DvError::Schema(format!("the table's protocol: {e}")))?;
        Ok(Self { state, protocol })
    }
}

impl TableReference for Checked<'_> {
    fn config(&self) -> &TableProperties {
        TableReference::config(self.state)
    }

    fn protocol(&self) -> &Protocol {
        &self.protocol
    }

    fn metadata(&self) -> &Metadata {
        TableReference::metadata(self.state)
    }

    fn eager_snapshot(&self) -> &EagerSnapshot {
        TableReference::eager_snapshot(self.state)
    }
}

/// A MERGE source taken apart.
struct Source {
    names: Vec<String>,
    columns: Vec<ArrayRef>,
    keys: Vec<ArrayRef>,
    delete: BooleanArray,
    unchanged: arrow_array::ListArray,
    /// `_from`: the struct (for its validity) and its key columns.
    from: Option<(ArrayRef, Vec<ArrayRef>)>,
}

impl Source {
    fn of(batch: &RecordBatch, keys: &[String]) -> Result<Self, DvError> {
        let schema = batch.schema();
        let end = schema
            .index_of("_delete")
            .map_err(|_| DvError::Schema("the MERGE source has no _delete column".into()))?;
        let names: Vec<String> = schema
            .fields()
            .iter()
            .take(end)
            .map(|f| f.name().clone())
            .collect();
        let columns: Vec<ArrayRef> = batch.columns().iter().take(end).cloned().collect();
        let keys = keys
            .iter()
            .map(|k| {
                batch.column_by_name(k).cloned().ok_or_else(|| {
                    DvError::Schema(format!("key column {k:?} is not in the source"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let delete = batch
            .column(end)
            .as_boolean_opt()
            .ok_or_else(|| DvError::Schema("_delete is not boolean".into()))?
            .clone();
        let unchanged = batch
            .column_by_name("_unchanged")
            .and_then(|c| c.as_list_opt::<i32>())
            .ok_or_else(|| DvError::Schema("_unchanged is not a list".into()))?
            .clone();
        let from = match batch.column_by_name("_from") {
            None => None,
            Some(column) => {
                let keys = column
                    .as_struct_opt()
                    .ok_or_else(|| DvError::Schema("_from is not a struct".into()))?
                    .columns()
                    .to_vec();
                Some((column.clone(), keys))
            }
        };
        Ok(Self {
            names,
            columns,
            keys,
            delete,
            unchanged,
            from,
        })
    }

    fn meta(&self) -> SourceMeta<'_> {
        SourceMeta {
            delete: &self.delete,
            unchanged: &self.unchanged,
        }
    }
}

/// `columns` (named `names`) as a batch of the table's columns `schema`: each cast to
/// the table's type, a column they lack null.
fn in_schema(
    schema: &SchemaRef,
    names: &[String],
    columns: &[ArrayRef],
) -> Result<RecordBatch, DvError> {
    let count = columns.first().map_or(0, Array::len);
    let by_name: HashMap<&str, &ArrayRef> = names
        .iter()
        .map(String::as_str)
        .zip(columns.iter())
        .collect();
    let columns = schema
        .fields()
        .iter()
        .map(|f| match by_name.get(f.name().as_str()) {
            Some(c) => cast(c, f.data_type()),
            None => Ok(new_null_array(f.data_type(), count)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(count));
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &options,
    )?)
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// The `[min, max]` a file's statistics (the `add` action's JSON) give an integer column.
fn int_bounds(stats: Option<&str>, column: &str) -> (Option<i64>, Option<i64>) {
    let Some(parsed) = stats.and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok()) else {
        return (None, None);
    };
    let get = |side: &str| {
        parsed
            .get(side)
            .and_then(|m| m.get(column))
            .and_then(serde_json::Value::as_i64)
    };
    (get("minValues"), get("maxValues"))
}

/// The rows a file's deletion vector deletes (empty without one).
async fn read_deletion_vector(
    store: &Arc<dyn ObjectStore>,
    root: &url::Url,
    view: &LogicalFileView,
) -> Result<RoaringTreemap, DvError> {
    let Some(descriptor) = view.deletion_vector_descriptor() else {
        return Ok(RoaringTreemap::new());
    };
    let size = usize::try_from(descriptor.size_in_bytes)
        .map_err(|_| DvError::Schema("a negative deletion vector size".into()))?;
    let kernel: delta_kernel::actions::deletion_vector::DeletionVectorDescriptor =
        descriptor.clone().try_into()?;
    let stored = match kernel.absolute_path(root)? {
        // Inline: z85 of the magic and the bitmap.
        None => z85::decode(&descriptor.path_or_inline_dv)
            .map_err(|_| DvError::Schema("an inline deletion vector is not z85".into()))?,
        Some(url) => {
            let relative = url
                .as_str()
                .strip_prefix(root.as_str())
                .ok_or_else(|| {
                    DvError::Unsupported(
                        "a deletion vector stored outside the table's directory".into(),
                    )
                })?
                .to_string();
            let offset = descriptor.offset.unwrap_or(1) as u64;
            // Stored: a 4-byte size, then the vector (magic and bitmap), then its CRC-32.
            let start = offset + 4;
            let bytes = store
                .get_range(&dv_path(&relative)?, start..start + size as u64)
                .await?;
            bytes.to_vec()
        }
    };
    let magic = stored
        .get(..4)
        .and_then(|m| <[u8; 4]>::try_from(m).ok())
        .map(u32::from_le_bytes);
    if magic != Some(PORTABLE_MAGIC) {
        return Err(DvError::Schema(
            "a deletion vector without the RoaringBitmapArray magic".into(),
        ));
    }
    RoaringTreemap::deserialize_from(stored.get(4..).unwrap_or_default())
        .map_err(|e| DvError::Schema(format!("a deletion vector does not parse: {e}")))
}

/// The object-store path of a deletion vector file, relative to the table.
fn dv_path(relative: &str) -> Result<Path, DvError> {
    Path::from_url_path(relative)
        .map_err(|e| DvError::Schema(format!("a deletion vector path does not parse: {e}")))
}

/// A Parquet reader of one data file.
#[allow(deprecated, reason = "see the import of ParquetObjectReader")]
async fn open_file(
    store: &Arc<dyn ObjectStore>,
    view: &LogicalFileView,
) -> Result<ParquetRecordBatchStreamBuilder<ParquetObjectReader>, DvError> {
    let reader = ParquetObjectReader::new(store.clone(), view.object_store_path())
        .with_file_size(view.size() as u64);
    Ok(ParquetRecordBatchStreamBuilder::new(reader)
        .await?
        .with_batch_size(64 * 1024))
}

/// The root columns of a file among `names` (by name; a column the file lacks is left
/// out).
#[allow(deprecated, reason = "see the import of ParquetObjectReader")]
fn projection(
    builder: &ParquetRecordBatchStreamBuilder<ParquetObjectReader>,
    names: &[String],
) -> ProjectionMask {
    let schema = builder.schema();
    let indices: Vec<usize> = names
        .iter()
        .filter_map(|n| schema.index_of(n).ok())
        .collect();
    ProjectionMask::roots(builder.parquet_schema(), indices)
}

/// Matches the live rows of one data file against the source keys, reading its key
/// columns only; the retired rows, how many rows were read and, when `index` is set and
/// the file's key is one integer column, the index of its keys.
async fn scan_keys(
    store: &Arc<dyn ObjectStore>,
    view: &LogicalFileView,
    key_names: &[String],
    key_types: &[DataType],
    source_keys: &SourceKeys,
    deleted: &RoaringTreemap,
    index: bool,
) -> Result<(Vec<Retired>, u64, Option<FileKeys>), DvError> {
    let builder = open_file(store, view).await?;
    for k in key_names {
        if builder.schema().index_of(k).is_err() {
            return Err(DvError::Schema(format!(
                "data file {} has no key column {k:?}",
                view.path()
            )));
        }
    }
    let mask = projection(&builder, key_names);
    let mut stream = builder.with_projection(mask).build()?;
    let mut found = Vec::new();
    let mut position = 0u64;
    // The file's keys as 64-bit integers, in file order (None: not indexed).
    let mut values: Option<Vec<Option<i64>>> = index.then(Vec::new);
    while let Some(batch) = stream.try_next().await? {
        let raw = key_names
            .iter()
            .map(|k| {
                batch
                    .column_by_name(k)
                    .ok_or_else(|| DvError::Schema(format!("no key column {k:?}")))
            })
            .collect::<Result<Vec<_>, DvError>>()?;
        let keys = raw
            .iter()
            .zip(key_types)
            .map(|(column, t)| cast(column, t))
            .collect::<Result<Vec<_>, _>>()?;
        found.extend(source_keys.matches(&keys, position, deleted)?);
        position += batch.num_rows() as u64;
        if let (Some(into), [only]) = (values.as_mut(), raw.as_slice()) {
            match cast(only, &DataType::Int64) {
                Ok(ints) if only.data_type().is_integer() => {
                    into.extend(ints.as_primitive::<arrow_array::types::Int64Type>().iter());
                }
                _ => values = None,
            }
        } else {
            values = None;
        }
    }
    Ok((found, position, values.and_then(FileKeys::new)))
}

/// What identifies a data file's deletion vector (none: it has none).
fn vector_id(view: &LogicalFileView) -> Option<String> {
    view.deletion_vector_descriptor().map(|d| descriptor_id(&d))
}

/// A file's statistics once some of its rows are deleted: the min/max values and null
/// counts still include the deleted rows, so they are bounds only (`tightBounds: false`
/// in the Delta protocol: readers may still skip the file by them, but not take them for
/// the live rows' exact values); left as they are when they do not parse.
fn loose_bounds(stats: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(stats) {
        Ok(serde_json::Value::Object(mut fields)) => {
            fields.insert("tightBounds".into(), serde_json::Value::Bool(false));
            serde_json::Value::Object(fields).to_string()
        }
        _ => stats.to_string(),
    }
}

/// What identifies a deletion vector: where it is stored.
fn descriptor_id(d: &DeletionVectorDescriptor) -> String {
    format!(
        "{:?}:{}:{:?}",
        d.storage_type, d.path_or_inline_dv, d.offset
    )
}

/// Matching one data file against a MERGE's keys (a task of its own).
struct FileJob {
    store: Arc<dyn ObjectStore>,
    root: url::Url,
    view: LogicalFileView,
    /// The file's key index, when it is kept and the MERGE's key is one integer column.
    indexed: Option<Arc<FileKeys>>,
    /// The file's deletion vector, when it was read before by the same descriptor.
    known: Option<Arc<RoaringTreemap>>,
    source_keys: Arc<SourceKeys>,
    key_names: Arc<Vec<String>>,
    key_types: Arc<Vec<DataType>>,
}

impl FileJob {
    async fn run(self) -> Result<Scanned, DvError> {
        let (old, vector_read) = match self.known {
            Some(dv) => (dv, false),
            None => (
                Arc::new(read_deletion_vector(&self.store, &self.root, &self.view).await?),
                true,
            ),
        };
        let sorted = self.source_keys.sorted_ints();
        if let (Some(index), Some(sorted)) = (&self.indexed, sorted) {
            let retired = index.matches(sorted, &old);
            return Ok(Scanned {
                view: self.view,
                old,
                vector_read,
                retired,
                from_index: true,
                rows_read: 0,
                keys: None,
            });
        }
        let (retired, rows_read, keys) = scan_keys(
            &self.store,
            &self.view,
            &self.key_names,
            &self.key_types,
            &self.source_keys,
            &old,
            sorted.is_some(),
        )
        .await?;
        Ok(Scanned {
            view: self.view,
            old,
            vector_read,
            retired,
            from_index: false,
            rows_read,
            keys,
        })
    }
}

/// The `names` columns of the rows at `positions` (sorted, unique) of a data file, in
/// that order.
async fn read_rows(
    store: &Arc<dyn ObjectStore>,
    view: &LogicalFileView,
    names: &[String],
    positions: &[u64],
) -> Result<RecordBatch, DvError> {
    let builder = open_file(store, view).await?;
    let total = builder.metadata().file_metadata().num_rows() as u64;
    let mask = projection(&builder, names);
    // A projection reads the columns in the file's order, whatever the order of `names`
    // (a table rewritten for a schema change may hold them in another order than the
    // changes): the batches' schema lists them so, and callers take them by name.
    let mut indices: Vec<usize> = names
        .iter()
        .filter_map(|n| builder.schema().index_of(n).ok())
        .collect();
    indices.sort_unstable();
    let schema = builder.schema().project(&indices)?;
    let selection = select(positions, total);
    let batches: Vec<RecordBatch> = builder
        .with_projection(mask)
        .with_row_selection(selection)
        .build()?
        .try_collect()
        .await?;
    Ok(concat_batches(&Arc::new(schema), &batches)?)
}

/// Every row of a data file that `deleted` does not hold.
async fn read_live_rows(
    store: &Arc<dyn ObjectStore>,
    view: &LogicalFileView,
    deleted: &RoaringTreemap,
) -> Result<RecordBatch, DvError> {
    let builder = open_file(store, view).await?;
    let total = builder.metadata().file_metadata().num_rows() as u64;
    let schema = builder.schema().clone();
    let live: Vec<u64> = (0..total).filter(|p| !deleted.contains(*p)).collect();
    let batches: Vec<RecordBatch> = builder
        .with_row_selection(select(&live, total))
        .build()?
        .try_collect()
        .await?;
    Ok(concat_batches(&schema, &batches)?)
}

/// A row selection of `positions` (sorted, unique) out of `total` rows.
fn select(positions: &[u64], total: u64) -> RowSelection {
    let mut selectors = Vec::new();
    let mut next = 0u64;
    for &p in positions {
        if p > next {
            selectors.push(RowSelector::skip((p - next) as usize));
        }
        match selectors.last_mut() {
            Some(last) if !last.skip && p == next => last.row_count += 1,
            _ => selectors.push(RowSelector::select(1)),
        }
        next = p + 1;
    }
    if total > next {
        selectors.push(RowSelector::skip((total - next) as usize));
    }
    RowSelection::from(selectors)
}

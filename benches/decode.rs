//! Parsing throughput on a captured pgoutput stream (1,000,000 inserts into the `bench`
//! table, see `benches/capture_stream.py`).
//!
//! Benchmarks, each over the whole capture per iteration:
//!
//! * `parse_message/{text,binary}`: `protocol::parse_message` on every message, the bare
//!   wire parse (tuples split into column datums) without the event layer;
//! * `decoder_feed/{text,binary}`: `Decoder::feed` into a `NullSink`: the full decoder
//!   (relation cache, transaction state, row images) with the events discarded;
//! * `arrow_tables/{text,binary}`: `Decoder::feed` into an `ArrowSink`, a `take()` every
//!   100,000 rows;
//! * `copy_binary/bench`: the initial snapshot's path, `CopyBinaryDecoder` over a synthetic
//!   COPY BINARY stream of the same table (`copy_stream/mod.rs`, 200,000 rows, one chunk
//!   per tuple), a batch every 100,000 rows. Needs no capture.
//!
//! Each is reported twice, once with `Throughput::Bytes` (message payload bytes, the
//! 12-byte record headers of the capture file excluded) and once with
//! `Throughput::Elements` (messages), so criterion prints both MB/s and msgs/s.
//!
//! Captures: `PGWIRE_CDC_BENCH_CAPTURE` (default `benches/.cache/bench_text.bin`) and
//! `PGWIRE_CDC_BENCH_CAPTURE_BINARY` (default `benches/.cache/bench_binary.bin`). A missing
//! capture is skipped with a hint on how to record it. A debug build refuses to run the
//! benchmarks (`cargo test --all-targets` builds this target with debug assertions and
//! therefore only prints a note).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Int64Type};
use criterion::{BenchmarkGroup, Criterion, Throughput};

use pgwire_cdc::arrow::ArrowSink;
use pgwire_cdc::decoder::{Decoder, DecoderConfig};
use pgwire_cdc::protocol::{parse_message, ParseContext};
use pgwire_cdc::sink::NullSink;
use pgwire_cdc::snapshot::{CopyBinaryDecoder, SnapshotMeta};

mod copy_stream;
use copy_stream::CopyStream;

/// Rows of the synthetic COPY stream.
const COPY_ROWS: usize = 200_000;

/// One capture file in memory: the raw file plus the (lsn, byte range) of each message.
struct Capture {
    name: &'static str,
    binary: bool,
    data: Vec<u8>,
    records: Vec<(u64, std::ops::Range<usize>)>,
    payload_bytes: u64,
    inserts: u64,
}

impl Capture {
    fn messages(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.records
            .iter()
            .filter_map(|(lsn, range)| self.data.get(range.clone()).map(|m| (*lsn, m)))
    }
}

/// Splits `[u64 lsn BE][u32 len BE][bytes]` records; errors on a truncated file.
fn load(path: &Path, name: &'static str, binary: bool) -> Result<Capture, String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut records = Vec::new();
    let mut payload_bytes = 0u64;
    let mut inserts = 0u64;
    let mut pos = 0usize;
    while pos < data.len() {
        let header = data
            .get(pos..pos + 12)
            .ok_or_else(|| format!("{}: truncated record header at byte {pos}", path.display()))?;
        let (lsn_part, size_part) = header.split_at(8);
        let lsn = u64::from_be_bytes(lsn_part.try_into().map_err(|_| "header".to_string())?);
        let len = u32::from_be_bytes(size_part.try_into().map_err(|_| "header".to_string())?);
        let start = pos + 12;
        let end = start + len as usize;
        let body = data
            .get(start..end)
            .ok_or_else(|| format!("{}: truncated record body at byte {start}", path.display()))?;
        if body.first() == Some(&b'I') {
            inserts += 1;
        }
        payload_bytes += u64::from(len);
        records.push((lsn, start..end));
        pos = end;
    }
    Ok(Capture {
        name,
        binary,
        data,
        records,
        payload_bytes,
        inserts,
    })
}

fn capture_path(var: &str, default_name: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("benches/.cache")
                .join(default_name)
        },
        PathBuf::from,
    )
}

const CTX: ParseContext = ParseContext {
    proto_version: 1,
    in_stream: false,
};

fn parse_all(cap: &Capture) -> Result<usize, String> {
    let mut n = 0usize;
    for (lsn, msg) in cap.messages() {
        let parsed = parse_message(msg, CTX).map_err(|e| format!("lsn {lsn}: {e}"))?;
        black_box(&parsed);
        n += 1;
    }
    Ok(n)
}

fn feed_all(cap: &Capture) -> Result<usize, String> {
    let mut dec = Decoder::new(DecoderConfig {
        proto_version: 1,
        binary: cap.binary,
    });
    let mut sink = NullSink::default();
    let mut n = 0usize;
    for (lsn, msg) in cap.messages() {
        dec.feed(msg, lsn, &mut sink)
            .map_err(|e| format!("lsn {lsn}: {e}"))?;
        n += 1;
    }
    black_box(&sink);
    Ok(n)
}

/// Rows per `take()`: batches of a realistic size, so memory stays bounded by the batch.
const ARROW_BATCH_ROWS: usize = 100_000;

fn arrow_all(cap: &Capture) -> Result<usize, String> {
    let mut dec = Decoder::new(DecoderConfig {
        proto_version: 1,
        binary: cap.binary,
    });
    let mut sink = ArrowSink::new(cap.binary);
    let mut rows = 0usize;
    for (lsn, msg) in cap.messages() {
        dec.feed(msg, lsn, &mut sink)
            .map_err(|e| format!("lsn {lsn}: {e}"))?;
        if sink.rows() >= ARROW_BATCH_ROWS {
            rows += take_rows(&mut sink)?;
        }
    }
    rows += take_rows(&mut sink)?;
    Ok(rows)
}

fn take_rows(sink: &mut ArrowSink) -> Result<usize, String> {
    let segments = sink.take().map_err(|e| e.to_string())?;
    Ok(segments
        .iter()
        .map(|s| black_box(&s.batch).num_rows())
        .sum())
}

fn copy_all(stream: &CopyStream) -> Result<Vec<arrow_array::RecordBatch>, String> {
    let meta = SnapshotMeta {
        consistent_point: 0x16B_3748,
        first_ordinal: 0,
    };
    let mut dec = CopyBinaryDecoder::new(Arc::clone(&stream.relation), meta);
    let mut batches = Vec::new();
    for chunk in stream.chunks() {
        dec.feed(chunk).map_err(|e| e.to_string())?;
        if dec.rows() >= ARROW_BATCH_ROWS {
            batches.push(dec.take_batch().map_err(|e| e.to_string())?);
        }
    }
    batches.push(dec.finish().map_err(|e| e.to_string())?);
    Ok(batches)
}

/// Every row decoded, with the ids and amounts it was generated with.
fn check_copy(stream: &CopyStream) -> Result<(), String> {
    let batches = copy_all(stream)?;
    let mut ids = Vec::new();
    let mut amounts = Vec::new();
    for b in &batches {
        ids.extend(
            b.column(0)
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .copied(),
        );
        amounts.extend(
            b.column(2)
                .as_primitive::<Decimal128Type>()
                .values()
                .iter()
                .copied(),
        );
    }
    let expected_ids: Vec<i64> = (1..=stream.rows as i64).collect();
    let expected_amounts: Vec<i128> = stream.amounts.iter().map(|&a| i128::from(a)).collect();
    if ids != expected_ids || amounts != expected_amounts {
        return Err("decoded ids or amounts differ from the generated ones".to_owned());
    }
    Ok(())
}

fn bench_one(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    cap: &Capture,
    f: fn(&Capture) -> Result<usize, String>,
) {
    for (unit, throughput) in [
        ("MB", Throughput::BytesDecimal(cap.payload_bytes)),
        ("msgs", Throughput::Elements(cap.records.len() as u64)),
    ] {
        group.throughput(throughput);
        group.bench_function(format!("{}/{unit}", cap.name), |b| {
            b.iter(|| {
                // Already validated once before measuring; a failure here would be a bug.
                if let Ok(n) = f(black_box(cap)) {
                    black_box(n);
                }
            });
        });
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "the bench's groups in the order they report, each a few lines"
)]
fn main() -> ExitCode {
    if cfg!(debug_assertions) {
        eprintln!(
            "benches/decode.rs: debug build, not benchmarking (run `cargo bench --bench decode`)"
        );
        return ExitCode::SUCCESS;
    }
    let mut captures = Vec::new();
    for (var, file, name, binary) in [
        ("PGWIRE_CDC_BENCH_CAPTURE", "bench_text.bin", "text", false),
        (
            "PGWIRE_CDC_BENCH_CAPTURE_BINARY",
            "bench_binary.bin",
            "binary",
            true,
        ),
    ] {
        let path = capture_path(var, file);
        if !path.exists() {
            eprintln!(
                "skipping the {name} capture: {} does not exist.\n\
                 Record it with `.venv/bin/python benches/capture_stream.py` \
                 (needs PostgreSQL server binaries; about 35 s), or set {var}.",
                path.display()
            );
            continue;
        }
        let cap = match load(&path, name, binary) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("benches/decode.rs: {e}");
                return ExitCode::FAILURE;
            }
        };
        // Validate once, outside the measurement: every message must parse and decode.
        for (what, f) in [
            ("parse_message", parse_all as fn(&Capture) -> _),
            ("Decoder::feed", feed_all),
            ("ArrowSink", arrow_all),
        ] {
            if let Err(e) = f(&cap) {
                eprintln!(
                    "benches/decode.rs: {what} failed on {}: {e}",
                    path.display()
                );
                return ExitCode::FAILURE;
            }
        }
        eprintln!(
            "{name} capture {}: {} messages ({} inserts), {:.1} MB of message payload",
            path.display(),
            cap.records.len(),
            cap.inserts,
            cap.payload_bytes as f64 / 1e6
        );
        captures.push(cap);
    }
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(10))
        .configure_from_args();
    {
        let mut group = c.benchmark_group("parse_message");
        for cap in &captures {
            bench_one(&mut group, cap, parse_all);
        }
        group.finish();
    }
    {
        let mut group = c.benchmark_group("decoder_feed");
        for cap in &captures {
            bench_one(&mut group, cap, feed_all);
        }
        group.finish();
    }
    {
        let mut group = c.benchmark_group("arrow_tables");
        for cap in &captures {
            bench_one(&mut group, cap, arrow_all);
        }
        group.finish();
    }
    {
        // Generated only now, so the 56 MB stream and its check do not change the heap the
        // capture benchmarks above run on.
        let copy = copy_stream::generate(COPY_ROWS);
        if let Err(e) = check_copy(&copy) {
            eprintln!("benches/decode.rs: CopyBinaryDecoder failed on the synthetic stream: {e}");
            return ExitCode::FAILURE;
        }
        eprintln!(
            "synthetic COPY stream: {} rows, {:.1} MB",
            copy.rows,
            copy.data.len() as f64 / 1e6
        );
        let mut group = c.benchmark_group("copy_binary");
        for (unit, throughput) in [
            ("MB", Throughput::BytesDecimal(copy.data.len() as u64)),
            ("rows", Throughput::Elements(copy.rows as u64)),
        ] {
            group.throughput(throughput);
            group.bench_function(format!("bench/{unit}"), |b| {
                b.iter(|| {
                    if let Ok(batches) = copy_all(black_box(&copy)) {
                        black_box(batches);
                    }
                });
            });
        }
        group.finish();
    }
    c.final_summary();
    ExitCode::SUCCESS
}

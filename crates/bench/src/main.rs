//! `scaledkv-bench`: RocksDB's db_bench workloads, names, flags and output
//! format, run against ScaledKV (or, with the `rocksdb` feature, against a
//! release build of RocksDB), so both tools' lines can be compared as is.

mod alloc_counter;
mod chart;
mod hashmap;
mod workloads;

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use scaledkv::Durability;
use scaledkv_bench::{cache, flag_bool, store, ycsb};

#[global_allocator]
static ALLOCATOR: alloc_counter::Counting = alloc_counter::Counting;

/// db_bench-compatible flags (`--name=value`); unknown db_bench flags are
/// refused rather than silently ignored.
#[derive(Parser, Debug, Clone)]
#[command(name = "scaledkv-bench", rename_all = "snake_case", about = "db_bench workloads against ScaledKV")]
pub struct Flags {
    /// Comma-separated: fillseq,fillrandom,overwrite,readrandom,readseq,
    /// readreverse,seekrandom,deleterandom,readwhilewriting,fillbatch,compact,stats
    #[arg(long, default_value = "fillseq,fillrandom,overwrite,readrandom,readseq,readreverse,seekrandom,deleterandom")]
    pub benchmarks: String,
    /// Number of keys.
    #[arg(long, default_value_t = 1_000_000)]
    pub num: u64,
    /// Number of read operations (-1: same as --num).
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub reads: i64,
    #[arg(long, default_value_t = 16)]
    pub key_size: usize,
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Next() calls after each seek in seekrandom.
    #[arg(long, default_value_t = 0)]
    pub seek_nexts: usize,
    /// Database directory.
    #[arg(long, default_value = "/tmp/scaledkv-bench")]
    pub db: PathBuf,
    #[arg(long, default_value = "0", value_parser = flag_bool, action = clap::ArgAction::Set)]
    pub use_existing_db: bool,
    /// With ScaledKV: 1 selects durability=sync unless --durability is given.
    #[arg(long, default_value = "0", value_parser = flag_bool, action = clap::ArgAction::Set)]
    pub sync: bool,
    /// ScaledKV durability: pmem, sync or buffered (default: buffered, or
    /// sync with --sync=1).
    #[arg(long)]
    pub durability: Option<Durability>,
    /// Verify each entry's checksum on reads (`Options::verify_checksums`).
    /// On by default, as in db_bench 7.8 (`-verify_checksum` default true)
    /// and in the `rocksdb` harness's default read options, so that both
    /// engines check what they read.
    #[arg(long, default_value = "1", value_parser = flag_bool, action = clap::ArgAction::Set)]
    pub verify_checksum: bool,
    /// ScaledKV only: 1 adds the hash table for point lookups
    /// (`Options::point_index`, off by default, as in the engine).
    #[arg(long, default_value = "0", value_parser = flag_bool, action = clap::ArgAction::Set)]
    pub point_index: bool,
    /// ScaledKV only: background GC waits until the log holds this many
    /// times the live bytes (`Options::gc_space_amp`; 1 = collect at once).
    #[arg(long)]
    pub gc_space_amp: Option<f64>,
    /// ScaledKV only: index updates deferred to the merger thread before
    /// it merges them (`Options::deferred_index_updates`; 0 = none).
    #[arg(long)]
    pub deferred_index_updates: Option<usize>,
    /// ScaledKV only: log entries between index checkpoints
    /// (`Options::checkpoint_interval_entries`).
    #[arg(long)]
    pub checkpoint_interval_entries: Option<u64>,
    /// ScaledKV only: log bytes between index checkpoints
    /// (`Options::checkpoint_interval_bytes`).
    #[arg(long)]
    pub checkpoint_interval_bytes: Option<u64>,
    /// ScaledKV only: 0 stops group-commit leaders from waiting for the
    /// last group's writers where a persist waits for a device
    /// (`Options::gather_groups`, on by default).
    #[arg(long, default_value = "1", value_parser = flag_bool, action = clap::ArgAction::Set)]
    pub gather_groups: bool,
    /// Entries per batch in fillbatch.
    #[arg(long, default_value_t = 1000)]
    pub batch_size: usize,
    /// Seconds readwhilewriting runs at most.
    #[arg(long, default_value_t = 0)]
    pub duration: u64,
    #[arg(long, default_value_t = 301)]
    pub seed: u64,
    /// Which engine to drive: scaledkv, or rocksdb (needs the `rocksdb` feature).
    #[arg(long, default_value = "scaledkv")]
    pub engine: String,
    /// RocksDB only: 1 disables the WAL.
    #[arg(long, default_value = "0", value_parser = flag_bool, action = clap::ArgAction::Set)]
    pub disable_wal: bool,
    /// RocksDB only: block cache bytes.
    #[arg(long, default_value_t = 8 << 30)]
    pub cache_size: usize,
    /// Progress bar: auto (on a terminal), always, never.
    #[arg(long, default_value = "auto")]
    pub progress: String,
}

fn open_store(flags: &Flags, fresh: bool) -> Result<Arc<dyn store::Store>, String> {
    match flags.engine.as_str() {
        "scaledkv" => {
            let durability =
                flags.durability.unwrap_or(if flags.sync { Durability::Sync } else { Durability::Buffered });
            let defaults = scaledkv::Options::default();
            let options = scaledkv::Options {
                durability,
                verify_checksums: flags.verify_checksum,
                point_index: flags.point_index,
                gc_space_amp: flags.gc_space_amp.unwrap_or(defaults.gc_space_amp),
                deferred_index_updates: flags.deferred_index_updates.unwrap_or(defaults.deferred_index_updates),
                gather_groups: flags.gather_groups,
                checkpoint_interval_entries: flags
                    .checkpoint_interval_entries
                    .unwrap_or(defaults.checkpoint_interval_entries),
                checkpoint_interval_bytes: flags
                    .checkpoint_interval_bytes
                    .unwrap_or(defaults.checkpoint_interval_bytes),
                ..defaults
            };
            Ok(Arc::new(store::ScaledKv::open(&flags.db, options, fresh)?))
        }
        #[cfg(feature = "rocksdb")]
        "rocksdb" => {
            Ok(Arc::new(store::rocks::Rocks::open(&flags.db, flags.sync, flags.disable_wal, flags.cache_size, fresh)?))
        }
        other => Err(format!(
            "unknown --engine `{other}` (this build supports: scaledkv{})",
            if cfg!(feature = "rocksdb") { ", rocksdb" } else { "; rebuild with --features rocksdb for rocksdb" }
        )),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // Subcommands, each with flags of its own; no subcommand is db_bench.
    let result = match args.get(1).map(String::as_str) {
        // The persisted-hashmap experiment.
        Some("hashmap") => hashmap::main(args[1..].to_vec()),
        // YCSB's workloads A-F.
        Some("ycsb") => ycsb::main(args[1..].to_vec()).map(drop),
        // A look-aside cache's hit ratio against a server's memory limit.
        Some("cache") => cache::main(args[1..].to_vec()),
        // A grouped bar chart for the compare scripts.
        Some("chart") => chart::main(args[1..].to_vec()),
        _ => run(Flags::parse()),
    };
    if let Err(error) = result {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

fn run(flags: Flags) -> Result<(), String> {
    let benchmarks: Vec<String> = flags.benchmarks.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
    for name in &benchmarks {
        if !workloads::KNOWN.contains(&name.as_str()) {
            return Err(format!("unknown benchmark `{name}`; known: {}", workloads::KNOWN.join(",")));
        }
    }
    let heap_before = alloc_counter::allocated_bytes();
    let store = open_store(&flags, !flags.use_existing_db)?;
    workloads::print_header(&flags, store.as_ref());
    for name in &benchmarks {
        workloads::run(name, &flags, &store)?;
    }
    for line in store.report() {
        println!("{line}");
    }
    let heap = alloc_counter::allocated_bytes().saturating_sub(heap_before);
    println!("heap: {:.1} MB held by the engine after the run (measured by the allocator)", heap as f64 / 1e6);
    Ok(())
}

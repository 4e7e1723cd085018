//! `scaledkv-bench hashmap`: the persisted-hashmap experiment. Insert N
//! random pairs of 4-byte integers into the same hash map (the toolkit's
//! table layout, hashing and probing) and time until all are inserted and
//! persisted, for each way of persisting:
//!
//! - `toolkit`: the toolkit's map, each insert published by one cache-line
//!   write-back and fence (or fdatasync on a page-cache file system);
//! - `toolkit-tx`: the same map with every insert in a transaction
//!   (undo-logged on tmpfs, redo-logged with one fdatasync on disk);
//! - `mmap-msync`: the table in an mmap'ed file, `msync(MS_SYNC)` of the
//!   touched page after each insert (the classic file-system way);
//! - `write-fdatasync`: the table in DRAM, `pwrite` of the slot and
//!   `fdatasync` after each insert;
//! - `pmdk-tx`, `pmdk-atomic`: PMDK's libpmemobj running the same map (a C
//!   program, `scripts/pmdk_hashmap.c`, passed with `--pmdk`);
//! - `toolkit-eadr`, `pmdk-atomic-eadr`: the one-fence insert on a
//!   platform whose CPU caches are persistent (eADR, CXL): a fence and no
//!   cache-line write-back (`SCALEDKV_PMEM_NO_FLUSH=1`, PMDK's
//!   `PMEM_NO_FLUSH=1`); tmpfs/DAX only;
//! - `*-batched`: the same without per-insert persistence, made durable
//!   once at the end.
//!
//! Lines are printed in db_bench's format; `--markdown` and `--chart`
//! write the table and a log-scale chart.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use clap::Parser;
use scaledkv_pmem::collections::hashmap::{self, Slot};
use scaledkv_pmem::collections::PHashMap;
use scaledkv_pmem::{medium_of_dir, Durability, Medium};

#[derive(Parser, Debug)]
#[command(name = "scaledkv-bench hashmap", rename_all = "snake_case")]
struct Flags {
    /// Comma-separated numbers of pairs to insert.
    #[arg(long, default_value = "1000,10000,100000,1000000")]
    num: String,
    /// Directory for the pool and files (its medium is reported).
    #[arg(long, default_value = "/dev/shm/scaledkv-hashmap")]
    db: PathBuf,
    /// Comma-separated variants (default: all).
    #[arg(
        long,
        default_value = "toolkit,toolkit-tx,mmap-msync,write-fdatasync,pmdk-tx,pmdk-atomic,toolkit-eadr,pmdk-atomic-eadr,toolkit-batched,mmap-msync-batched,write-fdatasync-batched,pmdk-batched"
    )]
    variants: String,
    /// Runs per (variant, N); the median is reported.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Largest N for the per-insert durable variants (on a disk each insert
    /// waits for the device, so 10M would take hours); batched ones run all N.
    #[arg(long, default_value_t = u64::MAX)]
    max_durable_num: u64,
    /// The compiled `scripts/pmdk_hashmap.c`; without it pmdk variants are skipped.
    #[arg(long)]
    pmdk: Option<PathBuf>,
    /// Toolkit durability (default: pmem on tmpfs/DAX, sync elsewhere).
    #[arg(long)]
    durability: Option<Durability>,
    #[arg(long)]
    markdown: Option<PathBuf>,
    #[arg(long)]
    chart: Option<PathBuf>,
    #[arg(long, default_value_t = 301)]
    seed: u64,
}

/// The `i`-th pair: SplitMix64 of (seed + i); the C program draws the same.
fn pair(seed: u64, i: u64) -> (u32, u32) {
    let mut x = seed.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    ((x >> 32) as u32, x as u32)
}

struct Measured {
    variant: String,
    num: u64,
    total_ms: f64,
}

pub fn main(args: Vec<String>) -> Result<(), String> {
    let flags = Flags::parse_from(args);
    let nums: Vec<u64> = flags
        .num
        .split(',')
        .map(|n| n.trim().parse().map_err(|_| format!("bad --num `{n}`")))
        .collect::<Result<_, _>>()?;
    std::fs::create_dir_all(&flags.db).map_err(|e| format!("{}: {e}", flags.db.display()))?;
    let medium = medium_of_dir(&flags.db).map_err(|e| format!("{}: {e}", flags.db.display()))?;
    let durability =
        flags.durability.unwrap_or(if medium == Medium::PageCache { Durability::Sync } else { Durability::Pmem });
    println!("Hash map:   {} medium ({}), toolkit durability {durability}", flags.db.display(), medium.name());
    println!("Pairs:      4-byte key + 4-byte value, 16-byte slots, median of {} runs", flags.repeats);
    if flags.pmdk.is_none() {
        println!("notice: no --pmdk binary given; pmdk variants skipped (scripts/compare-hashmap.sh builds it)");
    }
    let mut results = Vec::new();
    for &num in &nums {
        for variant in flags.variants.split(',').map(str::trim).filter(|v| !v.is_empty()) {
            let batched = variant.ends_with("-batched");
            if variant.starts_with("pmdk") && flags.pmdk.is_none() {
                continue;
            }
            if variant.ends_with("-eadr") && medium == Medium::PageCache {
                continue; // no persistent caches without persistent memory
            }
            if !batched && num > flags.max_durable_num {
                println!("{variant:<24}: skipped at N={num} (over --max_durable_num={})", flags.max_durable_num);
                continue;
            }
            let mut runs = Vec::new();
            for _ in 0..flags.repeats {
                clear(&flags.db)?;
                runs.push(run_variant(variant, num, &flags, durability, medium)?);
            }
            runs.sort_by(f64::total_cmp);
            let total_ms = runs[runs.len() / 2];
            let micros = total_ms * 1000.0 / num as f64;
            println!(
                "{variant:<24}: {micros:>11.3} micros/op {:>9.0} ops/sec; N={num:<9} {total_ms:>11.3} ms to insert and persist",
                1e6 / micros
            );
            results.push(Measured { variant: variant.to_string(), num, total_ms });
        }
    }
    clear(&flags.db)?;
    if let Some(path) = &flags.markdown {
        write_markdown(path, &results, &nums, &flags.db, medium, durability)?;
    }
    if let Some(path) = &flags.chart {
        draw_chart(path, &results, &format!("{} ({})", flags.db.display(), medium.name()))?;
    }
    Ok(())
}

fn clear(dir: &Path) -> Result<(), String> {
    for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "hashmap") {
            std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// Milliseconds from the first insert until everything is durable.
fn run_variant(variant: &str, num: u64, flags: &Flags, durability: Durability, medium: Medium) -> Result<f64, String> {
    let capacity = hashmap::capacity_for(num);
    let table_bytes = capacity * std::mem::size_of::<Slot>() as u64;
    let path = flags.db.join(format!("{variant}.hashmap"));
    let seed = flags.seed;
    let err = |e: &dyn std::fmt::Display| format!("{variant}: {e}");
    match variant {
        "toolkit-eadr" => {
            if medium == Medium::PageCache {
                return Err(format!("{variant} needs a tmpfs or DAX directory"));
            }
            // Declares the CPU caches persistent for the pool mapped next.
            std::env::set_var(scaledkv_pmem::flush::NO_FLUSH_ENV, "1");
            let result = run_variant("toolkit", num, flags, durability, medium);
            std::env::remove_var(scaledkv_pmem::flush::NO_FLUSH_ENV);
            result
        }
        "toolkit" | "toolkit-tx" | "toolkit-batched" => {
            let pool_bytes = table_bytes + table_bytes / 8 + (16 << 20);
            let options = PHashMap::options(pool_bytes, durability);
            let pool = scaledkv_pmem::Pool::create::<hashmap::MapRoot>(&path, &options).map_err(|e| err(&e))?;
            let mut map = PHashMap::init_with_capacity(pool, capacity).map_err(|e| err(&e))?;
            let started = Instant::now();
            for i in 0..num {
                let (key, value) = pair(seed, i);
                match variant {
                    "toolkit" => map.insert(key, value),
                    "toolkit-tx" => map.insert_tx(key, value),
                    _ => map.insert_unpersisted(key, value),
                }
                .map_err(|e| err(&e))?;
            }
            if variant == "toolkit-batched" {
                map.persist_all().map_err(|e| err(&e))?;
            }
            let elapsed = started.elapsed();
            assert_eq!(map.capacity(), capacity, "presized: no growth inside the timed loop");
            Ok(elapsed.as_secs_f64() * 1e3)
        }
        "mmap-msync" | "mmap-msync-batched" => {
            let file = create_file(&path, table_bytes).map_err(|e| err(&e))?;
            // SAFETY: the file is ours alone for the run; nothing truncates it.
            let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| err(&e))?;
            let started = Instant::now();
            {
                let slots: &mut [Slot] = scaledkv_pmem::bytemuck::cast_slice_mut(&mut map[..]);
                let per_insert = variant == "mmap-msync";
                for i in 0..num {
                    let (key, value) = pair(seed, i);
                    let index = hashmap::place(slots, key, value).ok_or_else(|| err(&"table full"))?;
                    if per_insert {
                        let page = index * 16 / 4096 * 4096;
                        // SAFETY: msync of one page inside the live mapping.
                        let rc = unsafe {
                            libc::msync(slots.as_mut_ptr().cast::<u8>().add(page).cast(), 4096, libc::MS_SYNC)
                        };
                        if rc != 0 {
                            return Err(err(&std::io::Error::last_os_error()));
                        }
                    }
                }
            }
            if variant == "mmap-msync-batched" {
                map.flush().map_err(|e| err(&e))?;
            }
            Ok(started.elapsed().as_secs_f64() * 1e3)
        }
        "write-fdatasync" | "write-fdatasync-batched" => {
            let file = create_file(&path, table_bytes).map_err(|e| err(&e))?;
            let mut slots: Vec<Slot> = vec![scaledkv_pmem::Zeroable::zeroed(); capacity as usize];
            let started = Instant::now();
            let per_insert = variant == "write-fdatasync";
            for i in 0..num {
                let (key, value) = pair(seed, i);
                let index = hashmap::place(&mut slots, key, value).ok_or_else(|| err(&"table full"))?;
                if per_insert {
                    let bytes = scaledkv_pmem::bytemuck::bytes_of(&slots[index]);
                    file.write_all_at(bytes, index as u64 * 16).map_err(|e| err(&e))?;
                    file.sync_data().map_err(|e| err(&e))?;
                }
            }
            if !per_insert {
                file.write_all_at(scaledkv_pmem::bytemuck::cast_slice(&slots), 0).map_err(|e| err(&e))?;
                file.sync_data().map_err(|e| err(&e))?;
            }
            Ok(started.elapsed().as_secs_f64() * 1e3)
        }
        "pmdk-tx" | "pmdk-atomic" | "pmdk-batched" | "pmdk-atomic-eadr" => {
            let binary = flags.pmdk.as_ref().expect("checked by the caller");
            let mode = variant.trim_start_matches("pmdk-").trim_end_matches("-eadr");
            let mut command = Command::new(binary);
            if variant.ends_with("-eadr") {
                if medium == Medium::PageCache {
                    return Err(format!("{variant} needs a tmpfs or DAX directory"));
                }
                command.env("PMEM_NO_FLUSH", "1");
            }
            command.args([mode, &num.to_string(), &capacity.to_string(), &seed.to_string()]).arg(&path);
            if medium != Medium::PageCache {
                // tmpfs stands in for PM: let PMDK flush cache lines as the
                // toolkit's pmem mode does, instead of calling msync.
                command.env("PMEM_IS_PMEM_FORCE", "1");
            }
            let output = command.output().map_err(|e| format!("{}: {e}", binary.display()))?;
            if !output.status.success() {
                return Err(format!("{}: {}", binary.display(), String::from_utf8_lossy(&output.stderr)));
            }
            let stdout = String::from_utf8_lossy(&output.stdout);
            stdout
                .lines()
                .find_map(|l| l.strip_prefix("total_ms ").and_then(|v| v.trim().parse().ok()))
                .ok_or_else(|| format!("{}: no `total_ms` line in its output: {stdout}", binary.display()))
        }
        other => Err(format!(
            "unknown variant `{other}`; known: toolkit, toolkit-tx, mmap-msync, write-fdatasync, pmdk-tx, pmdk-atomic and their -batched forms"
        )),
    }
}

/// A zero-filled file of `len` bytes, synced, so the timed loop measures
/// inserts and persists, not block allocation.
fn create_file(path: &Path, len: u64) -> std::io::Result<File> {
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < len {
        let n = (zeros.len() as u64).min(len - at);
        file.write_all_at(&zeros[..n as usize], at)?;
        at += n;
    }
    file.sync_all()?;
    Ok(file)
}

fn write_markdown(
    path: &Path,
    results: &[Measured],
    nums: &[u64],
    dir: &Path,
    medium: Medium,
    durability: Durability,
) -> Result<(), String> {
    let mut variants: Vec<&str> = Vec::new();
    for r in results {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    let cell =
        |variant: &str, num: u64| results.iter().find(|r| r.variant == variant && r.num == num).map(|r| r.total_ms);
    let mut out = format!(
        "Persisted hash map on {} ({}), toolkit durability {durability}: ms until N inserts are done and durable (median)\n\n| variant |",
        dir.display(),
        medium.name()
    );
    for n in nums {
        out += &format!(" N={n} |");
    }
    out += "\n|---|";
    out += &"---:|".repeat(nums.len());
    out += "\n";
    for v in &variants {
        out += &format!("| {v} |");
        for n in nums {
            out += &cell(v, *n).map_or(" – |".to_string(), |ms| format!(" {ms:.3} |"));
        }
        out += "\n";
    }
    let ratios = [
        ("toolkit", "mmap-msync"),
        ("toolkit-eadr", "mmap-msync"),
        ("toolkit-tx", "pmdk-tx"),
        ("toolkit", "pmdk-atomic"),
        ("toolkit-batched", "mmap-msync-batched"),
    ];
    for (ours, base) in ratios {
        let label = format!("speed-up {ours} vs {base}");
        if variants.contains(&base) && variants.contains(&ours) {
            out += &format!("| **{label}** |");
            for n in nums {
                out += &match (cell(ours, *n), cell(base, *n)) {
                    (Some(a), Some(b)) => format!(" {:.2}× |", b / a),
                    _ => " – |".to_string(),
                };
            }
            out += "\n";
        }
    }
    std::fs::write(path, out).map_err(|e| format!("{}: {e}", path.display()))
}

fn draw_chart(path: &Path, results: &[Measured], title: &str) -> Result<(), String> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| format!("chart {}: {e}", path.display());
    let (min_n, max_n) = results.iter().fold((u64::MAX, 0), |(lo, hi), r| (lo.min(r.num), hi.max(r.num)));
    let (min_ms, max_ms) =
        results.iter().fold((f64::MAX, 0f64), |(lo, hi), r| (lo.min(r.total_ms.max(1e-3)), hi.max(r.total_ms)));
    if results.is_empty() {
        return Ok(());
    }
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("Persisted hash map: time to insert and persist N pairs — {title}"), ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            ((min_n as f64 / 1.5)..(max_n as f64 * 1.5)).log_scale(),
            ((min_ms / 2.0)..(max_ms * 2.0)).log_scale(),
        )
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("N (pairs inserted)")
        .y_desc("ms (log scale)")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| err(&e))?;
    let mut variants: Vec<&str> = Vec::new();
    for r in results {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    for (i, variant) in variants.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> =
            results.iter().filter(|r| r.variant == *variant).map(|r| (r.num as f64, r.total_ms.max(1e-3))).collect();
        let style = if variant.ends_with("-batched") { color.stroke_width(1) } else { color.stroke_width(3) };
        chart
            .draw_series(LineSeries::new(points.clone(), style))
            .map_err(|e| err(&e))?
            .label(*variant)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
        chart.draw_series(points.iter().map(|p| Circle::new(*p, 3, color.filled()))).map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

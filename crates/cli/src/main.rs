//! `scaledkv`: the admin tool for a ScaledKV data directory (the server's
//! `--dir`, or any database the `scaledkv` library wrote), used while no
//! server has it open (the database's lock refuses a second opener).
//!
//! - `check`: opens the database as the server does and reads every entry
//!   back, verifying its checksum; exits 1 on any damage, naming it.
//! - `repair`: opens it in repair mode (corrupt records in the middle of
//!   the log are skipped instead of refusing to open), deletes the keys
//!   whose entries fail their checksum, reports each, and closes cleanly.
//! - `stats`: what the engine counts (keys, bytes, segments, index memory).
//! - `dump`: the keys and values, in key order, quoted as redis-cli quotes.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use scaledkv::{Db, Error, Options, RecoveryReport, SsdTier, WriteBatch};

#[derive(Parser)]
#[command(name = "scaledkv", version, about = "Checks, repairs, inspects and dumps a ScaledKV data directory")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Open the database as the server does (a torn tail is cut, as at any
    /// start) and read every entry back, verifying its checksum. Exit 1 on
    /// damage.
    Check(Target),
    /// Skip corrupt records in the middle of the log, delete the keys whose
    /// entries are damaged, report each, and close the database cleanly.
    Repair(Target),
    /// Print the engine's counters.
    Stats(Target),
    /// Print keys and values in key order, one `"key" "value"` line each.
    Dump {
        #[command(flatten)]
        target: Target,
        /// Only keys starting with these bytes.
        #[arg(long)]
        prefix: Option<String>,
        /// At most this many keys.
        #[arg(long)]
        limit: Option<usize>,
        /// Also the server's own entries (keys starting with 0xFF 0xFF: a
        /// collection's parts, settings).
        #[arg(long)]
        all: bool,
    },
}

#[derive(clap::Args)]
struct Target {
    /// The data directory (the server's `--dir`).
    dir: PathBuf,
    /// The SSD tier's directory, if the server ran with `--ssd-dir`.
    #[arg(long)]
    ssd_dir: Option<PathBuf>,
}

/// Keys the server keeps for itself start with these bytes.
const RESERVED: &[u8] = b"\xff\xff";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(target) => check(&target),
        Command::Repair(target) => repair(&target),
        Command::Stats(target) => stats(&target),
        Command::Dump { target, prefix, limit, all } => dump(&target, prefix.as_deref(), limit, all),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("scaledkv: {message}");
            ExitCode::FAILURE
        }
    }
}

fn open(target: &Target, repair: bool) -> Result<Db, String> {
    let options = Options {
        create_if_missing: false,
        repair,
        // No GC or checkpoints while the tool looks: it changes nothing
        // but what a repair must (and the checkpoint of a clean close).
        background_work: false,
        ssd_tier: target.ssd_dir.clone().map(|dir| SsdTier { dir, capacity_bytes: 0 }),
        ..Options::default()
    };
    Db::open(&target.dir, options).map_err(|error| match error {
        Error::Corruption { .. } if !repair => format!(
            "{error}\nThe log is damaged before its end. `scaledkv repair {}` skips the damaged records (reporting \
             each) and keeps everything else.",
            target.dir.display()
        ),
        Error::Locked { .. } => format!("{error} (stop the server first)"),
        _ => error.to_string(),
    })
}

fn print_report(report: &RecoveryReport) {
    println!(
        "opened: {} keys from the index checkpoint, {} log frames ({} bytes) replayed in {:.3} s",
        report.checkpoint_keys,
        report.replayed_frames,
        report.replayed_bytes,
        report.elapsed.as_secs_f64()
    );
    if let Some(restored) = &report.restored {
        println!(
            "segment cut short, length restored: {} from {} bytes: {}",
            restored.path.display(),
            restored.offset,
            restored.reason
        );
    }
    if let Some(cut) = &report.truncated {
        println!("torn tail cut: {} at offset {}: {}", cut.path.display(), cut.offset, cut.reason);
    }
    for skipped in &report.skipped {
        println!(
            "skipped damaged records: {} at offset {}: {}",
            skipped.path.display(),
            skipped.offset,
            skipped.reason
        );
    }
    for removed in &report.removed_segments {
        println!("removed segment: {}", removed.display());
    }
}

/// Reads every entry; the keys whose entries fail (and why), and how many
/// entries and bytes were read.
fn scan(db: &Db) -> (Vec<(Vec<u8>, String)>, u64, u64) {
    let mut damaged = Vec::new();
    let (mut entries, mut bytes) = (0, 0);
    let mut iter = db.iter();
    while let Some(entry) = iter.next_ref() {
        match entry {
            Ok((key, value)) => {
                entries += 1;
                bytes += (key.len() + value.len()) as u64;
            }
            Err(error) => {
                let key = iter.last_key().unwrap_or_default().to_vec();
                damaged.push((key, error.to_string()));
            }
        }
    }
    (damaged, entries, bytes)
}

fn check(target: &Target) -> Result<ExitCode, String> {
    let db = open(target, false)?;
    print_report(db.recovery_report());
    let (damaged, entries, bytes) = scan(&db);
    for (key, error) in &damaged {
        println!("damaged entry of key {}: {error}", quote(key));
    }
    if damaged.is_empty() {
        println!("read {entries} entries ({bytes} bytes of keys and values): every checksum matches");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{} damaged entries ({entries} good); `scaledkv repair {}` deletes their keys and keeps the rest",
        damaged.len(),
        target.dir.display()
    );
    Ok(ExitCode::FAILURE)
}

fn repair(target: &Target) -> Result<ExitCode, String> {
    let db = open(target, true)?;
    print_report(db.recovery_report());
    let (damaged, entries, _) = scan(&db);
    let mut batch = WriteBatch::new();
    for (key, error) in &damaged {
        println!("deleting key {}: {error}", quote(key));
        batch.delete(key);
    }
    if !damaged.is_empty() {
        db.write(batch).map_err(|error| format!("cannot delete the damaged keys: {error}"))?;
    }
    let (still, _, _) = scan(&db);
    if !still.is_empty() {
        return Err(format!("{} entries still fail their checksum after the repair", still.len()));
    }
    let report = db.recovery_report();
    println!(
        "repaired: {} damaged ranges skipped, {} keys deleted, {entries} entries kept; closing cleanly",
        report.skipped.len() + report.truncated.is_some() as usize,
        damaged.len()
    );
    drop(db);
    Ok(ExitCode::SUCCESS)
}

fn stats(target: &Target) -> Result<ExitCode, String> {
    let db = open(target, false)?;
    print_report(db.recovery_report());
    let stats = db.stats();
    // The server's own entries sort last (0xFF 0xFF): counted by a scan
    // of them alone, without copying.
    let mut own = db.range::<&[u8], _>(RESERVED..);
    let mut reserved = 0;
    while own.next_ref().is_some() {
        reserved += 1;
    }
    let user_keys = stats.keys - reserved;
    for (name, value) in [
        ("keys (engine entries)", stats.keys.to_string()),
        ("user keys (without the server's own entries)", user_keys.to_string()),
        ("live bytes", stats.live_bytes.to_string()),
        ("log bytes", stats.log_bytes.to_string()),
        ("bytes on the medium", stats.disk_bytes.to_string()),
        ("segments", stats.segments.to_string()),
        ("space amplification", format!("{:.2}", stats.space_amplification)),
        ("index memory bytes", stats.index_memory_bytes.to_string()),
        ("index bytes per key", format!("{:.1}", stats.index_bytes_per_key)),
        ("last sequence number", stats.last_seq.to_string()),
    ] {
        println!("{name}: {value}");
    }
    Ok(ExitCode::SUCCESS)
}

fn dump(target: &Target, prefix: Option<&str>, limit: Option<usize>, all: bool) -> Result<ExitCode, String> {
    let db = open(target, false)?;
    let prefix = prefix.unwrap_or("").as_bytes();
    let mut shown = 0;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut iter = db.range::<&[u8], _>(prefix..);
    while let Some(entry) = iter.next_ref() {
        if limit.is_some_and(|limit| shown >= limit) {
            break;
        }
        let (key, value) = entry.map_err(|error| format!("{error} (run `scaledkv check` for every damaged entry)"))?;
        if !key.starts_with(prefix) {
            break;
        }
        if !all && key.starts_with(RESERVED) {
            continue;
        }
        use std::io::Write;
        writeln!(out, "{} {}", quote(key), quote(value)).map_err(|e| e.to_string())?;
        shown += 1;
    }
    Ok(ExitCode::SUCCESS)
}

/// `bytes` quoted as redis-cli quotes a string: printable ASCII as it is,
/// `"` and `\` escaped, `\n` `\r` `\t` by name, other bytes as `\xHH`.
fn quote(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn bytes_are_quoted_as_redis_cli_quotes_them() {
        assert_eq!(quote(b"plain key"), "\"plain key\"");
        assert_eq!(quote(b"a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(quote(b"\n\r\t\x00\xff"), "\"\\n\\r\\t\\x00\\xff\"");
    }
}

//! The parts of `scaledkv-bench` that other crates' tests drive too: the
//! engines behind one trait (`store`) and YCSB's workloads (`ycsb`), which
//! scaledkv-server's tests run through its own protocols; and the cache
//! workload (`cache`).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

pub mod cache;
pub mod store;
pub mod ycsb;

/// db_bench's boolean flags: `1`/`0` or `true`/`false`.
pub fn flag_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        other => Err(format!("expected 0/1/true/false, got `{other}`")),
    }
}

/// A progress bar on stderr; `mode` is the `--progress` flag.
pub fn progress(mode: &str, name: &str, total: u64) -> ProgressBar {
    let show = match mode {
        "always" => true,
        "never" => false,
        _ => std::io::stderr().is_terminal(),
    };
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(name.to_string());
    bar
}

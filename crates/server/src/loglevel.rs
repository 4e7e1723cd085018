//! Redis's `loglevel` (debug, verbose, notice, warning) over the tracing
//! filter: `--loglevel`, the config file's `loglevel`, CONFIG GET and SET.
//! `RUST_LOG`, where set, chooses the filter at start instead; CONFIG SET
//! replaces it.

use std::sync::OnceLock;

use parking_lot::Mutex;
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// Redis's levels, in its order (its error lists them so).
pub const LEVELS: [&str; 4] = ["debug", "verbose", "notice", "warning"];
pub const DEFAULT: &str = "notice";

static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();
static CURRENT: Mutex<&str> = Mutex::new(DEFAULT);

/// Redis's name for `text`, in any case, if it is one.
pub fn parse(text: &str) -> Option<&'static str> {
    LEVELS.iter().copied().find(|level| level.eq_ignore_ascii_case(text))
}

/// The tracing filter a level stands for: ScaledKV's `info` events are
/// what Redis logs at `notice` (start, stop, syncs).
fn filter(level: &str) -> EnvFilter {
    EnvFilter::new(match level {
        "debug" | "verbose" => "debug",
        "notice" => "info",
        _ => "warn",
    })
}

/// Logs to stderr, or to `file` (Redis's `logfile`, without colours),
/// from here on, at `level` unless `RUST_LOG` says.
pub fn init(level: &'static str, file: Option<std::fs::File>) {
    let (layer, handle) = reload::Layer::new(EnvFilter::try_from_default_env().unwrap_or_else(|_| filter(level)));
    let output = match file {
        Some(file) => {
            let file = std::sync::Arc::new(file);
            tracing_subscriber::fmt::layer().with_ansi(false).with_writer(file).boxed()
        }
        None => tracing_subscriber::fmt::layer().with_writer(std::io::stderr).boxed(),
    };
    tracing_subscriber::registry().with(layer).with(output).init();
    let _ = FILTER.set(handle);
    *CURRENT.lock() = level;
}

/// The level last chosen (CONFIG GET loglevel).
pub fn current() -> &'static str {
    *CURRENT.lock()
}

/// Logs at `level` from now on (CONFIG SET loglevel).
pub fn set(level: &'static str) {
    *CURRENT.lock() = level;
    if let Some(handle) = FILTER.get() {
        let _ = handle.reload(filter(level));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_redis_names_in_any_case() {
        assert_eq!(parse("WARNING"), Some("warning"));
        assert_eq!(parse("Verbose"), Some("verbose"));
        assert_eq!(parse("nothing"), None);
        assert_eq!(parse(""), None);
    }
}

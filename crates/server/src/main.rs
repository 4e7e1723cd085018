/// mimalloc, not glibc's malloc (Redis, too, ships its own allocator). A
/// tokio worker allocates from a glibc thread arena, which grows by
/// `mprotect`: that needs the process's mmap lock for writing, so it queued
/// behind the spare-segment thread populating the next segment (which holds
/// the lock for reading, a 2 MiB step at a time), and every client waited
/// with it: 174 such stalls in 400k pipelined SETs, SET `-P 16` p99 21-28 ms
/// with one worker thread. With mimalloc: 6-8 ms, as Redis (BENCHMARKS.md,
/// eighth session).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use scaledkv_server::Config;

fn main() -> std::process::ExitCode {
    let config = match Config::from_args(std::env::args_os().collect()) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("scaledkv-server: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    // Before any thread starts: the fork keeps only this one.
    if config.daemonize {
        if let Err(error) = scaledkv_server::process::daemonize() {
            eprintln!("scaledkv-server: {error}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let log = match config.logfile.as_deref().map(scaledkv_server::process::open_log).transpose() {
        Ok(log) => log,
        Err(error) => {
            eprintln!("scaledkv-server: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    scaledkv_server::loglevel::init(config.loglevel, log);
    // One that cannot be written is a warning, as in Redis: the server
    // serves without it.
    let _pid_file = match config.pidfile.as_deref().map(scaledkv_server::process::PidFile::create).transpose() {
        Ok(pid_file) => pid_file,
        Err(error) => {
            tracing::warn!("{error}");
            None
        }
    };
    scaledkv_server::memory::note_startup();
    let db = match scaledkv_server::server::open(&config) {
        Ok(db) => db,
        Err(error) => {
            tracing::error!("{error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    serve_without_huge_pages();
    // This thread only accepts connections, expires keys and answers the
    // metrics endpoint: the connections are served by the I/O threads
    // (`io_threads.rs`).
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("start the runtime");
    match runtime.block_on(scaledkv_server::run(config, db)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Transparent huge pages off from here on, once the database is open (its
/// checkpoint loads into huge pages, which made opening faster). mimalloc
/// advises huge pages over its whole arena; under the server's churn it
/// returns pages to the kernel and takes them back, and each comes back as a
/// zeroed 2 MiB page: a quarter of the server's CPU in 100-byte SETs
/// (`clear_page_erms`), and twice the resident memory, for no gain in reads
/// (BENCHMARKS.md, forty-second session).
fn serve_without_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments and touches no
    // memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "transparent huge pages stay on");
    }
}

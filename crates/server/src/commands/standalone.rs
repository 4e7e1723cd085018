//! Cluster, replication and debugging commands: CLUSTER and its kin
//! answered as a standalone Redis 7.0 answers them (Debian's build, DEBUG
//! off), so that clients and tools that probe for a cluster (CLUSTER
//! INFO, READONLY) get the replies they expect instead of an unknown
//! command; REPLICAOF (`crate::replica`) and FAILOVER
//! (`crate::failover`) as Redis's.

use bytes::Bytes;

use super::args::eq;
use super::{err, CmdError, CmdResult, Ctx};

const CLUSTER_DISABLED: &str = "ERR This instance has cluster support disabled";

/// READONLY, READWRITE, ASKING.
pub fn cluster_disabled(_ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    Err(err(CLUSTER_DISABLED))
}

/// Redis 7.0's CLUSTER subcommands and their arities, which it checks
/// before it says that cluster support is disabled.
const CLUSTER_SUBCOMMANDS: &[(&str, i32)] = &[
    ("addslots", -3),
    ("addslotsrange", -4),
    ("bumpepoch", 2),
    ("count-failure-reports", 3),
    ("countkeysinslot", 3),
    ("delslots", -3),
    ("delslotsrange", -4),
    ("failover", -2),
    ("flushslots", 2),
    ("forget", 3),
    ("getkeysinslot", 4),
    ("help", 2),
    ("info", 2),
    ("keyslot", 3),
    ("links", 2),
    ("meet", -4),
    ("myid", 2),
    ("nodes", 2),
    ("replicas", 3),
    ("replicate", 3),
    ("reset", -2),
    ("saveconfig", 2),
    ("set-config-epoch", 3),
    ("setslot", -4),
    ("shards", 2),
    ("slaves", 3),
    ("slots", 2),
];

/// CLUSTER: Redis's errors for an unknown subcommand or a wrong count of
/// arguments, else cluster support is disabled.
pub fn cluster(_ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    super::subcommand("cluster", args, CLUSTER_SUBCOMMANDS)?;
    Err(err(CLUSTER_DISABLED))
}

/// Redis's refusal of a protected command (DEBUG) whose
/// `enable-<name>-command` is off, as Debian's Redis has it.
pub fn protected_refusal(name: &str) -> String {
    format!(
        "ERR {} command not allowed. If the enable-{name}-command option is set to \"local\", you can run it from a \
         local connection, otherwise you need to set this option in the configuration file, and then restart the \
         server.",
        name.to_ascii_uppercase()
    )
}

/// DEBUG's entry in the table: `run_command` refuses it before it runs
/// (PROTECTED), and scripts refuse it as Redis's do.
pub fn debug(_ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    Err(err(protected_refusal("debug")))
}

/// REPLICAOF / SLAVEOF host port: follow a Redis master
/// (`crate::replica`); NO ONE: stop following, keep the data, take writes.
pub fn replicaof(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if ctx.conn.master_link {
        return Err(err("ERR Command is not valid when client is a replica."));
    }
    if ctx.shared.failover.phase() != crate::failover::Phase::None {
        return Err(err("ERR REPLICAOF not allowed while failing over."));
    }
    if eq(&args[1], "no") && eq(&args[2], "one") {
        if ctx.shared.replication.following() {
            tracing::info!("REPLICAOF NO ONE: a master now");
        }
        ctx.shared.replication.stop(ctx.shared).map_err(|error| err(super::engine_error_text(&error)))?;
        ctx.out.ok();
        return Ok(());
    }
    let port = match super::args::int(&args[2]) {
        Ok(port) if (0..=65535).contains(&port) => port as u16,
        _ => return Err(err("ERR Invalid master port")),
    };
    let host = String::from_utf8_lossy(&args[1]).into_owned();
    tracing::info!(%host, port, "REPLICAOF: following a master");
    match ctx.shared.replication.follow(crate::replica::Master { host, port }) {
        crate::replica::Followed::Started => ctx.out.ok(),
        crate::replica::Followed::Already => ctx.out.simple("OK Already connected to specified master"),
    }
    Ok(())
}

/// FAILOVER [TO host port [FORCE]] [ABORT] [TIMEOUT ms]: hands over to
/// a replica (`crate::failover`), with Redis's checks and errors.
pub fn failover(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len() == 2 && eq(&args[1], "abort") {
        ctx.shared.failover.abort_by_client(ctx.shared).map_err(err)?;
        ctx.out.ok();
        return Ok(());
    }
    let (mut timeout, mut target, mut force) = (None, None, false);
    let mut at = 1;
    while at < args.len() {
        if eq(&args[at], "timeout") && at + 1 < args.len() && timeout.is_none() {
            let ms = super::args::int(&args[at + 1])?;
            if ms <= 0 {
                return Err(err("ERR FAILOVER timeout must be greater than 0"));
            }
            timeout = Some(ms);
            at += 2;
        } else if eq(&args[at], "to") && at + 2 < args.len() && target.is_none() {
            let port = super::args::int(&args[at + 2])?;
            // A port no replica announced finds none, as in Redis.
            let port = u16::try_from(port).unwrap_or(0);
            target = Some((String::from_utf8_lossy(&args[at + 1]).into_owned(), port));
            at += 3;
        } else if eq(&args[at], "force") && !force {
            force = true;
            at += 1;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let timeout = timeout.map(|ms| std::time::Duration::from_millis(ms as u64));
    let request = crate::failover::Request { target, timeout, force };
    ctx.shared.failover.request(ctx.shared, request).map_err(err)?;
    ctx.out.ok();
    Ok(())
}

/// BGREWRITEAOF: the log needs no rewrite (GC compacts it as it goes);
/// an index checkpoint is written, as SAVE does, so the next start
/// replays nothing.
pub fn bgrewriteaof(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    ctx.db().flush()?;
    ctx.shared.last_save.store(scaledkv::now_ms() / 1000, std::sync::atomic::Ordering::Relaxed);
    ctx.out.simple("Background append only file rewriting started");
    Ok(())
}

/// MODULE: ScaledKV loads no Redis modules (their API is Redis's process
/// and memory), so LIST is empty, as for a Redis without any, and LOAD
/// says so; tools that probe for modules (RedisInsight, client
/// libraries' `module_list`) get the replies they expect.
pub fn module(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    const SUBCOMMANDS: &[(&str, i32)] = &[("help", 2), ("list", 2), ("load", -3), ("loadex", -3), ("unload", 3)];
    match super::subcommand("module", args, SUBCOMMANDS)?.as_str() {
        "list" => ctx.out.array(0),
        "help" => ctx.out.help(&[
            "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "LIST",
            "    Return a list of loaded modules.",
            "LOAD <path> [<arg> ...]",
            "    Load a module library from <path>, passing to it any optional arguments.",
            "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
            "    Load a module library from <path>, while passing it module configurations and optional arguments.",
            "UNLOAD <name>",
            "    Unload a module.",
            "HELP",
            "    Prints this help.",
        ]),
        "unload" => return Err(err("ERR Error unloading module: no such module with that name")),
        _ => return Err(err("ERR ScaledKV does not load Redis modules")),
    }
    Ok(())
}

/// LOLWUT [VERSION v]: the version line Redis 7 answers (its drawings for
/// versions 5 and 6 are not built: the line stands for them too).
pub fn lolwut(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len() >= 3 && eq(&args[1], "version") {
        super::args::int(&args[2])?;
    }
    ctx.out.verbatim(&format!("Redis ver. {}\n", super::REDIS_VERSION));
    Ok(())
}

//! MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE]
//! [AUTH password] [AUTH2 username password] [KEYS key ...], as Redis 7:
//! each key that exists goes as a RESTORE of its DUMP payload with the
//! time it has left; those the target took are deleted here (unless
//! COPY), even when another key's RESTORE failed. The keys' locks are held
//! throughout, so no write to them can fall between the copy and the
//! delete. The wire is `crate::migrate`'s.

use bytes::Bytes;
use scaledkv::now_ms;

use super::args::{eq, int};
use super::{err, CmdError, CmdResult, Ctx};
use crate::migrate::{Moving, Target};

/// Redis's when the client asks for 0 ms or less.
const DEFAULT_TIMEOUT_MS: i64 = 1000;

pub fn migrate(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (mut copy, mut replace, mut auth, mut keys) = (false, false, None, &args[3..4]);
    let mut i = 6;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if eq(&args[i], "copy") {
            copy = true;
        } else if eq(&args[i], "replace") {
            replace = true;
        } else if eq(&args[i], "auth") && more >= 1 {
            auth = Some((None, &args[i + 1][..]));
            i += 1;
        } else if eq(&args[i], "auth2") && more >= 2 {
            auth = Some((Some(&args[i + 1][..]), &args[i + 2][..]));
            i += 2;
        } else if eq(&args[i], "keys") {
            if !args[3].is_empty() {
                return Err(err(
                    "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string",
                ));
            }
            keys = &args[i + 1..];
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let timeout = int(&args[5])?;
    let db = int(&args[4])?;
    let timeout = if timeout <= 0 { DEFAULT_TIMEOUT_MS } else { timeout };
    let host = String::from_utf8_lossy(&args[1]);
    // A port that is no number, or out of range, connects nowhere, as in
    // Redis.
    let port = super::args::parse_i64(&args[2]).and_then(|p| u16::try_from(p).ok()).unwrap_or(0);
    let mut moving = Vec::new();
    let now = now_ms();
    for key in keys {
        let Some(value) = ctx.read(key)? else { continue };
        // Its last millisecond still counts: Redis sends 1, not 0 (none).
        let ttl_ms = value.expiry_ms().map_or(0, |at| at.saturating_sub(now).max(1));
        let payload = super::dump::serialize(ctx, key, &value)?;
        moving.push(Moving { key, ttl_ms, payload });
    }
    if moving.is_empty() {
        ctx.out.simple("NOKEY");
        return Ok(());
    }
    let target =
        Target { host: &host, port, db, timeout: std::time::Duration::from_millis(timeout as u64), auth, replace };
    let shared = ctx.shared;
    let exchange = super::blocking(|| crate::migrate::exchange(&shared.migrate, &target, &moving));
    let mut refused = None;
    for (moved, reply) in moving.iter().zip(&exchange.replies) {
        match reply {
            Ok(()) if !copy => {
                ctx.writes.delete(moved.key);
                ctx.notify(crate::notify::GENERIC, "del", moved.key);
            }
            Ok(()) => {}
            Err(error) => {
                refused.get_or_insert(error);
            }
        }
    }
    // The keys moved are gone either way: the error goes in the reply, not
    // as the command's failure (which would undo the deletes).
    match (refused, exchange.failure) {
        (Some(error), _) => ctx.out.error(&format!("ERR Target instance replied with error: {error}")),
        (None, Some(failure)) => ctx.out.error(failure.text()),
        (None, None) => ctx.out.ok(),
    }
    Ok(())
}

//! ACL for ScaledKV's one user: `default`, with every permission, whose
//! password is `requirepass` (none: `nopass`), as Redis describes that
//! user (WHOAMI, USERS, LIST, GETUSER, CAT, DRYRUN, GENPASS, HELP), and
//! the ACL log of failed authentications (AUTH, HELLO ... AUTH) that
//! Redis keeps. Users other than `default` are not built: SETUSER is
//! refused with a clear error.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::args::eq;
use super::{err, lookup, subcommand, subcommand_syntax, CmdResult, Ctx};

/// Redis's `acllog-max-len` default.
const LOG_MAX: usize = 128;

/// Redis 7.0's ACL categories, in its order.
const CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// A failed authentication, as Redis's ACL LOG shows it.
struct Entry {
    count: u64,
    object: String,
    username: String,
    created: Instant,
    client_info: String,
}

#[derive(Default)]
pub struct AclLog {
    /// Newest first.
    entries: Mutex<VecDeque<Entry>>,
}

impl AclLog {
    /// Notes a failed AUTH (`object`: the command as sent) for
    /// `username`: a repeat of one of the newest entries within a minute
    /// counts there, as in Redis.
    pub fn auth_failed(&self, object: &[u8], username: &[u8], client_info: String) {
        let (object, username) =
            (String::from_utf8_lossy(object).into_owned(), String::from_utf8_lossy(username).into_owned());
        let mut entries = self.entries.lock();
        let now = Instant::now();
        let same = entries.iter().take(10).position(|entry| {
            entry.object == object && entry.username == username && now.duration_since(entry.created).as_secs() < 60
        });
        if let Some(at) = same {
            let mut entry = entries.remove(at).expect("found");
            entry.count += 1;
            entry.created = now;
            entry.client_info = client_info;
            entries.push_front(entry);
            return;
        }
        entries.push_front(Entry { count: 1, object, username, created: now, client_info });
        entries.truncate(LOG_MAX);
    }
}

/// The `default` user's rules, as ACL LIST shows them.
fn default_user_rules(password: Option<&str>) -> String {
    match password {
        Some(password) => format!("user default on #{} ~* &* +@all", sha256_hex(password)),
        None => "user default on nopass ~* &* +@all".into(),
    }
}

fn sha256_hex(text: &str) -> String {
    crate::script::hex(&Sha256::digest(text.as_bytes()))
}

/// Redis 7.0's ACL subcommands and their arities.
const SUBCOMMANDS: &[(&str, i32)] = &[
    ("cat", -2),
    ("deluser", -3),
    ("dryrun", -4),
    ("genpass", -2),
    ("getuser", 3),
    ("help", 2),
    ("list", 2),
    ("load", 2),
    ("log", -2),
    ("save", 2),
    ("setuser", -3),
    ("users", 2),
    ("whoami", 2),
];

pub fn acl(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = subcommand("acl", args, SUBCOMMANDS)?;
    let n = args.len();
    let password = ctx.shared.password();
    let out = &mut *ctx.out;
    match sub.as_str() {
        "whoami" => out.bulk(b"default"),
        "users" => {
            out.array(1);
            out.bulk(b"default");
        }
        "list" => {
            out.array(1);
            out.bulk(default_user_rules(password.as_deref()).as_bytes());
        }
        "getuser" if &args[2][..] != b"default" => out.null(),
        "getuser" => {
            out.map(6);
            out.bulk(b"flags");
            out.set(if password.is_some() { 1 } else { 2 });
            out.bulk(b"on");
            if password.is_none() {
                out.bulk(b"nopass");
            }
            out.bulk(b"passwords");
            match &password {
                Some(password) => {
                    out.array(1);
                    out.bulk(sha256_hex(password).as_bytes());
                }
                None => out.array(0),
            }
            for (name, value) in [("commands", "+@all"), ("keys", "~*"), ("channels", "&*")] {
                out.bulk(name.as_bytes());
                out.bulk(value.as_bytes());
            }
            out.bulk(b"selectors");
            out.array(0);
        }
        "cat" if n == 2 => {
            out.array(CATEGORIES.len());
            for category in CATEGORIES {
                out.bulk(category.as_bytes());
            }
        }
        "cat" if n == 3 => {
            let name = String::from_utf8_lossy(&args[2]).to_ascii_lowercase();
            if !CATEGORIES.contains(&name.as_str()) {
                return Err(err(format!("ERR Unknown category '{}'", String::from_utf8_lossy(&args[2]))));
            }
            return Err(err("ERR ACL CAT <category> is not supported by ScaledKV yet (see the README)"));
        }
        "genpass" if n <= 3 => {
            let bits = match args.get(2) {
                None => 256,
                Some(arg) => match super::args::int(arg)? {
                    bits @ 1..=4096 => bits as usize,
                    _ => {
                        return Err(err(
                            "ERR ACL GENPASS argument must be the number of bits for the output password, a \
                             positive number up to 4096",
                        ))
                    }
                },
            };
            let mut bytes = vec![0u8; bits.div_ceil(8)];
            rand::thread_rng().fill_bytes(&mut bytes);
            let hex = crate::script::hex(&bytes);
            out.bulk(&hex.as_bytes()[..bits.div_ceil(4)]);
        }
        "log" if n == 3 && eq(&args[2], "reset") => {
            ctx.shared.acl_log.entries.lock().clear();
            out.ok();
        }
        "log" if n <= 3 => {
            let count = match args.get(2) {
                None => 10,
                Some(arg) => super::args::int(arg)?.max(0) as usize,
            };
            let entries = ctx.shared.acl_log.entries.lock();
            let shown: Vec<&Entry> = entries.iter().take(count).collect();
            out.array(shown.len());
            for entry in shown {
                out.map(7);
                out.bulk(b"count");
                out.int(entry.count as i64);
                for (name, value) in [("reason", "auth"), ("context", "toplevel"), ("object", &entry.object)] {
                    out.bulk(name.as_bytes());
                    out.bulk(value.as_bytes());
                }
                out.bulk(b"username");
                out.bulk(entry.username.as_bytes());
                out.bulk(b"age-seconds");
                // Milliseconds, as Redis counts it.
                out.double(entry.created.elapsed().as_millis() as f64 / 1000.0);
                out.bulk(b"client-info");
                out.bulk(entry.client_info.as_bytes());
            }
        }
        "dryrun" => {
            if &args[2][..] != b"default" {
                return Err(err(format!("ERR User '{}' not found", String::from_utf8_lossy(&args[2]))));
            }
            let Some(command) = lookup(&args[3]) else {
                return Err(err(format!("ERR Command '{}' not found", String::from_utf8_lossy(&args[3]))));
            };
            if !command.arity_ok(n - 3) {
                return Err(err(format!("ERR wrong number of arguments for '{}' command", command.name)));
            }
            out.ok();
        }
        "deluser" => {
            if args[2..].iter().any(|user| &user[..] == b"default") {
                return Err(err("ERR The 'default' user cannot be removed"));
            }
            out.int(0);
        }
        "save" | "load" => {
            return Err(err(
                "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via \
                 the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration \
                 file set) in order to store users in the Redis configuration.",
            ))
        }
        "setuser" => {
            return Err(err(
                "ERR ACL SETUSER is not supported by ScaledKV: it has one user, default, whose password is \
                 requirepass (see the README)",
            ))
        }
        "help" => out.help(&[
            "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "CAT [<category>]",
            "    List all commands that belong to <category>, or all command categories",
            "    when no category is specified.",
            "DELUSER <username> [<username> ...]",
            "    Delete a list of users.",
            "DRYRUN <username> <command> [<arg> ...]",
            "    Returns whether the user can execute the given command without executing the command.",
            "GETUSER <username>",
            "    Get the user's details.",
            "GENPASS [<bits>]",
            "    Generate a secure 256-bit user password. The optional `bits` argument can",
            "    be used to specify a different size.",
            "LIST",
            "    Show users details in config file format.",
            "LOAD",
            "    Reload users from the ACL file.",
            "LOG [<count> | RESET]",
            "    Show the ACL log entries.",
            "SAVE",
            "    Save the current config to the ACL file.",
            "SETUSER <username> <attribute> [<attribute> ...]",
            "    Create or modify a user with the specified attributes.",
            "USERS",
            "    List all the registered usernames.",
            "WHOAMI",
            "    Return the current connection username.",
            "HELP",
            "    Prints this help.",
        ]),
        _ => return Err(subcommand_syntax("ACL", &args[1])),
    }
    Ok(())
}

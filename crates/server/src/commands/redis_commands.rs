//! Redis 7's own command table (`redis_commands.tsv`, written by
//! `scripts/gen-redis-commands.py` from redis-server 7.0.15's COMMAND):
//! every command and subcommand with its ACL categories and key
//! specifications. ACL rules are read against it, so `+@read`,
//! `-config|set` or `%R~app:*` mean here what they mean in Redis, and a
//! user described by ACL LIST reads as Redis would describe it, even for
//! commands ScaledKV does not have.

use std::collections::HashMap;
use std::sync::LazyLock;

use bytes::Bytes;

/// Redis 7.0's ACL categories, in its order (ACL CAT, descriptions).
pub const CATEGORIES: &[&str] = &[
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

/// A category's bit (`CATEGORIES` order), or None for an unknown name.
pub fn category(name: &str) -> Option<u32> {
    CATEGORIES.iter().position(|c| c.eq_ignore_ascii_case(name)).map(|i| 1 << i)
}

/// How a key argument is used, from its key specification's flags.
pub const ACCESS: u8 = 1;
/// Inserts, deletes or updates: needs a write pattern.
pub const WRITES: u8 = 2;

pub struct Spec {
    /// `get`, or `config|get` for a subcommand.
    pub fullname: String,
    pub arity: i32,
    pub categories: u32,
    /// Index of the container for a subcommand.
    pub parent: Option<usize>,
    /// Runs before authentication (AUTH HELLO QUIT RESET): no ACL applies.
    pub no_auth: bool,
    /// Indexes of the subcommands (they follow their container).
    pub subcommands: std::ops::Range<usize>,
    keys: Vec<KeySpec>,
    /// Redis's flags (`write`, `denyoom`, `movablekeys`, ...), its first
    /// key, last key and step as COMMAND INFO gives them (derived from the
    /// key specifications), and its tips.
    pub flags: Vec<String>,
    pub key_range: (i64, i64, i64),
    pub tips: Vec<String>,
}

struct KeySpec {
    /// `ACCESS` and `WRITES`.
    uses: u8,
    not_key: bool,
    begin: Begin,
    find: Find,
    /// As Redis lists them (`RW`, `access`, `delete`, ...).
    flags: Vec<String>,
    notes: Option<String>,
}

enum Begin {
    Index(usize),
    Keyword(String, i64),
    Unknown,
}

enum Find {
    Range { last: i64, step: usize, limit: i64 },
    KeyNum { index: usize, first: usize, step: usize },
    Unknown,
}

pub struct Table {
    pub specs: Vec<Spec>,
    by_name: HashMap<String, usize>,
}

pub static TABLE: LazyLock<Table> = LazyLock::new(|| parse(include_str!("redis_commands.tsv")));

fn parse(text: &str) -> Table {
    let mut specs: Vec<Spec> = Vec::new();
    let mut by_name = HashMap::new();
    for line in text.lines().filter(|line| !line.starts_with('#') && !line.is_empty()) {
        let columns: Vec<&str> = line.split('\t').collect();
        let [name, arity, flags, categories, keys, key_range, tips] = columns[..] else {
            panic!("a bad line in redis_commands.tsv: {line}")
        };
        let key_range = match key_range.split(',').map(|n| n.parse().expect("a number")).collect::<Vec<i64>>()[..] {
            [first, last, step] => (first, last, step),
            _ => panic!("first,last,step in {line}"),
        };
        let categories = categories
            .split(',')
            .filter(|c| !c.is_empty())
            .map(|c| category(c).unwrap_or_else(|| panic!("unknown category {c}")))
            .fold(0, |all, bit| all | bit);
        let parent = name.split_once('|').map(|(parent, _)| by_name[parent]);
        let id = specs.len();
        if let Some(parent) = parent {
            let container: &mut Spec = &mut specs[parent];
            if container.subcommands.is_empty() {
                container.subcommands = id..id;
            }
            container.subcommands.end = id + 1;
        }
        specs.push(Spec {
            fullname: name.to_string(),
            arity: arity.parse().expect("arity"),
            categories,
            parent,
            no_auth: flags.split(',').any(|flag| flag == "no_auth"),
            subcommands: 0..0,
            keys: keys.split(';').filter(|s| !s.is_empty()).map(key_spec).collect(),
            flags: list(flags),
            key_range,
            tips: list(tips),
        });
        by_name.insert(name.to_string(), id);
    }
    Table { specs, by_name }
}

/// A comma-separated column's items.
fn list(text: &str) -> Vec<String> {
    text.split(',').filter(|item| !item.is_empty()).map(str::to_string).collect()
}

fn key_spec(text: &str) -> KeySpec {
    let mut parts = text.split('/');
    let (flags, begin, find) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let notes = parts.next().map(unescape);
    let numbers = |s: &str| -> Vec<i64> { s.split(',').map(|n| n.parse().expect("a number")).collect() };
    let begin = match begin.split_at(1) {
        ("i", pos) => Begin::Index(pos.parse().expect("index")),
        ("k", spec) => {
            let (word, from) = spec.rsplit_once(',').expect("keyword,startfrom");
            Begin::Keyword(word.to_string(), from.parse().expect("startfrom"))
        }
        _ => Begin::Unknown,
    };
    let find = match find.split_at(1) {
        ("r", spec) => match numbers(spec)[..] {
            [last, step, limit] => Find::Range { last, step: step as usize, limit },
            _ => panic!("range"),
        },
        ("n", spec) => match numbers(spec)[..] {
            [index, first, step] => Find::KeyNum { index: index as usize, first: first as usize, step: step as usize },
            _ => panic!("keynum"),
        },
        _ => Find::Unknown,
    };
    let flags = list(flags);
    let uses = uses_of(flags.iter().map(String::as_str));
    KeySpec { uses, not_key: flags.iter().any(|flag| flag == "not_key"), begin, find, flags, notes }
}

/// A note's text: the generator writes `%`, `/`, `;`, tabs and newlines
/// as `%XX`.
fn unescape(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Table {
    /// The id of command `name` (any case; `config|get` for a subcommand).
    pub fn id(&self, name: &str) -> Option<usize> {
        self.id_of(&[name.as_bytes()])
    }

    /// The command or subcommand `args` invoke, as Redis looks it up: a
    /// container's subcommand by the second argument (the container itself
    /// when there is none such).
    pub fn resolve(&self, args: &[Bytes]) -> Option<usize> {
        let id = self.id_of(&[args.first()?])?;
        if self.specs[id].subcommands.is_empty() || args.len() < 2 {
            return Some(id);
        }
        Some(self.id_of(&[&args[0], b"|", &args[1]]).unwrap_or(id))
    }

    /// `resolve` for ScaledKV's `command` (no lookup by name unless it is a
    /// container).
    pub fn of_command(&self, command: &'static crate::commands::Command, args: &[Bytes]) -> Option<usize> {
        static IDS: LazyLock<Vec<Option<usize>>> =
            LazyLock::new(|| crate::commands::TABLE.iter().map(|command| TABLE.id(command.name)).collect());
        let id = (*IDS.get(crate::commands::index_of(command))?)?;
        if self.specs[id].subcommands.is_empty() || args.len() < 2 {
            return Some(id);
        }
        Some(self.id_of(&[&args[0], b"|", &args[1]]).unwrap_or(id))
    }

    /// The id of the name `parts` spell, in any case, without allocating
    /// (every command runs through here when its user is restricted).
    fn id_of(&self, parts: &[&[u8]]) -> Option<usize> {
        let mut name = [0u8; 48];
        let mut len = 0;
        for part in parts {
            name.get_mut(len..len + part.len())?.copy_from_slice(part);
            len += part.len();
        }
        name[..len].make_ascii_lowercase();
        self.by_name.get(std::str::from_utf8(&name[..len]).ok()?).copied()
    }

    /// The key arguments of command `id` invoked with `args` (the name
    /// first), each with how it is used (`ACCESS`, `WRITES`), as Redis's
    /// ACL finds them: by the key specifications, or for the commands whose
    /// specifications cannot say (SET, BITFIELD, SORT, MIGRATE) by reading
    /// the arguments as Redis does.
    /// Positions are within `args` even when the arity was not checked.
    pub fn keys(&self, id: usize, args: &[Bytes]) -> Vec<(usize, u8)> {
        let flags = |origin: KeyOrigin| match origin {
            KeyOrigin::Spec(at) => self.specs[id].keys[at].uses,
            KeyOrigin::Fixed(flags) => uses_of(flags.iter().copied()),
        };
        self.key_origins(id, args).into_iter().map(|(at, origin)| (at, flags(origin))).collect()
    }

    /// As `keys`, each with its flags as COMMAND GETKEYSANDFLAGS lists
    /// them (`RW`, `access`, `update`, ...).
    pub fn keys_and_flags(&self, id: usize, args: &[Bytes]) -> Vec<(usize, Vec<&str>)> {
        let flags = |origin: KeyOrigin| match origin {
            KeyOrigin::Spec(at) => self.specs[id].keys[at].flags.iter().map(String::as_str).collect(),
            KeyOrigin::Fixed(flags) => flags.to_vec(),
        };
        self.key_origins(id, args).into_iter().map(|(at, origin)| (at, flags(origin))).collect()
    }

    /// Whether command `id` has key arguments at all (COMMAND GETKEYS
    /// refuses one that has none).
    pub fn has_keys(&self, id: usize) -> bool {
        self.specs[id].keys.iter().any(|key| !key.not_key)
    }

    fn key_origins(&self, id: usize, args: &[Bytes]) -> Vec<(usize, KeyOrigin)> {
        let mut keys = self.key_positions(id, args);
        keys.retain(|&(at, _)| at < args.len());
        keys
    }

    fn key_positions(&self, id: usize, args: &[Bytes]) -> Vec<(usize, KeyOrigin)> {
        let spec = &self.specs[id];
        match spec.fullname.as_str() {
            "set" => {
                let get = has_word(&args[3.min(args.len())..], "get");
                return vec![(1, KeyOrigin::Fixed(if get { &["RW", "access", "update"] } else { &["OW", "update"] }))];
            }
            "bitfield" => return vec![(1, bitfield_flags(args))],
            "sort" | "sort_ro" => return sort_keys(args),
            "migrate" => return migrate_keys(args),
            _ => {}
        }
        let mut keys = Vec::new();
        let argc = args.len();
        for (spec_at, key) in spec.keys.iter().enumerate().filter(|(_, key)| !key.not_key) {
            let first = match &key.begin {
                Begin::Index(pos) => *pos,
                Begin::Keyword(word, from) => {
                    // As Redis: never the last argument (no key follows it)
                    // searching forward, never the first searching back.
                    let is_word = |&i: &usize| args[i].eq_ignore_ascii_case(word.as_bytes());
                    let found = if *from > 0 {
                        (*from as usize..argc.saturating_sub(1)).find(is_word)
                    } else {
                        let start = (argc as i64 + from).min(argc as i64 - 1);
                        (2..=start.max(0) as usize).rev().find(is_word)
                    };
                    match found {
                        Some(i) => i + 1,
                        None => continue,
                    }
                }
                Begin::Unknown => return Vec::new(),
            };
            let (first, last, step) = match key.find {
                Find::Range { last, step, limit } => {
                    let end = if last >= 0 {
                        first as i64 + last
                    } else if limit == 0 {
                        argc as i64 + last
                    } else {
                        first as i64 + ((argc as i64 - first as i64) / limit + last)
                    };
                    (first, end, step)
                }
                Find::KeyNum { index, first: offset, step } => {
                    let Some(count) =
                        args.get(first + index).and_then(|n| std::str::from_utf8(n).ok()?.parse::<i64>().ok())
                    else {
                        return Vec::new();
                    };
                    if count < 0 {
                        return Vec::new();
                    }
                    (first + offset, (first + offset) as i64 + count - 1, step)
                }
                Find::Unknown => return Vec::new(),
            };
            // Out of bounds: a syntax error the command reports itself.
            if last >= argc as i64 || last < first as i64 || first >= argc {
                return Vec::new();
            }
            keys.extend((first..=last as usize).step_by(step.max(1)).map(|i| (i, KeyOrigin::Spec(spec_at))));
        }
        keys
    }
}

impl Table {
    /// Command `id`'s COMMAND INFO entry, as Redis 7.0 writes it: name,
    /// arity, flags, first and last key and step, ACL categories, tips,
    /// key specifications, and its subcommands' entries.
    pub fn write_info(&self, id: usize, out: &mut crate::resp::reply::Out) {
        let spec = &self.specs[id];
        out.array(10);
        out.bulk(spec.fullname.as_bytes());
        out.int(spec.arity as i64);
        statuses(out, spec.flags.iter().map(String::as_str));
        out.int(spec.key_range.0);
        out.int(spec.key_range.1);
        out.int(spec.key_range.2);
        let categories = CATEGORIES.iter().enumerate().filter(|(bit, _)| spec.categories & 1 << bit != 0);
        let categories: Vec<String> = categories.map(|(_, name)| format!("@{name}")).collect();
        statuses(out, categories.iter().map(String::as_str));
        out.set(spec.tips.len());
        for tip in &spec.tips {
            out.bulk(tip.as_bytes());
        }
        out.set(spec.keys.len());
        for key in &spec.keys {
            write_key_spec(key, out);
        }
        // As Redis: an empty set where there are none, else an array.
        if spec.subcommands.is_empty() {
            out.set(0);
        } else {
            out.array(spec.subcommands.len());
        }
        for sub in spec.subcommands.clone() {
            self.write_info(sub, out);
        }
    }
}

/// A set of status replies (Redis's flags, categories).
fn statuses<'a>(out: &mut crate::resp::reply::Out, items: impl ExactSizeIterator<Item = &'a str>) {
    out.set(items.len());
    for item in items {
        out.simple(item);
    }
}

fn write_key_spec(key: &KeySpec, out: &mut crate::resp::reply::Out) {
    out.map(3 + key.notes.is_some() as usize);
    if let Some(notes) = &key.notes {
        out.bulk(b"notes");
        out.bulk(notes.as_bytes());
    }
    out.bulk(b"flags");
    statuses(out, key.flags.iter().map(String::as_str));
    let ints = |out: &mut crate::resp::reply::Out, kind: &str, fields: &[(&str, i64)]| {
        out.map(2);
        out.bulk(b"type");
        out.bulk(kind.as_bytes());
        out.bulk(b"spec");
        out.map(fields.len());
        for (name, value) in fields {
            out.bulk(name.as_bytes());
            out.int(*value);
        }
    };
    out.bulk(b"begin_search");
    match &key.begin {
        Begin::Index(pos) => ints(out, "index", &[("index", *pos as i64)]),
        Begin::Keyword(word, from) => {
            out.map(2);
            out.bulk(b"type");
            out.bulk(b"keyword");
            out.bulk(b"spec");
            out.map(2);
            out.bulk(b"keyword");
            out.bulk(word.as_bytes());
            out.bulk(b"startfrom");
            out.int(*from);
        }
        Begin::Unknown => ints(out, "unknown", &[]),
    }
    out.bulk(b"find_keys");
    match key.find {
        Find::Range { last, step, limit } => {
            ints(out, "range", &[("lastkey", last), ("keystep", step as i64), ("limit", limit)])
        }
        Find::KeyNum { index, first, step } => {
            ints(out, "keynum", &[("keynumidx", index as i64), ("firstkey", first as i64), ("keystep", step as i64)])
        }
        Find::Unknown => ints(out, "unknown", &[]),
    }
}

fn has_word(args: &[Bytes], word: &str) -> bool {
    args.iter().any(|arg| arg.eq_ignore_ascii_case(word.as_bytes()))
}

/// Where a key argument's flags come from: the command's key
/// specification (by index), or, for the commands whose specifications
/// cannot say, what Redis's own key finder gives.
#[derive(Clone, Copy)]
enum KeyOrigin {
    Spec(usize),
    Fixed(&'static [&'static str]),
}

/// `ACCESS` and `WRITES` of a key with these flags.
fn uses_of<'a>(flags: impl IntoIterator<Item = &'a str>) -> u8 {
    let mut uses = 0;
    for flag in flags {
        match flag {
            "access" => uses |= ACCESS,
            "insert" | "delete" | "update" => uses |= WRITES,
            _ => {}
        }
    }
    uses
}

/// BITFIELD only reads unless it has a SET or INCRBY (or a syntax error).
fn bitfield_flags(args: &[Bytes]) -> KeyOrigin {
    KeyOrigin::Fixed(if bitfield_reads_only(args) { &["RO", "access"] } else { &["RW", "access", "update"] })
}

fn bitfield_reads_only(args: &[Bytes]) -> bool {
    let mut i = 2;
    while i < args.len() {
        let left = args.len() - i - 1;
        let arg = &args[i];
        if arg.eq_ignore_ascii_case(b"get") && left >= 2 {
            i += 3;
        } else if arg.eq_ignore_ascii_case(b"overflow") && left >= 1 {
            i += 2;
        } else {
            return false;
        }
    }
    true
}

/// SORT's key, and the last STORE's destination.
fn sort_keys(args: &[Bytes]) -> Vec<(usize, KeyOrigin)> {
    let mut keys = vec![(1, KeyOrigin::Fixed(&["RO", "access"]))];
    let mut store = None;
    let mut i = 2;
    while i < args.len() {
        let arg = &args[i];
        if arg.eq_ignore_ascii_case(b"limit") {
            i += 2;
        } else if arg.eq_ignore_ascii_case(b"get") || arg.eq_ignore_ascii_case(b"by") {
            i += 1;
        } else if arg.eq_ignore_ascii_case(b"store") && i + 1 < args.len() {
            store = Some(i + 1);
        }
        i += 1;
    }
    keys.extend(store.map(|at| (at, KeyOrigin::Fixed(&["OW", "update"]))));
    keys
}

/// MIGRATE's key, or its KEYS.
fn migrate_keys(args: &[Bytes]) -> Vec<(usize, KeyOrigin)> {
    let (mut first, mut count) = (3, 1);
    let mut i = 6;
    while i < args.len() {
        let arg = &args[i];
        if arg.eq_ignore_ascii_case(b"keys") {
            (first, count) = if args[3].is_empty() { (i + 1, args.len() - i - 1) } else { (0, 0) };
            break;
        }
        if arg.eq_ignore_ascii_case(b"auth") {
            i += 1;
        } else if arg.eq_ignore_ascii_case(b"auth2") {
            i += 2;
        }
        i += 1;
    }
    let flags = KeyOrigin::Fixed(&["RW", "access", "delete"]);
    (first..first + count).filter(|&i| i < args.len()).map(|i| (i, flags)).collect()
}

/// How a command names pub/sub channels.
pub enum Channels {
    None,
    /// Channels from this argument on (SUBSCRIBE), or just it (PUBLISH).
    Names {
        from: usize,
        all: bool,
    },
    /// PSUBSCRIBE's patterns, which must equal an allowed pattern.
    Patterns,
}

/// The channels a command subscribes or publishes to, as Redis's ACL
/// checks them (unsubscribing is always allowed).
pub fn channels(fullname: &str) -> Channels {
    match fullname {
        "subscribe" | "ssubscribe" => Channels::Names { from: 1, all: true },
        "publish" | "spublish" => Channels::Names { from: 1, all: false },
        "psubscribe" => Channels::Patterns,
        _ => Channels::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    fn keys(words: &[&str]) -> Vec<(usize, u8)> {
        let args = args(words);
        TABLE.keys(TABLE.resolve(&args).unwrap(), &args)
    }

    #[test]
    fn the_table_is_redis_7s() {
        assert_eq!(TABLE.specs.len(), 366);
        let get = &TABLE.specs[TABLE.id("get").unwrap()];
        assert_eq!(get.categories, category("read").unwrap() | category("string").unwrap() | category("fast").unwrap());
        let config = TABLE.id("config").unwrap();
        let config_get = TABLE.resolve(&args(&["CONFIG", "GET", "x"])).unwrap();
        assert_eq!(TABLE.specs[config_get].fullname, "config|get");
        assert_eq!(TABLE.specs[config_get].parent, Some(config));
        assert!(TABLE.specs[config].subcommands.contains(&config_get));
        assert_eq!(TABLE.resolve(&args(&["config", "nosuch"])), Some(config));
    }

    #[test]
    fn keys_are_found_as_redis_finds_them() {
        assert_eq!(keys(&["get", "k"]), [(1, ACCESS)]);
        assert_eq!(keys(&["set", "k", "v"]), [(1, WRITES)]);
        assert_eq!(keys(&["set", "k", "v", "GET"]), [(1, ACCESS | WRITES)]);
        assert_eq!(keys(&["mset", "a", "1", "b", "2"]), [(1, WRITES), (3, WRITES)]);
        assert_eq!(keys(&["copy", "a", "b"]), [(1, ACCESS), (2, WRITES)]);
        assert_eq!(keys(&["zunionstore", "d", "2", "a", "b"]), [(1, WRITES), (3, ACCESS), (4, ACCESS)]);
        assert_eq!(keys(&["eval", "s", "2", "a", "b", "x"]), [(3, ACCESS | WRITES), (4, ACCESS | WRITES)]);
        assert_eq!(keys(&["eval", "s", "9", "a"]), [], "numkeys past the arguments");
        assert_eq!(keys(&["xread", "COUNT", "1", "STREAMS", "a", "b", "0", "0"]), [(4, ACCESS), (5, ACCESS)]);
        assert_eq!(keys(&["object", "encoding", "k"]), [(2, 0)]);
        assert_eq!(keys(&["sort", "l", "BY", "w*", "STORE", "d"]), [(1, ACCESS), (5, WRITES)]);
        assert_eq!(keys(&["bitfield", "k", "GET", "u8", "0"]), [(1, ACCESS)]);
        assert_eq!(keys(&["bitfield", "k", "SET", "u8", "0", "1"]), [(1, ACCESS | WRITES)]);
        assert_eq!(
            keys(&["migrate", "h", "1", "", "0", "5", "KEYS", "a", "b"]),
            [(7, ACCESS | WRITES), (8, ACCESS | WRITES)]
        );
        assert_eq!(keys(&["ping"]), []);
    }
}

//! ACL, as Redis 7.0's: the `default` user, with every permission, whose
//! password is `requirepass` (none: `nopass`), and users that ACL SETUSER
//! creates with Redis's rules: commands, categories and subcommands
//! (`+@read -keys +config|get`), key patterns with read and write
//! permissions (`~app:*`, `%R~cache:*`), channel patterns (`&news.*`) and
//! `(...)` selectors (`selector`). As Redis it describes users (WHOAMI,
//! USERS, LIST, GETUSER, CAT, DRYRUN, DELUSER, GENPASS, HELP), refuses
//! commands they may not run (NOPERM), and logs failed authentications
//! and refusals (ACL LOG). ACL SAVE keeps the users durably in the data
//! directory (the server's settings, where Redis writes its ACL file), ACL
//! LOAD and the server's start read them back.

mod selector;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::args::eq;
use super::redis_commands::{self, Table, CATEGORIES, TABLE};
use super::{err, subcommand, subcommand_syntax, CmdResult, Ctx};
use selector::Refusal;
pub use selector::Selector;

/// Redis's `acllog-max-len` default.
pub const LOG_MAX: usize = 128;

/// A failed authentication or a refused command, as Redis's ACL LOG
/// shows it.
struct Entry {
    count: u64,
    /// "auth", "command", "key" or "channel".
    reason: &'static str,
    /// "toplevel", "multi" or "lua".
    context: &'static str,
    object: String,
    username: String,
    created: Instant,
    client_info: String,
}

pub struct AclLog {
    /// Newest first.
    entries: Mutex<VecDeque<Entry>>,
    /// Redis's `acllog-max-len`: the most entries kept.
    max_len: AtomicUsize,
}

impl Default for AclLog {
    fn default() -> Self {
        AclLog { entries: Mutex::default(), max_len: AtomicUsize::new(LOG_MAX) }
    }
}

impl AclLog {
    pub fn max_len(&self) -> usize {
        self.max_len.load(Ordering::Relaxed)
    }

    /// `acllog-max-len`: the log keeps its newest `n` entries from the
    /// next one on, as Redis trims it.
    pub fn set_max_len(&self, n: usize) {
        self.max_len.store(n, Ordering::Relaxed);
    }

    /// Notes a failed AUTH (`object`: the command as sent) for
    /// `username`: a repeat of one of the newest entries within a minute
    /// counts there, as in Redis.
    pub fn auth_failed(&self, object: &[u8], username: &[u8], client_info: String) {
        self.add("auth", "toplevel", object, username, client_info);
    }

    /// Notes a command `username` may not run (`reason`: "command", "key"
    /// or "channel"; `context`: "toplevel", "multi" or "lua"; `object`:
    /// the command's name, the key, the channel).
    pub fn refused(&self, reason: &'static str, context: &'static str, object: &[u8], username: &[u8], info: String) {
        self.add(reason, context, object, username, info);
    }

    fn add(&self, reason: &'static str, context: &'static str, object: &[u8], username: &[u8], client_info: String) {
        let (object, username) =
            (String::from_utf8_lossy(object).into_owned(), String::from_utf8_lossy(username).into_owned());
        let mut entries = self.entries.lock();
        let now = Instant::now();
        let same = entries.iter().take(10).position(|entry| {
            entry.reason == reason
                && entry.context == context
                && entry.object == object
                && entry.username == username
                && now.duration_since(entry.created).as_secs() < 60
        });
        if let Some(at) = same {
            let mut entry = entries.remove(at).expect("found");
            entry.count += 1;
            entry.created = now;
            entry.client_info = client_info;
            entries.push_front(entry);
            return;
        }
        entries.push_front(Entry { count: 1, reason, context, object, username, created: now, client_info });
        entries.truncate(self.max_len());
    }
}

/// A user ACL SETUSER made. A new one is off, with no password, no
/// commands, keys or channels, as in Redis.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub on: bool,
    pub nopass: bool,
    /// SHA-256 of each password, in lowercase hex, in the order added.
    pub passwords: Vec<String>,
    /// `sanitize-payload` (true) or `skip-sanitize-payload` (false), as
    /// set: Redis's RESTORE payload checks, shown and kept (RESTORE checks
    /// every payload here).
    pub sanitize_payload: Option<bool>,
    /// The permissions given outside parentheses.
    pub root: Selector,
    /// `(...)` selectors: a command runs when the root or one of them
    /// allows all of it.
    pub selectors: Vec<Selector>,
}

/// What a user may not do with a command.
#[derive(Debug, PartialEq, Eq)]
pub enum Denied {
    /// The command (or subcommand, `config|set`) by Redis's full name.
    Command(&'static str),
    Key(Bytes),
    Channel(Bytes),
}

impl Denied {
    /// The command's refusal, Redis's NOPERM.
    pub fn error(&self) -> String {
        match self {
            Denied::Command(name) => format!("NOPERM this user has no permissions to run the '{name}' command"),
            Denied::Key(_) => "NOPERM this user has no permissions to access one of the keys used as arguments".into(),
            Denied::Channel(_) => {
                "NOPERM this user has no permissions to access one of the channels used as arguments".into()
            }
        }
    }

    /// The refusal of a command queued in MULTI that EXEC finds no longer
    /// allowed.
    pub fn changed_in_multi(&self) -> String {
        let reason = match self {
            Denied::Command(_) => "no permission to execute the command or subcommand",
            Denied::Key(_) => "no permission to touch the specified keys",
            Denied::Channel(_) => "no permission to access one of the channels used as arguments",
        };
        format!(
            "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This \
             command is no longer allowed for the following reason: {reason}"
        )
    }

    /// ACL DRYRUN's answer.
    fn dry_run(&self) -> String {
        match self {
            Denied::Command(name) => format!("This user has no permissions to run the '{name}' command"),
            Denied::Key(key) => format!("This user has no permissions to access the '{}' key", lossy(key)),
            Denied::Channel(channel) => {
                format!("This user has no permissions to access the '{}' channel", lossy(channel))
            }
        }
    }

    /// The refusal of a script's `redis.call`, as Redis words it.
    pub fn script_error(&self) -> &'static str {
        match self {
            Denied::Command(_) => "ERR The user executing the script can't run this command or subcommand",
            Denied::Key(_) => {
                "ERR The user executing the script can't access at least one of the keys mentioned in the command \
                 arguments"
            }
            Denied::Channel(_) => {
                "ERR The user executing the script can't publish to the channel mentioned in the command"
            }
        }
    }

    /// ACL LOG's reason and object.
    pub fn logged(&self) -> (&'static str, Bytes) {
        match self {
            Denied::Command(name) => ("command", Bytes::from_static(name.as_bytes())),
            Denied::Key(key) => ("key", key.clone()),
            Denied::Channel(channel) => ("channel", channel.clone()),
        }
    }
}

fn lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

/// SETUSER's arguments with each `(...)` selector split over several
/// arguments joined into one, as Redis's ACLMergeSelectorArguments; the
/// error names the argument whose parenthesis is not closed.
fn merge_selectors<'a>(rules: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<Vec<u8>>, String> {
    let mut merged = Vec::new();
    // The selector being joined, and the argument that opened it.
    let mut open: Option<(Vec<u8>, &[u8])> = None;
    for rule in rules {
        if let Some((selector, _)) = open.as_mut() {
            selector.push(b' ');
            selector.extend_from_slice(rule);
            if rule.last() == Some(&b')') {
                merged.extend(open.take().map(|(selector, _)| selector));
            }
        } else if rule.first() == Some(&b'(') && rule.last() != Some(&b')') {
            open = Some((rule.to_vec(), rule));
        } else {
            merged.push(rule.to_vec());
        }
    }
    match open {
        Some((_, start)) => Err(format!("Unmatched parenthesis in acl selector starting at '{}'.", lossy(start))),
        None => Ok(merged),
    }
}

impl User {
    /// A new user, as Redis makes one: off, no password, no permissions.
    fn new() -> User {
        User::default()
    }

    /// Whether `password` opens this user.
    fn accepts(&self, password: &[u8]) -> bool {
        self.on && (self.nopass || self.passwords.contains(&crate::script::hex(&Sha256::digest(password))))
    }

    /// What the user may not do running `args` (the command's name
    /// first), as Redis decides: allowed when one selector allows it all;
    /// otherwise the most telling refusal (a channel over a key over the
    /// command; the later argument of two).
    pub fn denied(&self, args: &[Bytes]) -> Option<Denied> {
        match TABLE.resolve(args) {
            Some(id) => self.denied_id(id, args),
            None => Some(Denied::Command("unknown")),
        }
    }

    /// `denied` of command `id` of Redis's table.
    fn denied_id(&self, id: usize, args: &[Bytes]) -> Option<Denied> {
        let table: &'static Table = &TABLE;
        let mut keys = None;
        let mut worst: Option<(Refusal, usize)> = None;
        for selector in std::iter::once(&self.root).chain(&self.selectors) {
            let refusal = selector.check(table, id, args, &mut keys)?;
            if worst.is_none_or(|worst| refusal > worst) {
                worst = Some(refusal);
            }
        }
        Some(match worst.expect("the root selector refused") {
            (Refusal::Command, _) => Denied::Command(&table.specs[id].fullname),
            (Refusal::Key, at) => Denied::Key(args[at].clone()),
            (Refusal::Channel, at) => Denied::Channel(args[at].clone()),
        })
    }

    /// Whether a client of this user subscribed to `channel` (a pattern
    /// when `pattern`) may stay subscribed.
    pub fn may_subscribe(&self, channel: &[u8], pattern: bool) -> bool {
        std::iter::once(&self.root).chain(&self.selectors).any(|s| s.allows_channel(channel, pattern))
    }

    /// Whether one of the user's selectors that may run `args` reads any
    /// key (SORT's BY and GET options need it, as in Redis).
    pub fn reads_every_key(&self, args: &[Bytes]) -> bool {
        let table: &'static Table = &TABLE;
        let Some(id) = table.resolve(args) else { return false };
        std::iter::once(&self.root)
            .chain(&self.selectors)
            .any(|s| s.check(table, id, args, &mut None).is_none() && s.has_every_key(redis_commands::ACCESS))
    }

    /// Applies SETUSER's arguments in order, all or none: the error is
    /// Redis's, naming the rule at fault.
    fn apply_all<'a>(&mut self, rules: impl IntoIterator<Item = &'a [u8]>) -> Result<(), String> {
        let mut changed = self.clone();
        for rule in merge_selectors(rules)? {
            changed.apply(&rule).map_err(|why| format!("Error in ACL SETUSER modifier '{}': {why}", lossy(&rule)))?;
        }
        *self = changed;
        Ok(())
    }

    /// Applies one rule (a whole `(...)` selector), as Redis's ACLSetUser.
    fn apply(&mut self, rule: &[u8]) -> Result<(), &'static str> {
        let word = |w: &str| rule.eq_ignore_ascii_case(w.as_bytes());
        match rule {
            [] => {}
            _ if word("on") => self.on = true,
            _ if word("off") => self.on = false,
            _ if word("skip-sanitize-payload") => self.sanitize_payload = Some(false),
            _ if word("sanitize-payload") => self.sanitize_payload = Some(true),
            _ if word("nopass") => {
                self.nopass = true;
                self.passwords.clear();
            }
            _ if word("resetpass") => {
                self.nopass = false;
                self.passwords.clear();
            }
            [b'>', password @ ..] => self.add_password(crate::script::hex(&Sha256::digest(password))),
            [b'#', hash @ ..] => self.add_password(checked_hash(hash)?),
            [b'<', password @ ..] => self.forget(crate::script::hex(&Sha256::digest(password)))?,
            [b'!', hash @ ..] => self.forget(checked_hash(hash)?)?,
            [b'(', inner @ .., b')'] => {
                let mut selector = Selector::default();
                for rule in inner.split(u8::is_ascii_whitespace).filter(|rule| !rule.is_empty()) {
                    selector.apply(rule)?;
                }
                self.selectors.push(selector);
            }
            _ if word("clearselectors") => self.selectors.clear(),
            _ if word("reset") => {
                let sanitize = Some(true);
                *self = User { sanitize_payload: sanitize, ..User::new() };
            }
            _ => self.root.apply(rule)?,
        }
        Ok(())
    }

    /// Its one password (none: `nopass`), as `requirepass` sets the
    /// `default` user's.
    fn set_password(&mut self, password: Option<&str>) {
        self.passwords.clear();
        self.nopass = password.is_none();
        if let Some(password) = password {
            self.add_password(sha256_hex(password));
        }
    }

    fn add_password(&mut self, hash: String) {
        if !self.passwords.contains(&hash) {
            self.passwords.push(hash);
        }
        self.nopass = false;
    }

    fn forget(&mut self, hash: String) -> Result<(), &'static str> {
        let at = self
            .passwords
            .iter()
            .position(|known| *known == hash)
            .ok_or("The password you are trying to remove from the user does not exist")?;
        self.passwords.remove(at);
        Ok(())
    }

    /// Its flags, in Redis's order.
    fn flags(&self) -> Vec<&'static str> {
        let mut flags = vec![if self.on { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        match self.sanitize_payload {
            Some(false) => flags.push("skip-sanitize-payload"),
            Some(true) => flags.push("sanitize-payload"),
            None => {}
        }
        flags
    }

    /// ACL LIST's line.
    fn rules(&self, name: &[u8]) -> String {
        format!("user {} {}", lossy(name), self.rule_words())
    }

    /// The rules that make this user from a new one, as ACL LIST shows
    /// them (and ACL SAVE keeps them).
    fn rule_words(&self) -> String {
        let mut words: Vec<String> = self.flags().iter().map(|flag| flag.to_string()).collect();
        words.extend(self.passwords.iter().map(|hash| format!("#{hash}")));
        words.push(self.root.describe());
        words.extend(self.selectors.iter().map(|selector| format!("({})", selector.describe())));
        words.join(" ")
    }
}

/// A `#hash` or `!hash` rule's hash, if it is one.
fn checked_hash(hash: &[u8]) -> Result<String, &'static str> {
    if hash.len() != 64 || !hash.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)) {
        return Err("The password hash must be exactly 64 characters and contain only lowercase hexadecimal \
                    characters");
    }
    Ok(lossy(hash).into_owned())
}

/// Where ACL SAVE keeps a user's rules: this, then the user's name.
const USER_PREFIX: &[u8] = b"\xff\xff\x00acl:";

/// Every user: `default` and those ACL SETUSER made.
pub struct Users {
    users: RwLock<BTreeMap<Vec<u8>, User>>,
    /// The `default` user is on and needs no password: connections start
    /// authenticated.
    default_open: AtomicBool,
    /// The `default` user may run everything: its connections skip the
    /// permission check.
    default_unrestricted: AtomicBool,
}

/// The users ACL SAVE stored in `db` (read at start and by ACL LOAD).
pub fn load_stored(db: &scaledkv::Db) -> Result<BTreeMap<Vec<u8>, User>, String> {
    let mut users = BTreeMap::new();
    let end = [USER_PREFIX, b"\xff"].concat();
    for item in db.range::<&[u8], _>(USER_PREFIX..&end[..]) {
        let (key, rules) = item.map_err(|e| e.to_string())?;
        let name = key[USER_PREFIX.len()..].to_vec();
        let mut user = User::new();
        user.apply_all(rules.split(|&b| b == b' ').filter(|rule| !rule.is_empty()))
            .map_err(|why| format!("the saved ACL user '{}' does not load: {why}", lossy(&name)))?;
        users.insert(name, user);
    }
    Ok(users)
}

const DEFAULT: &[u8] = b"default";

/// The `default` user of a server without saved users: every permission,
/// and `requirepass` as its password (none: `nopass`), as Redis makes it.
fn default_user(requirepass: Option<&str>) -> User {
    let mut user = User::new();
    user.apply_all(["+@all", "~*", "&*", "on"].map(str::as_bytes)).expect("valid rules");
    user.set_password(requirepass);
    user
}

impl Users {
    /// `users` as loaded, with the `default` user as saved, or else
    /// `default_user`; `requirepass`, when set, is its password either way
    /// (the setting given is the one that holds).
    pub fn new(users: BTreeMap<Vec<u8>, User>, requirepass: Option<&str>) -> Users {
        let all = Users {
            users: RwLock::new(BTreeMap::new()),
            default_open: AtomicBool::new(false),
            default_unrestricted: AtomicBool::new(false),
        };
        all.replace(users, requirepass);
        all
    }

    /// Replaces every user (ACL LOAD), as `new` makes them.
    fn replace(&self, mut users: BTreeMap<Vec<u8>, User>, requirepass: Option<&str>) {
        let default = users.entry(DEFAULT.to_vec()).or_insert_with(|| default_user(requirepass));
        if requirepass.is_some() {
            default.set_password(requirepass);
        }
        let mut registry = self.users.write();
        *registry = users;
        self.note_default(&registry);
    }

    /// Keeps the `default` user's summary flags in step with it (under the
    /// registry's write lock).
    fn note_default(&self, registry: &BTreeMap<Vec<u8>, User>) {
        let user = &registry[DEFAULT];
        self.default_open.store(user.on && user.nopass, Ordering::Relaxed);
        self.default_unrestricted.store(user.root.allows_everything(), Ordering::Relaxed);
    }

    /// Whether a connection needs no AUTH: the `default` user is on and
    /// has no password (Redis's `authRequired`).
    pub fn default_open(&self) -> bool {
        self.default_open.load(Ordering::Relaxed)
    }

    /// Whether the `default` user may run anything (no check needed).
    pub fn default_unrestricted(&self) -> bool {
        self.default_unrestricted.load(Ordering::Relaxed)
    }

    /// CONFIG SET requirepass: the `default` user's passwords become it
    /// alone (none: `nopass`), as in Redis.
    pub fn set_default_password(&self, password: Option<&str>) {
        let mut registry = self.users.write();
        registry.get_mut(DEFAULT).expect("the default user").set_password(password);
        self.note_default(&registry);
    }

    /// Whether the `default` user has no password (AUTH with a password
    /// alone is an error then).
    pub fn default_nopass(&self) -> bool {
        self.users.read()[DEFAULT].nopass
    }

    /// The user `name`, if there is one.
    pub fn get(&self, name: &[u8]) -> Option<User> {
        self.users.read().get(name).cloned()
    }

    /// What user `name` may not do running `args`, the command's name
    /// first (a user deleted since its connection authenticated may do
    /// nothing).
    pub fn denied(&self, name: &[u8], command: &'static super::Command, args: &[Bytes]) -> Option<Denied> {
        let table: &'static Table = &TABLE;
        let Some(id) = table.of_command(command, args) else {
            return Some(Denied::Command("unknown"));
        };
        match self.users.read().get(name) {
            Some(user) => user.denied_id(id, args),
            None => Some(Denied::Command(&table.specs[id].fullname)),
        }
    }

    /// Whether user `name` (None: `default`) may read every key running
    /// `args` (SORT's BY and GET).
    pub fn reads_every_key(&self, name: Option<&[u8]>, args: &[Bytes]) -> bool {
        let name = name.unwrap_or(DEFAULT);
        self.users.read().get(name).is_some_and(|user| user.reads_every_key(args))
    }

    /// Whether `password` opens user `name`.
    pub fn accepts(&self, name: &[u8], password: &[u8]) -> bool {
        self.users.read().get(name).is_some_and(|user| user.accepts(password))
    }

    /// Whether `password` opens user `name` and it may run everything on
    /// every key: memcached's authentication, whose commands are not
    /// Redis's and so cannot be checked one by one.
    pub fn opens_everything(&self, name: &[u8], password: &[u8]) -> bool {
        self.users.read().get(name).is_some_and(|user| user.accepts(password) && user.root.allows_everything())
    }
}

fn sha256_hex(text: &str) -> String {
    crate::script::hex(&Sha256::digest(text.as_bytes()))
}

/// GETUSER's `commands`, `keys` and `channels` of a selector.
fn describe_selector(out: &mut crate::resp::Out, selector: &Selector) {
    for (name, value) in [
        ("commands", selector.describe_commands()),
        ("keys", selector.describe_keys()),
        ("channels", selector.describe_channels()),
    ] {
        out.bulk(name.as_bytes());
        out.bulk(value.as_bytes());
    }
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
    let users = &ctx.shared.users;
    let out = &mut *ctx.out;
    match sub.as_str() {
        "whoami" => out.bulk(ctx.conn.user.as_deref().unwrap_or(b"default")),
        "users" => {
            let names: Vec<Vec<u8>> = users.users.read().keys().cloned().collect();
            out.array(names.len());
            for name in names {
                out.bulk(&name);
            }
        }
        "list" => {
            let lines: Vec<String> = users.users.read().iter().map(|(name, user)| user.rules(name)).collect();
            out.array(lines.len());
            for line in lines {
                out.bulk(line.as_bytes());
            }
        }
        "getuser" => match users.get(&args[2]) {
            None => out.null(),
            Some(user) => {
                out.map(6);
                out.bulk(b"flags");
                let flags = user.flags();
                out.set(flags.len());
                for flag in flags {
                    out.bulk(flag.as_bytes());
                }
                out.bulk(b"passwords");
                out.array(user.passwords.len());
                for hash in &user.passwords {
                    out.bulk(hash.as_bytes());
                }
                describe_selector(out, &user.root);
                out.bulk(b"selectors");
                out.array(user.selectors.len());
                for selector in &user.selectors {
                    out.map(3);
                    describe_selector(out, selector);
                }
            }
        },
        "cat" if n == 2 => {
            out.array(CATEGORIES.len());
            for category in CATEGORIES {
                out.bulk(category.as_bytes());
            }
        }
        "cat" if n == 3 => {
            let name = String::from_utf8_lossy(&args[2]);
            let Some(category) = redis_commands::category(&name) else {
                return Err(err(format!("ERR Unknown category '{name}'")));
            };
            let table: &Table = &TABLE;
            let names: Vec<&str> =
                table.specs.iter().filter(|spec| spec.categories & category != 0).map(|s| &s.fullname[..]).collect();
            out.array(names.len());
            for name in names {
                out.bulk(name.as_bytes());
            }
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
                for (name, value) in [("reason", entry.reason), ("context", entry.context), ("object", &entry.object)] {
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
            let user = users.get(&args[2]).ok_or_else(|| err(format!("ERR User '{}' not found", lossy(&args[2]))))?;
            // Redis's table, as Redis looks the command up: a container's
            // unknown subcommand is no command.
            let table: &Table = &TABLE;
            let found = table.resolve(&args[3..]).filter(|&id| n == 4 || table.specs[id].subcommands.is_empty());
            let Some(id) = found else {
                return Err(err(format!("ERR Command '{}' not found", lossy(&args[3]))));
            };
            let spec = &table.specs[id];
            if !super::arity_ok(spec.arity, n - 3) {
                return Err(err(format!("ERR wrong number of arguments for '{}' command", spec.fullname)));
            }
            match user.denied_id(id, &args[3..]) {
                Some(denied) => out.bulk(denied.dry_run().as_bytes()),
                None => out.ok(),
            }
        }
        "deluser" => {
            if args[2..].iter().any(|user| &user[..] == b"default") {
                return Err(err("ERR The 'default' user cannot be removed"));
            }
            let deleted: Vec<Vec<u8>> = {
                let mut registry = users.users.write();
                args[2..].iter().filter_map(|name| registry.remove_entry(&name[..]).map(|(name, _)| name)).collect()
            };
            // As Redis: the clients authenticated as them are closed.
            for client in ctx.shared.clients.lock().values() {
                if client.user.lock().as_ref().is_some_and(|user| deleted.contains(user)) {
                    client.kill();
                }
            }
            out.int(deleted.len() as i64);
        }
        "save" => {
            // The saved users are replaced whole, in one durable batch; the
            // registry's lock held keeps SETUSER and other SAVEs out.
            let registry = users.users.write();
            let mut batch = scaledkv::WriteBatch::new();
            let end = [USER_PREFIX, b"\xff"].concat();
            let db = &ctx.shared.db;
            let mut saved = 0;
            for item in db.range::<&[u8], _>(USER_PREFIX..&end[..]) {
                let (key, _) = item.map_err(|e| err(super::engine_error_text(&e)))?;
                batch.delete(&key);
                saved += 1;
            }
            for (name, user) in registry.iter() {
                batch.put(&[USER_PREFIX, name].concat(), user.rule_words().as_bytes());
            }
            db.write(batch).map_err(|error| {
                tracing::error!(%error, "ACL SAVE failed");
                err("ERR There was an error trying to save the ACLs. Please check the server logs for more information")
            })?;
            // Reserved entries, which DBSIZE leaves out.
            let reserved = &ctx.shared.reserved_entries;
            reserved.fetch_add(registry.len() as u64, std::sync::atomic::Ordering::Relaxed);
            reserved.fetch_sub(saved, std::sync::atomic::Ordering::Relaxed);
            out.ok();
        }
        "load" => {
            let loaded = load_stored(&ctx.shared.db).map_err(|why| err(format!("ERR Error loading ACLs: {why}")))?;
            users.replace(loaded, ctx.shared.password().as_deref());
            // As Redis: the connections of every user it had are closed.
            for client in ctx.shared.clients.lock().values() {
                if client.user.lock().is_some() {
                    client.kill();
                }
            }
            out.ok();
        }
        "setuser" => {
            let name = &args[2];
            if name.iter().any(|&b| b == b' ' || b == 0) {
                return Err(err("ERR Usernames can't contain spaces or null characters"));
            }
            let mut registry = users.users.write();
            let mut user = registry.get(&name[..]).cloned().unwrap_or_else(User::new);
            user.apply_all(args[3..].iter().map(|rule| &rule[..])).map_err(|why| err(format!("ERR {why}")))?;
            // As Redis: the user's clients subscribed to what it may no
            // longer listen to are closed.
            for client in ctx.shared.clients.lock().values() {
                if client.user.lock().as_deref() == Some(&name[..]) {
                    let subscriptions = ctx.shared.pubsub.subscriptions_of(client.id);
                    let pattern = |class| class == crate::pubsub::Class::Pattern;
                    if subscriptions.iter().any(|(class, channel)| !user.may_subscribe(channel, pattern(*class))) {
                        client.kill();
                    }
                }
            }
            registry.insert(name.to_vec(), user);
            users.note_default(&registry);
            out.ok();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(user: &mut User, rules: &str) -> Result<(), String> {
        user.apply_all(rules.split(' ').map(str::as_bytes))
    }

    #[test]
    fn setuser_applies_all_rules_or_none() {
        let mut user = User::new();
        let why = apply(&mut user, "on >pw +get +nosuch").unwrap_err();
        assert_eq!(why, "Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL");
        assert_eq!(user, User::new(), "nothing applied");
        apply(&mut user, "on >pw +@all ~* &*").unwrap();
        assert!(user.accepts(b"pw") && !user.accepts(b"other"));
        assert_eq!(user.rules(b"u"), format!("user u on #{} ~* &* +@all", sha256_hex("pw")));
        apply(&mut user, "off").unwrap();
        assert!(!user.accepts(b"pw"), "a user that is off opens to no password");
    }

    #[test]
    fn selectors_join_across_arguments_and_describe_themselves() {
        let mut user = User::new();
        apply(&mut user, "on nopass +get ~a:* (+set ~b:*) (%R~c:* +@read)").unwrap();
        assert_eq!(user.selectors.len(), 2);
        let args = |words: &str| words.split(' ').map(|w| Bytes::copy_from_slice(w.as_bytes())).collect::<Vec<_>>();
        assert_eq!(user.denied(&args("get a:1")), None);
        assert_eq!(user.denied(&args("set b:1 v")), None, "the first selector allows it");
        assert_eq!(user.denied(&args("get c:1")), None, "the second selector reads c:*");
        assert_eq!(user.denied(&args("set a:1 v")), Some(Denied::Key(Bytes::from_static(b"a:1"))));
        assert_eq!(user.denied(&args("del a:1")), Some(Denied::Command("del")));
        let line = user.rules(b"u");
        assert_eq!(line, "user u on nopass ~a:* resetchannels -@all +get (~b:* resetchannels -@all +set) (%R~c:* resetchannels -@all +@read)");
        let mut loaded = User::new();
        apply(&mut loaded, line.strip_prefix("user u ").unwrap()).unwrap();
        assert_eq!(loaded.rules(b"u"), line, "ACL SAVE's words load back");
        assert_eq!(
            apply(&mut user, "(+get ~x").unwrap_err(),
            "Unmatched parenthesis in acl selector starting at '(+get'."
        );
    }
}

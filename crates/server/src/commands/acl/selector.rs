//! A selector: the commands, keys and channels a user may use, as Redis 7
//! keeps them. A user has its root selector and any number of `(...)`
//! selectors; a command runs when one of them allows all of it.
//!
//! Commands are bits over Redis's own command table
//! (`redis_commands::TABLE`), so that a rule means what it means in Redis
//! and ACL LIST describes a selector as Redis does: `+@all` or `-@all`,
//! then the categories that fit best, then single commands. Only the
//! order of the single commands differs (Redis lists them in its command
//! dict's order, which is random per process; here in name order).

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::commands::redis_commands::{self, Channels, Table, ACCESS, CATEGORIES, TABLE, WRITES};
use crate::keyspace::glob_match;

/// A key pattern's permissions (`%R~`, `%W~`; `~` is both).
const READ: u8 = 1;
const WRITE: u8 = 2;
const BOTH: u8 = READ | WRITE;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    /// Allowed commands, a bit per id of Redis's table.
    bits: Vec<u64>,
    /// The reserved bit `+@all` sets: the selector starts from every
    /// command (described as `+@all ...`), not from none.
    future: bool,
    /// Every command, without looking at the bits (`+@all` until any
    /// command is taken away).
    all_commands: bool,
    /// `+select|0`: first arguments allowed for an otherwise blocked
    /// command, by command id, in the order added.
    first_args: BTreeMap<usize, Vec<String>>,
    all_keys: bool,
    /// Patterns with `READ`/`WRITE`, in the order added.
    patterns: Vec<(Vec<u8>, u8)>,
    all_channels: bool,
    channels: Vec<Vec<u8>>,
}

impl Default for Selector {
    /// No commands, keys or channels (Redis 7.0's `acl-pubsub-default`
    /// is `resetchannels`).
    fn default() -> Selector {
        Selector {
            bits: vec![0; TABLE.specs.len().div_ceil(64)],
            future: false,
            all_commands: false,
            first_args: BTreeMap::new(),
            all_keys: false,
            patterns: Vec::new(),
            all_channels: false,
            channels: Vec::new(),
        }
    }
}

/// Why a selector refuses a command, in Redis's order of relevance (a
/// channel refusal is reported over a key's, a key's over the command's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    Command,
    Key,
    Channel,
}

fn has_spaces(text: &[u8]) -> bool {
    text.iter().any(|&b| b.is_ascii_whitespace() || b == 0 || b == 0x0b)
}

impl Selector {
    pub fn all() -> Selector {
        let mut selector = Selector::default();
        for rule in ["+@all", "~*", "&*"] {
            selector.apply(rule.as_bytes()).expect("a valid rule");
        }
        selector
    }

    fn bit(&self, id: usize) -> bool {
        self.bits[id / 64] & (1 << (id % 64)) != 0
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        if on {
            self.bits[id / 64] |= 1 << (id % 64);
        } else {
            self.bits[id / 64] &= !(1 << (id % 64));
            self.all_commands = false;
        }
    }

    /// Allows or blocks command `id`, and a container's subcommands with it.
    fn change(&mut self, table: &Table, id: usize, allow: bool) {
        self.set_bit(id, allow);
        self.first_args.remove(&id);
        for sub in table.specs[id].subcommands.clone() {
            self.set_bit(sub, allow);
        }
    }

    fn change_category(&mut self, table: &Table, category: u32, allow: bool) {
        for id in 0..table.specs.len() {
            if table.specs[id].categories & category != 0 {
                self.change(table, id, allow);
            }
        }
    }

    /// Commands of `category` allowed and not.
    fn count(&self, table: &Table, category: u32) -> (usize, usize) {
        let ids = (0..table.specs.len()).filter(|&id| table.specs[id].categories & category != 0);
        ids.fold((0, 0), |(on, off), id| if self.bit(id) { (on + 1, off) } else { (on, off + 1) })
    }

    /// Applies one rule, as Redis's ACLSetSelector; the error is Redis's
    /// text for it.
    pub fn apply(&mut self, rule: &[u8]) -> Result<(), &'static str> {
        let table: &Table = &TABLE;
        let word = |w: &str| rule.eq_ignore_ascii_case(w.as_bytes());
        if word("allkeys") || word("~*") {
            self.all_keys = true;
            self.patterns.clear();
        } else if word("resetkeys") {
            self.all_keys = false;
            self.patterns.clear();
        } else if word("allchannels") || word("&*") {
            self.all_channels = true;
            self.channels.clear();
        } else if word("resetchannels") {
            self.all_channels = false;
            self.channels.clear();
        } else if word("allcommands") || word("+@all") {
            self.bits.fill(u64::MAX);
            (self.future, self.all_commands) = (true, true);
            self.first_args.clear();
        } else if word("nocommands") || word("-@all") {
            self.bits.fill(0);
            (self.future, self.all_commands) = (false, false);
            self.first_args.clear();
        } else if let [b'~' | b'%', ..] = rule {
            if self.all_keys {
                return Err("Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not \
                            have any effect. Try 'resetkeys' to start with an empty list of patterns");
            }
            let (flags, pattern) = key_pattern(rule).ok_or("Syntax error")?;
            if has_spaces(pattern) {
                return Err("Syntax error");
            }
            match self.patterns.iter_mut().find(|(known, _)| known == pattern) {
                Some((_, known)) => *known |= flags,
                None => self.patterns.push((pattern.to_vec(), flags)),
            }
        } else if let [b'&', channel @ ..] = rule {
            if self.all_channels {
                return Err("Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does \
                            not have any effect. Try 'resetchannels' to start with an empty list of channels");
            }
            if has_spaces(channel) {
                return Err("Syntax error");
            }
            if !self.channels.iter().any(|known| known == channel) {
                self.channels.push(channel.to_vec());
            }
        } else if let [sign @ (b'+' | b'-'), b'@', category @ ..] = rule {
            let category = std::str::from_utf8(category).ok().and_then(redis_commands::category);
            self.change_category(table, category.ok_or(UNKNOWN)?, *sign == b'+');
        } else if let [b'+', name @ ..] = rule {
            let name = std::str::from_utf8(name).map_err(|_| UNKNOWN)?;
            match name.rsplit_once('|') {
                None => self.change(table, table.id(name).ok_or(UNKNOWN)?, true),
                Some((command, first_arg)) => {
                    let id = table.id(command).ok_or(UNKNOWN)?;
                    if table.specs[id].parent.is_some() {
                        return Err("Allowing first-arg of a subcommand is not supported");
                    }
                    if first_arg.is_empty() {
                        return Err("Syntax error");
                    }
                    if table.specs[id].subcommands.is_empty() {
                        // Redis's deprecated way to allow `SELECT 0` alone.
                        let allowed = self.first_args.entry(id).or_default();
                        if !allowed.iter().any(|known| known.eq_ignore_ascii_case(first_arg)) {
                            allowed.push(first_arg.to_string());
                        }
                    } else {
                        self.change(table, table.id(name).ok_or(UNKNOWN)?, true);
                    }
                }
            }
        } else if let [b'-', name @ ..] = rule {
            let id = std::str::from_utf8(name).ok().and_then(|name| table.id(name)).ok_or(UNKNOWN)?;
            self.change(table, id, false);
        } else {
            return Err("Syntax error");
        }
        Ok(())
    }

    /// The command rules that rebuild this selector's bits, as Redis's
    /// ACLDescribeSelectorCommandRules writes them.
    pub fn describe_commands(&self) -> String {
        let table: &Table = &TABLE;
        let additive = !self.future;
        let mut rules = String::from(if additive { "-@all " } else { "+@all " });
        let mut fake = Selector::default();
        fake.apply(if additive { b"-@all" } else { b"+@all" }).expect("a valid rule");
        // Categories one at a time, the one that fits best first; `temp`
        // holds what the categories chosen so far do not yet explain.
        let mut temp = Selector { bits: self.bits.clone(), ..Selector::default() };
        let mut applied = [false; CATEGORIES.len()];
        loop {
            let mut best = None;
            let (mut min_diff, mut max_same) = (usize::MAX, 0);
            for (j, _) in CATEGORIES.iter().enumerate().filter(|(j, _)| !applied[*j]) {
                let (on, off) = temp.count(table, 1 << j);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < min_diff || (diff == min_diff && same > max_same)) {
                    (best, min_diff, max_same) = (Some(j), diff, same);
                }
            }
            let Some(best) = best else { break };
            fake.change_category(table, 1 << best, additive);
            temp.change_category(table, 1 << best, !additive);
            rules.push_str(if additive { "+@" } else { "-@" });
            rules.push_str(CATEGORIES[best]);
            rules.push(' ');
            applied[best] = true;
        }
        // Then single commands, a container before its subcommands.
        for id in (0..table.specs.len()).filter(|&id| table.specs[id].parent.is_none()) {
            for id in std::iter::once(id).chain(table.specs[id].subcommands.clone()) {
                let (mine, fakes) = (self.bit(id), fake.bit(id));
                if mine != fakes {
                    rules.push(if mine { '+' } else { '-' });
                    rules.push_str(&table.specs[id].fullname);
                    rules.push(' ');
                    fake.change(table, id, mine);
                }
            }
            if !self.bit(id) {
                for first_arg in self.first_args.get(&id).into_iter().flatten() {
                    rules.push_str(&format!("+{}|{first_arg} ", table.specs[id].fullname));
                }
            }
        }
        rules.pop();
        debug_assert_eq!(fake.bits, self.bits, "the description rebuilds the selector: {rules}");
        rules
    }

    /// GETUSER's `keys`.
    pub fn describe_keys(&self) -> String {
        if self.all_keys {
            return "~*".into();
        }
        let patterns = self.patterns.iter().map(|(pattern, flags)| {
            let prefix = match *flags {
                READ => "%R~",
                WRITE => "%W~",
                _ => "~",
            };
            format!("{prefix}{}", String::from_utf8_lossy(pattern))
        });
        patterns.collect::<Vec<_>>().join(" ")
    }

    /// GETUSER's `channels`.
    pub fn describe_channels(&self) -> String {
        if self.all_channels {
            return "&*".into();
        }
        let channels = self.channels.iter().map(|channel| format!("&{}", String::from_utf8_lossy(channel)));
        channels.collect::<Vec<_>>().join(" ")
    }

    /// The selector as rules (ACL LIST, ACL SAVE).
    pub fn describe(&self) -> String {
        let mut out = String::new();
        if self.all_keys || !self.patterns.is_empty() {
            out.push_str(&self.describe_keys());
            out.push(' ');
        }
        if !self.all_channels {
            out.push_str("resetchannels ");
        }
        if self.all_channels || !self.channels.is_empty() {
            out.push_str(&self.describe_channels());
            out.push(' ');
        }
        out.push_str(&self.describe_commands());
        out
    }

    fn allows_command(&self, table: &Table, id: usize, args: &[Bytes]) -> bool {
        let spec = &table.specs[id];
        if self.all_commands || spec.no_auth || self.bit(id) {
            return true;
        }
        let at = if spec.parent.is_some() { 2 } else { 1 };
        match (self.first_args.get(&id), args.get(at)) {
            (Some(allowed), Some(arg)) => allowed.iter().any(|a| a.as_bytes().eq_ignore_ascii_case(arg)),
            _ => false,
        }
    }

    fn allows_key(&self, key: &[u8], uses: u8) -> bool {
        if self.all_keys {
            return true;
        }
        let mut needs = 0;
        if uses & ACCESS != 0 {
            needs |= READ;
        }
        if uses & WRITES != 0 {
            needs |= WRITE;
        }
        self.patterns.iter().any(|(pattern, flags)| flags & needs == needs && glob_match(pattern, key))
    }

    /// Every command, key and channel (`+@all ~* &*`).
    pub fn allows_everything(&self) -> bool {
        self.all_commands && self.all_keys && self.all_channels
    }

    /// Whether this selector may read (or write) every key: SORT's BY and
    /// GET read keys named by the data, so Redis allows them only then.
    pub fn has_every_key(&self, uses: u8) -> bool {
        self.all_keys || self.patterns.iter().any(|(pattern, flags)| pattern == b"*" && flags & uses == uses)
    }

    /// Whether `channel` (a pattern when `pattern`, matched literally) may
    /// be used: named by a command, or kept by a subscribed client.
    pub fn allows_channel(&self, channel: &[u8], pattern: bool) -> bool {
        self.all_channels
            || self
                .channels
                .iter()
                .any(|allowed| if pattern { allowed == channel } else { glob_match(allowed, channel) })
    }

    /// Why this selector refuses command `id` with `args` (and the
    /// argument at fault), or None when it allows it. `keys` are the
    /// command's keys, found once for all the user's selectors.
    pub fn check(
        &self,
        table: &Table,
        id: usize,
        args: &[Bytes],
        keys: &mut Option<Vec<(usize, u8)>>,
    ) -> Option<(Refusal, usize)> {
        if !self.allows_command(table, id, args) {
            return Some((Refusal::Command, 0));
        }
        if !self.all_keys {
            let keys = keys.get_or_insert_with(|| table.keys(id, args));
            if let Some(&(at, _)) = keys.iter().find(|&&(at, uses)| !self.allows_key(&args[at], uses)) {
                return Some((Refusal::Key, at));
            }
        }
        if !self.all_channels {
            let (named, pattern) = match redis_commands::channels(&table.specs[id].fullname) {
                Channels::None => (0..0, false),
                Channels::Names { from, all } => {
                    (from..if all { args.len() } else { (from + 1).min(args.len()) }, false)
                }
                Channels::Patterns => (1..args.len(), true),
            };
            if let Some(at) = named.into_iter().find(|&at| !self.allows_channel(&args[at], pattern)) {
                return Some((Refusal::Channel, at));
            }
        }
        None
    }
}

const UNKNOWN: &str = "Unknown command or category name in ACL";

/// A key rule's permissions and pattern: `~p` both, `%R~p`, `%W~p`,
/// `%RW~p`; None when malformed (`%X~p`, `%~p`, `%R`).
fn key_pattern(rule: &[u8]) -> Option<(u8, &[u8])> {
    if let [b'~', pattern @ ..] = rule {
        return Some((BOTH, pattern));
    }
    let mut flags = 0;
    for (at, &b) in rule.iter().enumerate().skip(1) {
        match b.to_ascii_uppercase() {
            b'R' if flags & READ == 0 => flags |= READ,
            b'W' if flags & WRITE == 0 => flags |= WRITE,
            // Redis 7.0 took `%~p` (no permissions) and could then not
            // describe the user; 7.2 refuses it, as here.
            b'~' if flags != 0 => return Some((flags, &rule[at + 1..])),
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(rules: &str) -> Selector {
        let mut selector = Selector::default();
        for rule in rules.split(' ') {
            selector.apply(rule.as_bytes()).unwrap_or_else(|e| panic!("{rule}: {e}"));
        }
        selector
    }

    fn args(words: &str) -> Vec<Bytes> {
        words.split(' ').map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    fn check(selector: &Selector, words: &str) -> Option<(Refusal, usize)> {
        let args = args(words);
        selector.check(&TABLE, TABLE.resolve(&args).unwrap(), &args, &mut None)
    }

    #[test]
    fn commands_categories_and_subcommands() {
        let reader = selector("+@read -debug +config|get ~*");
        assert_eq!(check(&reader, "get k"), None);
        assert_eq!(check(&reader, "set k v"), Some((Refusal::Command, 0)));
        assert_eq!(check(&reader, "config get maxmemory"), None);
        assert_eq!(check(&reader, "config set maxmemory 1"), Some((Refusal::Command, 0)));
        assert_eq!(check(&reader, "auth pw"), None, "AUTH needs no permission");
        let selects = selector("+select|0");
        assert_eq!(check(&selects, "select 0"), None);
        assert_eq!(check(&selects, "select 1"), Some((Refusal::Command, 0)));
        assert_eq!(selects.describe_commands(), "-@all +select|0");
    }

    #[test]
    fn key_patterns_with_read_and_write_permissions() {
        let user = selector("+@all %R~in:* %W~out:* ~both:*");
        assert_eq!(check(&user, "get in:1"), None);
        assert_eq!(check(&user, "get out:1"), Some((Refusal::Key, 1)));
        assert_eq!(check(&user, "set out:1 v"), None, "SET without GET only writes");
        assert_eq!(check(&user, "set out:1 v GET"), Some((Refusal::Key, 1)));
        assert_eq!(check(&user, "copy in:1 out:1"), None);
        assert_eq!(check(&user, "copy out:1 in:1"), Some((Refusal::Key, 1)));
        assert_eq!(check(&user, "incr both:1"), None);
        assert_eq!(check(&user, "mget in:1 both:2 other"), Some((Refusal::Key, 3)));
        assert_eq!(user.describe_keys(), "%R~in:* %W~out:* ~both:*");
        let merged = selector("%R~k %W~k");
        assert_eq!(merged.describe_keys(), "~k", "the same pattern's permissions join");
    }

    #[test]
    fn channels_and_patterns() {
        let user = selector("+@all ~* &news.* &exact");
        assert_eq!(check(&user, "publish news.1 m"), None);
        assert_eq!(check(&user, "publish sport m"), Some((Refusal::Channel, 1)));
        assert_eq!(check(&user, "subscribe exact news.x other"), Some((Refusal::Channel, 3)));
        assert_eq!(check(&user, "psubscribe news.*"), None, "a pattern allowed literally");
        assert_eq!(check(&user, "psubscribe news.1"), Some((Refusal::Channel, 1)), "not matched as a channel");
        assert_eq!(check(&user, "unsubscribe sport"), None);
        assert_eq!(user.describe(), "~* resetchannels &news.* &exact +@all");
    }

    #[test]
    fn descriptions_rebuild_the_selector() {
        for rules in [
            "+@all",
            "-@all",
            "+@read",
            "+@all -@dangerous",
            "+@read +@write -keys -flushall",
            "+@hash +get -hset",
            "-@all +config|get +acl|whoami",
            "+@all -config|set -debug",
            "+@string -@write +set",
            "+@geo +@sortedset -zadd",
        ] {
            let user = selector(rules);
            let described = user.describe_commands();
            assert_eq!(selector(&described).bits, user.bits, "{rules} described as {described}");
        }
        assert_eq!(selector("+@all -@dangerous").describe_commands(), "+@all -@dangerous");
        assert_eq!(selector("+@read").describe_commands(), "-@all +@read");
    }

    /// Rules from Redis's grammar and around it.
    fn rule() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let known = prop::sample::select(vec![
            "+@all",
            "-@all",
            "+@read",
            "-@write",
            "+@dangerous",
            "-@dangerous",
            "+@admin",
            "-@keyspace",
            "+@string",
            "-@fast",
            "+@slow",
            "+@hash",
            "+@pubsub",
            "+get",
            "-get",
            "+config",
            "-config",
            "+config|get",
            "-config|set",
            "+client|id",
            "-client",
            "+select|0",
            "+select|1",
            "+acl|whoami",
            "-acl",
            "~*",
            "~a*",
            "%R~r*",
            "%W~w*",
            "%RW~b*",
            "resetkeys",
            "&*",
            "&ch*",
            "resetchannels",
            "nocommands",
            "allcommands",
        ]);
        prop_oneof![
            known.prop_map(|rule| rule.as_bytes().to_vec()),
            (prop::sample::select(vec!["+", "-", "~", "%", "&", "+@", "-@", "%R", "+get|", "|"]), any::<Vec<u8>>())
                .prop_map(|(start, tail)| [start.as_bytes(), &tail].concat()),
        ]
    }

    proptest::proptest! {
        /// Any rules: an error or a selector whose description rebuilds it,
        /// and checks of any command that do not fail.
        #[test]
        fn any_rules_describe_and_check_without_failing(
            rules in proptest::collection::vec(rule(), 0..12),
            args in proptest::collection::vec(proptest::prelude::any::<Vec<u8>>(), 0..6),
            name in proptest::sample::select(vec!["get", "set", "config", "sort", "eval", "publish", "psubscribe", "migrate", "xread", "bitfield"]),
        ) {
            let mut selector = Selector::default();
            for rule in &rules {
                let _ = selector.apply(rule);
            }
            let mut rebuilt = Selector::default();
            for rule in selector.describe_commands().split(' ') {
                rebuilt.apply(rule.as_bytes()).unwrap();
            }
            proptest::prop_assert_eq!(&rebuilt.bits, &selector.bits);
            let args: Vec<Bytes> = std::iter::once(Bytes::from(name)).chain(args.into_iter().map(Bytes::from)).collect();
            let id = TABLE.resolve(&args).unwrap();
            let _ = selector.check(&TABLE, id, &args, &mut None);
        }
    }

    #[test]
    fn malformed_rules_are_refused_with_redis_errors() {
        let mut user = Selector::default();
        for (rule, error) in [
            ("+nosuch", UNKNOWN),
            ("+@nosuch", UNKNOWN),
            ("-config|nosuch", UNKNOWN),
            ("+config|get|x", "Allowing first-arg of a subcommand is not supported"),
            ("+select|", "Syntax error"),
            ("%X~k", "Syntax error"),
            ("%~k", "Syntax error"),
            ("%R", "Syntax error"),
            ("bogus", "Syntax error"),
        ] {
            assert_eq!(user.apply(rule.as_bytes()), Err(error), "{rule}");
        }
        user.apply(b"~*").unwrap();
        assert!(user.apply(b"~k").unwrap_err().starts_with("Adding a pattern after the *"));
        user.apply(b"&*").unwrap();
        assert!(user.apply(b"&c").unwrap_err().contains("'allchannels'"));
    }
}

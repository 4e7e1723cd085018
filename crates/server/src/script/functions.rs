//! Redis 7's functions: libraries of Lua functions that FUNCTION LOAD
//! registers once and FCALL calls by name.
//!
//! A library is its code (`#!lua name=<library>` and Lua that calls
//! `redis.register_function`). What it registers (names, flags,
//! descriptions) is known by running that code (`vm::register_library`);
//! each I/O thread's Lua state runs every library again when the set
//! changes (`generation`), so a function's Lua closure lives in the state
//! that calls it. The libraries are durable: `commands::functions` writes
//! each one's code under the server's settings in the engine, and the
//! server loads them again when it starts.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard, RwLock};

/// Script flags (Redis's `scripts_flags_def`, in its order, which FUNCTION
/// LIST keeps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags(u8);

const FLAG_NAMES: [&str; 5] = ["no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"];

impl Flags {
    pub const NO_WRITES: Flags = Flags(1);
    pub const ALLOW_OOM: Flags = Flags(2);

    /// The flag called `name` (exactly as Redis spells it).
    pub fn named(name: &str) -> Option<Flags> {
        FLAG_NAMES.iter().position(|&known| known == name).map(|i| Flags(1 << i))
    }

    pub fn has(self, flag: Flags) -> bool {
        self.0 & flag.0 != 0
    }

    pub fn insert(&mut self, flag: Flags) {
        self.0 |= flag.0;
    }

    pub fn names(self) -> impl Iterator<Item = &'static str> {
        FLAG_NAMES.into_iter().enumerate().filter(move |(i, _)| self.0 & (1 << i) != 0).map(|(_, name)| name)
    }

    pub fn bits(self) -> u8 {
        self.0
    }

    pub fn from_bits(bits: u8) -> Flags {
        Flags(bits & ((1 << FLAG_NAMES.len()) - 1))
    }
}

/// A registered function.
#[derive(Debug, PartialEq)]
pub struct Function {
    /// As registered (FCALL finds it in any case).
    pub name: String,
    pub description: Option<Vec<u8>>,
    pub flags: Flags,
}

#[derive(Debug)]
pub struct Library {
    pub name: String,
    /// As loaded, shebang and all (FUNCTION LIST WITHCODE, DUMP).
    pub code: Vec<u8>,
    /// In the order the code registered them.
    pub functions: Vec<Function>,
}

impl Library {
    /// The Lua that registers the functions: the code from the shebang's
    /// line end on, so line numbers stay those the client sent.
    pub fn body(&self) -> &[u8] {
        let end = self.code.iter().position(|&b| b == b'\n').unwrap_or(self.code.len());
        &self.code[end..]
    }
}

/// Runs a library's Lua (its body) and returns what it registered, or
/// Redis's error text (without the `ERR ` that the reply adds).
pub type Register<'a> = dyn FnMut(&[u8]) -> Result<Vec<Function>, String> + 'a;

/// One set of libraries, as a change makes it (changes work on a copy).
#[derive(Clone, Default)]
pub struct Libraries {
    by_name: BTreeMap<String, Arc<Library>>,
    /// Lower-cased function name → its library and its place there.
    functions: HashMap<String, (Arc<Library>, usize)>,
}

impl Libraries {
    /// By name (FUNCTION LIST's order; Redis lists in its hash table's).
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Library>> {
        self.by_name.values()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    pub fn function_count(&self) -> usize {
        self.functions.len()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Library>> {
        self.by_name.get(name)
    }

    /// The function called `name`, in any case, and its library.
    pub fn function(&self, name: &[u8]) -> Option<(&Arc<Library>, &Function)> {
        let name = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
        self.functions.get(&name).map(|(library, i)| (library, &library.functions[*i]))
    }

    fn link(&mut self, library: Arc<Library>) {
        for (i, function) in library.functions.iter().enumerate() {
            self.functions.insert(function.name.to_ascii_lowercase(), (library.clone(), i));
        }
        self.by_name.insert(library.name.clone(), library);
    }

    pub fn unlink(&mut self, name: &str) -> Option<Arc<Library>> {
        let library = self.by_name.remove(name)?;
        for function in &library.functions {
            self.functions.remove(&function.name.to_ascii_lowercase());
        }
        Some(library)
    }

    /// A function of `library` whose name another library has taken.
    fn collision<'l>(&self, library: &'l Library) -> Option<&'l str> {
        library
            .functions
            .iter()
            .find(|function| self.functions.contains_key(&function.name.to_ascii_lowercase()))
            .map(|function| function.name.as_str())
    }

    /// FUNCTION LOAD (and each library of FUNCTION RESTORE): the library
    /// `code` defines, replacing one of its name only when `replace`;
    /// returns its name. On an error nothing changes.
    pub fn create(&mut self, code: &[u8], replace: bool, register: &mut Register<'_>) -> Result<String, String> {
        let (engine, name) = metadata(code)?;
        if !valid_name(&name) {
            return Err(BAD_NAME.into());
        }
        if !engine.eq_ignore_ascii_case("lua") {
            return Err(format!("Engine '{engine}' not found"));
        }
        if self.by_name.contains_key(&name) && !replace {
            return Err(format!("Library '{name}' already exists"));
        }
        let newline = code.iter().position(|&b| b == b'\n').expect("metadata found the line end");
        let functions = register(&code[newline..])?;
        if functions.is_empty() {
            return Err("No functions registered".into());
        }
        let library = Arc::new(Library { name: name.clone(), code: code.to_vec(), functions });
        let old = self.unlink(&name);
        if let Some(taken) = self.collision(&library) {
            let error = format!("Function {taken} already exists");
            if let Some(old) = old {
                self.link(old);
            }
            return Err(error);
        }
        self.link(library);
        Ok(name)
    }

    /// FUNCTION RESTORE's APPEND (or, with `replace`, REPLACE): `other`'s
    /// libraries join these. On an error nothing changes.
    pub fn join(&mut self, other: Libraries, replace: bool) -> Result<(), String> {
        let mut joined = self.clone();
        for name in other.by_name.keys() {
            if joined.by_name.contains_key(name) {
                if !replace {
                    return Err(format!("Library {name} already exists"));
                }
                joined.unlink(name);
            }
        }
        for library in other.by_name.values() {
            if let Some(taken) = joined.collision(library) {
                return Err(format!("Function {taken} already exists"));
            }
        }
        for library in other.by_name.into_values() {
            joined.link(library);
        }
        *self = joined;
        Ok(())
    }
}

const BAD_NAME: &str = "Library names can only contain letters, numbers, or underscores(_) and must be at least one \
                        character long";

/// Redis's `functionsVerifyName`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The engine and library name of `code`'s shebang line, or Redis's error.
fn metadata(code: &[u8]) -> Result<(String, String), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    // Redis reads the code as a C string: a NUL ends it.
    let text = &code[..code.iter().position(|&b| b == 0).unwrap_or(code.len())];
    let newline = text.iter().position(|&b| b == b'\n').ok_or("Invalid library metadata")?;
    let parts = crate::resp::request::split_args(&text[..newline]).filter(|parts| !parts.is_empty());
    let parts = parts.ok_or("Invalid library metadata")?;
    let engine = String::from_utf8_lossy(&parts[0][2..]).into_owned();
    let mut name = None;
    for part in &parts[1..] {
        match part.get(..5) {
            Some(prefix) if prefix.eq_ignore_ascii_case(b"name=") => {
                if name.is_some() {
                    return Err("Invalid metadata value, name argument was given multiple times".into());
                }
                name = Some(String::from_utf8_lossy(&part[5..]).into_owned());
            }
            _ => return Err(format!("Invalid metadata value given: {}", String::from_utf8_lossy(part))),
        }
    }
    Ok((engine, name.ok_or("Library name was not given")?))
}

/// The server's libraries.
#[derive(Default)]
pub struct Functions {
    current: RwLock<Arc<Libraries>>,
    /// Bumped by every change: each thread's Lua state loads the libraries
    /// again before it next calls a function.
    generation: AtomicU64,
    /// Held by a change from its copy to its durable write, so changes
    /// reach the engine in the order they were made.
    changing: Mutex<()>,
}

impl Functions {
    pub fn new(libraries: Libraries) -> Functions {
        Functions { current: RwLock::new(Arc::new(libraries)), ..Functions::default() }
    }

    pub fn current(&self) -> Arc<Libraries> {
        self.current.read().clone()
    }

    /// The libraries with the generation they are.
    pub fn snapshot(&self) -> (u64, Arc<Libraries>) {
        let current = self.current.read();
        (self.generation.load(Ordering::Acquire), current.clone())
    }

    /// Starts a change: the lock that keeps other changes out until
    /// `install`, and the libraries as they are (to change a copy of).
    pub fn begin(&self) -> (MutexGuard<'_, ()>, Arc<Libraries>) {
        let guard = self.changing.lock();
        (guard, self.current())
    }

    /// Makes `libraries` (once durable) the server's.
    pub fn install(&self, _change: MutexGuard<'_, ()>, libraries: Libraries) {
        let mut current = self.current.write();
        *current = Arc::new(libraries);
        self.generation.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Registers one function per line `f <name>` of the body.
    fn fake(body: &[u8]) -> Result<Vec<Function>, String> {
        let text = String::from_utf8_lossy(body);
        Ok(text
            .lines()
            .filter_map(|line| line.strip_prefix("f "))
            .map(|name| Function { name: name.into(), description: None, flags: Flags::default() })
            .collect())
    }

    #[test]
    fn metadata_is_read_as_redis_reads_it() {
        let err = |code: &[u8]| metadata(code).unwrap_err();
        assert_eq!(metadata(b"#!lua name=lib\nx").unwrap(), ("lua".into(), "lib".into()));
        assert_eq!(metadata(b"#!LUA NAME=lib \n").unwrap(), ("LUA".into(), "lib".into()));
        assert_eq!(metadata(b"#!lua name=\"a b\"\n").unwrap().1, "a b");
        assert_eq!(err(b"lua name=x\n"), "Missing library metadata");
        assert_eq!(err(b"#!lua name=x"), "Invalid library metadata");
        assert_eq!(err(b"#!lua name=x\0\n"), "Invalid library metadata");
        assert_eq!(err(b"#!lua name=\"x\n"), "Invalid library metadata");
        assert_eq!(err(b"#!lua\n"), "Library name was not given");
        assert_eq!(err(b"#!lua name=a name=b\n"), "Invalid metadata value, name argument was given multiple times");
        assert_eq!(err(b"#!lua foo=bar\n"), "Invalid metadata value given: foo=bar");
    }

    #[test]
    fn libraries_load_replace_and_collide_as_in_redis() {
        let mut libraries = Libraries::default();
        assert_eq!(libraries.create(b"#!lua name=one\nf alpha\nf Beta", false, &mut fake).unwrap(), "one");
        assert_eq!(libraries.function(b"BETA").unwrap().1.name, "Beta");
        assert_eq!(
            libraries.create(b"#!lua name=one\nf x", false, &mut fake).unwrap_err(),
            "Library 'one' already exists"
        );
        assert_eq!(
            libraries.create(b"#!lua name=two\nf ALPHA", false, &mut fake).unwrap_err(),
            "Function ALPHA already exists"
        );
        assert_eq!(libraries.create(b"#!js name=two\nf x", false, &mut fake).unwrap_err(), "Engine 'js' not found");
        assert_eq!(libraries.create(b"#!lua name=a-b\nf x", false, &mut fake).unwrap_err(), BAD_NAME);
        assert_eq!(libraries.create(b"#!lua name=two\n", false, &mut fake).unwrap_err(), "No functions registered");
        // A replacement may take its own functions' names, not another's.
        assert_eq!(libraries.create(b"#!lua name=one\nf alpha\nf gamma", true, &mut fake).unwrap(), "one");
        assert!(libraries.function(b"beta").is_none());
        assert_eq!(libraries.create(b"#!lua name=two\nf delta", false, &mut fake).unwrap(), "two");
        assert_eq!(
            libraries.create(b"#!lua name=one\nf delta", true, &mut fake).unwrap_err(),
            "Function delta already exists"
        );
        assert_eq!(libraries.function(b"gamma").unwrap().0.name, "one", "a failed replacement keeps the old library");
        assert_eq!((libraries.len(), libraries.function_count()), (2, 3));
        assert_eq!(libraries.get("one").unwrap().body(), b"\nf alpha\nf gamma");
    }

    #[test]
    fn joins_append_or_replace_and_fail_whole() {
        let mut mine = Libraries::default();
        mine.create(b"#!lua name=one\nf a", false, &mut fake).unwrap();
        let mut theirs = Libraries::default();
        theirs.create(b"#!lua name=one\nf b", false, &mut fake).unwrap();
        theirs.create(b"#!lua name=two\nf c", false, &mut fake).unwrap();
        assert_eq!(mine.clone().join(theirs.clone(), false).unwrap_err(), "Library one already exists");
        let mut replaced = mine.clone();
        replaced.join(theirs.clone(), true).unwrap();
        assert!(replaced.function(b"a").is_none() && replaced.function(b"c").is_some());
        let mut clash = Libraries::default();
        clash.create(b"#!lua name=three\nf A", false, &mut fake).unwrap();
        assert_eq!(mine.join(clash, true).unwrap_err(), "Function A already exists");
        assert_eq!(mine.len(), 1, "nothing of a failed join stays");
    }

    #[test]
    fn flags_keep_redis_order() {
        let mut flags = Flags::default();
        flags.insert(Flags::named("allow-oom").unwrap());
        flags.insert(Flags::NO_WRITES);
        assert_eq!(flags.names().collect::<Vec<_>>(), ["no-writes", "allow-oom"]);
        assert_eq!(Flags::from_bits(flags.bits()), flags);
        assert!(Flags::named("No-Writes").is_none());
    }
}

//! Each thread's Lua state, sandboxed as Redis 7 sandboxes its own, and
//! one script's run in it.
//!
//! The sandbox: only Lua's base (without files, modules or environments),
//! string, table and math libraries, plus `redis`, `cjson` and `bit`; the
//! globals and the libraries are read-only (assigning to them is Redis's
//! "Attempt to modify a readonly table", reading a missing global its
//! "Script attempted to access nonexistent global variable"), so one
//! script cannot change what the next one runs with. Memory is bounded
//! (`Control::memory_limit`), and a hook looks every `HOOK_INSTRUCTIONS` at the
//! clock and at SCRIPT KILL.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use mlua::{ffi, Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};

use super::convert::lua_to_reply;
use super::functions::{Flags, Functions, Library};
use super::{BusyFunction, Control, Script};
use crate::resp::Out;

/// Compiled scripts a thread keeps; past it the cache starts over.
const COMPILED_MAX: usize = 1000;

/// How often the hook runs: ~1 ms of a busy loop here.
const HOOK_INSTRUCTIONS: u32 = 100_000;

const KILLED: &str = "ERR Script killed by user with SCRIPT KILL...";

/// What a command run from a script gave.
pub enum CallError {
    /// Its error reply's text (or why it may not run from a script).
    Error(String),
    /// It names a key whose lock the script does not hold and could not
    /// take without waiting: the script is run again holding every lock.
    NeedsAllKeys,
}

/// How a run ended.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// The reply (the result, or the script's error) is in `out`.
    Replied,
    /// Stopped by SCRIPT KILL; its error is in `out`, its writes go.
    Killed,
    /// Must run again holding every key's lock; nothing is in `out`.
    NeedsAllKeys,
}

/// A script's run, as its callbacks and the hook see it.
struct RunState {
    started: Cell<Instant>,
    kill_epoch: Cell<u64>,
    busy: Cell<bool>,
    killed: Cell<bool>,
    needs_all_keys: Cell<bool>,
    /// `redis.setresp(3)` was called.
    resp3: Cell<bool>,
    /// While a library loads: when it must have finished.
    load_deadline: Cell<Option<Instant>>,
    /// The library function running, if it is one.
    function: RefCell<Option<BusyFunction>>,
}

struct Vm {
    lua: Lua,
    /// `xpcall`s a script with the error handler that notes where it failed.
    runner: Function,
    compiled: HashMap<String, Function>,
    /// Runs a library's code with the library API (`PRELUDE`).
    loader: Function,
    /// `xpcall`s a library's function as `runner` does a script.
    function_runner: Function,
    /// The libraries' functions by name as registered (FCALL looks the
    /// name up, in any case, in the registry first), as loaded here for
    /// the generation of `Functions` that `libraries` names.
    functions: HashMap<String, Function>,
    libraries: Option<u64>,
    /// The memory limit the state has now.
    memory_limit: Cell<usize>,
    generation: u64,
    control: Arc<Control>,
    run: Rc<RunState>,
}

thread_local! {
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
}

/// Lua that builds the sandbox, run once per state with its libraries
/// still writable. Returns the globals' proxy and the runner.
const PRELUDE: &str = r#"
local redis_lib, handler, flag_bits = ...
local error, type, tostring, setmetatable, getmetatable = error, type, tostring, setmetatable, getmetatable
local select, next, ipairs, pairs, setfenv, string = select, next, ipairs, pairs, setfenv, string
local raw_pcall, raw_xpcall, raw_rawset = pcall, xpcall, rawset

local protected = setmetatable({}, {__mode = 'k'})
local function refuse() error('Attempt to modify a readonly table', 2) end
local function readonly(t)
  local proxy = setmetatable({}, {__index = t, __newindex = refuse, __metatable = false})
  protected[proxy] = true
  return proxy
end

-- Redis's pcall gives a caught redis.call error as its text.
local function caught(ok, ...)
  if not ok then
    local e = ...
    if type(e) == 'table' and type(e.err) == 'string' then e = e.err end
    return false, e
  end
  return true, ...
end

local env = {
  assert = assert, collectgarbage = collectgarbage, error = error, gcinfo = gcinfo,
  getmetatable = getmetatable, ipairs = ipairs, loadstring = loadstring, next = next,
  pairs = pairs, rawequal = rawequal, rawget = rawget, select = select,
  setmetatable = setmetatable, tonumber = tonumber, tostring = tostring, type = type,
  unpack = unpack, print = print, _VERSION = _VERSION, coroutine = readonly(coroutine),
  pcall = function(...) return caught(raw_pcall(...)) end,
  xpcall = xpcall,
  rawset = function(t, k, v)
    if protected[t] then refuse() end
    return raw_rawset(t, k, v)
  end,
  string = readonly(string), table = readonly(table), math = readonly(math),
  cjson = readonly(cjson), bit = readonly(bit), cmsgpack = readonly(cmsgpack),
  redis = readonly(redis_lib),
}
local globals = setmetatable({}, {
  __index = function(_, name)
    local value = env[name]
    if value == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end
    return value
  end,
  __newindex = refuse,
  __metatable = false,
})
protected[globals] = true
env._G = globals
getmetatable('').__metatable = false

local function runner(f, keys, argv)
  env.KEYS, env.ARGV = keys, argv
  local ok, result = raw_xpcall(f, handler)
  env.KEYS, env.ARGV = nil, nil
  return ok, result
end

-- Redis 7's functions. A library's code runs once per state with only the
-- library API (`redis.register_function`, `redis.log`, the constants);
-- its functions run later with the globals scripts have, KEYS and ARGV
-- given as arguments instead. Every library shares one read-only table
-- of globals, as in Redis.
local registering
local loading = false
local function nonexistent(name)
  error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 3)
end
local function register_function(...)
  local n = select('#', ...)
  if n < 1 or n > 2 then error('wrong number of arguments to redis.register_function', 0) end
  local name, callback, description, flags = nil, nil, nil, 0
  local first, second = ...
  if n == 2 then
    if type(first) ~= 'string' and type(first) ~= 'number' then
      error('first argument to redis.register_function must be a string', 0)
    end
    if type(second) ~= 'function' then error('second argument to redis.register_function must be a function', 0) end
    name, callback = tostring(first), second
  else
    if type(first) ~= 'table' then
      error('calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).', 0)
    end
    for key, value in next, first do
      if type(key) ~= 'string' and type(key) ~= 'number' then
        error('named argument key given to redis.register_function is not a string', 0)
      end
      local lower = string.lower(tostring(key))
      if lower == 'function_name' then
        if type(value) ~= 'string' and type(value) ~= 'number' then
          error('function_name argument given to redis.register_function must be a string', 0)
        end
        name = tostring(value)
      elseif lower == 'description' then
        if type(value) ~= 'string' and type(value) ~= 'number' then
          error('description argument given to redis.register_function must be a string', 0)
        end
        description = tostring(value)
      elseif lower == 'callback' then
        if type(value) ~= 'function' then
          error('callback argument given to redis.register_function must be a function', 0)
        end
        callback = value
      elseif lower == 'flags' then
        if type(value) ~= 'table' then
          error('flags argument to redis.register_function must be a table representing function flags', 0)
        end
        local i = 1
        while value[i] ~= nil do
          local flag = value[i]
          local bit = (type(flag) == 'string' or type(flag) == 'number') and flag_bits[string.lower(tostring(flag))]
          if not bit then error('unknown flag given', 0) end
          if flags % (2 * bit) < bit then flags = flags + bit end
          i = i + 1
        end
      else
        error('unknown argument given to redis.register_function', 0)
      end
    end
    if name == nil then error('redis.register_function must get a function name argument', 0) end
    if callback == nil then error('redis.register_function must get a callback argument', 0) end
  end
  if not string.find(name, '^[%w_]+$') then
    error('Library names can only contain letters, numbers, or underscores(_) and must be at least one character long', 0)
  end
  for _, registered in ipairs(registering) do
    if registered.name == name then error('Function already exists in the library', 0) end
  end
  registering[#registering + 1] = {name = name, callback = callback, description = description, flags = flags}
end

local library_redis_fields = {register_function = register_function, log = redis_lib.log}
for name, value in pairs(redis_lib) do
  if string.sub(name, 1, 4) == 'LOG_' or string.sub(name, 1, 13) == 'REDIS_VERSION' then
    library_redis_fields[name] = value
  end
end
local library_redis = setmetatable({}, {
  __index = function(_, name)
    local value = library_redis_fields[name]
    if value == nil then nonexistent(name) end
    return value
  end,
  __newindex = refuse,
  __metatable = false,
})
protected[library_redis] = true
local library_api = {redis = library_redis}
local library_globals = setmetatable({}, {
  __index = function(_, name)
    local value
    if loading then value = library_api[name] else value = env[name] end
    if value == nil then nonexistent(name) end
    return value
  end,
  __newindex = refuse,
  __metatable = false,
})
protected[library_globals] = true

-- Runs a library's compiled code: true and what it registered, or false
-- and its error.
local function load_library(chunk)
  registering, loading = {}, true
  setfenv(chunk, library_globals)
  local ok, err = raw_pcall(chunk)
  local registered = registering
  registering, loading = nil, false
  if not ok then return false, err end
  return true, registered
end

local function call_function(f, keys, args)
  return raw_xpcall(function() return f(keys, args) end, handler)
end
return globals, runner, load_library, call_function
"#;

fn create(control: &Arc<Control>, generation: u64) -> mlua::Result<Vm> {
    let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, LuaOptions::default())?;
    let globals = lua.globals();
    super::libs::install(&lua, &globals)?;
    let run = Rc::new(RunState {
        started: Cell::new(Instant::now()),
        kill_epoch: Cell::new(0),
        busy: Cell::new(false),
        killed: Cell::new(false),
        needs_all_keys: Cell::new(false),
        resp3: Cell::new(false),
        load_deadline: Cell::new(None),
        function: RefCell::new(None),
    });
    let redis = redis_library(&lua, &run)?;
    // SAFETY: both follow Lua's C function protocol (`super::call`).
    unsafe {
        redis.raw_set("call", lua.create_c_function(super::call::redis_call)?)?;
        redis.raw_set("pcall", lua.create_c_function(super::call::redis_pcall)?)?;
    }
    let handler = lua.create_function(error_handler)?;
    let flag_bits = lua.create_table()?;
    for bit in 0..8 {
        if let Some(name) = Flags::from_bits(1 << bit).names().next() {
            flag_bits.raw_set(name, 1 << bit)?;
        }
    }
    let (proxy, runner, loader, function_runner): (Table, Function, Function, Function) =
        lua.load(PRELUDE).set_name("=prelude").call((redis, handler, flag_bits))?;
    lua.set_globals(proxy)?;
    let (hook_run, hook_control) = (run.clone(), control.clone());
    lua.set_hook(HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS), move |_, _| {
        check_clock(&hook_run, &hook_control)
    })?;
    Ok(Vm {
        lua,
        runner,
        compiled: HashMap::new(),
        loader,
        function_runner,
        functions: HashMap::new(),
        libraries: None,
        memory_limit: Cell::new(0),
        generation,
        control: control.clone(),
        run,
    })
}

/// The hook: marks a script busy once it passes `busy_millis` (SCRIPT KILL
/// may then stop it, and this I/O thread's other clients move to another
/// thread), and stops a killed one.
fn check_clock(run: &RunState, control: &Control) -> mlua::Result<VmState> {
    if let Some(deadline) = run.load_deadline.get() {
        if Instant::now() >= deadline {
            return Err(mlua::Error::runtime("FUNCTION LOAD timeout"));
        }
        return Ok(VmState::Continue);
    }
    if !run.busy.get()
        && run.started.get().elapsed() >= Duration::from_millis(control.busy_millis.load(Ordering::Relaxed))
    {
        run.busy.set(true);
        if let Some(function) = &*run.function.borrow() {
            control.busy_functions.lock().push(function.clone());
        }
        control.busy.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("a script has run past busy-reply-threshold; SCRIPT KILL stops it");
        hand_over_io_thread();
    }
    if run.busy.get() && kill_epoch(run, control).load(Ordering::Relaxed) != run.kill_epoch.get() {
        run.killed.set(true);
    }
    if run.killed.get() {
        // Raised again at every hook, should the script catch it.
        return Err(mlua::Error::runtime(KILLED));
    }
    Ok(VmState::Continue)
}

/// What stops the run: FUNCTION KILL's epoch for a function, SCRIPT
/// KILL's for a script.
fn kill_epoch<'c>(run: &RunState, control: &'c Control) -> &'c AtomicU64 {
    match *run.function.borrow() {
        Some(_) => &control.function_kill_epoch,
        None => &control.kill_epoch,
    }
}

/// Gives this I/O thread's runtime (its other connections, a client that
/// would send SCRIPT KILL) to another thread while the script goes on
/// here. Tokio's `block_in_place` hands the runtime over; the sleep lets
/// the new thread take it before the hand-over could be undone.
fn hand_over_io_thread() {
    let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
    if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
        tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(10)));
    }
}

/// The message handler of every run: the error as Redis keeps it, a table
/// `{err=..., source=..., line=...}` naming the script's line that failed.
fn error_handler(lua: &Lua, error: Value) -> mlua::Result<Table> {
    let location = (0..200)
        .map_while(|level| {
            lua.inspect_stack(level, |debug| {
                let source = debug.source().source.map(|s| s.into_owned());
                (source, debug.current_line())
            })
        })
        .find(|(source, _)| matches!(source.as_deref(), Some("@user_script" | "@user_function")));
    let line = location.as_ref().and_then(|(_, line)| *line);
    let table = match error {
        Value::Table(table) => table,
        Value::String(text) => {
            let table = lua.create_table()?;
            let mut message = b"ERR ".to_vec();
            message.extend_from_slice(&text.as_bytes());
            table.raw_set("err", lua.create_string(&message)?)?;
            table
        }
        other => {
            // An error raised in Rust (a library function, the hook):
            // Lua's own would carry the script's position, as here.
            let text = match &other {
                Value::Error(error) => innermost(error),
                other => other.to_string().unwrap_or_default(),
            };
            let table = lua.create_table()?;
            let message = match (text.strip_prefix("ERR "), line) {
                (Some(_), _) => text.clone(),
                (None, Some(line)) => format!("ERR user_script:{line}: {text}"),
                (None, None) => format!("ERR {text}"),
            };
            table.raw_set("err", message)?;
            table
        }
    };
    if let Some((source, line)) = location {
        table.raw_set("source", source)?;
        table.raw_set("line", line)?;
    }
    Ok(table)
}

/// The message of the error at the bottom of a chain of callback errors.
fn innermost(error: &mlua::Error) -> String {
    match error {
        mlua::Error::CallbackError { cause, .. } => innermost(cause),
        mlua::Error::RuntimeError(message) => message.clone(),
        mlua::Error::ExternalError(error) => error.to_string(),
        other => other.to_string(),
    }
}

fn redis_library(lua: &Lua, run: &Rc<RunState>) -> mlua::Result<Table> {
    let redis = lua.create_table()?;
    redis.raw_set(
        "error_reply",
        lua.create_function(|lua, text: mlua::LuaString| {
            let text = text.as_bytes();
            let text = text.strip_prefix(b"-").unwrap_or(&text);
            let mut message = Vec::new();
            if !text.contains(&b' ') {
                message.extend_from_slice(b"ERR ");
            }
            message.extend_from_slice(text);
            let table = lua.create_table()?;
            table.raw_set("err", lua.create_string(&message)?)?;
            Ok(table)
        })?,
    )?;
    redis.raw_set(
        "status_reply",
        lua.create_function(|lua, text: mlua::LuaString| {
            let table = lua.create_table()?;
            table.raw_set("ok", text)?;
            Ok(table)
        })?,
    )?;
    redis.raw_set("sha1hex", lua.create_function(|_, text: mlua::LuaString| Ok(super::sha1_hex(&text.as_bytes())))?)?;
    redis.raw_set(
        "log",
        lua.create_function(|_, (level, rest): (i64, MultiValue)| {
            let message = super::libs::joined(&rest);
            match level {
                0 => tracing::debug!(script = true, "{message}"),
                1 | 2 => tracing::info!(script = true, "{message}"),
                3 => tracing::warn!(script = true, "{message}"),
                _ => return Err(mlua::Error::runtime("ERR Invalid debug level.")),
            }
            Ok(())
        })?,
    )?;
    let resp = run.clone();
    redis.raw_set(
        "setresp",
        lua.create_function(move |_, version: i64| {
            if version != 2 && version != 3 {
                return Err(mlua::Error::runtime("ERR RESP version must be 2 or 3."));
            }
            resp.resp3.set(version == 3);
            Ok(())
        })?,
    )?;
    // Scripts replicate their effects (a batch) whatever they ask for.
    redis.raw_set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
    redis.raw_set("set_repl", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    // Redis's debugger (SCRIPT DEBUG) is not built: these do nothing.
    redis.raw_set("breakpoint", lua.create_function(|_, ()| Ok(false))?)?;
    redis.raw_set("debug", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    for (name, value) in [("LOG_DEBUG", 0), ("LOG_VERBOSE", 1), ("LOG_NOTICE", 2), ("LOG_WARNING", 3)] {
        redis.raw_set(name, value)?;
    }
    for (name, value) in [("REPL_NONE", 0), ("REPL_AOF", 1), ("REPL_SLAVE", 2), ("REPL_REPLICA", 2), ("REPL_ALL", 3)] {
        redis.raw_set(name, value)?;
    }
    let version = crate::commands::REDIS_VERSION;
    redis.raw_set("REDIS_VERSION", version)?;
    let number = version.split('.').fold(0i64, |n, part| n * 256 + part.parse::<i64>().unwrap_or(0));
    redis.raw_set("REDIS_VERSION_NUM", number)?;
    Ok(redis)
}

impl Vm {
    /// Gives the state `script-memory-limit` as it is now.
    fn limit_memory(&self) {
        let limit = self.control.memory_limit.load(Ordering::Relaxed) as usize;
        if self.memory_limit.get() != limit {
            let _ = self.lua.set_memory_limit(limit);
            self.memory_limit.set(limit);
        }
    }

    /// The compiled function of `script`, or Redis's compile error.
    fn function(&mut self, script: &Script) -> Result<Function, String> {
        if let Some(function) = self.compiled.get(&script.sha) {
            return Ok(function.clone());
        }
        let chunk = self.lua.load(&script.source[..]).set_name("@user_script");
        let function = chunk
            .into_function()
            .map_err(|error| format!("ERR Error compiling script (new function): {}", compile_error(&error)))?;
        if self.compiled.len() >= COMPILED_MAX {
            self.compiled.clear();
        }
        self.compiled.insert(script.sha.clone(), function.clone());
        Ok(function)
    }

    /// Runs a library's Lua (`body`) with the library API, for at most
    /// `timeout`: what it registers, with its callbacks, or Redis's error
    /// (without `ERR `).
    fn load_library(
        &self,
        body: &[u8],
        timeout: Option<Duration>,
    ) -> Result<Vec<(super::functions::Function, Function)>, String> {
        self.limit_memory();
        let chunk = self.lua.load(body).set_name("@user_function");
        let chunk = chunk.into_function().map_err(|e| format!("Error compiling function: {}", compile_error(&e)))?;
        self.run.load_deadline.set(timeout.map(|timeout| Instant::now() + timeout));
        let loaded = self.loader.call::<(bool, Value)>(chunk);
        self.run.load_deadline.set(None);
        let (ok, value) = loaded.map_err(|e| format!("Error registering functions: ERR {}", innermost(&e)))?;
        if !ok {
            let message = match &value {
                Value::Table(table) => match table.raw_get::<Value>("err") {
                    Ok(Value::String(text)) => String::from_utf8_lossy(&text.as_bytes()).into_owned(),
                    _ => "ERR unknown error".into(),
                },
                Value::String(text) => format!("ERR {}", String::from_utf8_lossy(&text.as_bytes())),
                // Raised in Rust (`redis.log`, the hook): its text may
                // carry the code already.
                Value::Error(error) => {
                    let text = innermost(error);
                    if text.starts_with("ERR ") {
                        text
                    } else {
                        format!("ERR {text}")
                    }
                }
                other => format!("ERR {}", other.to_string().unwrap_or_default()),
            };
            return Err(format!("Error registering functions: {message}"));
        }
        let Value::Table(registered) = value else { return Err("Error registering functions".into()) };
        let mut functions = Vec::new();
        for entry in registered.sequence_values::<Table>() {
            let entry = entry.map_err(|e| e.to_string())?;
            let read = || -> mlua::Result<_> {
                let name: String = entry.raw_get("name")?;
                let description: Option<mlua::LuaString> = entry.raw_get("description")?;
                let flags: u8 = entry.raw_get("flags")?;
                let callback: Function = entry.raw_get("callback")?;
                let description = description.map(|text| text.as_bytes().to_vec());
                Ok((super::functions::Function { name, description, flags: Flags::from_bits(flags) }, callback))
            };
            functions.push(read().map_err(|e| e.to_string())?);
        }
        Ok(functions)
    }

    /// The function FCALL calls `name` (as registered), loading this
    /// state's libraries again first if they changed.
    fn library_function(&mut self, functions: &Functions, name: &str) -> Result<Function, String> {
        let (generation, libraries) = functions.snapshot();
        if self.libraries != Some(generation) {
            self.functions.clear();
            for library in libraries.iter() {
                // Loaded once already: no timeout, as Redis loads its RDB.
                let loaded = self.load_library(library.body(), None).map_err(|e| stored_library_error(library, &e))?;
                for (function, callback) in loaded {
                    self.functions.insert(function.name, callback);
                }
            }
            self.libraries = Some(generation);
        }
        self.functions.get(name).cloned().ok_or_else(|| "ERR Function not found".into())
    }
}

/// How long a library's code may run when it loads (Redis's
/// `LOAD_TIMEOUT_MS`).
const LOAD_TIMEOUT: Duration = Duration::from_millis(500);

fn compile_error(error: &mlua::Error) -> String {
    match error {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        other => innermost(other),
    }
}

fn stored_library_error(library: &Library, error: &str) -> String {
    format!("ERR the library '{}' no longer loads: {error}", library.name)
}

/// Runs `f` with this thread's Lua state, made anew if SCRIPT FLUSH came
/// since (Redis starts over with a fresh state too) or it has none yet.
fn with_vm<T>(
    control: &Arc<Control>,
    generation: u64,
    f: impl FnOnce(&mut Vm) -> Result<T, String>,
) -> Result<T, String> {
    VM.with(|cell| {
        let mut cell = cell.borrow_mut();
        let stale = match &*cell {
            Some(vm) => vm.generation != generation || !Arc::ptr_eq(&vm.control, control),
            None => true,
        };
        if stale {
            *cell = None;
            let vm = create(control, generation).map_err(|e| format!("ERR cannot create the Lua state: {e}"))?;
            *cell = Some(vm);
        }
        f(cell.as_mut().expect("created above"))
    })
}

/// Compiles `script` (and keeps it compiled): Redis's compile error if it
/// is not Lua.
pub fn compile(control: &Arc<Control>, generation: u64, script: &Script) -> Result<(), String> {
    with_vm(control, generation, |vm| vm.function(script).map(drop))
}

/// Runs a library's Lua (the code after its shebang line) to learn what
/// it registers (FUNCTION LOAD): its functions, or Redis's error (without
/// `ERR `).
pub fn register_library(
    control: &Arc<Control>,
    generation: u64,
    body: &[u8],
) -> Result<Vec<super::functions::Function>, String> {
    with_vm(control, generation, |vm| {
        let loaded = vm.load_library(body, Some(LOAD_TIMEOUT))?;
        Ok(loaded.into_iter().map(|(function, _)| function).collect())
    })
}

/// What runs: a script, or a library's function (its name as
/// registered, and the FCALL that calls it).
pub enum Program<'a> {
    Script(&'a Script),
    Function { functions: &'a Functions, name: &'a str, command: &'a [Bytes] },
}

/// Runs `program` with `keys` and `argv`, each `redis.call` through `call`
/// (given the command's arguments and whether the script chose RESP3,
/// it returns the command's reply in that protocol), and writes its reply
/// to `out`.
pub fn run(
    control: &Arc<Control>,
    generation: u64,
    program: &Program<'_>,
    keys: &[Bytes],
    argv: &[Bytes],
    call: &mut super::call::CommandCall<'_>,
    out: &mut Out,
) -> Outcome {
    let ran = with_vm(control, generation, |vm| {
        let (function, runner, name, source) = match program {
            Program::Script(script) => (vm.function(script)?, vm.runner.clone(), &script.sha[..], "@user_script"),
            Program::Function { functions, name, command } => {
                let function = vm.library_function(functions, name)?;
                static RUNS: AtomicU64 = AtomicU64::new(0);
                *vm.run.function.borrow_mut() = Some(BusyFunction {
                    run: RUNS.fetch_add(1, Ordering::Relaxed),
                    name: name.to_string(),
                    command: command.to_vec(),
                    started: Instant::now(),
                });
                (function, vm.function_runner.clone(), *name, "@user_function")
            }
        };
        let outcome = run_in(vm, &runner, function, (name, source), keys, argv, call, out);
        let function = vm.run.function.borrow_mut().take();
        if vm.run.busy.get() {
            if let Some(function) = function {
                control.busy_functions.lock().retain(|busy| busy.run != function.run);
            }
            control.busy.fetch_sub(1, Ordering::Relaxed);
        }
        vm.run.busy.set(false);
        Ok(outcome)
    });
    ran.unwrap_or_else(|message| {
        out.error(&message);
        Outcome::Replied
    })
}

/// Runs `function` through `runner`; `(name, source)` name it in errors.
#[allow(clippy::too_many_arguments)]
fn run_in(
    vm: &Vm,
    runner: &Function,
    function: Function,
    (name, source): (&str, &str),
    keys: &[Bytes],
    argv: &[Bytes],
    call: &mut super::call::CommandCall<'_>,
    out: &mut Out,
) -> Outcome {
    let run = &vm.run;
    run.started.set(Instant::now());
    run.kill_epoch.set(kill_epoch(run, &vm.control).load(Ordering::Relaxed));
    run.killed.set(false);
    run.needs_all_keys.set(false);
    run.resp3.set(false);
    vm.limit_memory();
    let mark = out.len();
    let installed = super::call::install(call, &run.resp3, &run.needs_all_keys);
    let result = (|| -> mlua::Result<()> {
        // SAFETY: `push_list` raises Lua errors only inside this protected
        // call; the runner is called with the function and two tables.
        let (ok, value): (bool, Value) = unsafe {
            vm.lua.exec_raw((runner, function), |state| {
                super::call::push_list(state, keys);
                super::call::push_list(state, argv);
                ffi::lua_call(state, 3, 2);
            })
        }?;
        if run.killed.get() {
            // The handler noted where the kill found it (unless the script
            // caught it and ended before the hook raised it again).
            let line = match &value {
                Value::Table(table) => table.raw_get::<Option<usize>>("line").ok().flatten(),
                _ => None,
            };
            out.error(&script_error_text(KILLED, name, line.map(|l| (source.into(), l))));
            return Ok(());
        }
        if run.needs_all_keys.get() {
            return Ok(());
        }
        if ok {
            if let Err(message) = lua_to_reply(out, &value, run.resp3.get()) {
                out.truncate(mark);
                out.error(&message);
            }
        } else {
            out.error(&script_error(&value, name));
        }
        Ok(())
    })();
    drop(installed);
    if run.needs_all_keys.get() {
        out.truncate(mark);
        return Outcome::NeedsAllKeys;
    }
    if run.killed.get() {
        if result.is_err() {
            out.truncate(mark);
            out.error(&script_error_text(KILLED, name, None));
        }
        return Outcome::Killed;
    }
    if let Err(error) = result {
        // Out of memory, or a failure of the state itself.
        out.truncate(mark);
        out.error(&format!("ERR {}", innermost(&error)));
    }
    Outcome::Replied
}

/// A failed script's reply: the error and where the script (its SHA1 or
/// function name) failed.
fn script_error(value: &Value, name: &str) -> String {
    let Value::Table(table) = value else {
        // Not through the handler: Lua's memory error.
        return format!("ERR {}", value.to_string().unwrap_or_default());
    };
    let text = |name: &str| match table.raw_get::<Value>(name) {
        Ok(Value::String(s)) => Some(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
        Ok(Value::Number(n)) => Some((n as i64).to_string()),
        Ok(Value::Integer(n)) => Some(n.to_string()),
        _ => None,
    };
    let message = text("err").unwrap_or_else(|| "ERR unknown error".into());
    let location = text("source").zip(text("line").and_then(|l| l.parse().ok()));
    script_error_text(&message, name, location)
}

fn script_error_text(message: &str, name: &str, location: Option<(String, usize)>) -> String {
    match location {
        Some((source, line)) => format!("{message} script: {name}, on {source}:{line}."),
        None => format!("{message} script: {name}"),
    }
}

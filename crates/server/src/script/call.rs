//! `redis.call` and `redis.pcall`, and a run's KEYS and ARGV, on Lua's C
//! API. mlua guards each of its own operations with a protected call once
//! the state has a memory limit, which made a one-GET script cost 40% more
//! server CPU (13.0-14.8 against 8.6-9.9 µs per EVALSHA at `-P 16`); here
//! the arguments come out and the reply goes in with plain C calls.
//!
//! Those calls may raise a Lua error (out of memory) by `longjmp`, which
//! must not cross a Rust frame that owns anything: the Rust work (running
//! the command) happens first with owned values, the reply is left in a
//! thread-local buffer, and only functions whose locals are plain numbers
//! and pointers then touch the Lua stack.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int};

use bytes::{Bytes, BytesMut};
use mlua::ffi;

use super::vm::CallError;

/// A script's way to run a command: its arguments, whether the script
/// chose RESP3, and the (empty) buffer its reply goes into in that
/// protocol. The buffer is this thread's, reused call after call.
pub type CommandCall<'a> = dyn FnMut(Vec<Bytes>, bool, &mut BytesMut) -> Result<(), CallError> + 'a;

#[derive(Clone, Copy)]
struct Current {
    call: *mut CommandCall<'static>,
    resp3: *const Cell<bool>,
    needs_all_keys: *const Cell<bool>,
}

thread_local! {
    static CURRENT: Cell<Option<Current>> = const { Cell::new(None) };
    /// The last command's reply, or its error text.
    static REPLY: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// While alive, `redis.call` on this thread runs commands through `call`.
pub struct Installed(());

impl Drop for Installed {
    fn drop(&mut self) {
        CURRENT.set(None);
    }
}

/// Makes `call` the running script's (until the guard is dropped, which
/// happens before the borrows given here end).
pub fn install(call: &mut CommandCall<'_>, resp3: &Cell<bool>, needs_all_keys: &Cell<bool>) -> Installed {
    // SAFETY: only the lifetime is erased; `Installed` clears the pointer
    // before the borrow it came from ends, and only this thread reads it.
    let call: *mut CommandCall<'static> = unsafe { std::mem::transmute(call as *mut CommandCall<'_>) };
    CURRENT.set(Some(Current { call, resp3, needs_all_keys }));
    Installed(())
}

enum Status {
    Reply,
    Error,
}

fn set_reply(bytes: &[u8]) {
    REPLY.with(|reply| {
        let mut reply = reply.borrow_mut();
        reply.clear();
        reply.extend_from_slice(bytes);
    });
}

/// Takes the arguments off the stack and runs the command; its reply or
/// error text is left in `REPLY`. Raises no Lua error.
unsafe fn run_command(state: *mut ffi::lua_State) -> Status {
    let Some(current) = CURRENT.get() else {
        set_reply(b"ERR no script is running");
        return Status::Error;
    };
    let needs_all_keys = &*current.needs_all_keys;
    if needs_all_keys.get() {
        set_reply(b"ERR the script is run again");
        return Status::Error;
    }
    let count = ffi::lua_gettop(state);
    if count == 0 {
        set_reply(b"ERR Please specify at least one argument for this redis lib call");
        return Status::Error;
    }
    let mut args = Vec::with_capacity(count as usize);
    for index in 1..=count {
        match ffi::lua_type(state, index) {
            ffi::LUA_TSTRING => {
                let mut len = 0;
                // A string: no conversion, so nothing is allocated.
                let data = ffi::lua_tolstring(state, index, &mut len) as *const u8;
                args.push(Bytes::copy_from_slice(std::slice::from_raw_parts(data, len)));
            }
            ffi::LUA_TNUMBER => {
                args.push(Bytes::from(crate::zset::format_score(ffi::lua_tonumber(state, index))));
            }
            _ => {
                set_reply(b"ERR Lua redis lib command arguments must be strings or integers");
                return Status::Error;
            }
        }
    }
    let resp3 = (*current.resp3).get();
    let result = REPLY.with(|reply| {
        let mut reply = reply.borrow_mut();
        reply.clear();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (*current.call)(args, resp3, &mut reply)))
    });
    match result {
        Ok(Ok(())) => Status::Reply,
        Ok(Err(CallError::Error(text))) => {
            set_reply(text.as_bytes());
            Status::Error
        }
        Ok(Err(CallError::NeedsAllKeys)) => {
            needs_all_keys.set(true);
            set_reply(b"ERR the script is run again");
            Status::Error
        }
        Err(_) => {
            set_reply(b"ERR the command failed (a server bug)");
            Status::Error
        }
    }
}

/// `redis.call`.
///
/// # Safety
/// Called by Lua only, as a C function.
pub unsafe extern "C-unwind" fn redis_call(state: *mut ffi::lua_State) -> c_int {
    call(state, true)
}

/// `redis.pcall`.
///
/// # Safety
/// Called by Lua only, as a C function.
pub unsafe extern "C-unwind" fn redis_pcall(state: *mut ffi::lua_State) -> c_int {
    call(state, false)
}

/// Returns the command's reply as Redis converts it, or its error: raised
/// as a table `{err=...}` (`redis.call`) or returned as one (`pcall`).
unsafe fn call(state: *mut ffi::lua_State, raise: bool) -> c_int {
    let status = run_command(state);
    ffi::lua_settop(state, 0);
    // From here on only numbers and pointers live in Rust frames.
    let (data, len) = REPLY.with(|reply| {
        let reply = reply.borrow();
        (reply.as_ptr(), reply.len())
    });
    match status {
        Status::Reply => {
            let mut at = 0;
            if !push_reply(state, data, len, &mut at, 0) {
                ffi::lua_settop(state, 0);
                ffi::lua_pushnil(state);
            }
            1
        }
        Status::Error => {
            ffi::lua_createtable(state, 0, 1);
            ffi::lua_pushlstring(state, data as *const c_char, len);
            ffi::lua_setfield(state, -2, c"err".as_ptr());
            if raise {
                ffi::lua_error(state);
            }
            1
        }
    }
}

/// The end of the line starting at `at` (the index of its `\r`).
unsafe fn line_end(data: *const u8, len: usize, at: usize) -> Option<usize> {
    let bytes = std::slice::from_raw_parts(data, len);
    bytes.get(at..)?.windows(2).position(|w| w == b"\r\n").map(|end| at + end)
}

unsafe fn number<T: std::str::FromStr>(data: *const u8, from: usize, to: usize) -> Option<T> {
    let bytes = std::slice::from_raw_parts(data.add(from), to - from);
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Pushes `{tag = <the value on top>}` in place of that value.
unsafe fn tag(state: *mut ffi::lua_State, tag: &std::ffi::CStr) {
    ffi::lua_createtable(state, 0, 1);
    ffi::lua_insert(state, -2);
    ffi::lua_setfield(state, -2, tag.as_ptr());
}

/// Pushes the Lua value of the RESP reply at `*at` (Redis's conversion:
/// RESP2 nulls are `false`, RESP3's `nil`; status `{ok=}`, error `{err=}`,
/// RESP3 maps, sets, doubles, big numbers and verbatim strings tagged
/// tables) and moves `*at` past it. False if the reply is malformed (a
/// server bug; a command's `Out` never is).
unsafe fn push_reply(state: *mut ffi::lua_State, data: *const u8, len: usize, at: &mut usize, depth: usize) -> bool {
    if depth > 64 || *at >= len || ffi::lua_checkstack(state, 4) == 0 {
        return false;
    }
    let kind = *data.add(*at);
    let Some(end) = line_end(data, len, *at + 1) else { return false };
    let (text, text_len) = (data.add(*at + 1), end - *at - 1);
    let header_from = *at + 1;
    *at = end + 2;
    match kind {
        b'+' | b'-' | b'(' => {
            ffi::lua_pushlstring(state, text as *const c_char, text_len);
            tag(
                state,
                match kind {
                    b'+' => c"ok",
                    b'-' => c"err",
                    _ => c"big_number",
                },
            );
        }
        b':' => {
            let Some(n) = number::<i64>(data, header_from, end) else { return false };
            ffi::lua_pushnumber(state, n as f64);
        }
        b'$' | b'=' => {
            let Some(size) = number::<i64>(data, header_from, end) else { return false };
            if size < 0 {
                ffi::lua_pushboolean(state, 0);
                return true;
            }
            let size = size as usize;
            if *at + size + 2 > len {
                return false;
            }
            let body = data.add(*at);
            *at += size + 2;
            if kind == b'$' {
                ffi::lua_pushlstring(state, body as *const c_char, size);
            } else {
                // "txt:..." -> {verbatim_string={format="txt", string="..."}}
                let format_len = size.min(3);
                ffi::lua_createtable(state, 0, 2);
                ffi::lua_pushlstring(state, body as *const c_char, format_len);
                ffi::lua_setfield(state, -2, c"format".as_ptr());
                let rest = size.saturating_sub(4);
                ffi::lua_pushlstring(state, body.add(size - rest) as *const c_char, rest);
                ffi::lua_setfield(state, -2, c"string".as_ptr());
                tag(state, c"verbatim_string");
            }
        }
        b'*' | b'>' | b'~' | b'%' => {
            let Some(count) = number::<i64>(data, header_from, end) else { return false };
            if count < 0 {
                ffi::lua_pushboolean(state, 0);
                return true;
            }
            let count = count.min(i32::MAX as i64) as c_int;
            match kind {
                b'%' => {
                    ffi::lua_createtable(state, 0, count);
                    for _ in 0..count {
                        if !push_reply(state, data, len, at, depth + 1) || !push_reply(state, data, len, at, depth + 1)
                        {
                            return false;
                        }
                        ffi::lua_rawset(state, -3);
                    }
                    tag(state, c"map");
                }
                b'~' => {
                    ffi::lua_createtable(state, 0, count);
                    for _ in 0..count {
                        if !push_reply(state, data, len, at, depth + 1) {
                            return false;
                        }
                        ffi::lua_pushboolean(state, 1);
                        ffi::lua_rawset(state, -3);
                    }
                    tag(state, c"set");
                }
                _ => {
                    ffi::lua_createtable(state, count, 0);
                    for index in 1..=count {
                        if !push_reply(state, data, len, at, depth + 1) {
                            return false;
                        }
                        ffi::lua_rawseti(state, -2, index as ffi::lua_Integer);
                    }
                }
            }
        }
        b'_' => ffi::lua_pushnil(state),
        b'#' => ffi::lua_pushboolean(state, (text_len == 1 && *text == b't') as c_int),
        b',' => {
            let value = match std::slice::from_raw_parts(text, text_len) {
                b"inf" => f64::INFINITY,
                b"-inf" => f64::NEG_INFINITY,
                _ => match number::<f64>(data, header_from, end) {
                    Some(value) => value,
                    None => return false,
                },
            };
            ffi::lua_pushnumber(state, value);
            tag(state, c"double");
        }
        _ => return false,
    }
    true
}

/// Pushes a table of `items` as Lua strings (a run's KEYS or ARGV).
///
/// # Safety
/// Called inside a protected call (mlua's `exec_raw`): a Lua error raised
/// here unwinds by `longjmp`, over no frame that owns anything.
pub unsafe fn push_list(state: *mut ffi::lua_State, items: &[Bytes]) {
    ffi::lua_createtable(state, items.len().min(i32::MAX as usize) as c_int, 0);
    for (index, item) in items.iter().enumerate() {
        ffi::lua_pushlstring(state, item.as_ptr() as *const c_char, item.len());
        ffi::lua_rawseti(state, -2, index as ffi::lua_Integer + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::{Out, Protocol};
    use crate::script::convert::lua_to_reply;
    use mlua::{Lua, Value};

    /// The Lua value `redis.call` would return for `reply`, or None if
    /// `push_reply` found it malformed.
    fn to_lua(lua: &Lua, reply: &[u8]) -> Option<Value> {
        // SAFETY: pushes inside mlua's protected call; `reply` outlives it.
        let (ok, value): (bool, Value) = unsafe {
            lua.exec_raw((), |state| {
                let mut at = 0;
                let ok = push_reply(state, reply.as_ptr(), reply.len(), &mut at, 0);
                if !ok {
                    ffi::lua_settop(state, 0);
                    ffi::lua_pushnil(state);
                }
                ffi::lua_pushboolean(state, ok as c_int);
                ffi::lua_insert(state, -2);
            })
        }
        .unwrap();
        ok.then_some(value)
    }

    fn roundtrip(reply: &[u8], resp3: bool) -> Vec<u8> {
        let lua = Lua::new();
        let value = to_lua(&lua, reply).unwrap();
        let mut out = Out::new(if resp3 { Protocol::Resp3 } else { Protocol::Resp2 });
        lua_to_reply(&mut out, &value, resp3).unwrap();
        out.buf.to_vec()
    }

    #[test]
    fn replies_come_back_as_redis_returns_them() {
        assert_eq!(roundtrip(b"+OK\r\n", false), b"+OK\r\n");
        assert_eq!(roundtrip(b"-ERR no\r\n", false), b"-ERR no\r\n");
        assert_eq!(roundtrip(b":-42\r\n", false), b":-42\r\n");
        assert_eq!(roundtrip(b"$3\r\na\r\n\r\n", false), b"$3\r\na\r\n\r\n");
        // A RESP2 null is false, which goes back as a null.
        assert_eq!(roundtrip(b"$-1\r\n", false), b"$-1\r\n");
        assert_eq!(roundtrip(b"*-1\r\n", false), b"$-1\r\n");
        assert_eq!(
            roundtrip(b"*3\r\n:1\r\n*1\r\n$1\r\nx\r\n$0\r\n\r\n", false),
            b"*3\r\n:1\r\n*1\r\n$1\r\nx\r\n$0\r\n\r\n"
        );
        // RESP3's types keep theirs in a RESP3 reply.
        assert_eq!(roundtrip(b",1.5\r\n", true), b",1.5\r\n");
        assert_eq!(roundtrip(b"#t\r\n", true), b"#t\r\n");
        assert_eq!(roundtrip(b"%1\r\n$1\r\na\r\n:1\r\n", true), b"%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(roundtrip(b"~1\r\n$1\r\na\r\n", true), b"~1\r\n$1\r\na\r\n");
        assert_eq!(roundtrip(b"=8\r\ntxt:abcd\r\n", true), b"=8\r\ntxt:abcd\r\n");
        assert_eq!(roundtrip(b"(123\r\n", true), b"(123\r\n");
        // ... and flatten in a RESP2 one.
        assert_eq!(roundtrip(b",1.5\r\n", false), b"$3\r\n1.5\r\n");
        assert_eq!(roundtrip(b"%1\r\n$1\r\na\r\n:1\r\n", false), b"*2\r\n$1\r\na\r\n:1\r\n");
    }

    #[test]
    fn truncated_replies_are_errors() {
        let lua = Lua::new();
        for reply in [&b"$5\r\nab"[..], b"*2\r\n:1\r\n", b":12", b"", b"?x\r\n"] {
            assert!(to_lua(&lua, reply).is_none(), "{reply:?}");
        }
    }
}

//! Values across the script boundary, by Redis 7's rules: a command's
//! reply (RESP, in the protocol the script chose with `redis.setresp`) as
//! the Lua value `redis.call` returns, and the script's result as the reply.

use mlua::{Lua, Table, Value};

use crate::resp::Out;

/// Tables nested deeper than this in a script's result are refused (a
/// table can hold itself).
const MAX_DEPTH: usize = 1000;

/// The Lua value of the RESP reply at the start of `reply` (as a command
/// wrote it into an `Out`): RESP2 nulls are `false`, RESP3's `nil`; a
/// status is `{ok=...}`, an error `{err=...}`, RESP3's maps, sets,
/// doubles, big numbers and verbatim strings tables tagged so.
pub fn reply_to_lua(lua: &Lua, reply: &[u8]) -> mlua::Result<Value> {
    let mut at = 0;
    let value = parse(lua, reply, &mut at)?;
    Ok(value)
}

fn bad_reply() -> mlua::Error {
    mlua::Error::runtime("ERR a command's reply could not be read back (a server bug)")
}

fn line<'a>(reply: &'a [u8], at: &mut usize) -> mlua::Result<&'a [u8]> {
    let rest = reply.get(*at..).ok_or_else(bad_reply)?;
    let end = rest.windows(2).position(|w| w == b"\r\n").ok_or_else(bad_reply)?;
    *at += end + 2;
    Ok(&rest[..end])
}

fn number(text: &[u8]) -> mlua::Result<i64> {
    std::str::from_utf8(text).ok().and_then(|t| t.parse().ok()).ok_or_else(bad_reply)
}

fn tagged(lua: &Lua, tag: &str, value: Value) -> mlua::Result<Value> {
    let table = lua.create_table()?;
    table.raw_set(tag, value)?;
    Ok(Value::Table(table))
}

fn parse(lua: &Lua, reply: &[u8], at: &mut usize) -> mlua::Result<Value> {
    let kind = *reply.get(*at).ok_or_else(bad_reply)?;
    *at += 1;
    let text = line(reply, at)?;
    match kind {
        b'+' => tagged(lua, "ok", Value::String(lua.create_string(text)?)),
        b'-' => tagged(lua, "err", Value::String(lua.create_string(text)?)),
        b':' => Ok(Value::Number(number(text)? as f64)),
        b'$' | b'=' => {
            let len = number(text)?;
            if len < 0 {
                return Ok(Value::Boolean(false));
            }
            let data = reply.get(*at..*at + len as usize).ok_or_else(bad_reply)?;
            *at += len as usize + 2;
            if kind == b'$' {
                return Ok(Value::String(lua.create_string(data)?));
            }
            // "txt:..." -> {verbatim_string={format="txt", string="..."}}
            let (format, string) = data.split_at(data.len().min(3));
            let inner = lua.create_table()?;
            inner.raw_set("format", lua.create_string(format)?)?;
            inner.raw_set("string", lua.create_string(string.get(1..).unwrap_or_default())?)?;
            tagged(lua, "verbatim_string", Value::Table(inner))
        }
        b'*' | b'>' | b'~' | b'%' => {
            let len = number(text)?;
            if len < 0 {
                return Ok(Value::Boolean(false));
            }
            let table = lua.create_table()?;
            match kind {
                b'%' => {
                    for _ in 0..len {
                        let key = parse(lua, reply, at)?;
                        let value = parse(lua, reply, at)?;
                        table.raw_set(key, value)?;
                    }
                    tagged(lua, "map", Value::Table(table))
                }
                b'~' => {
                    for _ in 0..len {
                        table.raw_set(parse(lua, reply, at)?, true)?;
                    }
                    tagged(lua, "set", Value::Table(table))
                }
                _ => {
                    for i in 1..=len {
                        table.raw_set(i, parse(lua, reply, at)?)?;
                    }
                    Ok(Value::Table(table))
                }
            }
        }
        b'_' => Ok(Value::Nil),
        b'#' => Ok(Value::Boolean(text == b"t")),
        b',' => {
            let value = match text {
                b"inf" => f64::INFINITY,
                b"-inf" => f64::NEG_INFINITY,
                _ => std::str::from_utf8(text).ok().and_then(|t| t.parse().ok()).ok_or_else(bad_reply)?,
            };
            tagged(lua, "double", Value::Number(value))
        }
        b'(' => tagged(lua, "big_number", Value::String(lua.create_string(text)?)),
        _ => Err(bad_reply()),
    }
}

/// A Lua number as Redis replies it: converted to an integer as C's cast
/// does on x86-64 (towards zero; out of range or NaN: the lowest integer).
pub fn lua_integer(value: f64) -> i64 {
    if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&value) {
        i64::MIN
    } else {
        value as i64
    }
}

/// Writes the script's result `value` as the reply. `resp3`: the script
/// chose RESP3 (`redis.setresp(3)`), which turns booleans into RESP3's.
pub fn lua_to_reply(out: &mut Out, value: &Value, resp3: bool) -> Result<(), String> {
    emit(out, value, resp3, 0)
}

fn emit(out: &mut Out, value: &Value, resp3: bool, depth: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err("ERR reached lua stack limit".into());
    }
    match value {
        Value::Boolean(true) if !resp3 => out.int(1),
        Value::Boolean(false) if !resp3 => out.null(),
        Value::Boolean(b) => out.boolean(*b),
        Value::Integer(n) => out.int(*n),
        Value::Number(n) => out.int(lua_integer(*n)),
        Value::String(s) => out.bulk(&s.as_bytes()),
        Value::Table(table) => emit_table(out, table, resp3, depth)?,
        // Nil, and what a reply cannot hold (functions, userdata).
        _ => out.null(),
    }
    Ok(())
}

fn emit_table(out: &mut Out, table: &Table, resp3: bool, depth: usize) -> Result<(), String> {
    let field = |name: &str| table.raw_get::<Value>(name).unwrap_or(Value::Nil);
    if let Value::String(error) = field("err") {
        out.error(&String::from_utf8_lossy(&error.as_bytes()));
        return Ok(());
    }
    if let Value::String(status) = field("ok") {
        out.simple(&String::from_utf8_lossy(&status.as_bytes()));
        return Ok(());
    }
    if let Value::Number(n) = field("double") {
        out.double(n);
        return Ok(());
    }
    if let Value::Integer(n) = field("double") {
        out.double(n as f64);
        return Ok(());
    }
    if let Value::String(digits) = field("big_number") {
        out.big_number(&String::from_utf8_lossy(&digits.as_bytes()));
        return Ok(());
    }
    if let Value::Table(map) = field("map") {
        let pairs: Vec<(Value, Value)> = map.pairs::<Value, Value>().filter_map(Result::ok).collect();
        out.map(pairs.len());
        for (key, value) in &pairs {
            emit(out, key, resp3, depth + 1)?;
            emit(out, value, resp3, depth + 1)?;
        }
        return Ok(());
    }
    if let Value::Table(set) = field("set") {
        let members: Vec<Value> = set.pairs::<Value, Value>().filter_map(Result::ok).map(|(k, _)| k).collect();
        out.set(members.len());
        for member in &members {
            emit(out, member, resp3, depth + 1)?;
        }
        return Ok(());
    }
    if let Value::Table(verbatim) = field("verbatim_string") {
        if let Ok(Value::String(text)) = verbatim.raw_get::<Value>("string") {
            out.verbatim(&String::from_utf8_lossy(&text.as_bytes()));
            return Ok(());
        }
    }
    // An array: its elements up to the first nil.
    let mut elements = Vec::new();
    loop {
        match table.raw_get::<Value>(elements.len() + 1) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(value) => elements.push(value),
        }
    }
    out.array(elements.len());
    for element in &elements {
        emit(out, element, resp3, depth + 1)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::Protocol;

    fn roundtrip(reply: &[u8], resp3: bool) -> Vec<u8> {
        let lua = Lua::new();
        let value = reply_to_lua(&lua, reply).unwrap();
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
    fn numbers_convert_as_redis_on_x86() {
        assert_eq!(lua_integer(3.99), 3);
        assert_eq!(lua_integer(-3.7), -3);
        assert_eq!(lua_integer(1e20), i64::MIN);
        assert_eq!(lua_integer(f64::NAN), i64::MIN);
    }

    #[test]
    fn a_table_that_holds_itself_is_an_error_not_a_crash() {
        let lua = Lua::new();
        let table = lua.create_table().unwrap();
        table.raw_set(1, table.clone()).unwrap();
        let mut out = Out::new(Protocol::Resp2);
        assert_eq!(lua_to_reply(&mut out, &Value::Table(table), false).unwrap_err(), "ERR reached lua stack limit");
    }

    #[test]
    fn truncated_replies_are_errors() {
        let lua = Lua::new();
        for reply in [&b"$5\r\nab"[..], b"*2\r\n:1\r\n", b":12", b"", b"?x\r\n"] {
            assert!(reply_to_lua(&lua, reply).is_err(), "{reply:?}");
        }
    }
}

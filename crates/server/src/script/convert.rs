//! A script's result as its reply, by Redis 7's rules (the other way, a
//! command's reply as a Lua value, is in `call`).

use mlua::{Table, Value};

use crate::resp::Out;

/// Tables nested deeper than this in a script's result are refused (a
/// table can hold itself).
const MAX_DEPTH: usize = 1000;

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
    // mlua gives an integral Lua number as an Integer.
    let double = match field("double") {
        Value::Number(n) => Some(n),
        Value::Integer(n) => Some(n as f64),
        _ => None,
    };
    if let Some(value) = double {
        out.double(value);
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
    use mlua::Lua;

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
}

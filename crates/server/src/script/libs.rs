//! The libraries Redis gives scripts beside Lua's own: `cjson`, `bit` (Lua
//! BitOp's functions on 32-bit integers), `cmsgpack` (`super::msgpack`)
//! and `math.random` as Redis's (rand48 from Redis's starting state, so a
//! fresh server's first picks are Redis's). `struct` is not built: a
//! script that uses it gets the nonexistent-global error.

use std::cell::Cell;

use mlua::{Lua, MultiValue, Table, Value, Variadic};

/// Tables nested deeper than this are not encoded, as lua-cjson's limit.
const JSON_MAX_DEPTH: usize = 1000;

pub fn install(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    globals.raw_set("cjson", cjson(lua)?)?;
    globals.raw_set("bit", bit(lua)?)?;
    globals.raw_set("cmsgpack", super::msgpack::library(lua)?)?;
    let math: Table = globals.raw_get("math")?;
    math.raw_set("random", lua.create_function(random)?)?;
    math.raw_set(
        "randomseed",
        lua.create_function(|_, seed: i32| {
            seed_rand48(seed);
            Ok(())
        })?,
    )?;
    Ok(())
}

// ---- math.random -------------------------------------------------------

thread_local! {
    static RAND48: Cell<u64> = const { Cell::new(0x1234_ABCD_330E) };
}

/// `math.randomseed`.
fn seed_rand48(seed: i32) {
    RAND48.set(((seed as u32 as u64) << 16) | 0x330E);
}

fn lrand48() -> i32 {
    let next = (0x5DEE_CE66Du64.wrapping_mul(RAND48.get()).wrapping_add(0xB)) & ((1 << 48) - 1);
    RAND48.set(next);
    (next >> 17) as i32
}

fn random(_: &Lua, args: Variadic<f64>) -> mlua::Result<f64> {
    const MAX: f64 = i32::MAX as f64;
    let r = (lrand48() % i32::MAX) as f64 / MAX;
    match args[..] {
        [] => Ok(r),
        [upper] => {
            let upper = upper as i32;
            if upper < 1 {
                return Err(mlua::Error::runtime("bad argument #1 to 'random' (interval is empty)"));
            }
            Ok((r * upper as f64).floor() + 1.0)
        }
        [lower, upper] => {
            let (lower, upper) = (lower as i32, upper as i32);
            if lower > upper {
                return Err(mlua::Error::runtime("bad argument #2 to 'random' (interval is empty)"));
            }
            Ok((r * (upper as f64 - lower as f64 + 1.0)).floor() + lower as f64)
        }
        _ => Err(mlua::Error::runtime("wrong number of arguments")),
    }
}

// ---- bit ---------------------------------------------------------------

/// Lua BitOp's `tobit`: the number rounded and wrapped to 32 bits.
fn tobit(x: f64) -> i32 {
    if !x.is_finite() {
        return 0;
    }
    x.round_ties_even().rem_euclid(4_294_967_296.0) as u32 as i32
}

fn bit(lua: &Lua) -> mlua::Result<Table> {
    let bit = lua.create_table()?;
    let unary = |f: fn(i32) -> i32| lua.create_function(move |_, x: f64| Ok(f(tobit(x)) as f64));
    bit.raw_set("tobit", unary(|x| x)?)?;
    bit.raw_set("bnot", unary(|x| !x)?)?;
    bit.raw_set("bswap", unary(i32::swap_bytes)?)?;
    let fold = |f: fn(i32, i32) -> i32| {
        lua.create_function(move |_, (first, rest): (f64, Variadic<f64>)| {
            Ok(rest.iter().fold(tobit(first), |acc, &x| f(acc, tobit(x))) as f64)
        })
    };
    bit.raw_set("band", fold(|a, b| a & b)?)?;
    bit.raw_set("bor", fold(|a, b| a | b)?)?;
    bit.raw_set("bxor", fold(|a, b| a ^ b)?)?;
    let shift = |f: fn(i32, u32) -> i32| {
        lua.create_function(move |_, (x, n): (f64, f64)| Ok(f(tobit(x), tobit(n) as u32 & 31) as f64))
    };
    bit.raw_set("lshift", shift(|x, n| ((x as u32) << n) as i32)?)?;
    bit.raw_set("rshift", shift(|x, n| ((x as u32) >> n) as i32)?)?;
    bit.raw_set("arshift", shift(|x, n| x >> n)?)?;
    bit.raw_set("rol", shift(|x, n| (x as u32).rotate_left(n) as i32)?)?;
    bit.raw_set("ror", shift(|x, n| (x as u32).rotate_right(n) as i32)?)?;
    let tohex = lua.create_function(|_, (x, n): (f64, Option<f64>)| {
        let n = n.map(tobit).unwrap_or(8);
        let digits = n.unsigned_abs().min(8) as usize;
        let value = tobit(x) as u32 as u64;
        let text = format!("{value:08x}");
        let text = &text[8 - digits..];
        Ok(if n < 0 { text.to_uppercase() } else { text.to_string() })
    })?;
    bit.raw_set("tohex", tohex)?;
    Ok(bit)
}

// ---- cjson -------------------------------------------------------------

fn cjson(lua: &Lua) -> mlua::Result<Table> {
    let cjson = lua.create_table()?;
    cjson.raw_set("null", Value::NULL)?;
    cjson.raw_set(
        "encode",
        lua.create_function(|_, value: Value| {
            let mut text = Vec::new();
            encode(&value, &mut text, 0).map_err(mlua::Error::runtime)?;
            Ok(mlua::BString::from(text))
        })?,
    )?;
    cjson.raw_set(
        "decode",
        lua.create_function(|lua, text: mlua::LuaString| {
            let json: serde_json::Value =
                serde_json::from_slice(&text.as_bytes()).map_err(|e| mlua::Error::runtime(e.to_string()))?;
            json_to_lua(lua, &json)
        })?,
    )?;
    Ok(cjson)
}

fn json_to_lua(lua: &Lua, json: &serde_json::Value) -> mlua::Result<Value> {
    use serde_json::Value as J;
    Ok(match json {
        J::Null => Value::NULL,
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        J::String(s) => Value::String(lua.create_string(s)?),
        J::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, json_to_lua(lua, item)?)?;
            }
            Value::Table(table)
        }
        J::Object(fields) => {
            let table = lua.create_table_with_capacity(0, fields.len())?;
            for (key, value) in fields {
                table.raw_set(key.as_str(), json_to_lua(lua, value)?)?;
            }
            Value::Table(table)
        }
    })
}

/// lua-cjson's number format, `%.14g`.
fn format_number(value: f64, out: &mut Vec<u8>) -> Result<(), String> {
    if !value.is_finite() {
        return Err("Cannot serialise number: must not be NaN or Inf".into());
    }
    out.extend_from_slice(format_g(value, 14).as_bytes());
    Ok(())
}

/// C's `%.<precision>g`.
pub fn format_g(value: f64, precision: usize) -> String {
    if value == 0.0 {
        return if value.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let scientific = format!("{value:.*e}", precision - 1);
    let (mantissa, exponent) = scientific.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("{:e}'s exponent is a number");
    let trim = |text: &str| -> String {
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            text.to_string()
        }
    };
    if exponent < -4 || exponent >= precision as i32 {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exponent.abs())
    } else {
        let decimals = (precision as i32 - 1 - exponent).max(0) as usize;
        trim(&format!("{value:.decimals$}"))
    }
}

fn encode_string(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &byte in bytes {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{byte:04x}").as_bytes()),
            _ => out.push(byte),
        }
    }
    out.push(b'"');
}

/// A table's length as a JSON array (lua-cjson's rule): its largest key if
/// every key is a positive integer and it is not too sparse; None for an
/// object (and for an empty table, which cjson writes as `{}`).
fn array_length(table: &Table) -> Result<Option<usize>, String> {
    let (mut max, mut items) = (0usize, 0usize);
    for pair in table.pairs::<Value, Value>() {
        let (key, _) = pair.map_err(|e| e.to_string())?;
        let index = match key {
            Value::Integer(i) if i >= 1 => i as usize,
            Value::Number(n) if n >= 1.0 && n.fract() == 0.0 => n as usize,
            _ => return Ok(None),
        };
        max = max.max(index);
        items += 1;
    }
    if max > 10 && max > items * 2 {
        return Err("Cannot serialise table: excessively sparse array".into());
    }
    Ok((max > 0).then_some(max))
}

fn encode(value: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), String> {
    match value {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(data) if data.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::Number(n) => format_number(*n, out)?,
        Value::String(s) => encode_string(&s.as_bytes(), out),
        Value::Table(table) => {
            if depth >= JSON_MAX_DEPTH {
                return Err(format!("Cannot serialise, excessive nesting ({})", depth + 1));
            }
            match array_length(table)? {
                Some(len) => {
                    out.push(b'[');
                    for i in 1..=len {
                        if i > 1 {
                            out.push(b',');
                        }
                        let item: Value = table.raw_get(i).map_err(|e| e.to_string())?;
                        encode(&item, out, depth + 1)?;
                    }
                    out.push(b']');
                }
                None => {
                    out.push(b'{');
                    for (n, pair) in table.pairs::<Value, Value>().enumerate() {
                        let (key, item) = pair.map_err(|e| e.to_string())?;
                        if n > 0 {
                            out.push(b',');
                        }
                        match &key {
                            Value::String(s) => encode_string(&s.as_bytes(), out),
                            Value::Integer(i) => encode_string(i.to_string().as_bytes(), out),
                            Value::Number(x) => encode_string(format_g(*x, 14).as_bytes(), out),
                            _ => return Err("Cannot serialise table: table key must be a number or string".into()),
                        }
                        out.push(b':');
                        encode(&item, out, depth + 1)?;
                    }
                    out.push(b'}');
                }
            }
        }
        other => return Err(format!("Cannot serialise {}: type not supported", other.type_name())),
    }
    Ok(())
}

/// `redis.log`'s arguments joined as Redis joins them.
pub fn joined(args: &MultiValue) -> String {
    let parts: Vec<String> = args
        .iter()
        .map(|value| match value {
            Value::String(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
            Value::Number(n) => format_g(*n, 14),
            Value::Integer(n) => n.to_string(),
            other => other.type_name().to_string(),
        })
        .collect();
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(lua: &Lua, code: &str) -> String {
        match lua.load(code).eval::<Value>().unwrap() {
            Value::String(s) => s.to_str().unwrap().to_string(),
            Value::Number(n) => format_g(n, 14),
            Value::Integer(n) => n.to_string(),
            other => format!("{other:?}"),
        }
    }

    fn lua() -> Lua {
        let lua = Lua::new();
        install(&lua, &lua.globals()).unwrap();
        lua
    }

    #[test]
    fn math_random_repeats_redis_picks() {
        let lua = lua();
        // What a fresh Redis 7.0 answers to EVAL "return {math.random(100), ...}".
        assert_eq!(
            eval(&lua, "return math.random(100) .. ' ' .. math.random(100) .. ' ' .. math.random(100)"),
            "40 85 36"
        );
        lua.load("math.randomseed(7)").exec().unwrap();
        let first = eval(&lua, "return math.random()");
        lua.load("math.randomseed(7)").exec().unwrap();
        assert_eq!(eval(&lua, "return math.random()"), first);
    }

    #[test]
    fn bit_works_on_32_bit_integers() {
        let lua = lua();
        assert_eq!(eval(&lua, "return bit.band(7, 3)"), "3");
        assert_eq!(eval(&lua, "return bit.bnot(0)"), "-1");
        assert_eq!(eval(&lua, "return bit.lshift(1, 31)"), "-2147483648");
        assert_eq!(eval(&lua, "return bit.rshift(-1, 28)"), "15");
        assert_eq!(eval(&lua, "return bit.arshift(-16, 2)"), "-4");
        assert_eq!(eval(&lua, "return bit.tohex(255)"), "000000ff");
        assert_eq!(eval(&lua, "return bit.tohex(-1, -4)"), "FFFF");
        assert_eq!(eval(&lua, "return bit.bxor(1, 2, 4)"), "7");
        assert_eq!(eval(&lua, "return bit.tobit(4294967297)"), "1");
    }

    #[test]
    fn cjson_encodes_as_lua_cjson_and_decodes() {
        let lua = lua();
        assert_eq!(eval(&lua, "return cjson.encode({1,2,{a=1}})"), "[1,2,{\"a\":1}]");
        assert_eq!(eval(&lua, "return cjson.encode({})"), "{}");
        assert_eq!(eval(&lua, "return cjson.encode({1.5, 'a/b', true, false})"), "[1.5,\"a\\/b\",true,false]");
        assert_eq!(eval(&lua, "return cjson.encode(0.1)"), "0.1");
        assert_eq!(eval(&lua, "return cjson.encode(1e20)"), "1e+20");
        assert_eq!(eval(&lua, "return cjson.encode(cjson.decode('{\"x\":null}'))"), "{\"x\":null}");
        assert_eq!(eval(&lua, "return cjson.decode('[1,2,null,{\"a\":\"b\"}]')[4].a"), "b");
        let sparse = lua.load("return cjson.encode({[1]=1, [100]=2})").eval::<Value>();
        assert!(sparse.unwrap_err().to_string().contains("excessively sparse array"));
        let cyclic = lua.load("local t = {}; t.t = t; return cjson.encode(t)").eval::<Value>();
        assert!(cyclic.unwrap_err().to_string().contains("excessive nesting"));
        assert!(lua.load("return cjson.decode('[1,')").eval::<Value>().is_err());
    }

    #[test]
    fn g_format_matches_c() {
        for (value, text) in
            [(100.0, "100"), (0.1, "0.1"), (1e20, "1e+20"), (1.5e-5, "1.5e-05"), (123456.789, "123456.789")]
        {
            assert_eq!(format_g(value, 14), text);
        }
        assert_eq!(format_g(0.1, 17), "0.10000000000000001");
    }
}

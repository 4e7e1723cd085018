//! `cmsgpack`, as Redis's lua_cmsgpack encodes and decodes MessagePack:
//! integral numbers in the smallest integer form, others as a 32-bit float
//! when exact and 64-bit otherwise; strings as str8/16/32; a table whose
//! keys are 1..n (or none) as an array, any other as a map; tables nested
//! deeper than 16 as nil.

use mlua::{Lua, MultiValue, Table, Value, Variadic};

const MAX_NESTING: usize = 16;
const BAD_DATA: &str = "Bad data format in input.";
const MISSING: &str = "Missing bytes in input.";

pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let cmsgpack = lua.create_table()?;
    cmsgpack.raw_set(
        "pack",
        lua.create_function(|lua, values: Variadic<Value>| {
            if values.is_empty() {
                return Err(mlua::Error::runtime("MessagePack pack needs input."));
            }
            let mut out = Vec::new();
            for value in values.iter() {
                encode(value, &mut out, 0);
            }
            lua.create_string(&out)
        })?,
    )?;
    cmsgpack.raw_set(
        "unpack",
        lua.create_function(|lua, data: mlua::LuaString| {
            let (_, values) = unpack(lua, &data.as_bytes(), 0, 0)?;
            Ok(values)
        })?,
    )?;
    cmsgpack.raw_set(
        "unpack_one",
        lua.create_function(|lua, (data, offset): (mlua::LuaString, Option<i64>)| {
            unpack_with_offset(lua, &data.as_bytes(), 1, offset.unwrap_or(0))
        })?,
    )?;
    cmsgpack.raw_set(
        "unpack_limit",
        lua.create_function(|lua, (data, limit, offset): (mlua::LuaString, i64, Option<i64>)| {
            unpack_with_offset(lua, &data.as_bytes(), limit.max(0) as usize, offset.unwrap_or(0))
        })?,
    )?;
    Ok(cmsgpack)
}

/// lua_cmsgpack's `unpack_one`/`unpack_limit`: the offset after what was
/// read (-1 at the end), then the values.
fn unpack_with_offset(lua: &Lua, data: &[u8], limit: usize, offset: i64) -> mlua::Result<MultiValue> {
    if offset < 0 || offset as usize > data.len() {
        return Err(mlua::Error::runtime("Start offset is greater than input length."));
    }
    let (end, values) = unpack(lua, data, offset as usize, limit)?;
    let next = if end >= data.len() { -1 } else { end as i64 };
    let mut result = MultiValue::new();
    result.push_back(Value::Number(next as f64));
    result.extend(values);
    Ok(result)
}

/// Decodes up to `limit` values (0: all) from `at`; returns where it
/// stopped.
fn unpack(lua: &Lua, data: &[u8], mut at: usize, limit: usize) -> mlua::Result<(usize, MultiValue)> {
    let mut values = MultiValue::new();
    while at < data.len() && (limit == 0 || values.len() < limit) {
        values.push_back(decode(lua, data, &mut at, 0)?);
    }
    Ok((at, values))
}

fn encode(value: &Value, out: &mut Vec<u8>, depth: usize) {
    match value {
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(n) => encode_int(*n, out),
        Value::Number(n) => encode_number(*n, out),
        Value::String(s) => encode_str(&s.as_bytes(), out),
        Value::Table(table) if depth < MAX_NESTING => encode_table(table, out, depth),
        // nil, functions, userdata, and tables nested too deep.
        _ => out.push(0xc0),
    }
}

fn encode_number(n: f64, out: &mut Vec<u8>) {
    if n.fract() == 0.0 && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&n) {
        encode_int(n as i64, out);
    } else if (n as f32) as f64 == n || n.is_nan() {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn encode_int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        let n = n as u64;
        match n {
            0..=0x7f => out.push(n as u8),
            0x80..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
            0x100..=0xffff => {
                out.push(0xcd);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(0xce);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            _ => {
                out.push(0xcf);
                out.extend_from_slice(&n.to_be_bytes());
            }
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -(1 << 31) {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn encode_str(bytes: &[u8], out: &mut Vec<u8>) {
    let len = bytes.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(bytes);
}

fn encode_header(len: usize, fix: u8, sixteen: u8, out: &mut Vec<u8>) {
    if len < 16 {
        out.push(fix | len as u8);
    } else if len <= 0xffff {
        out.push(sixteen);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(sixteen + 1);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
}

fn encode_table(table: &Table, out: &mut Vec<u8>, depth: usize) {
    let pairs: Vec<(Value, Value)> = table.pairs::<Value, Value>().filter_map(Result::ok).collect();
    let index = |key: &Value| match key {
        Value::Integer(i) if *i >= 1 => Some(*i as usize),
        Value::Number(n) if *n >= 1.0 && n.fract() == 0.0 => Some(*n as usize),
        _ => None,
    };
    let max = pairs.iter().map(|(key, _)| index(key)).try_fold(0, |max, i| i.map(|i| max.max(i)));
    match max {
        Some(max) if max == pairs.len() => {
            encode_header(max, 0x90, 0xdc, out);
            for i in 1..=max {
                let item: Value = table.raw_get(i).unwrap_or(Value::Nil);
                encode(&item, out, depth + 1);
            }
        }
        _ => {
            encode_header(pairs.len(), 0x80, 0xde, out);
            for (key, item) in &pairs {
                encode(key, out, depth + 1);
                encode(item, out, depth + 1);
            }
        }
    }
}

fn take<'a>(data: &'a [u8], at: &mut usize, len: usize) -> mlua::Result<&'a [u8]> {
    let bytes = data.get(*at..at.saturating_add(len)).ok_or_else(|| mlua::Error::runtime(MISSING))?;
    *at += len;
    Ok(bytes)
}

fn be(data: &[u8], at: &mut usize, len: usize) -> mlua::Result<u64> {
    Ok(take(data, at, len)?.iter().fold(0u64, |n, &b| n << 8 | b as u64))
}

fn decode(lua: &Lua, data: &[u8], at: &mut usize, depth: usize) -> mlua::Result<Value> {
    if depth > 512 {
        return Err(mlua::Error::runtime(BAD_DATA));
    }
    let kind = take(data, at, 1)?[0];
    let number = |n: f64| Ok(Value::Number(n));
    match kind {
        0x00..=0x7f => number(kind as f64),
        0xe0..=0xff => number(kind as i8 as f64),
        0xc0 => Ok(Value::Nil),
        0xc2 => Ok(Value::Boolean(false)),
        0xc3 => Ok(Value::Boolean(true)),
        0xcc => number(be(data, at, 1)? as f64),
        0xcd => number(be(data, at, 2)? as f64),
        0xce => number(be(data, at, 4)? as f64),
        0xcf => number(be(data, at, 8)? as f64),
        0xd0 => number(be(data, at, 1)? as u8 as i8 as f64),
        0xd1 => number(be(data, at, 2)? as u16 as i16 as f64),
        0xd2 => number(be(data, at, 4)? as u32 as i32 as f64),
        0xd3 => number(be(data, at, 8)? as i64 as f64),
        0xca => number(f32::from_bits(be(data, at, 4)? as u32) as f64),
        0xcb => number(f64::from_bits(be(data, at, 8)?)),
        0xa0..=0xbf | 0xd9 | 0xda | 0xdb | 0xc4 | 0xc5 | 0xc6 => {
            let len = match kind {
                0xa0..=0xbf => (kind & 0x1f) as usize,
                0xd9 | 0xc4 => be(data, at, 1)? as usize,
                0xda | 0xc5 => be(data, at, 2)? as usize,
                _ => be(data, at, 4)? as usize,
            };
            Ok(Value::String(lua.create_string(take(data, at, len)?)?))
        }
        0x90..=0x9f | 0xdc | 0xdd => {
            let len = match kind {
                0x90..=0x9f => (kind & 0x0f) as usize,
                0xdc => be(data, at, 2)? as usize,
                _ => be(data, at, 4)? as usize,
            };
            // Each element takes a byte at least: a length past the input
            // is refused before a table that large is made.
            if len > data.len() - *at {
                return Err(mlua::Error::runtime(MISSING));
            }
            let table = lua.create_table_with_capacity(len, 0)?;
            for i in 1..=len {
                table.raw_set(i, decode(lua, data, at, depth + 1)?)?;
            }
            Ok(Value::Table(table))
        }
        0x80..=0x8f | 0xde | 0xdf => {
            let len = match kind {
                0x80..=0x8f => (kind & 0x0f) as usize,
                0xde => be(data, at, 2)? as usize,
                _ => be(data, at, 4)? as usize,
            };
            if len > (data.len() - *at) / 2 {
                return Err(mlua::Error::runtime(MISSING));
            }
            let table = lua.create_table_with_capacity(0, len)?;
            for _ in 0..len {
                let key = decode(lua, data, at, depth + 1)?;
                let value = decode(lua, data, at, depth + 1)?;
                if !matches!(key, Value::Nil) {
                    table.raw_set(key, value)?;
                }
            }
            Ok(Value::Table(table))
        }
        _ => Err(mlua::Error::runtime(BAD_DATA)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(lua: &Lua, code: &str) -> Vec<u8> {
        match lua.load(code).eval::<Value>().unwrap() {
            Value::String(s) => s.as_bytes().to_vec(),
            other => panic!("{other:?}"),
        }
    }

    /// The bytes Redis 7.0's lua_cmsgpack gave for the same calls.
    #[test]
    fn packs_as_redis_does() {
        let lua = Lua::new();
        lua.globals().raw_set("cmsgpack", library(&lua).unwrap()).unwrap();
        let cases: [(&str, &[u8]); 6] = [
            (
                "return cmsgpack.pack(1, -1, 127, 128, -33, 256, 70000, -70000, 5000000000)",
                b"\x01\xff\x7f\xcc\x80\xd0\xdf\xcd\x01\x00\xce\x00\x01\x11p\xd2\xff\xfe\xee\x90\xcf\x00\x00\x00\x01*\x05\xf2\x00",
            ),
            ("return cmsgpack.pack(1.5, 0.1, nil, true, false)", b"\xca?\xc0\x00\x00\xcb?\xb9\x99\x99\x99\x99\x99\x9a\xc0\xc3\xc2"),
            ("return cmsgpack.pack({1,2,3}, {a=1}, {})", b"\x93\x01\x02\x03\x81\xa1a\x01\x90"),
            ("return cmsgpack.pack({1, nil, 3})", b"\x82\x01\x01\x03\x03"),
            ("return cmsgpack.pack(2^53, -2^40)", b"\xcf\x00 \x00\x00\x00\x00\x00\x00\xd3\xff\xff\xff\x00\x00\x00\x00\x00"),
            ("return cmsgpack.pack(1e300)", b"\xcb~7\xe4<\x88\x00u\x9c"),
        ];
        for (code, expected) in cases {
            assert_eq!(packed(&lua, code), expected, "{code}");
        }
        let long = packed(&lua, "return cmsgpack.pack(string.rep('x', 40), string.rep('y', 300))");
        assert_eq!(&long[..2], b"\xd9\x28");
        assert_eq!(&long[42..45], b"\xda\x01\x2c");
    }

    #[test]
    fn unpacks_what_it_packs_and_refuses_bad_input() {
        let lua = Lua::new();
        lua.globals().raw_set("cmsgpack", library(&lua).unwrap()).unwrap();
        let check = |code: &str, expected: &str| {
            let got: String = lua.load(code).eval().unwrap();
            assert_eq!(got, expected, "{code}");
        };
        check("local a, b, c = cmsgpack.unpack(cmsgpack.pack(1, 'x', {1, {k='v'}})); return a .. b .. c[2].k", "1xv");
        check("return table.concat({cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3))}, ',')", "1,1");
        check("return table.concat({cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 1)}, ',')", "2,2");
        check("return table.concat({cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2)}, ',')", "2,1,2");
        check("return table.concat({cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 5)}, ',')", "-1,1,2,3");
        check("return tostring(select('#', cmsgpack.unpack('')))", "0");
        // Lua 5.1 writes bytes in decimal: 0xc1 (never used), an array of
        // 3 with one element, an array claiming 2^32-1, a cut uint16.
        for bad in ["\\193", "\\147\\1", "\\221\\255\\255\\255\\255", "\\205\\1"] {
            let error = lua.load(format!("return cmsgpack.unpack('{bad}')")).eval::<Value>().unwrap_err();
            assert!(error.to_string().contains("input"), "{bad}: {error}");
        }
    }

    proptest::proptest! {
        /// Any bytes unpack to values or to an error, never a panic; and
        /// what packs unpacks and packs again to as many bytes (a map's
        /// keys may come out in another order).
        #[test]
        fn any_input_unpacks_or_is_refused(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let lua = Lua::new();
            if let Ok((_, values)) = unpack(&lua, &data, 0, 0) {
                let mut again = Vec::new();
                for value in values.iter() {
                    encode(value, &mut again, 0);
                }
                let (_, twice) = unpack(&lua, &again, 0, 0).unwrap();
                let mut third = Vec::new();
                for value in twice.iter() {
                    encode(value, &mut third, 0);
                }
                proptest::prop_assert_eq!(again.len(), third.len());
            }
        }
    }
}

#!/usr/bin/env python3
"""redis-py, unchanged, against a server on 127.0.0.1:PORT (argv[1]): Redis 7's
functions as an application uses them (FUNCTION LOAD with and without REPLACE,
FCALL and FCALL_RO, FUNCTION LIST with a pattern and the code, DUMP and RESTORE
with each policy, STATS, DELETE, FLUSH), a library in a pipeline and in a
transaction, and the errors redis-py raises, in RESP2 and RESP3. Run by hand
(pip install redis); it passes against redis-server too. Raises on the first
wrong answer."""
import sys

import redis

LIBRARY = """#!lua name=counters
local function bump(keys, args)
  local n = redis.call('incrby', keys[1], args[1])
  redis.call('expire', keys[1], args[2] or 3600)
  return n
end
redis.register_function('bump', bump)
redis.register_function{function_name='peek', callback=function(keys) return redis.call('get', keys[1]) end,
  flags={'no-writes'}, description='reads a counter'}
"""

for proto in (2, 3):
    r = redis.Redis(port=int(sys.argv[1]), protocol=proto, decode_responses=True)
    r.flushall()
    r.function_flush()
    assert r.function_load(LIBRARY) == "counters"
    try:
        r.function_load(LIBRARY)
        raise AssertionError("a library loaded twice")
    except redis.ResponseError as e:
        assert "Library 'counters' already exists" in str(e), e
    assert r.function_load(LIBRARY, replace=True) == "counters"
    assert r.fcall("bump", 1, "visits", 5) == 5
    assert r.fcall("BUMP", 1, "visits", 2, 60) == 7 and 0 < r.ttl("visits") <= 60
    assert r.fcall_ro("peek", 1, "visits") == "7"
    try:
        r.fcall_ro("bump", 1, "visits", 1)
        raise AssertionError("FCALL_RO ran a function that writes")
    except redis.ResponseError as e:
        assert "write flag using *_ro command" in str(e), e
    try:
        r.fcall("nosuch", 0)
        raise AssertionError("an unknown function ran")
    except redis.ResponseError as e:
        assert "Function not found" in str(e), e
    listed = r.function_list(library="count*", withcode=True)
    assert len(listed) == 1, listed
    entry = listed[0]
    if proto == 2:  # a flat list of names and values
        entry = dict(zip(entry[::2], entry[1::2]))
    assert entry["library_name"] == "counters" and entry["library_code"] == LIBRARY, entry
    assert len(entry["functions"]) == 2
    assert r.function_list(library="nomatch") == []
    payload = redis.Redis(port=int(sys.argv[1]), protocol=proto).function_dump()
    assert r.function_flush() and r.function_list() == []
    assert r.function_restore(payload)
    try:
        r.function_restore(payload)
        raise AssertionError("a restore collided silently")
    except redis.ResponseError as e:
        assert "already exists" in str(e), e
    assert r.function_restore(payload, "REPLACE") and r.function_restore(payload, "FLUSH")
    stats = r.function_stats()
    if proto == 2:
        stats = dict(zip(stats[::2], stats[1::2]))
    assert stats["running_script"] is None, stats
    pipe = r.pipeline(transaction=True)
    pipe.fcall("bump", 1, "visits", 1).fcall_ro("peek", 1, "visits")
    assert pipe.execute() == [8, "8"]
    pipe = r.pipeline(transaction=False)
    pipe.fcall("bump", 1, "other", 3).fcall("bump", 1, "other", 3)
    assert pipe.execute() == [3, 6]
    r.flushall()
    assert r.fcall("bump", 1, "after-flushall", 1) == 1, "FLUSHALL dropped the functions"
    assert r.function_delete("counters") and r.function_list() == []
    print(f"RESP{proto}: redis-py function calls ok")

#!/usr/bin/env python3
"""redis-py, unchanged, against a server on 127.0.0.1:PORT (argv[1]): the stream
calls an application makes (XADD with MAXLEN, XRANGE, consumer groups, XPENDING,
XCLAIM, XAUTOCLAIM, XINFO, blocking XREAD and XREADGROUP woken by another
client, XTRIM, XDEL), in RESP2 and RESP3. Run by hand (pip install redis);
it passes against redis-server too. Raises on the first wrong answer."""
import redis, threading, time, sys
for proto in (2, 3):
    r = redis.Redis(port=int(sys.argv[1]), protocol=proto, decode_responses=True)
    r.flushall()
    a = r.xadd("orders", {"item": "book", "qty": "2"})
    b = r.xadd("orders", {"item": "pen", "qty": "1"}, maxlen=1000, approximate=True)
    assert r.xlen("orders") == 2
    rng = r.xrange("orders")
    assert rng[0][0] == a and rng[0][1] == {"item": "book", "qty": "2"}, rng
    assert r.xrevrange("orders", count=1)[0][0] == b
    r.xgroup_create("orders", "billing", id="0")
    got = r.xreadgroup("billing", "alice", {"orders": ">"}, count=10)
    entries = got["orders"][0] if proto == 3 else got[0][1]
    assert [e[0] for e in entries] == [a, b], got
    p = r.xpending("orders", "billing")
    assert p["pending"] == 2 and p["consumers"][0]["name"] == "alice", p
    rows = r.xpending_range("orders", "billing", min="-", max="+", count=10)
    assert rows[0]["message_id"] == a and rows[0]["times_delivered"] == 1, rows
    claimed = r.xclaim("orders", "billing", "bob", min_idle_time=0, message_ids=[a])
    assert claimed[0][0] == a
    auto = r.xautoclaim("orders", "billing", "carol", min_idle_time=0, start_id="0-0", count=10, justid=True)
    assert auto == [a, b], auto
    assert r.xack("orders", "billing", a, b) == 2
    info = r.xinfo_stream("orders")
    assert info["length"] == 2 and info["first-entry"][0] == a, info
    groups = r.xinfo_groups("orders")
    assert groups[0]["name"] == "billing" and groups[0]["pending"] == 0, groups
    cons = r.xinfo_consumers("orders", "billing")
    assert {c["name"] for c in cons} == {"alice", "bob", "carol"}, cons
    # Blocking reads woken by an XADD from another client.
    result = {}
    def reader():
        rr = redis.Redis(port=int(sys.argv[1]), protocol=proto, decode_responses=True)
        result["xread"] = rr.xread({"orders": "$"}, block=5000)
    t = threading.Thread(target=reader); t.start(); time.sleep(0.3)
    c = r.xadd("orders", {"item": "ink"})
    t.join()
    got = result["xread"]
    first = got["orders"][0] if proto == 3 else got[0][1]
    assert first[0][0] == c, got
    def consumer():
        rr = redis.Redis(port=int(sys.argv[1]), protocol=proto, decode_responses=True)
        result["group"] = rr.xreadgroup("billing", "dave", {"orders": ">"}, block=5000, count=1)
    r.xgroup_setid("orders", "billing", "$")
    t = threading.Thread(target=consumer); t.start(); time.sleep(0.3)
    d = r.xadd("orders", {"item": "paper"})
    t.join()
    got = result["group"]
    first = got["orders"][0] if proto == 3 else got[0][1]
    assert first[0][0] == d, got
    assert r.xtrim("orders", maxlen=1, approximate=True) == 0 and r.xtrim("orders", maxlen=1, approximate=False) == 3 and r.xlen("orders") == 1
    assert r.xdel("orders", d) == 1 and r.xlen("orders") == 0
    assert r.xgroup_destroy("orders", "billing") == 1
    print(f"redis-py {redis.__version__} RESP{proto}: streams ok")

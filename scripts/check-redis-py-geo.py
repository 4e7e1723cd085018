#!/usr/bin/env python3
"""redis-py, unchanged, against a server on 127.0.0.1:PORT (argv[1]): the geo
calls a store locator makes (GEOADD with NX/XX/CH, GEODIST, GEOPOS, GEOHASH,
GEOSEARCH by radius and box with WITHDIST/WITHCOORD/WITHHASH, COUNT ANY,
GEOSEARCHSTORE with STOREDIST, GEORADIUS and GEORADIUSBYMEMBER), in RESP2 and
RESP3. Run by hand (pip install redis); it passes against redis-server too.
Raises on the first wrong answer."""
import redis, sys
for proto in (2, 3):
    r = redis.Redis(port=int(sys.argv[1]), protocol=proto, decode_responses=True)
    r.flushall()
    assert r.geoadd("sicily", [13.361389, 38.115556, "Palermo", 15.087269, 37.502669, "Catania"]) == 2
    assert r.geoadd("sicily", [13.361389, 38.115556, "Palermo"], nx=True) == 0
    assert r.geoadd("sicily", [13.5, 38.1, "Palermo"], xx=True, ch=True) == 1
    r.geoadd("sicily", [13.361389, 38.115556, "Palermo"])
    assert r.geodist("sicily", "Palermo", "Catania") == 166274.1516
    assert r.geodist("sicily", "Palermo", "Catania", unit="km") == 166.2742
    assert r.geodist("sicily", "Palermo", "nowhere") is None
    pos = r.geopos("sicily", "Palermo", "nowhere")
    assert abs(pos[0][0] - 13.361389) < 1e-5 and abs(pos[0][1] - 38.115556) < 1e-5 and pos[1] is None, pos
    assert r.geohash("sicily", "Palermo", "Catania") == ["sqc8b49rny0", "sqdtr74hyu0"]
    near = r.geosearch("sicily", longitude=15, latitude=37, radius=200, unit="km",
                       withdist=True, withcoord=True, withhash=True, sort="ASC")
    assert [n[0] for n in near] == ["Catania", "Palermo"] and near[0][1] == 56.4413, near
    assert near[0][2] == 3479447370796909 and abs(near[0][3][0] - 15.087269) < 1e-5, near
    assert r.geosearch("sicily", member="Palermo", width=400, height=400, unit="km", sort="DESC") == ["Catania", "Palermo"]
    assert len(r.geosearch("sicily", longitude=15, latitude=37, radius=200, unit="km", count=1, any=True)) == 1
    assert r.geosearchstore("near", "sicily", longitude=15, latitude=37, radius=100, unit="km", storedist=True) == 1
    stored = [tuple(pair) for pair in r.zrange("near", 0, -1, withscores=True)]
    assert stored == [("Catania", 56.4412578701582)], stored
    assert r.georadius("sicily", 15, 37, 200, unit="km", sort="ASC") == ["Catania", "Palermo"]
    assert r.georadius("sicily", 15, 37, 200, unit="km", store="copy") == 2 and r.zcard("copy") == 2
    assert r.georadiusbymember("sicily", "Palermo", 10, unit="km") == ["Palermo"]
    try:
        r.geoadd("sicily", [200, 100, "nowhere"])
        raise AssertionError("an invalid point was taken")
    except redis.ResponseError as e:
        assert "invalid longitude,latitude pair" in str(e), e
    print(f"RESP{proto}: redis-py geo calls ok")

#!/usr/bin/env python3
"""GEO commands, scaledkv-server vs redis-server, side by side.

redis-benchmark sends geo commands with -c 50 and -n N at each pipeline
depth, in this order on one server (each __rand_int__ is its own random
number below KEYSPACE, written <rand>e-5 so that with the default
100,000 points fall at random in a 1° x 1° square, a region of about
111 x 111 km, 8 places a square kilometre):
  geoadd      GEOADD places <rand>e-5 <rand>e-5 p:<rand>: up to KEYSPACE
              places in one index
  geopos      GEOPOS places p:<rand>
  geodist     GEODIST places p:<rand> p:<rand> km
  near-1km    GEOSEARCH places FROMLONLAT <rand point> BYRADIUS 1 km
              COUNT 10 ASC: the ten nearest within a kilometre
  box-2km     GEOSEARCH places FROMLONLAT <rand point> BYBOX 2 2 km
              WITHDIST: everything in a 2 km square, with distances
against Redis 7 without persistence and with `appendfsync always`, and
ScaledKV in `sync` mode (every write durable before its reply), each on a
fresh data directory on each medium, REPEATS times interleaved. Medians of
req/s, p50/p99 latency and the server's CPU time per request.

Every process started here is stopped by its PID. Results are printed and
appended to bench-results/geo-<timestamp>.md.
"""

import compare_redis

RUN = compare_redis.Comparison("geo", n=200000, keyspace=100000)

POINT = ["__rand_int__e-5", "__rand_int__e-5"]
WORKLOADS = {
    "geoadd": ["GEOADD", "places"] + POINT + ["p:__rand_int__"],
    "geopos": ["GEOPOS", "places", "p:__rand_int__"],
    "geodist": ["GEODIST", "places", "p:__rand_int__", "p:__rand_int__", "km"],
    "near-1km": ["GEOSEARCH", "places", "FROMLONLAT"] + POINT + ["BYRADIUS", "1", "km", "COUNT", "10", "ASC"],
    "box-2km": ["GEOSEARCH", "places", "FROMLONLAT"] + POINT + ["BYBOX", "2", "2", "km", "WITHDIST"],
}


def bench(server, name, pipeline):
    return RUN.bench(server, WORKLOADS[name], pipeline)


def main():
    RUN.run("GEO", list(WORKLOADS), bench)


if __name__ == "__main__":
    main()

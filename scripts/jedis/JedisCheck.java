import java.util.*;
import redis.clients.jedis.*;
import redis.clients.jedis.args.GeoUnit;
import redis.clients.jedis.params.GeoRadiusParam;
import redis.clients.jedis.params.SortingParams;
import redis.clients.jedis.resps.FunctionStats;
import redis.clients.jedis.resps.GeoRadiusResponse;
import redis.clients.jedis.resps.LibraryInfo;
import redis.clients.jedis.params.ScanParams;
import redis.clients.jedis.params.XAddParams;
import redis.clients.jedis.params.XReadGroupParams;
import redis.clients.jedis.resps.StreamEntry;
import redis.clients.jedis.resps.Tuple;

/**
 * Jedis, unchanged, against a server on 127.0.0.1:PORT (scripts/check-jedis.sh): the calls
 * YCSB's Redis binding makes, pipelines, transactions, scripts, functions, streams, geo, SORT, a pool, RESP2 and RESP3. Exits 1 on the
 * first wrong answer.
 */
public class JedisCheck {
  static void expect(boolean ok, String what) {
    if (!ok) {
      System.err.println("FAILED: " + what);
      System.exit(1);
    }
    System.out.println("ok: " + what);
  }

  static void check(Jedis j, String proto) {
    String p = proto + " ";
    j.flushAll();
    expect("PONG".equals(j.ping()), p + "PING");
    expect("OK".equals(j.set("greeting", "hello")) && "hello".equals(j.get("greeting")), p + "SET/GET");
    Map<String, String> record = new HashMap<>();
    for (int i = 0; i < 10; i++) record.put("field" + i, "v" + i + "x".repeat(100));
    expect("OK".equals(j.hmset("user1", record)), p + "HMSET (YCSB insert)");
    expect(j.hgetAll("user1").equals(record), p + "HGETALL (YCSB read)");
    expect(j.hmget("user1", "field3", "nope").equals(Arrays.asList(record.get("field3"), null)), p + "HMGET");
    j.zadd("_indices", "user1".hashCode(), "user1");
    j.zadd("_indices", "user2".hashCode(), "user2");
    List<String> scanned = j.zrangeByScore("_indices", "user1".hashCode(), Double.POSITIVE_INFINITY, 0, 10);
    expect(scanned.contains("user1"), p + "ZRANGEBYSCORE with LIMIT (YCSB scan)");
    List<Tuple> scored = j.zrangeWithScores("_indices", 0, -1);
    expect(scored.size() == 2 && scored.get(0).getScore() <= scored.get(1).getScore(), p + "ZRANGE WITHSCORES");
    expect(j.incr("counter") == 1 && j.incrBy("counter", 41) == 42, p + "INCR/INCRBY");
    expect(j.expire("counter", 100) == 1 && j.ttl("counter") > 90, p + "EXPIRE/TTL");
    expect("OK".equals(j.mset("a", "1", "b", "2")) && j.mget("a", "b", "c").equals(Arrays.asList("1", "2", null)), p + "MSET/MGET");
    expect(j.lpush("list", "x", "y", "z") == 3 && j.lrange("list", 0, -1).equals(Arrays.asList("z", "y", "x")), p + "LPUSH/LRANGE");
    expect(j.sadd("set", "m1", "m2") == 2 && j.smembers("set").equals(new HashSet<>(Arrays.asList("m1", "m2"))), p + "SADD/SMEMBERS");
    expect(j.del("a", "b", "nope") == 2 && !j.exists("a"), p + "DEL/EXISTS");

    Pipeline pipe = j.pipelined();
    List<Response<String>> replies = new ArrayList<>();
    for (int i = 0; i < 1000; i++) pipe.set("k" + i, "v" + i);
    for (int i = 0; i < 1000; i++) replies.add(pipe.get("k" + i));
    pipe.sync();
    boolean all = true;
    for (int i = 0; i < 1000; i++) all &= ("v" + i).equals(replies.get(i).get());
    expect(all, p + "a pipeline of 1000 SETs and 1000 GETs");

    Transaction tx = j.multi();
    tx.set("tx", "1");
    tx.incr("tx");
    List<Object> done = tx.exec();
    expect(done.size() == 2 && "2".equals(j.get("tx")), p + "MULTI/EXEC");

    // Scripts: EVAL, then SCRIPT LOAD and EVALSHA, as client libraries run them.
    j.del("sc", "sh");
    String script = "local n = redis.call('incr', KEYS[1]); redis.call('hset', KEYS[2], 'last', n); return {n, ARGV[1]}";
    Object evaluated = j.eval(script, Arrays.asList("sc", "sh"), Arrays.asList("tag"));
    expect(Arrays.asList(1L, "tag").equals(evaluated) && "1".equals(j.hget("sh", "last")), p + "EVAL");
    String sha = j.scriptLoad(script);
    expect(j.scriptExists(sha, "0000000000000000000000000000000000000000").equals(Arrays.asList(true, false)), p + "SCRIPT LOAD/EXISTS");
    Object bySha = j.evalsha(sha, Arrays.asList("sc", "sh"), Arrays.asList("again"));
    expect(Arrays.asList(2L, "again").equals(bySha) && "2".equals(j.hget("sh", "last")), p + "EVALSHA");

    // Streams: a producer appends, a consumer group reads and acknowledges.
    j.del("events");
    Map<String, String> event = new HashMap<>();
    event.put("kind", "click");
    event.put("n", "1");
    StreamEntryID first = j.xadd("events", StreamEntryID.NEW_ENTRY, event);
    StreamEntryID second = j.xadd("events", XAddParams.xAddParams().maxLen(1000).approximateTrimming(), event);
    expect(j.xlen("events") == 2 && second.compareTo(first) > 0, p + "XADD/XLEN");
    List<StreamEntry> range = j.xrange("events", "-", "+");
    expect(range.size() == 2 && range.get(0).getID().equals(first) && range.get(0).getFields().equals(event), p + "XRANGE");
    expect("OK".equals(j.xgroupCreate("events", "workers", new StreamEntryID(0, 0), false)), p + "XGROUP CREATE");
    var read = j.xreadGroup("workers", "w1", XReadGroupParams.xReadGroupParams().count(10),
        Collections.singletonMap("events", StreamEntryID.XREADGROUP_UNDELIVERED_ENTRY));
    expect(read.size() == 1 && read.get(0).getValue().size() == 2 && j.xpending("events", "workers").getTotal() == 2,
        p + "XREADGROUP");
    expect(j.xack("events", "workers", first, second) == 2 && j.xpending("events", "workers").getTotal() == 0,
        p + "XACK/XPENDING");

    // Geo: the points of Redis's documentation, searched as a store locator would.
    j.del("sicily");
    expect(j.geoadd("sicily", 13.361389, 38.115556, "Palermo") == 1
        && j.geoadd("sicily", 15.087269, 37.502669, "Catania") == 1, p + "GEOADD");
    Double km = j.geodist("sicily", "Palermo", "Catania", GeoUnit.KM);
    expect(km != null && Math.abs(km - 166.2742) < 1e-9, p + "GEODIST " + km);
    List<GeoCoordinate> where = j.geopos("sicily", "Palermo", "nowhere");
    expect(where.size() == 2 && Math.abs(where.get(0).getLongitude() - 13.361389) < 1e-5 && where.get(1) == null,
        p + "GEOPOS");
    expect(j.geohash("sicily", "Palermo").equals(Collections.singletonList("sqc8b49rny0")), p + "GEOHASH");
    List<GeoRadiusResponse> near = j.georadius("sicily", 15, 37, 200, GeoUnit.KM,
        GeoRadiusParam.geoRadiusParam().withDist().withCoord().sortAscending());
    expect(near.size() == 2 && near.get(0).getMemberByString().equals("Catania")
        && Math.abs(near.get(0).getDistance() - 56.4413) < 1e-9
        && Math.abs(near.get(1).getCoordinate().getLatitude() - 38.115556) < 1e-5, p + "GEORADIUS WITHDIST WITHCOORD ASC");
    List<GeoRadiusResponse> boxed = j.geosearch("sicily", new GeoCoordinate(15, 37), 400, 400, GeoUnit.KM);
    expect(boxed.size() == 2, p + "GEOSEARCH BYBOX");

    // SORT: by itself, by weights in other keys with GET, stored.
    j.del("ids", "sorted");
    j.rpush("ids", "3", "1", "2");
    j.mset("w_1", "30", "w_2", "20", "w_3", "10", "name_1", "one", "name_3", "three");
    expect(j.sort("ids").equals(List.of("1", "2", "3")), p + "SORT");
    expect(j.sort("ids", new SortingParams().by("w_*").get("#", "name_*").limit(0, 2))
        .equals(Arrays.asList("3", "three", "2", null)), p + "SORT BY GET LIMIT");
    expect(j.sort("ids", new SortingParams().alpha().desc(), "sorted") == 3
        && j.lrange("sorted", 0, -1).equals(List.of("3", "2", "1")), p + "SORT ALPHA DESC STORE");

    // Functions (Redis 7): a library loaded, called, listed, dumped, restored, deleted.
    j.functionFlush();
    String library = "#!lua name=jlib\n"
        + "redis.register_function('jincr', function(keys, args) return redis.call('incrby', keys[1], args[1]) end)\n"
        + "redis.register_function{function_name='jget', callback=function(keys, args) "
        + "return redis.call('get', keys[1]) end, flags={'no-writes'}}";
    j.del("fc");
    expect("jlib".equals(j.functionLoad(library)), p + "FUNCTION LOAD");
    expect(Long.valueOf(5).equals(j.fcall("jincr", List.of("fc"), List.of("5"))), p + "FCALL");
    expect("5".equals(j.fcallReadonly("jget", List.of("fc"), List.of())), p + "FCALL_RO");
    List<LibraryInfo> libraries = j.functionList();
    expect(libraries.size() == 1 && "jlib".equals(libraries.get(0).getLibraryName())
        && libraries.get(0).getFunctions().size() == 2, p + "FUNCTION LIST");
    FunctionStats stats = j.functionStats();
    expect(stats.getRunningScript() == null && stats.getEngines().containsKey("LUA"), p + "FUNCTION STATS");
    byte[] dump = j.functionDump();
    expect("OK".equals(j.functionFlush()) && "OK".equals(j.functionRestore(dump)), p + "FUNCTION DUMP, FLUSH, RESTORE");
    expect(Long.valueOf(7).equals(j.fcall("jincr", List.of("fc"), List.of("2"))), p + "FCALL after RESTORE");
    expect("OK".equals(j.functionDelete("jlib")) && j.functionList().isEmpty(), p + "FUNCTION DELETE");

    ScanParams params = new ScanParams().match("k1*").count(100);
    Set<String> seen = new HashSet<>();
    String cursor = ScanParams.SCAN_POINTER_START;
    do {
      var page = j.scan(cursor, params);
      seen.addAll(page.getResult());
      cursor = page.getCursor();
    } while (!cursor.equals(ScanParams.SCAN_POINTER_START));
    expect(seen.size() == 111, p + "SCAN MATCH k1* (111 keys)");
  }

  public static void main(String[] args) {
    int port = Integer.parseInt(args[0]);
    HostAndPort at = new HostAndPort("127.0.0.1", port);
    try (Jedis j = new Jedis(at, DefaultJedisClientConfig.builder().build())) {
      check(j, "RESP2");
    }
    JedisClientConfig resp3 = DefaultJedisClientConfig.builder().protocol(RedisProtocol.RESP3).build();
    try (Jedis j = new Jedis(at, resp3)) {
      check(j, "RESP3");
    }
    try (JedisPool pool = new JedisPool(new JedisPoolConfig(), at, resp3)) {
      for (int i = 0; i < 3; i++) {
        try (Jedis j = pool.getResource()) {
          j.set("pooled", "yes" + i);
          expect(("yes" + i).equals(j.get("pooled")), "JedisPool connection " + i);
        }
      }
    }
    System.out.println("Jedis: every check passed");
  }
}

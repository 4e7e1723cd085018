// spymemcached, a Java memcached client, unchanged against a memcached
// server: `java MemcachedCheck PORT binary|text [PASSWORD]` makes a client's
// calls (stores, CAS, counters, appends, touch, bulk gets, stats, async
// futures) over the binary or the text protocol, with SASL PLAIN when a
// password is given, and exits 1 on the first wrong answer.

import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import net.spy.memcached.AddrUtil;
import net.spy.memcached.CASResponse;
import net.spy.memcached.CASValue;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.ConnectionFactoryBuilder.Protocol;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.auth.AuthDescriptor;
import net.spy.memcached.auth.PlainCallbackHandler;

public class MemcachedCheck {
    static int checks = 0;

    static void check(String what, Object got, Object expected) {
        checks++;
        if (expected == null ? got != null : !expected.equals(got)) {
            System.err.println("FAIL " + what + ": got " + got + ", expected " + expected);
            System.exit(1);
        }
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        boolean binary = args[1].equals("binary");
        ConnectionFactoryBuilder builder = new ConnectionFactoryBuilder()
                .setProtocol(binary ? Protocol.BINARY : Protocol.TEXT)
                .setOpTimeout(10_000);
        if (args.length > 2) {
            builder.setAuthDescriptor(new AuthDescriptor(new String[] {"PLAIN"},
                    new PlainCallbackHandler("user", args[2])));
        }
        MemcachedClient mc = new MemcachedClient(builder.build(), AddrUtil.getAddresses("127.0.0.1:" + port));
        try {
            run(mc, binary);
        } finally {
            mc.shutdown(5, TimeUnit.SECONDS);
        }
        System.out.println("spymemcached " + args[1] + (args.length > 2 ? " with SASL" : "") + ": " + checks + " checks passed");
    }

    static void run(MemcachedClient mc, boolean binary) throws Exception {
        check("flush", mc.flush().get(), true);
        check("set", mc.set("greeting", 0, "hello").get(), true);
        check("get", mc.get("greeting"), "hello");
        check("get missing", mc.get("nothing"), null);
        check("add taken", mc.add("greeting", 0, "x").get(), false);
        check("add", mc.add("fresh", 0, "new").get(), true);
        check("replace missing", mc.replace("nothing", 0, "x").get(), false);
        check("replace", mc.replace("fresh", 0, "newer").get(), true);
        check("append", mc.append(0, "greeting", ", world").get(), true);
        check("prepend", mc.prepend(0, "greeting", "> ").get(), true);
        check("joined", mc.get("greeting"), "> hello, world");

        CASValue<Object> read = mc.gets("fresh");
        check("gets", read.getValue(), "newer");
        check("cas", mc.cas("fresh", read.getCas(), "swapped"), CASResponse.OK);
        check("cas stale", mc.cas("fresh", read.getCas(), "again"), CASResponse.EXISTS);
        check("cas missing", mc.cas("nothing", 1, "x"), CASResponse.NOT_FOUND);
        check("after cas", mc.get("fresh"), "swapped");

        check("incr missing", mc.incr("hits", 1), -1L);
        check("incr with default", mc.incr("hits", 1, 10), 10L);
        check("incr", mc.incr("hits", 5), 15L);
        check("decr", mc.decr("hits", 20), 0L);
        check("counter", mc.get("hits").toString().trim(), "0");

        check("delete", mc.delete("fresh").get(), true);
        check("delete missing", mc.delete("fresh").get(), false);
        check("touch", mc.touch("greeting", 3600).get(), true);
        check("touch missing", mc.touch("nothing", 3600).get(), false);
        if (binary) {
            CASValue<Object> touched = mc.getAndTouch("greeting", 3600);
            check("get and touch", touched.getValue(), "> hello, world");
        }
        if (!binary) {
            // -1 is in the past; the binary protocol's expiration is
            // unsigned (0xffffffff: a Unix time in 2106).
            check("expired", mc.set("gone", -1, "x").get(), true);
            check("expired get", mc.get("gone"), null);
        }

        // Async stores in flight together, then one bulk get (quiet GETKQs
        // and a NOOP on the binary protocol, one `get` line on the text).
        List<Future<Boolean>> stores = new ArrayList<>();
        List<String> keys = new ArrayList<>();
        for (int i = 0; i < 200; i++) {
            keys.add("bulk:" + i);
            stores.add(mc.set("bulk:" + i, 0, "value " + i));
        }
        for (Future<Boolean> f : stores) {
            check("async set", f.get(), true);
        }
        keys.add("bulk:missing");
        Map<String, Object> bulk = mc.getBulk(keys);
        check("bulk size", bulk.size(), 200);
        check("bulk value", bulk.get("bulk:123"), "value 123");

        // Random bytes: the client's transcoder would compress repeated ones.
        java.util.Random random = new java.util.Random(7);
        byte[] big = new byte[500_000];
        random.nextBytes(big);
        check("big set", mc.set("big", 0, big).get(), true);
        check("big get", Arrays.equals((byte[]) mc.get("big"), big), true);
        byte[] huge = new byte[2 << 20];
        random.nextBytes(huge);
        if (binary) {
            check("huge set", mc.set("big", 0, huge).get(), false);
        } else {
            // The client raises the text protocol's SERVER_ERROR.
            String refusal;
            try {
                refusal = "stored: " + mc.set("big", 0, huge).get();
            } catch (java.util.concurrent.ExecutionException e) {
                refusal = e.getCause().getMessage();
            }
            check("huge set", refusal, "SERVER_ERROR object too large for cache");
        }
        check("huge drops the old", mc.get("big"), null);

        Map<InetSocketAddress, String> versions = new java.util.HashMap<>();
        mc.getVersions().forEach((k, v) -> versions.put((InetSocketAddress) k, v));
        check("versions", versions.size(), 1);
        Map<String, String> stats = mc.getStats().values().iterator().next();
        check("stats has cmd_get", stats.containsKey("cmd_get"), true);
    }
}

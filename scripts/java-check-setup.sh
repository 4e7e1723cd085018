# Sourced by the Java client checks (check-jedis.sh, check-spymemcached.sh)
# with $client (a name for messages), $project (the directory of its
# pom.xml, which only resolves the client library) and $main (its check's
# .java file): installs Debian's maven and a JDK if missing, resolves the
# library into $cp (or prints a NOTICE and exits 0 when Maven Central
# cannot be reached), compiles the check into $out/classes, builds the
# server, and stops every PID added to `pids` on exit.
if ! command -v mvn >/dev/null || ! command -v javac >/dev/null || ! command -v python3 >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven default-jdk-headless python3
fi
out="target/$(basename "$project")-check"
mkdir -p "$out"
if ! mvn -q -f "$project/pom.xml" dependency:build-classpath -Dmdep.outputFile="$PWD/$out/classpath.txt" >"$out/maven.log" 2>&1; then
    echo "NOTICE: Maven could not resolve $client (see $out/maven.log); skipping the $client check"
    exit 0
fi
cp="$(cat "$out/classpath.txt")"
javac -nowarn -Xlint:-deprecation -cp "$cp" -d "$out/classes" "$main"
cargo build --release -q -p scaledkv-server

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

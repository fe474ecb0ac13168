#!/usr/bin/env bash
# make bench: dlock's waiting benchmarks on a throwaway cluster.
#
#   release-to-grant latency with 1 and 16 waiters on one name
#   expiry-to-grant latency (nobody releases)
#   change-to-watcher latency: how soon dlock.watch() returns after the
#   commit of a grant or a release, with 1 and 100 watchers on one name (and
#   for 100, when the last of them returns)
#   cycle rate (acquire + release) of one hot name with 8 and 32 clients
#
# BENCH_QUICK=1 runs a few seconds in all, to check that the benchmark works
# (make test does this); figures from it mean nothing.
#
# Also writes its figures as tab-separated files into BENCH_OUT (default
# bench/results): waiting.tsv, hot-name.tsv, every handoff sample in
# handoff-samples.tsv, the run's date and mode in run-info.tsv, and the chart
# handoff-latency.svg (bench/charts.sh; skipped without gnuplot).

. "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

if [ "${BENCH_QUICK:-0}" = 1 ]; then
    CYCLES=20 EXPIRY_CYCLES=5 WATCH_CYCLES=10 SECONDS_PER_RUN=1
else
    CYCLES=${CYCLES:-500} EXPIRY_CYCLES=${EXPIRY_CYCLES:-100} WATCH_CYCLES=${WATCH_CYCLES:-200}
    SECONDS_PER_RUN=${SECONDS_PER_RUN:-15}
fi

DEBIAN_PACKAGES+=(gnuplot-nox)    # the charts (bench/charts.sh)
ensure_packages
build_and_install

start_cluster 54330 max_connections=120
BIN=$WORK/bin
mkdir -p "$BIN"
cc -O2 -Wall -Wextra -Werror -I"$("$PG_CONFIG" --includedir)" -o "$BIN/handoff" \
    "$SRC_DIR/bench/handoff.c" "$SRC_DIR/test/lib/dlock_client.c" -L"$("$PG_CONFIG" --libdir)" -lpq
cp "$SRC_DIR"/bench/*.sql "$BIN/"
[ "$(id -un)" = "$RUN_USER" ] || chown -R "$RUN_USER": "$BIN"

run() { as_run_user env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres PGDATABASE=postgres "$@"; }
run psql -X -q -c 'CREATE EXTENSION dlock'
CONN="host=$PGHOST port=$PGPORT user=postgres dbname=postgres"

OUT=${BENCH_OUT:-$SRC_DIR/bench/results}
mkdir -p "$OUT"
printf 'date\t%s\nmode\t%s\npostgres\t%s\ncpus\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" \
    "$([ "${BENCH_QUICK:-0}" = 1 ] && echo quick || echo full)" \
    "$(run psql -X -At -c 'SHOW server_version')" "$(nproc)" >"$OUT/run-info.tsv"
printf 'workload\tmedian_ms\tp99_ms\tmax_ms\tsamples\n' >"$OUT/waiting.tsv"
printf 'kind\twaiters\tsample_ms\n' >"$OUT/handoff-samples.tsv"
printf 'clients\tcycles_per_s\tmean_ms\n' >"$OUT/hot-name.tsv"
# handoff_samples KIND WAITERS: the samples of handoff's last run, into the table
handoff_samples() {
    awk -v k="$1" -v w="$2" '{ print k "\t" w "\t" $1 }' "$BIN/samples" >>"$OUT/handoff-samples.tsv"
}

printf '\n%-44s %12s %12s %12s %8s\n' "workload" "median ms" "p99 ms" "max ms" "samples"
for waiters in 1 16; do
    read -r med p99 max n < <(run env HANDOFF_SAMPLES="$BIN/samples" "$BIN/handoff" release "$CONN" "$waiters" "$CYCLES")
    printf '%-44s %12s %12s %12s %8s\n' "release-to-grant, $waiters waiter(s)" "$med" "$p99" "$max" "$n"
    printf '%s\t%s\t%s\t%s\t%s\n' "release-to-grant, $waiters waiter(s)" "$med" "$p99" "$max" "$n" >>"$OUT/waiting.tsv"
    handoff_samples release "$waiters"
done
read -r med p99 max n < <(run env HANDOFF_SAMPLES="$BIN/samples" "$BIN/handoff" expiry "$CONN" "$EXPIRY_CYCLES" 50)
printf '%-44s %12s %12s %12s %8s\n' "expiry-to-grant (server clock), 1 waiter" "$med" "$p99" "$max" "$n"
printf '%s\t%s\t%s\t%s\t%s\n' "expiry-to-grant (server clock), 1 waiter" "$med" "$p99" "$max" "$n" >>"$OUT/waiting.tsv"
handoff_samples expiry 1
for watchers in 1 100; do
    { read -r med p99 max n; read -r lmed lp99 lmax ln; } < <(run "$BIN/handoff" watch "$CONN" "$watchers" "$WATCH_CYCLES")
    printf '%-44s %12s %12s %12s %8s\n' "change-to-watcher, $watchers watcher(s)" "$med" "$p99" "$max" "$n"
    printf '%s\t%s\t%s\t%s\t%s\n' "change-to-watcher, $watchers watcher(s)" "$med" "$p99" "$max" "$n" >>"$OUT/waiting.tsv"
    if [ "$watchers" -gt 1 ]; then
        printf '%-44s %12s %12s %12s %8s\n' "change-to-last-watcher, $watchers watchers" "$lmed" "$lp99" "$lmax" "$ln"
        printf '%s\t%s\t%s\t%s\t%s\n' "change-to-last-watcher, $watchers watchers" "$lmed" "$lp99" "$lmax" "$ln" >>"$OUT/waiting.tsv"
    fi
done

printf '\n%-44s %12s %12s\n' "workload" "cycles/s" "mean ms"
for clients in 8 32; do
    out=$(run pgbench -n -M prepared -c "$clients" -j 2 -T "$SECONDS_PER_RUN" \
        -f "$BIN/hot_name.sql" 2>&1)
    tps=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' <<<"$out" | head -n 1)
    lat=$(sed -nE 's/^latency average = ([0-9.]+) ms/\1/p' <<<"$out")
    if [ -z "$tps" ]; then echo "$out" >&2; exit 1; fi
    printf '%-44s %12s %12s\n' "one hot name, $clients clients" "$tps" "$lat"
    printf '%s\t%s\t%s\n' "$clients" "$tps" "$lat" >>"$OUT/hot-name.tsv"
done
echo
BENCH_OUT=$OUT bash "$SRC_DIR/bench/charts.sh" handoff

# The queue leaves nothing behind
left=$(run psql -X -At -c "SELECT count(*) FROM dlock.locks")
echo
echo "dlock locks left in pg_locks after the runs: $left"
[ "$left" = 0 ]

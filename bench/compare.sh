#!/usr/bin/env bash
# dlock side by side with what people use instead, in one run on one
# throwaway cluster (and one throwaway Redis), so that every method sees the
# same machine, the same moment and the same settings.
#
#   lock cycles (acquire + release) on random names out of 10,000 with 1, 8
#   and 32 clients, and on one hot name with 8 clients, each with
#   synchronous_commit on and off; and random names with 8 clients and
#   fsync = off, where no method waits for the disk (CPU cost alone); methods:
#     durable floor       two one-row UPDATE transactions per cycle
#     advisory locks      pg_advisory_xact_lock; pg_advisory_lock + unlock
#     ShedLock-style      upsert that takes an expired row; UPDATE to release
#     PL/pgSQL lease      hand-written lease with tokens (plpgsql_lease.sql)
#     dlock               try_acquire (hot name: acquire) + release
#     Redis               SET NX PX + compare-and-delete (redis_lock.c), AOF
#                         appendfsync always (for "on"), everysec ("off"),
#                         no (fsync = off)
#   guarded-write cycles (acquire + one guarded UPDATE of an account row +
#   release, three transactions) on random names out of 1,000 with 1, 8 and
#   32 clients, the write with synchronous_commit on; methods:
#     durable floor       three one-row UPDATE transactions per cycle
#     PL/pgSQL lease      token compared in the UPDATE's WHERE clause
#     dlock               try_acquire + UPDATE ... WHERE dlock.fence() +
#                         release, with dlock.durable_grants on, and off (the
#                         grant then commits with synchronous_commit off)
#     Redis + PostgreSQL  SET NX PX, UPDATE, compare-and-delete
#                         (redis_pg_guarded.c), AOF appendfsync always
#   sets of 2 and of 8 consecutive names out of 10,000 with 8 clients:
#     durable floor       two one-row UPDATE transactions per cycle
#     dlock               acquire_all + release_all; N acquires in ascending
#                         order in one transaction and N releases in one; N
#                         acquires and N releases, each its own transaction
#   an UPDATE of 100,000 rows with and without a fence in its WHERE clause,
#   and the guard's own cost per row (a count(*) with and without it)
#   dlock's cycle rate with 1,000 versus 1,000,000 names in lease_state
#   dlock.lease_state's size and HOT-update share after many cycles
#   shared leases and semaphores, each holder with its own lease:
#     shared cycles (acquire + release) of one name with 8 readers, with
#     synchronous_commit on, and with fsync = off: the durable floor;
#     pg_advisory_xact_lock_shared; a PL/pgSQL shared lease with tokens
#     (plpgsql_lease.sql); dlock.acquire(shared => true) + release; and, for
#     reference, dlock's exclusive cycle on random names
#     permits of a semaphore of 4 on one name with 16 clients: the durable
#     floor; dlock.acquire(max_holders => 4) + release; Redis, a sorted-set
#     semaphore in one EVAL + ZREM (redis_lock.c), AOF appendfsync always
#     a writer's wait for an exclusive lock of a name that 8 readers keep
#     taking shared (writer_wait.c): advisory locks, the PL/pgSQL leases
#     (the writer polls), dlock (it queues)
#   the SQL edition (sql-edition/dlock.sql) against the C edition, each in a
#   database of its own, both with their default settings and
#   synchronous_commit on: cycles on random names out of 10,000 with 1 and 8
#   clients (try_acquire + release), and on one hot name with 8 clients
#   (acquire, waiting, + release); methods: the durable floor, the C edition
#   (CREATE EXTENSION dlock, not preloaded, as in every other section), the
#   SQL edition installed and owned by a role without superuser rights, as
#   on a managed service, whose clients connect as that role
#
# Methods run in turn (A B C A B C ...), REPS times each with a fixed
# duration; the tables show the median of the repetitions.
#
# The lock-cycle and guarded-write tables also go, one row a method and
# workload, into cycle-rate.tsv in BENCH_OUT (default bench/results), with the
# run's date and mode in compare-info.tsv, and as the chart cycle-rate.svg
# (bench/charts.sh).
#
# Needs dlock installed (make install).  Installs redis-server, libhiredis-dev,
# libpq-dev and gnuplot-nox when they are missing.  BENCH_QUICK=1 runs in about
# a minute to show that the benchmark works; its figures mean nothing.
# SECONDS_PER_RUN, REPS, FENCE_REPS, SCALE_REPS, SCALE_WARMUP_SECONDS, POLL_MS
# and CHURN_SECONDS override the defaults; BENCH_SECTIONS picks some of the
# parts: cycles guarded sets fence churn scale kinds editions (churn's table
# counts what ran before it).  Section kinds also writes kinds.tsv (its
# cycle-rate rows), writer-samples.tsv (every writer wait, in ms) and
# kinds-info.tsv, and the charts kinds-rate.svg and writer-wait.svg; section
# editions writes editions.tsv and editions-info.tsv.  PG_PORT and REDIS_PORT
# set the ports (the cluster listens on a unix socket only, Redis on
# 127.0.0.1).

. "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

if [ "${BENCH_QUICK:-0}" = 1 ]; then
    SECONDS_PER_RUN=1 REPS=1 FENCE_REPS=1 SCALE_REPS=1 SCALE_WARMUP_SECONDS=1 CHURN_SECONDS=1
    SMALL_NAMES=1000 BIG_NAMES=20000 CHURN_TARGET=1000000
else
    SECONDS_PER_RUN=${SECONDS_PER_RUN:-6} REPS=${REPS:-3} FENCE_REPS=${FENCE_REPS:-11}
    SCALE_REPS=${SCALE_REPS:-7} SCALE_WARMUP_SECONDS=${SCALE_WARMUP_SECONDS:-40}
    CHURN_SECONDS=${CHURN_SECONDS:-150}
    SMALL_NAMES=1000 BIG_NAMES=1000000 CHURN_TARGET=1000000
fi
# Polling interval of the methods that cannot wait (ShedLock-style, PL/pgSQL
# lease, Redis) on the hot name: retry 1 ms after a refused acquire
POLL_MS=${POLL_MS:-1}
NAMES=10000
PG_PORT=${PG_PORT:-54332}
REDIS_PORT=${REDIS_PORT:-54379}
BENCH_DIR=$SRC_DIR/bench
T0=$(date +%s)

# --- packages -----------------------------------------------------------------

. "$BENCH_DIR/servers.sh"
ensure_packages
ensure_bench_packages redis-server libhiredis-dev libpq-dev gnuplot-nox
if [ ! -f "$("$PG_CONFIG" --sharedir)/extension/dlock.control" ]; then
    echo "dlock is not installed in $("$PG_CONFIG" --bindir): run make install first" >&2
    exit 1
fi

# --- cluster, Redis, programs -------------------------------------------------

# The server log would otherwise get one ERROR line per refused acquire.
# shared_buffers holds a million names' rows (about 300 MB with the index),
# as on any server that keeps that many names busy; the default 128 MB would
# measure the operating system's page cache instead.
start_cluster "$PG_PORT" max_connections=100 shared_buffers=1GB \
    log_min_messages=fatal log_min_error_statement=panic

# Redis keeps its files in the cluster's work directory, so stop it first
trap 'stop_redis; stop_cluster' EXIT
trap 'exit 130' INT TERM

run() {
    as_run_user env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres \
        PGDATABASE="${DB:-postgres}" "$@"
}
psql_do() { run psql -X -q -v ON_ERROR_STOP=1 "$@"; }
psql_val() { run psql -X -At -v ON_ERROR_STOP=1 -c "$1"; }

mkdir -p "$WORK/bin" "$WORK/sql" "$WORK/logs"
cp "$BENCH_DIR"/sql/*.sql "$BENCH_DIR/plpgsql_lease.sql" "$WORK/sql/"
cp "$SRC_DIR/sql-edition/dlock.sql" "$WORK/sql/sql_edition.sql"
# each with the client library the test and bench programs share
CLIENT_LIB=$SRC_DIR/test/lib/dlock_client.c
cc -O2 -Wall -Wextra -Werror -pthread -I"$("$PG_CONFIG" --includedir)" \
    -o "$WORK/bin/redis_lock" "$BENCH_DIR/redis_lock.c" "$CLIENT_LIB" \
    -L"$("$PG_CONFIG" --libdir)" -lhiredis -lpq
cc -O2 -Wall -Wextra -Werror -pthread -I"$("$PG_CONFIG" --includedir)" \
    -o "$WORK/bin/redis_pg_guarded" "$BENCH_DIR/redis_pg_guarded.c" "$CLIENT_LIB" \
    -L"$("$PG_CONFIG" --libdir)" -lhiredis -lpq
cc -O2 -Wall -Wextra -Werror -I"$("$PG_CONFIG" --includedir)" \
    -o "$WORK/bin/writer_wait" "$BENCH_DIR/writer_wait.c" "$CLIENT_LIB" \
    -L"$("$PG_CONFIG" --libdir)" -lpq
[ "$(id -un)" = "$RUN_USER" ] || chown -R "$RUN_USER": "$WORK/bin" "$WORK/sql" "$WORK/logs"

start_redis "$WORK/redis" "$REDIS_PORT" || exit 1

say "setting up"
psql_do -v names="$NAMES" -f "$WORK/sql/bench_setup.sql"

# --- one run of one method ----------------------------------------------------

# latency_stats DIR: "mean_ms p99_ms" of the cycles in pgbench's
# per-transaction logs (column 3, microseconds; refused cycles say "failed")
latency_stats() {
    cat "$1"/tx* | awk '$3 != "failed" { print $3 }' | sort -n |
        awk '{ v[NR] = $1; sum += $1 }
             END {
                 if (NR == 0) { print "nan nan"; exit }
                 i = int(0.99 * NR); if (i < 0.99 * NR) i++    # ceil: nearest rank
                 printf "%.3f %.3f\n", sum / NR / 1000, v[i] / 1000
             }'
}

# pg_run SCRIPT CLIENTS SYNC NAMES POLL: one pgbench run; prints
# "ops_per_s mean_ms p99_ms misses".  POLL 0: a refused acquire ends the
# cycle, which counts in ops/s as a cycle that did no work (a miss).  POLL > 0:
# the client polls every POLL ms until granted; misses are the refused polls,
# and a cycle's latency includes them.  DB selects the database, DURATION
# overrides SECONDS_PER_RUN, NO_CHECKPOINT=1 skips the checkpoint before it,
# PG_OPTIONS adds settings to the sessions' PGOPTIONS ("-c name=value ..."),
# PG_DEFINE one more variable of the script ("name=value"), PG_ROLE the role
# pgbench connects as (default postgres; the checkpoint is postgres's).
pg_run() {
    local script=$1 clients=$2 sync=$3 names=$4 poll=$5
    local dir out tries=1 jobs=$(($2 < 2 ? $2 : 2))
    local processed failed retries tps ops mean p99
    [ "$poll" -gt 0 ] && tries=0
    # A directory per run for pgbench's per-transaction logs (pgbench writes
    # them as the run user)
    dir=$(as_run_user mktemp -d "$WORK/logs/run.XXXXXX")
    # A checkpoint now rather than in the middle of some method's run (not
    # worth its time in quick mode)
    [ "${BENCH_QUICK:-0}" = 1 ] || [ "${NO_CHECKPOINT:-0}" = 1 ] || psql_do -c CHECKPOINT
    if ! out=$(cd "$dir" && run env PGOPTIONS="-c synchronous_commit=$sync${PG_OPTIONS:+ $PG_OPTIONS}" \
            PGUSER="${PG_ROLE:-postgres}" pgbench -n -M prepared -c "$clients" -j "$jobs" -T "${DURATION:-$SECONDS_PER_RUN}" \
            -D names="$names" -D pause_ms="$poll" ${PG_DEFINE:+-D "$PG_DEFINE"} --max-tries="$tries" \
            -l --log-prefix="$dir/tx" -f "$WORK/sql/$script" 2>&1); then
        echo "$out" >&2
        return 1
    fi
    processed=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' <<<"$out")
    failed=$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1/p' <<<"$out")
    retries=$(sed -nE 's/^total number of retries: ([0-9]+).*/\1/p' <<<"$out")
    tps=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' <<<"$out" | head -n 1)
    if [ -z "$processed" ] || [ -z "$tps" ] || [ "$processed" = 0 ]; then
        echo "$out" >&2
        return 1
    fi
    read -r mean p99 < <(latency_stats "$dir")
    rm -rf "$dir"
    if [ "$tries" = 1 ]; then
        # tps counts granted cycles only; add the refused ones
        ops=$(awk -v t="$tps" -v p="$processed" -v f="${failed:-0}" 'BEGIN { printf "%.1f", t * (p + f) / p }')
        echo "$ops $mean $p99 ${failed:-0}"
    else
        echo "$tps $mean $p99 ${retries:-0}"
    fi
}

# redis_run CLIENTS NAMES POLL: the same for Redis
redis_run() {
    "$WORK/bin/redis_lock" 127.0.0.1 "$REDIS_PORT" "$1" "$SECONDS_PER_RUN" "$2" "$3"
}

# thousands N: N with commas between groups of three digits
thousands() { sed -E ':a; s/([0-9])([0-9]{3})($|,)/\1,\2\3/; ta' <<<"$1"; }

# median: of the numbers on stdin, one a line (empty lines ignored)
median() {
    awk NF | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# section NAME: whether BENCH_SECTIONS (default: all) names this part
section() { [[ " ${BENCH_SECTIONS:-cycles guarded sets fence churn scale kinds editions} " == *" $1 "* ]]; }

# start_tsv: (once a run) a new cycle-rate.tsv and compare-info.tsv in OUT,
# for the first section that writes rows
TSV_STARTED=no
start_tsv() {
    [ "$TSV_STARTED" = no ] || return 0
    TSV_STARTED=yes
    OUT=${BENCH_OUT:-$SRC_DIR/bench/results}
    mkdir -p "$OUT"
    write_info "$OUT/compare-info.tsv"
    printf 'workload\tclients\tnames\tsetting\tmethod\tlabel\tops_per_s\tmean_ms\tp99_ms\tmisses\n' \
        >"$OUT/cycle-rate.tsv"
}

# write_info FILE: the run's date, mode, versions and settings, for the charts
write_info() {
    printf '%s\t%s\n' date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
        mode "$([ "${BENCH_QUICK:-0}" = 1 ] && echo quick || echo full)" \
        postgres "$(psql_val 'SHOW server_version')" redis "$(redis-server --version | awk '{ print $3 }' | sed 's/^v=//')" \
        cpus "$(nproc)" seconds_per_run "$SECONDS_PER_RUN" reps "$REPS" >"$1"
}

# --- lock-cycle tables ------------------------------------------------------

LABELS=() CMDS=()

# alternate: run CMDS in turn REPS times; RESULTS[i] collects method i's lines
alternate() {
    local rep i
    RESULTS=()
    for ((rep = 1; rep <= REPS; rep++)); do
        for i in "${!CMDS[@]}"; do
            RESULTS[i]+="$(eval "${CMDS[i]}")"$'\n'
        done
    done
}

# print_table: one table of LABELS and the medians of RESULTS; the first
# method is the durable floor.  With TSV_ROW set (the workload's columns),
# also adds a row a method, named by KEYS, to cycle-rate.tsv (or to the file
# TSV_FILE names)
print_table() {
    local i col floor_ops ops mean p99 misses
    printf '| %-44s | %9s | %8s | %8s | %7s | %8s |\n' method ops/s "mean ms" "p99 ms" "x floor" misses
    printf '|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..46})" ----------: ---------: ---------: --------: ---------:
    for i in "${!LABELS[@]}"; do
        for col in 1 2 3 4; do
            printf -v "c$col" '%s' "$(awk -v c="$col" 'NF { print $c }' <<<"${RESULTS[i]}" | median)"
        done
        ops=$c1 mean=$c2 p99=$c3 misses=$c4
        [ "$i" = 0 ] && floor_ops=$ops
        printf '| %-44s | %9.0f | %8.3f | %8.3f | %7.2f | %8.0f |\n' "${LABELS[i]}" \
            "$ops" "$mean" "$p99" "$(awk -v a="$ops" -v b="$floor_ops" 'BEGIN { print a / b }')" "$misses"
        [ -z "${TSV_ROW:-}" ] || printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$TSV_ROW" "${KEYS[i]}" \
            "${LABELS[i]}" "$ops" "$mean" "$p99" "$misses" >>"${TSV_FILE:-$OUT/cycle-rate.tsv}"
    done
}

# cycle_table CLIENTS NAMES SYNC: SYNC is on or off (synchronous_commit), or
# cpu: synchronous_commit on with fsync off, so that commits write their WAL
# but nobody waits for the disk
cycle_table() {
    local clients=$1 names=$2 sync=$3 pgsync=$3 poll=0 aof what dl setting
    case $sync in
        on) aof=always setting="synchronous_commit=on" ;;
        off) aof=everysec setting="synchronous_commit=off" ;;
        cpu) aof=no pgsync=on setting="fsync=off: CPU cost alone" ;;
    esac
    if [ "$names" = 1 ]; then
        poll=$POLL_MS
        what="one hot name, $clients clients"
        dl="dlock.acquire (waits) + release"
    else
        what="random names out of $(thousands "$names"), $clients client$([ "$clients" = 1 ] || echo s)"
        dl="dlock.try_acquire + release"
    fi
    say "$what, $setting"
    redis CONFIG SET appendfsync "$aof" >/dev/null
    if [ "$sync" = cpu ]; then
        psql_do -c 'ALTER SYSTEM SET fsync = off' -c 'SELECT pg_reload_conf()' >/dev/null
    fi
    LABELS=("durable floor: 2 x one-row UPDATE"
            "pg_advisory_xact_lock (1 transaction)"
            "pg_advisory_lock + pg_advisory_unlock"
            "ShedLock-style upsert + UPDATE"
            "PL/pgSQL lease with token"
            "$dl"
            "Redis SET NX PX + EVAL delete, AOF $aof")
    CMDS=("pg_run floor.sql $clients $pgsync $names 0"
          "pg_run advisory_xact.sql $clients $pgsync $names 0"
          "pg_run advisory_session.sql $clients $pgsync $names 0"
          "pg_run shedlock.sql $clients $pgsync $names $poll"
          "pg_run plpgsql.sql $clients $pgsync $names $poll"
          "pg_run $([ "$names" = 1 ] && echo dlock_wait.sql || echo dlock_try.sql) $clients $pgsync $names $poll"
          "redis_run $clients $names $poll")
    KEYS=(floor advisory_xact advisory_session shedlock plpgsql dlock redis)
    alternate
    if [ "$sync" = cpu ]; then
        psql_do -c 'ALTER SYSTEM RESET fsync' -c 'SELECT pg_reload_conf()' >/dev/null
    fi
    echo
    echo "### $what, $setting (Redis: appendfsync $aof)"
    echo
    TSV_ROW="$what"$'\t'"$clients"$'\t'"$names"$'\t'"$sync" print_table
}

echo "# dlock compared, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "PostgreSQL $(psql_val 'SHOW server_version'), $(redis-server --version | awk '{ print $1, $3 }'), $(nproc) CPUs."
echo "Default settings but for shared_buffers = 1GB and the log level. $SECONDS_PER_RUN s per run, methods in turn,"
echo "$REPS run(s) of each, medians shown. pgbench -M prepared; Redis: redis_lock.c, a thread per client."
echo
echo "* ops/s: acquire + release cycles per second. Random names: a refused acquire (the name"
echo "  was held by another client) ends its cycle; it counts in ops/s as a cycle that did no"
echo "  work and in *misses*. Hot name: the methods that cannot wait poll every $POLL_MS ms until"
echo "  granted; *misses* counts the refused polls, and latency includes them."
echo "* mean, p99: latency of a granted cycle (acquire to end of release), from pgbench's"
echo "  per-transaction log or the Redis client. x floor: ops/s divided by the durable floor's."

if section cycles; then
    start_tsv
    for sync in on off; do
        for clients in 1 8 32; do
            [ "${BENCH_QUICK:-0}" = 1 ] && [ "$clients" != 8 ] && continue
            [ "${BENCH_QUICK:-0}" = 1 ] && [ "$sync" = off ] && continue
            cycle_table "$clients" "$NAMES" "$sync"
        done
        [ "${BENCH_QUICK:-0}" = 1 ] && [ "$sync" = on ] && continue
        cycle_table 8 1 "$sync"
    done
    cycle_table 8 "$NAMES" cpu
fi

# --- guarded-write cycles -----------------------------------------------------

# guarded_table CLIENTS: acquire + one guarded UPDATE of the name's account +
# release, three transactions, on random names out of GUARDED_NAMES (one
# account each); every method's write commits with synchronous_commit on
GUARDED_NAMES=1000
guarded_table() {
    local clients=$1 what
    what="guarded write, random names out of $(thousands "$GUARDED_NAMES"), $clients client$([ "$clients" = 1 ] || echo s)"
    say "$what"
    redis CONFIG SET appendfsync always >/dev/null
    LABELS=("durable floor: 3 x one-row UPDATE"
            "PL/pgSQL lease + UPDATE checking its token"
            "dlock + fenced UPDATE, durable_grants = on"
            "dlock + fenced UPDATE, durable_grants = off"
            "Redis lock (AOF always) + PostgreSQL UPDATE")
    # durable_grants = off: the session runs with synchronous_commit off, so
    # that the grant commits without waiting; the fenced UPDATE's transaction
    # sets it on for itself (guarded_dlock_lazy.sql)
    CMDS=("pg_run guarded_floor.sql $clients on $GUARDED_NAMES 0"
          "pg_run guarded_plpgsql.sql $clients on $GUARDED_NAMES 0"
          "pg_run guarded_dlock.sql $clients on $GUARDED_NAMES 0"
          "PG_OPTIONS='-c dlock.durable_grants=off' pg_run guarded_dlock_lazy.sql $clients off $GUARDED_NAMES 0"
          "run env PGOPTIONS='-c synchronous_commit=on' \"\$WORK/bin/redis_pg_guarded\" 127.0.0.1 $REDIS_PORT $clients \$SECONDS_PER_RUN $GUARDED_NAMES ''")
    KEYS=(floor plpgsql dlock dlock_grants_off redis_pg)
    alternate
    echo
    echo "### $what (fenced write: synchronous_commit on; Redis: appendfsync always)"
    echo
    TSV_ROW="$what"$'\t'"$clients"$'\t'"$GUARDED_NAMES"$'\t'guarded print_table
}

if section guarded; then
    start_tsv
    # The setting must reach dlock through PGOPTIONS before its library loads
    if [ "$(run env PGOPTIONS='-c dlock.durable_grants=off' psql -X -At -v ON_ERROR_STOP=1 \
            -c "SELECT dlock.fence('k1', 0)" -c 'SHOW dlock.durable_grants' | tail -n 1)" != off ]; then
        echo "dlock.durable_grants = off in PGOPTIONS did not take effect" >&2
        exit 1
    fi
    for clients in 1 8 32; do
        [ "${BENCH_QUICK:-0}" = 1 ] && [ "$clients" != 8 ] && continue
        guarded_table "$clients"
    done
    echo
    echo "Guarded write: a cycle is acquire, one UPDATE of the name's account row and release, three"
    echo "transactions; the UPDATE is fenced (dlock.fence, or the PL/pgSQL lease's token in its WHERE"
    echo "clause) but for Redis, which has no token PostgreSQL could check."
fi

# --- sets ----------------------------------------------------------------------

# set_scripts N: pgbench scripts for a set of N consecutive names out of
# NAMES, in ascending order: acquire_all + release_all (two transactions);
# N acquires in one transaction + N releases in one; N acquires and N
# releases, each its own transaction
set_scripts() {
    local n=$1 i range
    range="ARRAY(SELECT 'k' || i FROM generate_series(:k, :k + $((n - 1))) i)"
    {
        echo "-- dlock.acquire_all of $n names, then release_all: two transactions"
        echo "\\set k random(1, :names - $((n - 1)))"
        echo "SELECT count(*) FROM dlock.acquire_all($range, '10 s', 'client-' || :client_id);"
        echo "SELECT dlock.release_all($range, 'client-' || :client_id);"
    } >"$WORK/sql/set_all_$n.sql"
    {
        echo "-- $n dlock.acquire calls in ascending order in one transaction, then the releases in one"
        echo "\\set k random(1, :names - $((n - 1)))"
        echo "BEGIN;"
        for ((i = 0; i < n; i++)); do
            echo "SELECT token FROM dlock.acquire('k' || (:k + $i), '10 s', 'client-' || :client_id);"
        done
        echo "COMMIT;"
        echo "BEGIN;"
        for ((i = 0; i < n; i++)); do
            echo "SELECT dlock.release('k' || (:k + $i), 'client-' || :client_id);"
        done
        echo "COMMIT;"
    } >"$WORK/sql/set_singles_tx_$n.sql"
    {
        echo "-- $n dlock.acquire calls in ascending order, then the releases, each its own transaction"
        echo "\\set k random(1, :names - $((n - 1)))"
        for ((i = 0; i < n; i++)); do
            echo "SELECT token FROM dlock.acquire('k' || (:k + $i), '10 s', 'client-' || :client_id);"
        done
        for ((i = 0; i < n; i++)); do
            echo "SELECT dlock.release('k' || (:k + $i), 'client-' || :client_id);"
        done
    } >"$WORK/sql/set_singles_$n.sql"
    [ "$(id -un)" = "$RUN_USER" ] || chown "$RUN_USER": "$WORK"/sql/set_*.sql
}

# sets_table N: lock cycles of sets of N names, 8 clients, synchronous_commit on
sets_table() {
    local n=$1 what
    what="sets of $n consecutive names out of $(thousands "$NAMES"), 8 clients"
    say "$what"
    set_scripts "$n"
    LABELS=("durable floor: 2 x one-row UPDATE"
            "acquire_all + release_all (2 transactions)"
            "$n x acquire, sorted, in 1 transaction + $n releases in 1"
            "$n x acquire, sorted + $n x release ($((2 * n)) transactions)")
    CMDS=("pg_run floor.sql 8 on $NAMES 0"
          "pg_run set_all_$n.sql 8 on $NAMES 0"
          "pg_run set_singles_tx_$n.sql 8 on $NAMES 0"
          "pg_run set_singles_$n.sql 8 on $NAMES 0")
    KEYS=(floor acquire_all singles_tx singles)
    alternate
    echo
    echo "### $what, synchronous_commit=on (ops/s: whole sets acquired and released)"
    echo
    # not in cycle-rate.tsv: its chart compares lock methods on single names
    TSV_ROW= print_table
}

if section sets; then
    start_tsv
    for n in 2 8; do
        [ "${BENCH_QUICK:-0}" = 1 ] && [ "$n" != 2 ] && continue
        sets_table "$n"
    done
    echo
    echo "Sets: every method holds all N names at once before it releases any; acquire_all takes"
    echo "them in one call and one transaction, under one token."
fi
if section cycles || section guarded || section sets; then
    echo
    BENCH_OUT=$OUT bash "$SRC_DIR/bench/charts.sh" cycles
fi

# --- fenced UPDATE ------------------------------------------------------------
if section fence; then
    say "UPDATE of 100,000 rows with and without a fence"
    TOKEN=$(psql_val "SELECT token FROM dlock.try_acquire('fence', '1 h', 'writer')")
    PTOKEN=$(psql_val "SELECT plpgsql_acquire('fence', '1 h', 'writer')")
    LABELS=("no fence"
            "WHERE dlock.fence(name, token)"
            "WHERE EXISTS (PL/pgSQL lease row ... FOR SHARE)")
    FENCE_SQL=("UPDATE bench_fence SET v = v + 1"
               "UPDATE bench_fence SET v = v + 1 WHERE dlock.fence('fence', $TOKEN)"
               "UPDATE bench_fence SET v = v + 1 WHERE EXISTS (SELECT FROM plpgsql_lease
                  WHERE name = 'fence' AND token = $PTOKEN AND expires_at > clock_timestamp() FOR SHARE)")

    # plan_ms SQL: server execution time of one statement over bench_fence;
    # checks that it went through all 100,000 rows
    plan_ms() {
        local plan
        plan=$(psql_val "EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) $1")
        if ! grep -q 'Seq Scan on bench_fence (actual rows=100000 ' <<<"$plan"; then
            echo "$plan" >&2
            return 1
        fi
        sed -nE 's/^Execution Time: ([0-9.]+) ms$/\1/p' <<<"$plan"
    }
    # update_ms SQL: the same after a VACUUM, so that every UPDATE starts from
    # the same table state
    update_ms() {
        psql_do -c 'VACUUM bench_fence'
        plan_ms "$1"
    }

    # time_in_turn FUNCTION SQL...: FENCE_REPS rounds of FUNCTION over each SQL
    # in turn; RESULTS[i] collects SQL i's times
    time_in_turn() {
        local fn=$1 rep i
        shift
        RESULTS=()
        for ((rep = 1; rep <= FENCE_REPS; rep++)); do
            for ((i = 1; i <= $#; i++)); do
                RESULTS[i - 1]+="$("$fn" "${!i}")"$'\n'
            done
        done
    }

    # Warm-up: the first UPDATE finds no free space yet, unlike all later ones
    if [ "${BENCH_QUICK:-0}" != 1 ]; then
        for sql in "${FENCE_SQL[@]}"; do update_ms "$sql" >/dev/null; done
    fi
    time_in_turn update_ms "${FENCE_SQL[@]}"
    echo
    echo "### UPDATE of all 100,000 rows of a table, one statement (EXPLAIN ANALYZE, TIMING OFF)"
    echo
    echo "Median of $FENCE_REPS runs each, in turn, each after a VACUUM of the table."
    echo
    printf '| %-48s | %9s | %9s | %9s | %7s |\n' "guard in the WHERE clause" "median ms" "min ms" "max ms" "x none"
    printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..50})" ----------: ----------: ----------: --------:
    for i in "${!LABELS[@]}"; do
        med=$(median <<<"${RESULTS[i]}")
        [ "$i" = 0 ] && base=$med
        printf '| %-48s | %9.1f | %9.1f | %9.1f | %7.2f |\n' "${LABELS[i]}" "$med" \
            "$(awk NF <<<"${RESULTS[i]}" | sort -g | head -n 1)" "$(awk NF <<<"${RESULTS[i]}" | sort -g | tail -n 1)" \
            "$(awk -v a="$med" -v b="$base" 'BEGIN { print a / b }')"
    done

    # The guard alone: the same rows counted instead of updated, so that the
    # guard's cost per row is not lost in the noise of writing 100,000 rows.
    # Every count has a filter on each row (v >= 0, always true), so that they
    # differ only in the guard.
    COUNT_SQL=()
    for sql in "${FENCE_SQL[@]}"; do
        guard=${sql#UPDATE bench_fence SET v = v + 1}
        COUNT_SQL+=("SELECT count(*) FROM bench_fence WHERE v >= 0${guard/ WHERE / AND }")
    done
    # Warm-up: the first scan after the UPDATEs sets the rows' hint bits
    for sql in "${COUNT_SQL[@]}"; do plan_ms "$sql" >/dev/null; done
    time_in_turn plan_ms "${COUNT_SQL[@]}"
    echo
    echo "The guard alone: SELECT count(*) of the same 100,000 rows, WHERE v >= 0 and each guard"
    echo "(median of $FENCE_REPS runs); *ns per row* is the difference from no guard, per row."
    echo
    printf '| %-48s | %9s | %11s |\n' "guard in the WHERE clause" "median ms" "ns per row"
    printf '|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..50})" ----------: ------------:
    for i in "${!LABELS[@]}"; do
        med=$(median <<<"${RESULTS[i]}")
        [ "$i" = 0 ] && base=$med
        printf '| %-48s | %9.1f | %11.1f |\n' "${LABELS[i]}" "$med" \
            "$(awk -v a="$med" -v b="$base" 'BEGIN { print (a - b) * 1e6 / 100000 }')"
    done
    psql_val "SELECT dlock.release('fence', 'writer'), plpgsql_release('fence', 'writer')" >/dev/null
fi

# --- many cycles: lease_state's size and HOT share -----------------------------
if section churn; then
    grants() { DB=${1:-postgres} psql_val 'SELECT last_value FROM dlock.token_seq'; }

    say "dlock cycles until $(thousands "$CHURN_TARGET") grants or $CHURN_SECONDS s"
    churn_start=$(date +%s)
    churn_ops=()
    while :; do
        left=$((CHURN_SECONDS - ($(date +%s) - churn_start)))
        [ "$left" -gt 0 ] && [ "$(grants)" -lt "$CHURN_TARGET" ] || break
        churn_ops+=("$(DURATION=$((left < 30 ? left : 30)) pg_run dlock_try.sql 8 off "$NAMES" 0 | awk '{ print $1 }')")
    done
    echo
    echo "### Tables after the whole run, $(thousands "$(grants)") dlock grants (tokens issued) in all"
    echo
    if [ ${#churn_ops[@]} -gt 0 ]; then
        echo "Every method's table had all the cycles of the tables above; dlock's also had the"
        echo "grants of its setup (10,000 names) and $(($(date +%s) - churn_start)) s of try_acquire + release"
        echo "on random names out of $(thousands "$NAMES") with 8 clients, synchronous_commit=off, at"
        echo "$(printf '%s\n' "${churn_ops[@]}" | median | xargs printf '%.0f') cycles/s (median of ${#churn_ops[@]} runs). Counters from pg_stat_user_tables since initdb."
    else
        echo "Every method's table had all the cycles of the tables above, which took dlock past"
        echo "$(thousands "$CHURN_TARGET") grants without extra cycles. Counters from pg_stat_user_tables since initdb."
    fi
    echo
    psql_do -c 'SELECT pg_stat_force_next_flush()' >/dev/null
    echo "| table | rows | heap | indexes | updates | HOT updates | HOT share | autovacuums |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    psql_val "SELECT format('| %s | %s | %s | %s | %s | %s | %s | %s |',
                    s.relid::regclass, c.n, pg_size_pretty(pg_relation_size(s.relid)),
                    pg_size_pretty(pg_indexes_size(s.relid)), s.n_tup_upd, s.n_tup_hot_upd,
                    coalesce(round(100.0 * s.n_tup_hot_upd / nullif(s.n_tup_upd, 0), 1) || ' %', '-'),
                    s.autovacuum_count)
                FROM pg_stat_user_tables s,
                     LATERAL (SELECT (xpath('/row/n/text()',
                              query_to_xml(format('SELECT count(*) AS n FROM %s', s.relid::regclass),
                                           false, true, '')))[1]::text AS n) c
               WHERE s.relname IN ('lease_state', 'plpgsql_lease', 'shedlock', 'bench_floor')
               ORDER BY s.relname = 'lease_state' DESC, s.relname"
fi

# --- cycle rate with few and many names -----------------------------------------
if section scale; then
    RESULTS=() LABELS=() CMDS=() FILL_S=()
    for n in "$SMALL_NAMES" "$BIG_NAMES"; do
        say "dlock.lease_state with $(thousands "$n") names"
        psql_do -c "CREATE DATABASE names_$n"
        DB=names_$n psql_do -f "$WORK/sql/helpers.sql"
        start=$(date +%s.%N)
        DB=names_$n psql_do -v names="$n" -f "$WORK/sql/dlock_fill.sql"
        FILL_S+=("$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')")
        DB=names_$n psql_do -c 'VACUUM ANALYZE'
    done
    # Measured between checkpoints, in steady state.  Right after a checkpoint
    # the first change of each page writes its full image to the WAL: with a
    # million names that is nearly every change until every page has had one,
    # which is the cost of updating any large table at random, not dlock's.  So
    # one checkpoint, a warm-up that changes (nearly) every page once, and no
    # checkpoints between the runs (the section ends well within
    # checkpoint_timeout and max_wal_size).
    for sync in on off; do
        [ "${BENCH_QUICK:-0}" = 1 ] && [ "$sync" = off ] && continue
        for n in "$SMALL_NAMES" "$BIG_NAMES"; do
            LABELS+=("$n|$sync")
            CMDS+=("DB=names_$n NO_CHECKPOINT=1 pg_run dlock_try.sql 1 $sync $n 0")
        done
    done
    say "dlock cycles with $(thousands "$SMALL_NAMES") versus $(thousands "$BIG_NAMES") names"
    [ "${BENCH_QUICK:-0}" = 1 ] || psql_do -c CHECKPOINT
    for n in "$SMALL_NAMES" "$BIG_NAMES"; do
        DB=names_$n NO_CHECKPOINT=1 DURATION=$SCALE_WARMUP_SECONDS \
            pg_run dlock_try.sql 8 off "$n" 0 >/dev/null
    done
    # One client runs are cheap, and the disk's noise is large next to the
    # difference sought: more repetitions
    REPS=$SCALE_REPS alternate
    echo
    echo "### dlock.try_acquire + release on random names, 1 client, by the number of names in lease_state"
    echo
    echo "Each set of names in its own database, granted beforehand with a 1 ms ttl (so all free);"
    echo "median of $SCALE_REPS runs of each, in turn, after one checkpoint and a ${SCALE_WARMUP_SECONDS} s warm-up of"
    echo "each (8 clients), with no checkpoint between the runs: steady state, not the burst of"
    echo "full-page images that follows every checkpoint."
    echo "Filling took ${FILL_S[0]} s for $(thousands "$SMALL_NAMES") names and ${FILL_S[1]} s for $(thousands "$BIG_NAMES") names (batches of 2,000 grants per commit)."
    echo
    printf '| %9s | %11s | %9s | %8s | %8s | %6s | %10s | %10s |\n' names sync_commit ops/s "mean ms" "p99 ms" misses heap indexes
    echo "|---:|---|---:|---:|---:|---:|---:|---:|"
    for i in "${!LABELS[@]}"; do
        n=${LABELS[i]%|*} sync=${LABELS[i]#*|}
        for col in 1 2 3 4; do
            printf -v "c$col" '%s' "$(awk -v c="$col" 'NF { print $c }' <<<"${RESULTS[i]}" | median)"
        done
        read -r heap idx < <(DB=names_$n psql_val "SELECT replace(pg_size_pretty(pg_relation_size('dlock.lease_state')), ' ', ''),
                                                          replace(pg_size_pretty(pg_indexes_size('dlock.lease_state')), ' ', '')" | tr '|' ' ')
        printf '| %9s | %11s | %9.0f | %8.3f | %8.3f | %6.0f | %10s | %10s |\n' "$(thousands "$n")" "$sync" "$c1" "$c2" "$c3" "$c4" "$heap" "$idx"
    done

    echo
fi

# --- shared leases and semaphores ----------------------------------------------

# Readers of the shared tables, clients of the semaphore and its size; the
# writer's timeout, how long it holds the name and pauses between cycles
READERS=8 SEM_CLIENTS=16 SEM_PERMITS=4
WRITER_TIMEOUT_MS=1000 WRITER_HOLD_MS=1 WRITER_PAUSE_MS=10

# ops_of I: the median ops/s of method I in RESULTS
ops_of() { awk 'NF { print $1 }' <<<"${RESULTS[$1]}" | median; }

# versus I J...: a line with method I's ops/s over each method J's
versus() {
    local i=$1 j line=""
    shift
    for j in "$@"; do
        line+="${line:+; }$(awk -v a="$(ops_of "$i")" -v b="$(ops_of "$j")" 'BEGIN { printf "%.2fx", a / b }') ${LABELS[j]}"
    done
    echo
    echo "${LABELS[i]}, cycles/s against: $line."
}

# shared_table SYNC: shared cycles of one name, READERS clients; SYNC is on
# or cpu (synchronous_commit on with fsync off)
shared_table() {
    local sync=$1 setting what
    case $sync in
        on) setting="synchronous_commit=on" ;;
        cpu) setting="fsync=off: CPU cost alone" ;;
    esac
    what="shared leases of one name, $READERS readers"
    say "$what, $setting"
    [ "$sync" != cpu ] || psql_do -c 'ALTER SYSTEM SET fsync = off' -c 'SELECT pg_reload_conf()' >/dev/null
    LABELS=("durable floor: 2 x one-row UPDATE"
            "pg_advisory_xact_lock_shared (1 transaction)"
            "PL/pgSQL shared lease with token"
            "dlock.acquire(shared => true) + release"
            "dlock exclusive, random names (reference)")
    # The floor and the exclusive reference on random names out of NAMES:
    # one changed row per commit each, as a shared grant or release
    CMDS=("pg_run floor.sql $READERS on $NAMES 0"
          "pg_run shared_advisory.sql $READERS on 1 0"
          "pg_run shared_plpgsql.sql $READERS on 1 $POLL_MS"
          "pg_run shared_dlock.sql $READERS on 1 0"
          "pg_run dlock_try.sql $READERS on $NAMES 0")
    KEYS=(floor advisory_shared plpgsql_shared dlock_shared dlock_exclusive)
    alternate
    [ "$sync" != cpu ] || psql_do -c 'ALTER SYSTEM RESET fsync' -c 'SELECT pg_reload_conf()' >/dev/null
    echo
    echo "### $what, $setting"
    echo
    TSV_FILE=$OUT/kinds.tsv TSV_ROW="$what"$'\t'"$READERS"$'\t'1$'\t'"$sync" print_table
    versus 3 1 2 4
}

# semaphore_table: permits of a semaphore of SEM_PERMITS on one name,
# SEM_CLIENTS clients, synchronous_commit on, Redis appendfsync always
semaphore_table() {
    local what="semaphore of $SEM_PERMITS on one name, $SEM_CLIENTS clients"
    say "$what"
    redis CONFIG SET appendfsync always >/dev/null
    LABELS=("durable floor: 2 x one-row UPDATE"
            "dlock.acquire(max_holders => $SEM_PERMITS) + release"
            "Redis sorted-set EVAL + ZREM, AOF always")
    # dlock waits in arrival order; Redis cannot wait, so it polls every
    # POLL_MS, like the methods that cannot wait on the hot name
    CMDS=("pg_run floor.sql $SEM_CLIENTS on $NAMES 0"
          "PG_DEFINE=permits=$SEM_PERMITS pg_run semaphore_dlock.sql $SEM_CLIENTS on 1 0"
          "\"\$WORK/bin/redis_lock\" 127.0.0.1 $REDIS_PORT $SEM_CLIENTS \$SECONDS_PER_RUN 1 $POLL_MS $SEM_PERMITS")
    KEYS=(floor dlock_semaphore redis_semaphore)
    alternate
    echo
    echo "### $what, synchronous_commit=on (Redis: appendfsync always)"
    echo
    TSV_FILE=$OUT/kinds.tsv TSV_ROW="$what"$'\t'"$SEM_CLIENTS"$'\t'1$'\t'on print_table
    versus 1 2
}

# writer_run METHOD: READERS clients cycle shared leases of one name (as in
# shared_table) while one writer takes it exclusively in cycles
# (writer_wait.c); prints the readers' "ops_per_s mean_ms p99_ms misses" and
# the writer's "p50_ms p99_ms max_ms grants timeouts", and appends the
# writer's waits to writer-samples.tsv
writer_run() {
    local method=$1 readers poll=0 wpoll=0 options="" acquire release wpid line samples
    case $method in
        advisory)
            # The session lock conflicts with the readers' transaction locks
            readers=shared_advisory.sql options="-c lock_timeout=$WRITER_TIMEOUT_MS"
            acquire="SELECT pg_advisory_lock(1)" release="SELECT pg_advisory_unlock(1)" ;;
        plpgsql)
            # lock_timeout bounds the writer's waits for the readers' row locks
            readers=shared_plpgsql.sql poll=$POLL_MS wpoll=$POLL_MS options="-c lock_timeout=$WRITER_TIMEOUT_MS"
            acquire="SELECT plpgsql_acquire_writer('bench-shared', '10 s', 'writer')"
            release="SELECT plpgsql_release('bench-shared', 'writer')" ;;
        dlock)
            readers=shared_dlock.sql
            acquire="SELECT token FROM dlock.acquire('bench-shared', '10 s', 'writer', timeout => '$WRITER_TIMEOUT_MS ms')"
            release="SELECT dlock.release('bench-shared', 'writer')" ;;
    esac
    samples=$(as_run_user mktemp "$WORK/logs/writer.XXXXXX")
    [ "${BENCH_QUICK:-0}" = 1 ] || psql_do -c CHECKPOINT
    # The writer starts 0.3 s after the readers and stops before them
    run env PGOPTIONS="-c synchronous_commit=on $options" WRITER_SAMPLES="$samples" \
        "$WORK/bin/writer_wait" 300 "$(awk -v s="$SECONDS_PER_RUN" 'BEGIN { print s - 0.5 }')" \
        "$WRITER_TIMEOUT_MS" "$WRITER_HOLD_MS" "$WRITER_PAUSE_MS" "$wpoll" "$acquire" "$release" \
        >"$samples.out" &
    wpid=$!
    line=$(NO_CHECKPOINT=1 pg_run "$readers" "$READERS" on 1 "$poll") || { wait "$wpid"; return 1; }
    wait "$wpid" || return 1
    echo "$line $(cat "$samples.out")"
    awk -v m="$method" '{ print m "\t" $1 }' "$samples" >>"$OUT/writer-samples.tsv"
    rm -f "$samples" "$samples.out"
}

writer_table() {
    local what="a writer behind $READERS readers of one name" i col
    say "$what"
    LABELS=("advisory: pg_advisory_lock, lock_timeout"
            "PL/pgSQL leases: writer polls every $POLL_MS ms"
            "dlock.acquire(timeout => $WRITER_TIMEOUT_MS ms)")
    CMDS=("writer_run advisory" "writer_run plpgsql" "writer_run dlock")
    alternate
    echo
    echo "### $what, synchronous_commit=on"
    echo
    echo "The readers cycle as in the shared table; the writer, in one session, acquires exclusively"
    echo "(timeout $WRITER_TIMEOUT_MS ms), holds $WRITER_HOLD_MS ms, releases, pauses $WRITER_PAUSE_MS ms, again. *writer p50, p99*: from its"
    echo "acquire's start to the grant (a timed-out attempt counts with its wait). Readers: pg_advisory_xact_lock_shared,"
    echo "the PL/pgSQL shared lease (polls every $POLL_MS ms while the writer holds), dlock.acquire(shared => true)."
    echo
    printf '| %-46s | %13s | %10s | %8s | %10s | %10s | %10s | %7s | %8s |\n' writer "readers ops/s" \
        "reader p99" misses "writer p50" "writer p99" "writer max" grants timeouts
    printf '|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..48})" --------------: -----------: \
        ---------: -----------: -----------: -----------: --------: ---------:
    for i in "${!LABELS[@]}"; do
        for col in 1 3 4 5 6 7 8 9; do
            printf -v "c$col" '%s' "$(awk -v c="$col" 'NF { print $c }' <<<"${RESULTS[i]}" | median)"
        done
        printf '| %-46s | %13.0f | %10.3f | %8.0f | %10.3f | %10.3f | %10.3f | %7.0f | %8.0f |\n' "${LABELS[i]}" \
            "$c1" "$c3" "$c4" "$c5" "$c6" "$c7" "$c8" "$c9"
    done
    echo
    echo "Times in ms; medians of the $REPS runs of each figure."
}

if section kinds; then
    OUT=${BENCH_OUT:-$SRC_DIR/bench/results}
    mkdir -p "$OUT"
    write_info "$OUT/kinds-info.tsv"
    printf 'workload\tclients\tnames\tsetting\tmethod\tlabel\tops_per_s\tmean_ms\tp99_ms\tmisses\n' >"$OUT/kinds.tsv"
    printf 'method\tsample_ms\n' >"$OUT/writer-samples.tsv"
    for sync in on cpu; do
        [ "${BENCH_QUICK:-0}" = 1 ] && [ "$sync" = cpu ] && continue
        shared_table "$sync"
    done
    semaphore_table
    writer_table
    echo
    echo "Every holder of a shared lease or a permit has its own lease and token; Redis's permits expire"
    echo "on the clients' clocks and have no token that a guarded write could check."
    # The queues leave nothing behind once every client has gone
    left=$(psql_val 'SELECT count(*) FROM dlock.locks')
    if [ "$left" != 0 ]; then
        echo "dlock locks left in pg_locks after the runs: $left" >&2
        exit 1
    fi
    echo
    BENCH_OUT=$OUT bash "$SRC_DIR/bench/charts.sh" kinds
fi

# --- the SQL edition against the C edition -------------------------------------

# The role that installs and owns the SQL edition, and the two databases
SQL_ROLE=dlock_sql_owner DB_C=edition_c DB_SQL=edition_sql

# edition_setup: the C edition (with the floor's table) and the SQL edition,
# each in a new database with NAMES names granted and free
edition_setup() {
    say "the C edition in database $DB_C, the SQL edition in $DB_SQL (owned by $SQL_ROLE)"
    psql_do -c "CREATE DATABASE $DB_C" -c "CREATE ROLE $SQL_ROLE LOGIN" \
        -c "CREATE DATABASE $DB_SQL OWNER $SQL_ROLE"
    DB=$DB_C psql_do -f "$WORK/sql/helpers.sql" \
        -c "CREATE TABLE bench_floor (id integer PRIMARY KEY, v bigint NOT NULL DEFAULT 0)" \
        -c "INSERT INTO bench_floor (id) SELECT g FROM generate_series(1, $NAMES) g"
    # As on a managed service: the installing role owns the database, no
    # superuser right; the script, the helper and the names are its own
    run psql -X -q -v ON_ERROR_STOP=1 -U "$SQL_ROLE" -d "$DB_SQL" \
        -f "$WORK/sql/sql_edition.sql" -f "$WORK/sql/not_granted.sql"
    if [ "$(DB=$DB_SQL psql_val "SELECT rolsuper FROM pg_roles r JOIN pg_namespace n ON n.nspowner = r.oid
                                   WHERE n.nspname = 'dlock'")" != f ] ||
        [ "$(DB=$DB_SQL psql_val "SELECT count(*) FROM pg_extension WHERE extname = 'dlock'")" != 0 ]; then
        echo "compare.sh: the SQL edition is not installed as a plain role's schema in $DB_SQL" >&2
        exit 1
    fi
    DB=$DB_C psql_do -v names="$NAMES" -f "$WORK/sql/dlock_fill.sql" -c 'VACUUM ANALYZE'
    run psql -X -q -v ON_ERROR_STOP=1 -U "$SQL_ROLE" -d "$DB_SQL" -v names="$NAMES" \
        -f "$WORK/sql/dlock_fill.sql"
    # (a database owner's VACUUM skips the shared catalogs, loudly)
    DB=$DB_SQL psql_do -c 'VACUUM ANALYZE'
}

# edition_table CLIENTS NAMES: floor, C edition, SQL edition in turn, REPS
# times; adds the workload's rows to ED_ROWS (the table) and editions.tsv
ED_ROWS=()
edition_table() {
    local clients=$1 names=$2 what script i col floor_ops c_ops workload x_c
    if [ "$names" = 1 ]; then
        what="one hot name, $clients clients: acquire (waits) + release"
        script=dlock_wait.sql
    else
        what="random names out of $(thousands "$names"), $clients client$([ "$clients" = 1 ] || echo s): try_acquire + release"
        script=dlock_try.sql
    fi
    say "editions: $what"
    LABELS=("durable floor: 2 x one-row UPDATE" "C edition" "SQL edition")
    CMDS=("DB=$DB_C pg_run floor.sql $clients on $names 0"
          "DB=$DB_C pg_run $script $clients on $names 0"
          "DB=$DB_SQL PG_ROLE=$SQL_ROLE pg_run $script $clients on $names 0")
    KEYS=(floor c_edition sql_edition)
    alternate
    for i in "${!LABELS[@]}"; do
        for col in 1 2 3 4; do
            printf -v "c$col" '%s' "$(awk -v c="$col" 'NF { print $c }' <<<"${RESULTS[i]}" | median)"
        done
        workload="" x_c=-
        if [ "$i" = 0 ]; then
            floor_ops=$c1 workload=$what
        else
            [ "$i" = 1 ] && c_ops=$c1
            x_c=$(awk -v a="$c1" -v b="$c_ops" 'BEGIN { printf "%.2f", a / b }')
        fi
        ED_ROWS+=("$(printf '| %-62s | %-34s | %9.0f | %8.3f | %8.3f | %7.2f | %11s | %7.0f |' \
            "$workload" "${LABELS[i]}" "$c1" "$c2" "$c3" \
            "$(awk -v a="$c1" -v b="$floor_ops" 'BEGIN { print a / b }')" "$x_c" "$c4")")
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$what" "$clients" "$names" "${KEYS[i]}" \
            "${LABELS[i]}" "$c1" "$c2" "$c3" "$c4" >>"$OUT/editions.tsv"
    done
    ED_RATIOS+=("$(awk -v a="$c1" -v b="$c_ops" 'BEGIN { printf "%.2f", a / b }')x ${what%%:*}")
}

if section editions; then
    OUT=${BENCH_OUT:-$SRC_DIR/bench/results}
    mkdir -p "$OUT"
    write_info "$OUT/editions-info.tsv"
    printf 'workload\tclients\tnames\tmethod\tlabel\tops_per_s\tmean_ms\tp99_ms\tmisses\n' >"$OUT/editions.tsv"
    edition_setup
    ED_ROWS=() ED_RATIOS=()
    edition_table 1 "$NAMES"
    edition_table 8 "$NAMES"
    edition_table 8 1
    echo
    echo "### The SQL edition against the C edition, synchronous_commit=on"
    echo
    echo "Each edition in a database of its own, with its default settings (the C edition not preloaded:"
    echo "durable_grants on, lazy_release on; the SQL edition: durable_grants on, lazy_release off), $(thousands "$NAMES")"
    echo "names granted beforehand and free. The SQL edition installed by, owned by and called as a role"
    echo "without superuser rights. Floor, C edition, SQL edition in turn, $REPS run(s) of $SECONDS_PER_RUN s each, medians."
    echo
    printf '| %-62s | %-34s | %9s | %8s | %8s | %7s | %11s | %7s |\n' workload method cycles/s "mean ms" "p99 ms" \
        "x floor" "x C edition" misses
    printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..64})" "$(printf -- '-%.0s' {1..36})" \
        ----------: ---------: ---------: --------: ------------: --------:
    printf '%s\n' "${ED_ROWS[@]}"
    echo
    echo "SQL edition, cycles/s against the C edition's: $(printf '%s; ' "${ED_RATIOS[@]}" | sed 's/; $//')."
    # Nothing may stay locked once every client has gone
    for db in "$DB_C" "$DB_SQL"; do
        left=$(DB=$db psql_val 'SELECT count(*) FROM dlock.locks')
        if [ "$left" != 0 ]; then
            echo "dlock locks left in $db after the runs: $left" >&2
            exit 1
        fi
    done
    echo
fi
echo "Whole run: $(($(date +%s) - T0)) s."

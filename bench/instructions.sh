#!/usr/bin/env bash
# bench/instructions.sh: the CPU work of a lock cycle, counted in
# instructions, which the load on the machine and its disk do not change.
#
# A throwaway cluster runs under valgrind's callgrind (every backend is
# counted); one pgbench client runs each script for N1 and then N2
# transactions, and the instructions of its backend, (count at N2 - count at
# N1) / (N2 - N1), are one cycle's, without the connection's start-up.  The
# scripts are those of bench/compare.sh: the floor of two one-row UPDATE
# commits and dlock's try_acquire + release (in the FROM form and a scalar
# form), and the guarded-write cycle (three commits, the floor's and
# dlock's; and dlock's in one transaction, the shapes (d) and (e) of
# bench/invoice.sh).  fsync = off and dlock preloaded, as in the CPU-alone table of
# bench/compare.sh.  Instructions are not time: a cycle that waits for memory
# or the kernel more than another costs more time for its instructions; see
# docs/performance.md.
#
# BENCH_QUICK=1 runs a few transactions only (the figures mean nothing).
# Writes instructions.tsv into BENCH_OUT (default bench/results).

. "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

if [ "${BENCH_QUICK:-0}" = 1 ]; then N1=20 N2=60; else N1=${N1:-1000} N2=${N2:-3000}; fi
NAMES=10000
GUARDED_NAMES=1000

DEBIAN_PACKAGES+=(valgrind)
ensure_packages
build_and_install

# The wrapper that pg_ctl starts instead of postgres; each process writes
# its counts to its own file when it exits
PROFILE_DIR=$(make_work_dir)
cat >"$PROFILE_DIR/postgres" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=$PROFILE_DIR/cg.%p \
    "$PG_BINDIR/postgres" "\$@" 2>>$PROFILE_DIR/valgrind.log
EOF
chmod 755 "$PROFILE_DIR/postgres"
[ "$(id -un)" = "$RUN_USER" ] || chown "$RUN_USER": "$PROFILE_DIR/postgres"

CLUSTER_POSTGRES=$PROFILE_DIR/postgres CLUSTER_WAIT=300 \
    start_cluster 54350 shared_preload_libraries=dlock fsync=off shared_buffers=256MB
trap 'stop_cluster; rm -rf "$PROFILE_DIR"' EXIT
SQL=$WORK/sql
mkdir -p "$SQL"
cp "$SRC_DIR"/bench/sql/*.sql "$SRC_DIR/bench/plpgsql_lease.sql" "$SQL/"
[ "$(id -un)" = "$RUN_USER" ] || chown -R "$RUN_USER": "$SQL"

run() { as_run_user env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres PGDATABASE=postgres "$@"; }
psql_do() { run psql -X -q -v ON_ERROR_STOP=1 "$@" >/dev/null; }

say "setting up (under callgrind, slowly)"
psql_do -v names="$NAMES" -f "$SQL/bench_setup.sql"

# backend_instructions SCRIPT N NAMES SYNC [OPTIONS]: the instructions of the
# backend that served one pgbench client running SCRIPT N times
backend_instructions() {
    local script=$1 n=$2 names=$3 sync=$4 options=${5:-} pid="" pgbench_pid
    run env PGOPTIONS="-c synchronous_commit=$sync $options" \
        pgbench -n -M prepared -c 1 -t "$n" -D names="$names" -D pause_ms=0 \
        -f "$SQL/$script" >"$PROFILE_DIR/pgbench.out" 2>&1 &
    pgbench_pid=$!
    # Its backend, found while it runs (under callgrind even its start-up
    # takes a second)
    while [ -z "$pid" ] && kill -0 "$pgbench_pid" 2>/dev/null; do
        pid=$(run psql -X -At -c "SELECT pid FROM pg_stat_activity
            WHERE application_name = 'pgbench' AND backend_type = 'client backend'")
        [ -n "$pid" ] || sleep 0.05
    done
    if ! wait "$pgbench_pid" || [ -z "$pid" ]; then
        cat "$PROFILE_DIR/pgbench.out" >&2
        echo "pgbench failed, or its backend was not seen" >&2
        exit 1
    fi
    # The backend writes its counts when it exits, just after pgbench
    for _ in $(seq 600); do
        grep -q '^totals:' "$PROFILE_DIR/cg.$pid" 2>/dev/null && break
        sleep 0.1
    done
    grep -m1 '^summary:' "$PROFILE_DIR/cg.$pid" | awk '{ print $2 }'
    rm -f "$PROFILE_DIR/cg.$pid"
}

# per_cycle SCRIPT NAMES SYNC [OPTIONS]: instructions of one cycle
per_cycle() {
    local a b
    a=$(backend_instructions "$1" "$N1" "$2" "$3" "${4:-}")
    b=$(backend_instructions "$1" "$N2" "$2" "$3" "${4:-}")
    echo $(((b - a) / (N2 - N1)))
}

OUT=${BENCH_OUT:-$SRC_DIR/bench/results}
mkdir -p "$OUT"
printf 'cycle\tmethod\tinstructions\tx_floor\n' >"$OUT/instructions.tsv"

# table TITLE FLOOR-LABEL FLOOR-SCRIPT NAMES then LABEL SCRIPT SYNC OPTIONS ...
table() {
    local title=$1 floor_label=$2 floor_script=$3 names=$4 floor label script sync options ir ratio
    shift 4
    say "$title"
    floor=$(per_cycle "$floor_script" "$names" on)
    echo
    echo "### $title: instructions per cycle (callgrind, fsync = off)"
    echo
    printf '| %s | %s | %s |\n|---|---:|---:|\n' method instructions "x floor's"
    printf '| %s | %s | 1.00 |\n' "$floor_label" "$floor"
    printf '%s\t%s\t%s\t1.00\n' "$title" "$floor_label" "$floor" >>"$OUT/instructions.tsv"
    while [ $# -ge 4 ]; do
        label=$1 script=$2 sync=$3 options=$4
        shift 4
        ir=$(per_cycle "$script" "$names" "$sync" "$options")
        ratio=$(awk -v a="$ir" -v b="$floor" 'BEGIN { printf "%.2f", a / b }')
        printf '| %s | %s | %s |\n' "$label" "$ir" "$ratio"
        printf '%s\t%s\t%s\t%s\n' "$title" "$label" "$ir" "$ratio" >>"$OUT/instructions.tsv"
    done
}

table "lock cycle, random names out of $NAMES" "floor: 2 x one-row UPDATE" floor.sql "$NAMES" \
    "dlock: try_acquire (FROM form) + release" dlock_try.sql on "" \
    "dlock: try_acquire (scalar subquery) + release" dlock_try_scalar.sql on ""
table "guarded write, random names out of $GUARDED_NAMES" "floor: 3 x one-row UPDATE" guarded_floor.sql \
    "$GUARDED_NAMES" \
    "PL/pgSQL lease + UPDATE checking its token" guarded_plpgsql.sql on "" \
    "dlock + fenced UPDATE, durable_grants = on" guarded_dlock.sql on "" \
    "dlock + fenced UPDATE, durable_grants = off" guarded_dlock_lazy.sql off "-c dlock.durable_grants=off" \
    "dlock, one transaction: acquire + fenced UPDATE + release" guarded_dlock_one_txn.sql on "" \
    "dlock, one round trip: acquire + UPDATE + release" guarded_dlock_one_rt.sql on ""

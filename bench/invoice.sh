#!/usr/bin/env bash
# bench/invoice.sh: the nightly-invoice workload, lock by lock.
#
# 10,000 accounts, 20 workers; each worker takes the lock for one account,
# debits its balance and writes its invoice (one statement), and releases
# (bench/invoice.c says how each method does it).  Methods, alternated over
# ROUNDS rounds (A B C ... A B C ...):
#
#   nolock          no lock: the floor
#   nolock_batch    no lock, BATCH accounts a write: the floor of dlock_c
#   advisory        pg_advisory_xact_lock taken by the write
#   dlock_a         dlock: acquire; fenced write; release (3 transactions)
#   dlock_b         dlock: acquire; fenced write + release (2 transactions)
#   dlock_c         dlock: acquire_all of a batch of BATCH accounts; the
#                   batch's fenced write + release_all (2 transactions a batch)
#   dlock_d         dlock: acquire, fenced write and release in one
#                   transaction (the grant commits with the write)
#   dlock_e         dlock: the same transaction in one round trip (one
#                   pipeline; the write needs no fence there)
#   sqled_e         dlock_e against the SQL edition (sql-edition/dlock.sql)
#   dlock_*_off     the same with dlock.durable_grants = off
#   redis_everysec  Redis SET NX PX + compare-and-delete, AOF everysec
#   redis_always    the same, appendfsync always (both unfenced)
#   etcd            etcd lease + txn, its revision checked by the write as a
#                   fencing token in the application's table
#
# Every run is checked: one invoice per account, each balance debited once,
# no lease, key or lock left behind; a run that fails its check fails the
# benchmark.  Before the rounds, a deliberately wrong run (account 1
# invoiced twice) must fail its check: the check can see a double write.
# After them, one worker's acquire + release alone, with nothing written
# (the median of ROUNDS runs of ALONE_CYCLES cycles each).
#
# PostgreSQL: a throwaway cluster (scripts/common.sh), fsync and
# synchronous_commit on; the C edition (CREATE EXTENSION dlock) in database
# postgres; for the SQL edition's methods, the same tables and names in
# database sql_edition, which role dlock_sql_owner (no superuser right, as on
# a managed service) owns, installs the SQL edition into and runs them as.
# Redis and etcd (Debian's etcd-server, its v3 JSON
# gateway over HTTP/1.1 with a keep-alive connection per worker, libcurl):
# throwaway servers on 127.0.0.1 (bench/servers.sh).  All stopped by pid on
# exit.  Installs the Debian packages it needs; needs dlock installed (make
# install).
#
# Prints the table; writes invoice.tsv (one row a method: median run
# seconds, overhead, alone ms), invoice-runs.tsv (every run) and
# invoice-info.tsv into BENCH_OUT (default bench/results), and the charts
# invoice.svg and invoice.txt (bench/charts.sh invoice).
#
# BENCH_QUICK=1: 1,000 accounts, one round (about half a minute): the
# benchmark works and its checks hold; its figures mean nothing.  ACCOUNTS,
# WORKERS, BATCH, ROUNDS, ALONE_CYCLES and METHODS (a list of the keys above)
# override the defaults; PG_PORT, REDIS_PORT, ETCD_PORT and ETCD_PEER_PORT
# the ports (Redis and etcd listen on 127.0.0.1).

. "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
BENCH_DIR=$SRC_DIR/bench
. "$BENCH_DIR/servers.sh"

if [ "${BENCH_QUICK:-0}" = 1 ]; then
    ACCOUNTS=${ACCOUNTS:-1000} ROUNDS=${ROUNDS:-1} ALONE_CYCLES=${ALONE_CYCLES:-200}
else
    ACCOUNTS=${ACCOUNTS:-10000} ROUNDS=${ROUNDS:-4} ALONE_CYCLES=${ALONE_CYCLES:-2000}
fi
WORKERS=${WORKERS:-20}
BATCH=${BATCH:-10}
METHODS=${METHODS:-nolock nolock_batch advisory dlock_a dlock_b dlock_c dlock_d dlock_e sqled_e dlock_a_off dlock_b_off dlock_c_off dlock_e_off redis_everysec redis_always etcd}
PG_PORT=${PG_PORT:-54340}
REDIS_PORT=${REDIS_PORT:-54380}
ETCD_PORT=${ETCD_PORT:-54381}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-54382}
T0=$(date +%s)

declare -A LABEL=(
    [nolock]="no lock"
    [nolock_batch]="no lock, $BATCH accounts a write (floor of (c))"
    [advisory]="pg_advisory_xact_lock in the write"
    [dlock_a]="dlock (a): acquire; fenced write; release"
    [dlock_b]="dlock (b): acquire; fenced write + release"
    [dlock_c]="dlock (c): acquire_all of $BATCH; write + release_all"
    [dlock_d]="dlock (d): acquire + fenced write + release, one transaction"
    [dlock_e]="dlock (e): (d) in one round trip, the write unfenced"
    [sqled_e]="SQL edition (e): dlock (e) against the SQL edition"
    [dlock_a_off]="dlock (a), durable_grants = off"
    [dlock_b_off]="dlock (b), durable_grants = off"
    [dlock_c_off]="dlock (c), durable_grants = off"
    [dlock_e_off]="dlock (e), durable_grants = off"
    [redis_everysec]="Redis, appendfsync everysec (unfenced)"
    [redis_always]="Redis, appendfsync always (unfenced)"
    [etcd]="etcd lease + txn (revision fenced in the table)"
)
# transactions and round trips per account
declare -A COST=(
    [nolock]="1 / 1" [nolock_batch]="1/$BATCH / 1/$BATCH" [advisory]="1 / 1" [dlock_a]="3 / 3" [dlock_b]="2 / 2"
    [dlock_c]="2/$BATCH / 2/$BATCH" [dlock_d]="1 / 2" [dlock_e]="1 / 1" [sqled_e]="1 / 1" [dlock_a_off]="3 / 3" [dlock_b_off]="2 / 2"
    [dlock_c_off]="2/$BATCH / 2/$BATCH" [dlock_e_off]="1 / 1" [redis_everysec]="1 / 3" [redis_always]="1 / 3"
    [etcd]="1 / 4"
)
for m in $METHODS; do
    [ -n "${LABEL[$m]:-}" ] || { echo "invoice.sh: unknown method $m" >&2; exit 64; }
done

ensure_packages
ensure_bench_packages redis-server libhiredis-dev libpq-dev gnuplot-nox etcd-server \
    libcurl4-openssl-dev curl
if [ ! -f "$("$PG_CONFIG" --sharedir)/extension/dlock.control" ]; then
    echo "dlock is not installed in $("$PG_CONFIG" --bindir): run make install first" >&2
    exit 1
fi

# --- servers and the program --------------------------------------------------

start_cluster "$PG_PORT" max_connections=100 fsync=on synchronous_commit=on
# Redis and etcd keep their files in the cluster's work directory: stop them first
trap 'stop_etcd; stop_redis; stop_cluster' EXIT
trap 'exit 130' INT TERM
start_redis "$WORK/redis" "$REDIS_PORT" || exit 1
start_etcd "$WORK/etcd" "$ETCD_PORT" "$ETCD_PEER_PORT" || exit 1

# DB and DB_USER: another database and role than postgres
run() {
    as_run_user env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER="${DB_USER:-postgres}" \
        PGDATABASE="${DB:-postgres}" "$@"
}
psql_do() { run psql -X -q -v ON_ERROR_STOP=1 "$@"; }
psql_val() { run psql -X -At -v ON_ERROR_STOP=1 -c "$1"; }

mkdir -p "$WORK/bin"
cc -O2 -Wall -Wextra -Werror -pthread -I"$("$PG_CONFIG" --includedir)" \
    -o "$WORK/bin/invoice" "$BENCH_DIR/invoice.c" "$SRC_DIR/test/lib/dlock_client.c" \
    -L"$("$PG_CONFIG" --libdir)" -lpq -lhiredis -lcurl
[ "$(id -un)" = "$RUN_USER" ] || chown -R "$RUN_USER": "$WORK/bin"
# The SQL edition's database and the role that owns it
SQL_DB=sql_edition SQL_ROLE=dlock_sql_owner
# db_of METHOD: the database of a key of METHODS
db_of() { case $1 in sqled_*) echo "$SQL_DB" ;; *) echo postgres ;; esac; }
invoice() {
    run env INVOICE_CONNINFO= INVOICE_SQL_CONNINFO="dbname=$SQL_DB user=$SQL_ROLE" \
        INVOICE_REDIS_PORT="$REDIS_PORT" INVOICE_ETCD_URL="$ETCD_URL" \
        INVOICE_BATCH="$BATCH" "$WORK/bin/invoice" "$@"
}

# setup_accounts: the tables and every account's lease row, in the database
# of DB (as DB_USER), where dlock is installed
setup_accounts() {
    psql_do -v accounts="$ACCOUNTS" <<'EOF'
-- fillfactor: room for the night's HOT updates
CREATE TABLE accounts (
    id integer PRIMARY KEY,
    opening bigint NOT NULL,
    balance bigint NOT NULL,
    monthly bigint NOT NULL,
    fence_token bigint NOT NULL DEFAULT 0   -- etcd's revision, the write's fence
) WITH (fillfactor = 50);
CREATE TABLE invoices (
    id bigserial PRIMARY KEY,
    account integer NOT NULL,   -- no unique key: a double write must be seen, not refused
    night date NOT NULL,
    amount bigint NOT NULL
);
CREATE INDEX ON invoices (account);
INSERT INTO accounts (id, opening, balance, monthly)
SELECT i, 100000, 100000, 1000 + i % 4000 FROM generate_series(1, :accounts) i;
-- every account's lease row exists before the first run (a name's first
-- grant inserts it, later ones update it), 500 names a transaction
DO $$
BEGIN
    FOR i IN 1 .. (SELECT max(id) FROM accounts) LOOP
        PERFORM dlock.acquire('account:' || i, '30s', 'setup');
        PERFORM dlock.release('account:' || i, 'setup');
        IF i % 500 = 0 THEN COMMIT; END IF;
    END LOOP;
END
$$;
EOF
    DB_USER='' psql_do -c 'VACUUM ANALYZE'
}

say "setting up $ACCOUNTS accounts"
psql_do -c 'CREATE EXTENSION dlock'
setup_accounts
# the databases whose leftovers are checked after the runs
CHECK_DBS=(postgres)
if [[ " $METHODS " == *" sqled_"* ]]; then
    say "setting up $ACCOUNTS accounts under the SQL edition, in database $SQL_DB"
    psql_do -c "CREATE ROLE $SQL_ROLE LOGIN" -c "CREATE DATABASE $SQL_DB OWNER $SQL_ROLE"
    # As on a managed service: installed by the database's owner, no superuser
    DB=$SQL_DB DB_USER=$SQL_ROLE psql_do <"$SRC_DIR/sql-edition/dlock.sql"
    if [ "$(DB=$SQL_DB psql_val "SELECT r.rolsuper FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner
                                  WHERE n.nspname = 'dlock'")" != f ]; then
        echo "invoice.sh: the SQL edition is not a plain role's schema in $SQL_DB" >&2
        exit 1
    fi
    DB=$SQL_DB DB_USER=$SQL_ROLE setup_accounts
    CHECK_DBS+=("$SQL_DB")
fi

# reset: the accounts as before the night, no invoices, a checkpoint (not
# worth its time in quick mode), so that every run starts alike; in the
# database of DB
reset_tables() {
    psql_do -c "TRUNCATE invoices" \
        -c "UPDATE accounts SET balance = opening, fence_token = 0 WHERE balance <> opening OR fence_token <> 0" \
        -c "VACUUM ANALYZE accounts, invoices, dlock.lease_state"
    [ "${BENCH_QUICK:-0}" = 1 ] || psql_do -c CHECKPOINT
}

# check: prints what is wrong with the night's result, nothing when it is
# right; in the database of DB
check() {
    local bad left
    bad=$(psql_val "SELECT count(*) FILTER (WHERE coalesce(i.n, 0) <> 1)
                           || ' accounts without exactly one invoice, '
                           || count(*) FILTER (WHERE a.balance <> a.opening - a.monthly)
                           || ' balances not debited exactly once'
                      FROM accounts a
                      LEFT JOIN (SELECT account, count(*) AS n FROM invoices GROUP BY account) i
                        ON i.account = a.id
                    HAVING count(*) FILTER (WHERE coalesce(i.n, 0) <> 1
                                               OR a.balance <> a.opening - a.monthly) > 0")
    [ -z "$bad" ] || echo "$bad"
    left=$(psql_val "SELECT (SELECT count(*) FROM dlock.leases WHERE state = 'live')
                            + (SELECT count(*) FROM dlock.locks)")
    [ "$left" = 0 ] || echo "$left dlock leases or locks left"
    left=$(redis DBSIZE)
    [ "$left" = 0 ] || echo "$left Redis keys left"
    left=$(curl -s -m 5 -X POST "$ETCD_URL/v3/kv/range" \
        -d '{"key":"YWNjb3VudDo=","range_end":"YWNjb3VudDs=","count_only":true}')
    # proto3 JSON leaves a count of 0 out
    [[ "$left" == *'"header"'* && "$left" != *'"count"'* ]] || echo "etcd keys left: $left"
}

# invoice_args METHOD: the program's method for a key of METHODS (and sets
# Redis's appendfsync)
invoice_method() {
    case $1 in
        redis_everysec) redis CONFIG SET appendfsync everysec >/dev/null; echo redis ;;
        redis_always) redis CONFIG SET appendfsync always >/dev/null; echo redis ;;
        *) echo "$1" ;;
    esac
}

# --- the self-test of the check -----------------------------------------------

reset_tables
invoice run double "$WORKERS" "$ACCOUNTS" >/dev/null
problems=$(check)
if [ -z "$problems" ]; then
    echo "invoice.sh: the check did not see account 1 invoiced twice" >&2
    exit 1
fi
echo "self-test: a run that invoices account 1 twice fails its check ($problems)"

# --- the rounds -----------------------------------------------------------------

OUT=${BENCH_OUT:-$SRC_DIR/bench/results}
mkdir -p "$OUT"
printf '%s\t%s\n' date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
    mode "$([ "${BENCH_QUICK:-0}" = 1 ] && echo quick || echo full)" \
    postgres "$(psql_val 'SHOW server_version')" \
    redis "$(redis-server --version | awk '{ print $3 }' | sed 's/^v=//')" \
    etcd "$(etcd --version | awk '/^etcd Version/ { print $3 }')" \
    cpus "$(nproc)" accounts "$ACCOUNTS" workers "$WORKERS" batch "$BATCH" \
    rounds "$ROUNDS" alone_cycles "$ALONE_CYCLES" >"$OUT/invoice-info.tsv"
printf 'round\tmethod\tseconds\n' >"$OUT/invoice-runs.tsv"
declare -A RUNS=() ALONE=()

for ((round = 1; round <= ROUNDS; round++)); do
    say "round $round of $ROUNDS"
    for m in $METHODS; do
        DB=$(db_of "$m") reset_tables
        s=$(invoice run "$(invoice_method "$m")" "$WORKERS" "$ACCOUNTS")
        problems=$(DB=$(db_of "$m") check)
        if [ -n "$problems" ]; then
            echo "invoice.sh: $m failed its check: $problems" >&2
            exit 1
        fi
        printf '   %-16s %8s s, checked\n' "$m" "$s"
        printf '%s\t%s\t%s\n' "$round" "$m" "$s" >>"$OUT/invoice-runs.tsv"
        RUNS[$m]+="$s"$'\n'
    done
done

say "one worker's acquire + release alone ($ALONE_CYCLES cycles, $ROUNDS round(s))"
for ((round = 1; round <= ROUNDS; round++)); do
    for m in $METHODS; do
        [[ "$m" != nolock* ]] || continue
        read -r ms per < <(invoice alone "$(invoice_method "$m")" "$ALONE_CYCLES" "$ACCOUNTS")
        ALONE[$m]+="$ms $per"$'\n'
    done
done
for db in "${CHECK_DBS[@]}"; do
    problems=$(DB=$db check)
    case $problems in
        *left*) echo "invoice.sh: after the acquire + release runs, in $db: $problems" >&2; exit 1 ;;
    esac
done

# --- the table ----------------------------------------------------------------

median() {
    awk NF | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

floor=$(median <<<"${RUNS[nolock]:-}")
floor_batch=$(median <<<"${RUNS[nolock_batch]:-}")
printf 'method\tlabel\tmedian_s\toverhead_s\talone_ms\talone_accounts\n' >"$OUT/invoice.tsv"
echo
echo "Nightly invoices: $ACCOUNTS accounts, $WORKERS workers, median of $ROUNDS round(s)" \
    "$([ "${BENCH_QUICK:-0}" = 1 ] && echo '(QUICK MODE: the figures mean nothing)')"
echo
printf '| %-52s | %6s | %11s | %11s | %28s |\n' method "run, s" "overhead, s" "txns / RTs" "acquire + release alone, ms"
printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..54})" -------: ------------: ------------: -----------------------------:
for m in $METHODS; do
    med=$(median <<<"${RUNS[$m]}")
    # the overhead of a batch method: over the batched writes alone
    f=$floor
    [[ "$m" != dlock_c* ]] || f=$floor_batch
    over=-
    [ -z "$f" ] || [[ "$m" = nolock* ]] || over=$(awk -v a="$med" -v b="$f" 'BEGIN { printf "%+.2f", a - b }')
    alone=- alone_ms="" per=""
    if [ -n "${ALONE[$m]:-}" ]; then
        alone_ms=$(awk '{ print $1 }' <<<"${ALONE[$m]}" | median)
        per=$(awk 'NF { print $2; exit }' <<<"${ALONE[$m]}")
        alone=$(awk -v a="$alone_ms" -v n="$per" 'BEGIN {
            if (n > 1) printf "%.3f (%.3f an account)", a, a / n; else printf "%.3f", a }')
    fi
    printf '| %-52s | %6.2f | %11s | %11s | %28s |\n' "${LABEL[$m]}" "$med" "$over" "${COST[$m]}" "$alone"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "${LABEL[$m]}" "$med" "${over#+}" "$alone_ms" "$per" >>"$OUT/invoice.tsv"
done
echo
echo "txns / RTs: transactions and client round trips per account; overhead: the run's" \
    "median less no lock's (batches: less the batched writes'). Every run checked: one invoice per" \
    "account, each balance debited once."
echo "PostgreSQL $(psql_val 'SHOW server_version' | awk '{ print $1 }'), Redis $(redis-server --version | awk '{ print $3 }' | sed 's/^v=//'), etcd $(etcd --version | awk '/^etcd Version/ { print $3 }'), $(nproc) CPUs; whole run $(($(date +%s) - T0)) s."
echo
BENCH_OUT=$OUT bash "$BENCH_DIR/charts.sh" invoice

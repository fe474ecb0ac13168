#!/usr/bin/env bash
# make bench: dlock.purge() on a table of ended names, on a throwaway cluster.
#
# The names are written straight into dlock.lease_state (as if released two
# days ago) and the token counter is moved past them; then dlock.purge('1
# day') is called in one session, each call in its own transaction, until it
# returns 0.  Prints the time, the calls, the names per second and the WAL
# written, then what VACUUM leaves of the table.
#
# PURGE_NAMES sets the number of names (default 1,000,000).  BENCH_QUICK=1
# uses 20,000, to check that the benchmark works; figures from it mean
# little.

. "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

if [ "${BENCH_QUICK:-0}" = 1 ]; then
    NAMES=20000
else
    NAMES=${PURGE_NAMES:-1000000}
fi

ensure_packages
build_and_install

start_cluster 54333 max_wal_size=4GB
sql() { as_run_user env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres PGDATABASE=postgres \
            psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
now() { date +%s.%N; }

sql -c 'CREATE EXTENSION dlock'
say "writing $NAMES ended names"
sql <<SQL
INSERT INTO dlock.lease_state (name, token, owner, holder_role, acquired_at,
                               expires_at, ended_at, end_reason, lock_delay,
                               session_bound)
SELECT 'job:' || md5(i::text), i, 'worker', 'postgres'::regrole::dlock.holder,
       now() - interval '2 days 1 minute', now() - interval '1 day 23 hours',
       now() - interval '2 days', 'released', '0', false
  FROM generate_series(1, $NAMES) i;
\o /dev/null
SELECT setval('dlock.token_seq', $NAMES);
\o
VACUUM ANALYZE dlock.lease_state;
CHECKPOINT;
SQL
size_before=$(sql -c "SELECT pg_size_pretty(pg_total_relation_size('dlock.lease_state'))")
lsn_before=$(sql -c 'SELECT pg_current_wal_lsn()')

say "purging"
start=$(now)
sql <<'SQL'
DO $$
DECLARE
  n bigint;
BEGIN
  LOOP
    n := dlock.purge('1 day');
    COMMIT;
    EXIT WHEN n = 0;
  END LOOP;
END $$;
SQL
end=$(now)

read -r left wal wal_pretty < <(sql -F ' ' -c "
SELECT (SELECT count(*) FROM dlock.lease_state),
       pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn_before'),
       replace(pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn_before')), ' ', '')")
[ "$left" = 0 ] || { echo "purge left $left names" >&2; exit 1; }

vstart=$(now)
sql -c 'VACUUM dlock.lease_state'
vend=$(now)
size_after=$(sql -c "SELECT pg_size_pretty(pg_total_relation_size('dlock.lease_state'))")

awk -v n="$NAMES" -v s="$start" -v e="$end" -v w="$wal" -v wp="$wal_pretty" \
    -v vs="$vstart" -v ve="$vend" -v b="$size_before" -v a="$size_after" 'BEGIN {
    t = e - s
    printf "\n%-34s %14s\n", "dlock.purge(), one session", "figure"
    printf "%-34s %14d\n", "names purged", n
    printf "%-34s %14d\n", "calls (1000 names each, then 0)", int((n + 999) / 1000) + 1
    printf "%-34s %14.2f\n", "seconds", t
    printf "%-34s %14.0f\n", "names/s", n / t
    printf "%-34s %14s\n", "WAL written", wp
    printf "%-34s %14.0f\n", "WAL bytes per name", w / n
    printf "%-34s %14.2f\n", "VACUUM afterwards, seconds", ve - vs
    printf "%-34s %14s\n", "table + index before", b
    printf "%-34s %14s\n", "table + index after VACUUM", a
}'

#!/usr/bin/env bash
# The SQL edition's suites on a throwaway cluster: run as the user that
# owns the clone (not root: initdb refuses it), with PG_CONFIG naming a
# PostgreSQL installation that has no dlock installed (the SQL edition must
# not need one).  It starts a cluster in a temporary directory, on a unix
# socket only, runs sql-edition/test/run.sh twice (the tests as the plain
# role that installed the SQL edition, then as a superuser), stops the
# cluster it started, and ends with a line "N passed, N failed".
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
export PG_CONFIG
BINDIR=$("$PG_CONFIG" --bindir)

# The tests' LOAD 'dlock' must fail as on a managed service: with the C
# edition's module installed, it would define dlock's settings
if [ -e "$("$PG_CONFIG" --pkglibdir)/dlock.so" ] || [ -e "$("$PG_CONFIG" --sharedir)/extension/dlock.control" ]; then
  echo "$PG_CONFIG's installation has the C edition of dlock; the SQL edition's tests need one without it" >&2
  exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlock-sql.XXXXXX")
PGPID=
cleanup() {
  [ -n "$PGPID" ] && kill -INT "$PGPID" 2>/dev/null && while kill -0 "$PGPID" 2>/dev/null; do sleep 0.2; done
  rm -rf "$WORK"
}
trap cleanup EXIT

"$BINDIR/initdb" -D "$WORK/data" -A trust -U postgres >/dev/null || exit 1
"$BINDIR/pg_ctl" -D "$WORK/data" -l "$WORK/log" -w \
  -o "-k $WORK -c listen_addresses='' -c max_prepared_transactions=10" start >/dev/null || exit 1
PGPID=$(head -1 "$WORK/data/postmaster.pid")
export PGHOST=$WORK PGUSER=postgres PGPORT=5432

passed=0 failed=0
# count LOG: add the tests that passed and failed, as pg_regress prints
# them up to PostgreSQL 15 ("test api ... ok", "... FAILED") and as TAP
# from 16 on ("ok 1 - api", "not ok 1 - api")
count() {
  local p f
  p=$(grep -cE '^test .* \.\.\. ok|^ok [0-9]+ ' "$1")
  f=$(grep -cE '^test .* \.\.\. FAILED|^not ok [0-9]+ ' "$1")
  passed=$((passed + p)); failed=$((failed + f))
}
for as in owner superuser; do
  echo "== tests as the $as"
  failed_before=$failed
  DLOCK_SQL_AS=$as DLOCK_SQL_OUT="$WORK/out-$as" bash "$HERE/run.sh" all 2>&1 | tee "$WORK/$as.log"
  rc=${PIPESTATUS[0]}
  count "$WORK/$as.log"
  # a run that failed with no test failed (the install, say) is a failure,
  # not a run with nothing to count
  if [ "$rc" -ne 0 ] && [ "$failed" -eq "$failed_before" ]; then
    echo "# sql-edition/test/run.sh as the $as failed (exit status $rc) before a test failed"
    failed=$((failed + 1))
  fi
  if grep -qE 'FAILED|^not ok [0-9]+ ' "$WORK/$as.log"; then
    cat "$WORK"/out-$as/*/regression.diffs 2>/dev/null
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

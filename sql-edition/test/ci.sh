#!/usr/bin/env bash
# The SQL edition's suites on a throwaway cluster: run as the user that
# owns the clone (not root: initdb refuses it), with PG_CONFIG naming a
# PostgreSQL installation that has no dlock installed (the SQL edition must
# not need one).  It starts a cluster in a temporary directory, on a unix
# socket only, runs sql-edition/test/run.sh twice (the tests as the plain
# role that installed the SQL edition, then as a superuser), then the
# stress checker (stress/checker.c: the lock-guarded set and the
# mixed-kinds churn, each fenced and as its control) as a role that is no
# superuser and installed the SQL edition in its own database, stops the
# cluster it started, and ends with a line "N passed, N failed".
#
#   DLOCK_SQL_STAGES                 what runs, of "tests stress" (default both)
#   DLOCK_SQL_STRESS_SECONDS         each fenced stress run (default 12)
#   DLOCK_SQL_STRESS_CONTROL_SECONDS each control run (default 8)
#
# The stress stage compiles the checker with PG_CONFIG's include and
# library directories (libpq's headers, as libpq-dev installs them) and a
# C compiler (cc).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
EDITION=$(dirname "$HERE")
ROOT=$(dirname "$EDITION")
STAGES=${DLOCK_SQL_STAGES:-tests stress}
for stage in $STAGES; do
  case $stage in
    tests|stress) ;;
    *) echo "DLOCK_SQL_STAGES: no stage \"$stage\" (tests, stress)" >&2; exit 2 ;;
  esac
done
wanted() { [[ " $STAGES " == *" $1 "* ]]; }
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
  wanted tests || break
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

# The stress checker against the SQL edition.  Each run is one result; a
# control run (the same schedule without dlock.fence()) passes only when
# the checker found the anomalies that a missing fence lets through, or
# the checker could not tell a broken lock from a working one.
STRESS_ROLE=dlock_stress
stress_n=0
. "$ROOT/stress/diagnostics.sh"
# stress_result RC TITLE [OUTPUT]: a failure is followed by the checker's
# summary lines in OUTPUT as TAP diagnostics, which a run's list of
# failures keeps
stress_result() {
  stress_n=$((stress_n + 1))
  if [ "$1" -eq 0 ]; then
    echo "ok $stress_n - stress: $2"
    passed=$((passed + 1))
  else
    echo "not ok $stress_n - stress: $2"
    failed=$((failed + 1))
    [ -z "${3:-}" ] || stress_diagnostics "$3"
  fi
}
# stress_run TITLE OPTION...: the checker as the plain role, in its
# database, bounded (the checker's own deadline is its length and 20 s of
# grace for its workers, in each of up to three rounds of 1, 2 and 4 times
# the length when a round tests too little; a SIGTERM makes it kill them
# and fail)
stress_run() {
  local title=$1 rc secs=0 prev= a
  shift
  for a in "$@"; do [ "$prev" = --seconds ] && secs=$a; prev=$a; done
  echo "-- stress: $title"
  PGUSER=$STRESS_ROLE PGDATABASE=$STRESS_ROLE timeout -k 10 $((secs * 7 + 90)) \
    "$WORK/checker" --edition sql "$@" 2>&1 | tee "$WORK/stress.out"
  rc=${PIPESTATUS[0]}
  stress_result "$rc" "$title" "$WORK/stress.out"
}
stress_stage() {
  local fenced_s=${DLOCK_SQL_STRESS_SECONDS:-12} control_s=${DLOCK_SQL_STRESS_CONTROL_SECONDS:-8}
  local start=$SECONDS psql_s=("$BINDIR/psql" -X -q -v ON_ERROR_STOP=1) who
  echo "== stress checker against the SQL edition"
  if ! cc -std=c99 -O2 -Wall -Wextra -Werror -I"$("$PG_CONFIG" --includedir)" -o "$WORK/checker" \
      "$ROOT/stress/checker.c" "$ROOT/stress/kinds.c" "$ROOT/test/lib/dlock_client.c" \
      -L"$("$PG_CONFIG" --libdir)" -lpq; then
    stress_result 1 "the checker builds"
    return
  fi
  # A role with no right but to log in, owning a database of its own,
  # installs the SQL edition there and runs the checker
  who=$("${psql_s[@]}" -d postgres -c "CREATE ROLE $STRESS_ROLE LOGIN" \
          -c "CREATE DATABASE $STRESS_ROLE OWNER $STRESS_ROLE" &&
        "${psql_s[@]}" -d "$STRESS_ROLE" -c "REVOKE CREATE ON SCHEMA public FROM PUBLIC" \
          -c "ALTER SCHEMA public OWNER TO $STRESS_ROLE" &&
        "${psql_s[@]}" -U "$STRESS_ROLE" -d "$STRESS_ROLE" -f "$EDITION/dlock.sql" &&
        "${psql_s[@]}" -U "$STRESS_ROLE" -d "$STRESS_ROLE" -Atc \
          "SELECT r.rolsuper, pg_get_userbyid(n.nspowner),
                  (SELECT count(*) FROM pg_extension WHERE extname = 'dlock')
             FROM pg_roles r, pg_namespace n
            WHERE r.rolname = current_user AND n.nspname = 'dlock'")
  if [ "$who" != "f|$STRESS_ROLE|0" ]; then
    echo "# expected schema dlock owned by $STRESS_ROLE, not a superuser, and no extension; got \"$who\""
    stress_result 1 "the SQL edition installed by $STRESS_ROLE, not a superuser"
    return
  fi
  stress_run "set, fenced" --seconds "$fenced_s"
  stress_run "set, control without dlock.fence() (must detect lost writes)" \
    --no-fence --seconds "$control_s"
  stress_run "kinds, fenced" --kinds --seconds "$fenced_s"
  stress_run "kinds, control without dlock.fence() (must see conflicting holders inside at once)" \
    --kinds --no-fence --seconds "$control_s"
  echo "# stress stage: $((SECONDS - start)) s"
}
wanted stress && stress_stage

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

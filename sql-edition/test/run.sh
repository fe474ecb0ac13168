#!/usr/bin/env bash
# Runs the project's regression files (test/sql/*.sql) and isolation specs
# (test/specs/*.spec, but the test build's hook_*.spec) against the SQL edition
# of dlock, installed by a plain role that owns the database, as that role.
#
#   sql-edition/test/run.sh [regress|isolation|all] [test ...]
#
# The server is the one of the libpq environment (PGHOST, PGPORT), reached
# as a superuser (PGUSER) only to make the role and the database:
#   DLOCK_SQL_ROLE (default dlock_sql_owner): LOGIN CREATEROLE CREATEDB, no superuser,
#     as a managed service's administrator role
#   DLOCK_SQL_DB   (default contrib_regression, the name pg_regress gives its own): owned by that role; made afresh
#   DLOCK_SQL_AS   (default owner): the role the tests run as.  A
#     CREATEROLE role cannot SET ROLE to the roles it creates (up to
#     PostgreSQL 15 at all; from 16 on, unless createrole_self_grant says
#     "set"), which several files do; "superuser" runs them as PGUSER
#     instead (the functions still run as the role that installed them).
# PG_CONFIG names the installation whose pg_regress, pg_isolation_regress and
# psql run.  The SQL edition's expected files (sql-edition/expected/) stand
# in for the C edition's where they differ by design (sql-edition/README.md
# explains each difference).  Results go to DLOCK_SQL_OUT (default: a new
# temporary directory, named on the first line of output).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
EDITION=$(dirname "$HERE")
ROOT=$(dirname "$EDITION")
PG_CONFIG=${PG_CONFIG:-pg_config}
BINDIR=$("$PG_CONFIG" --bindir)
PGXS_DIR=$(dirname "$(dirname "$(dirname "$("$PG_CONFIG" --pgxs)")")")
REGRESS="$PGXS_DIR/src/test/regress/pg_regress"
ISOLATION="$PGXS_DIR/src/test/isolation/pg_isolation_regress"
ROLE=${DLOCK_SQL_ROLE:-dlock_sql_owner}
RUN_AS=$ROLE
[ "${DLOCK_SQL_AS:-owner}" = superuser ] && RUN_AS=${PGUSER:-$(id -un)}
DB=${DLOCK_SQL_DB:-contrib_regression}
WHAT=${1:-all}
shift || true

psql_super() { "$BINDIR/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }

# A fresh database owned by a plain role, with the SQL edition installed by it
# (a failed run may have left prepared transactions in it)
if [ "$(psql_super -d postgres -Atc "SELECT count(*) FROM pg_database WHERE datname = '$DB'")" = 1 ]; then
  for gid in $(psql_super -d "$DB" -Atc "SELECT gid FROM pg_prepared_xacts WHERE database = '$DB'"); do
    psql_super -d "$DB" -c "ROLLBACK PREPARED '$gid'"
  done
fi
psql_super -d postgres -c "DROP DATABASE IF EXISTS $DB" \
  -c "DO \$\$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN CREATE ROLE $ROLE LOGIN CREATEROLE CREATEDB; END IF; END\$\$" \
  -c "CREATE DATABASE $DB OWNER $ROLE"
psql_super -d "$DB" -c "REVOKE CREATE ON SCHEMA public FROM PUBLIC" -c "ALTER SCHEMA public OWNER TO $ROLE"
"$BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -U "$ROLE" -d "$DB" -f "$EDITION/dlock.sql"

# The tests' input: the project's files, the SQL edition's expected files
# over the C edition's
OUT=${DLOCK_SQL_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dlock-sql-test.XXXXXX")}
echo "results in $OUT"
rm -rf "$OUT"
mkdir -p "$OUT/input/expected"
cp -r "$ROOT/test/sql" "$ROOT/test/specs" "$OUT/input/"
# CREATE and DROP EXTENSION dlock are, for the SQL edition, running its
# script and dropping its schema
# (an isolation spec cannot include a file: there dlock_sql_install(), made
# below, runs the script)
for f in "$OUT"/input/specs/*.spec; do
  sed -i -e "s|^\( *\)CREATE EXTENSION dlock\( VERSION '[0-9.]*'\)\?;\$|\1DO \$\$BEGIN PERFORM public.dlock_sql_install(); END\$\$;|" \
         -e "s|^\( *\)ALTER EXTENSION dlock UPDATE;\$|\1-- (one version)|" "$f"
done
for f in "$OUT"/input/sql/*.sql "$OUT"/input/specs/*.spec; do
  sed -i -e 's|^CREATE EXTENSION dlock;$|\\set ECHO none\n\\set dlock_inside_transaction\n\\i dlock.sql\n\\unset dlock_inside_transaction\n\\set ECHO all|' \
         -e "s|^CREATE EXTENSION dlock VERSION \(.*\);\$|-- CREATE EXTENSION dlock VERSION \1; (the SQL edition has one version)|" \
         -e "s|^\( *\)DROP EXTENSION dlock;\$|\1DO \$\$BEGIN PERFORM set_config('client_min_messages', 'warning', true); DROP SCHEMA dlock CASCADE; END\$\$;|" "$f"
done
cp "$ROOT"/test/expected/*.out "$OUT/input/expected/"
cp "$EDITION"/expected/*.out "$OUT/input/expected/" 2>/dev/null || true
# and the SQL edition's own test: its conflict matrix against the C edition's
cp "$HERE/conflicts.sql" "$OUT/input/sql/"
# (the tests include the script by a name relative to where psql runs, so
# that the messages that name it do not depend on where the clone is)
cp "$EDITION/dlock.sql" "$OUT/input/dlock.sql"
cd "$OUT/input"

# dlock_sql_install(): the script, without its psql lines and its own
# transaction, run by the owner
{
  echo 'CREATE FUNCTION public.dlock_sql_install() RETURNS void LANGUAGE plpgsql AS $install$'
  echo 'BEGIN'
  echo '  EXECUTE $script$'
  sed -e '/^\\if/,/^\\endif/d' "$EDITION/dlock.sql"
  echo '$script$;'
  echo 'END'
  echo '$install$;'
} > "$OUT/install-function.sql"
"$BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -U "$ROLE" -d "$DB" -f "$OUT/install-function.sql"

status=0
if [ "$WHAT" = regress ] || [ "$WHAT" = all ]; then
  if [ "$WHAT" = regress ] && [ $# -gt 0 ]; then tests=("$@"); else
    tests=($(sed -nE 's/^REGRESS *= *//p' "$ROOT/Makefile") conflicts); fi
  # security.sql sets the role to roles it creates and makes databases
  # owned by them, which a CREATEROLE role may not (see DLOCK_SQL_AS), and
  # transactions.sql reads pg_backend_memory_contexts, which only superusers
  # may: they run as PGUSER (the functions still run as the role that
  # installed them)
  owner_tests=() super_tests=()
  for t in "${tests[@]}"; do
    case "$t" in
      security|transactions) [ "$RUN_AS" = "$ROLE" ] && super_tests+=("$t") || owner_tests+=("$t") ;;
      *) owner_tests+=("$t") ;;
    esac
  done
  if [ ${#owner_tests[@]} -gt 0 ]; then
    "$REGRESS" --use-existing --bindir="$BINDIR" --dbname="$DB" --user="$RUN_AS" \
      --inputdir="$OUT/input" --outputdir="$OUT/regress" "${owner_tests[@]}" || status=1
  fi
  if [ ${#super_tests[@]} -gt 0 ]; then
    "$REGRESS" --use-existing --bindir="$BINDIR" --dbname="$DB" --user="${PGUSER:-$(id -un)}" \
      --inputdir="$OUT/input" --outputdir="$OUT/regress-superuser" "${super_tests[@]}" || status=1
  fi
fi
if [ "$WHAT" = isolation ] || [ "$WHAT" = all ]; then
  if [ "$WHAT" = isolation ] && [ $# -gt 0 ]; then specs=("$@"); else
    specs=($(sed -nE '/^ISOLATION *=/,/^[^ ]/{s/^ISOLATION *= *//;s/\\$//;p}' "$ROOT/Makefile" | grep -v '^#')); fi
  "$ISOLATION" --use-existing --bindir="$BINDIR" --dbname="$DB" --user="$RUN_AS" \
    --inputdir="$OUT/input" --outputdir="$OUT/isolation" "${specs[@]}" || status=1
fi
exit $status

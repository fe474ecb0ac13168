#!/usr/bin/env bash
# make test-drivers: the recipes of docs/drivers/ run with real client
# drivers, directly and through a real pgbouncer in transaction mode.
#
# Starts a throwaway cluster on 127.0.0.1 (scripts/common.sh) with dlock
# installed in a database that an application role owns, and Debian's
# pgbouncer in front of it (pool_mode = transaction, password auth), then
# runs every executable test/drivers/*/run with the environment below.  A
# run prints "ok - ..." / "not ok - ..." lines and exits non-zero when
# something failed.  Before them, each code block of docs/drivers/*.md that
# follows a line "<!-- file: PATH -->" is checked to equal that file, so the
# docs cannot drift from what is tested.  Ends with "N passed, N failed".
#
# Environment of a run (its working directory is its own directory):
#   DLOCK_DIRECT_URL    postgresql://app:pw@127.0.0.1:PORT/drivers (the server)
#   DLOCK_BOUNCER_URL   the same through pgbouncer
#   PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE   the direct connection
#   DLOCK_BOUNCER_PORT  pgbouncer's port
#   DLOCK_BOUNCER_ADMIN pgbouncer's admin console, a libpq URL; it speaks
#                       the simple query protocol only: psql "$DLOCK_BOUNCER_ADMIN" -c RECONNECT
#   DLOCK_SUPER_URL     a superuser connection, for set-up and inspection
#   DLOCK_SCRATCH       a private directory the run may write into
#   PATH                with PostgreSQL's bin directory (psql) first
#
# Assumes dlock is installed (make test-drivers installs it first); installs
# the drivers' Debian packages when missing.  DRIVERS="python node" runs only
# those; DLOCK_DRIVERS_PORT sets the server's port (pgbouncer takes the next).
# Nothing is left running: the cluster and pgbouncer are stopped by pid.

. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"

# What the recipes need, and a JavaScript runtime and a JDK only when there
# is none on PATH
DEBIAN_PACKAGES+=(python3-psycopg python3-psycopg2 python3-sqlalchemy python3-alembic
                  libpostgresql-jdbc-java)
command -v node >/dev/null || DEBIAN_PACKAGES+=(nodejs)
command -v npm >/dev/null || DEBIAN_PACKAGES+=(npm)
command -v javac >/dev/null || DEBIAN_PACKAGES+=(default-jdk-headless)
ensure_packages

DRIVERS_DIR=$SRC_DIR/test/drivers
PG_PORT=${DLOCK_DRIVERS_PORT:-55400}
BOUNCER_PORT=$((PG_PORT + 1))
DB=drivers
passed=0
failed=0

# result OK|NOT TEXT: one counted check of the harness itself
result() {
    if [ "$1" = ok ]; then echo "ok - $2"; passed=$((passed + 1));
    else echo "not ok - $2"; failed=$((failed + 1)); fi
}

#
# The docs: every block marked with a file name equals that file
#
check_docs() {
    local doc path block n
    for doc in "$SRC_DIR"/docs/drivers/*.md; do
        [ -e "$doc" ] || continue
        n=0
        # "path<TAB>line" for each marker, the block's text into a file each
        awk -v out="$WORK/doc-block." '
            # a marker, then the next fenced block is its file
            match($0, /^<!-- file: [^ ]+ -->$/) {
                path = $3; line = NR; want = 1; next
            }
            want && /^```/ { want = 0; inside = 1; n++; f = out n; printf "" > f
                             printf "%s\t%d\n", path, line; next }
            inside && /^```$/ { inside = 0; close(f); next }
            inside { print > f }
        ' "$doc" >"$WORK/doc-blocks"
        while IFS=$'\t' read -r path block; do
            n=$((n + 1))
            if [ ! -f "$SRC_DIR/$path" ]; then
                result not "${doc#"$SRC_DIR"/}: $path, named at line $block, exists"
            elif diff -u "$SRC_DIR/$path" "$WORK/doc-block.$n" >"$WORK/doc.diff"; then
                result ok "${doc#"$SRC_DIR"/}: the block at line $block equals $path"
            else
                result not "${doc#"$SRC_DIR"/}: the block at line $block equals $path"
                head -n 40 "$WORK/doc.diff" | sed 's/^/# /'
            fi
        done <"$WORK/doc-blocks"
        [ "$n" -gt 0 ] || result not "${doc#"$SRC_DIR"/}: names at least one tested file"
    done
}

#
# The cluster, the database, the role and pgbouncer
#
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "$PG_PORT" "$BOUNCER_PORT"; do
    port_free "$p" || { echo "port $p on 127.0.0.1 is in use: set DLOCK_DRIVERS_PORT" >&2; exit 1; }
done

say "starting a throwaway cluster on 127.0.0.1:$PG_PORT"
# dlock preloaded so that queue => true works; passwords checked for the
# application role (the superuser connects through trust)
start_cluster "$PG_PORT" "listen_addresses=127.0.0.1" "shared_preload_libraries=dlock" \
    "max_connections=60"
BOUNCER_PID=
stop_all() {
    if [ -n "$BOUNCER_PID" ] && kill -0 "$BOUNCER_PID" 2>/dev/null; then
        kill -INT "$BOUNCER_PID"
        while kill -0 "$BOUNCER_PID" 2>/dev/null; do sleep 0.1; done
    fi
    stop_cluster
}
trap stop_all EXIT

sed -i '1i host all app 127.0.0.1/32 scram-sha-256' "$WORK/data/pg_hba.conf"
super() { as_run_user psql -X -q -At -v ON_ERROR_STOP=1 -h "$WORK" -p "$PG_PORT" -U postgres "$@"; }
super -d postgres -c "SELECT pg_reload_conf()" >/dev/null
super -d postgres <<EOF
CREATE ROLE app LOGIN PASSWORD 'pw';
CREATE DATABASE $DB OWNER app;
EOF
super -d "$DB" <<'EOF'
CREATE EXTENSION dlock;
-- What the recipes fence: one row per job, written by its lease's holder
CREATE TABLE jobs (id text PRIMARY KEY, done_by bigint, runs int NOT NULL DEFAULT 0,
                   at timestamptz DEFAULT clock_timestamp());
ALTER TABLE jobs OWNER TO app;
EOF

say "starting pgbouncer on 127.0.0.1:$BOUNCER_PORT (transaction pooling)"
B=$WORK/bouncer
mkdir "$B"
cat >"$B/pgbouncer.ini" <<EOF
[databases]
$DB = host=127.0.0.1 port=$PG_PORT dbname=$DB

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $B/userlist.txt
admin_users = bouncer_admin
pool_mode = transaction
default_pool_size = 4
max_client_conn = 200
logfile = $B/pgbouncer.log
pidfile = $B/pgbouncer.pid
ignore_startup_parameters = extra_float_digits,options
EOF
cat >"$B/userlist.txt" <<'EOF'
"app" "pw"
"bouncer_admin" "adminpw"
EOF
[ "$(id -un)" = "$RUN_USER" ] || chown -R "$RUN_USER": "$B"
chmod 600 "$B/userlist.txt"
as_run_user pgbouncer -d -q "$B/pgbouncer.ini"
for _ in $(seq 100); do [ -s "$B/pgbouncer.pid" ] && break; sleep 0.1; done
BOUNCER_PID=$(cat "$B/pgbouncer.pid")

export DLOCK_DIRECT_URL="postgresql://app:pw@127.0.0.1:$PG_PORT/$DB"
export DLOCK_BOUNCER_URL="postgresql://app:pw@127.0.0.1:$BOUNCER_PORT/$DB"
export DLOCK_BOUNCER_PORT=$BOUNCER_PORT
export DLOCK_BOUNCER_ADMIN="postgresql://bouncer_admin:adminpw@127.0.0.1:$BOUNCER_PORT/pgbouncer"
export DLOCK_SUPER_URL="postgresql://postgres@127.0.0.1:$PG_PORT/$DB"
export PGHOST=127.0.0.1 PGPORT=$PG_PORT PGUSER=app PGPASSWORD=pw PGDATABASE=$DB
export PATH=$PG_BINDIR:$PATH
unset PGSERVICE PGSSLMODE PGOPTIONS

up=no
for _ in $(seq 50); do
    [ "$(psql -X -At -d "$DLOCK_BOUNCER_URL" -c 'SELECT 1' 2>/dev/null)" = 1 ] && { up=yes; break; }
    sleep 0.1
done
if [ "$up" = yes ]; then
    result ok "pgbouncer $(pgbouncer --version | head -n 1 | awk '{print $2}') accepts the application role"
else
    result not "pgbouncer accepts the application role"
    cat "$B/pgbouncer.log"
fi

say "docs/drivers: each block marked with a file equals it"
check_docs

#
# The drivers
#
for run in "$DRIVERS_DIR"/*/run; do
    [ -x "$run" ] || continue
    dir=$(dirname "$run")
    name=$(basename "$dir")
    if [ -n "${DRIVERS:-}" ] && [[ " $DRIVERS " != *" $name "* ]]; then continue; fi
    say "$name"
    export DLOCK_SCRATCH=$WORK/scratch-$name
    mkdir -p "$DLOCK_SCRATCH"
    out=$WORK/$name.out
    start=$(date +%s)
    set +e
    (cd "$dir" && timeout "${DLOCK_DRIVER_TIMEOUT:-600}" "$run") 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    set -e
    ok=$(grep -c '^ok - ' "$out" || true)
    bad=$(grep -c '^not ok - ' "$out" || true)
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
        echo "not ok - $name/run exited with $rc"
        bad=1
    fi
    if [ "$ok" -eq 0 ] && [ "$bad" -eq 0 ]; then
        echo "not ok - $name/run checked something"
        bad=1
    fi
    say "$name: $ok passed, $bad failed in $(($(date +%s) - start)) s"
    passed=$((passed + ok))
    failed=$((failed + bad))
done

[ "$failed" -eq 0 ] || { echo "# pgbouncer's log:"; tail -n 20 "$B/pgbouncer.log" | sed 's/^/# /'; }
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

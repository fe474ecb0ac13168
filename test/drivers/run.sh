#!/usr/bin/env bash
# make test-drivers: the recipes of docs/drivers/ run with real client
# drivers, directly and through a real pgbouncer in transaction mode.
#
# Starts a throwaway cluster on 127.0.0.1 (scripts/common.sh) with dlock
# installed in a database that an application role owns, and Debian's
# pgbouncer in front of it (pool_mode = transaction, password auth), then
# runs every executable test/drivers/*/run with the environment below.  A
# run prints "ok - ..." / "not ok - ..." lines and exits non-zero when
# something failed.  Ends with "N passed, N failed".
#
# The docs are tested too, so that they cannot drift from what is tested.
# Every fenced code block of docs/drivers/*.md follows, on the line right
# before it, one of these markers (a block without one fails):
#   <!-- file: PATH -->      the block equals the file PATH (checked before
#                            the drivers run)
#   <!-- setup -->           SQL that the doc's examples need: run with psql,
#                            as the application role, before each of them
#   <!-- example: RUNNER --> a usage example, run as pasted by the executable
#                            RUNNER (test/drivers/DRIVER/example, after that
#                            driver's run) on an empty database with dlock
#                            installed, after the doc's setup blocks, directly
#                            and through pgbouncer.  It must exit 0 and do its
#                            write: run each job of the jobs table once, under
#                            its lease's token, and release the lease.
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
# and of an example's RUNNER, which gets the example's file as its argument:
#   DATABASE_URL        postgresql://app:pw@127.0.0.1:PORT/DB, the empty
#                       database, directly or through pgbouncer
#   JDBC_DATABASE_URL   the same as a JDBC URL, credentials included
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
# The docs: every block marked with a file equals it, every other block is
# an example or its setup, recorded for run_examples
#
check_docs() {
    local doc rel setup kind arg line n examples=0
    : >"$WORK/examples"
    : >"$WORK/examples-run"
    for doc in "$SRC_DIR"/docs/drivers/*.md; do
        [ -e "$doc" ] || continue
        rel=${doc#"$SRC_DIR"/}
        setup=$WORK/setup-$(basename "$doc" .md).sql
        : >"$setup"
        n=0
        # "kind<TAB>arg<TAB>line" for each fenced block, the line being the
        # marker's (kind "none": no marker right before the block), or for a
        # marker that no block follows ("dangling"); each block's text into
        # a file
        awk -v out="$WORK/doc-block." '
            function marker(k, a) {
                if (kind != "") printf "dangling\t%s\t%d\n", arg, line
                kind = k; arg = a; line = NR
            }
            inside && /^```$/ { inside = 0; close(f); next }
            inside { print > f; next }
            /^<!-- file: [^ ]+ -->$/ { marker("file", $3); next }
            /^<!-- example: [^ ]+ -->$/ { marker("example", $3); next }
            /^<!-- setup -->$/ { marker("setup", "-"); next }
            /^```/ {
                inside = 1; n++; f = out n; printf "" > f
                if (kind == "") printf "none\t-\t%d\n", NR
                else printf "%s\t%s\t%d\n", kind, arg, line
                kind = ""; next
            }
            kind != "" { printf "dangling\t%s\t%d\n", arg, line; kind = "" }
            END { if (kind != "") printf "dangling\t%s\t%d\n", arg, line }
        ' "$doc" >"$WORK/doc-blocks"
        while IFS=$'\t' read -r kind arg line; do
            [ "$kind" = dangling ] || n=$((n + 1))
            case $kind in
            file)
                if [ ! -f "$SRC_DIR/$arg" ]; then
                    result not "$rel: $arg, named at line $line, exists"
                elif diff -u "$SRC_DIR/$arg" "$WORK/doc-block.$n" >"$WORK/doc.diff"; then
                    result ok "$rel: the block at line $line equals $arg"
                else
                    result not "$rel: the block at line $line equals $arg"
                    head -n 40 "$WORK/doc.diff" | sed 's/^/# /'
                fi ;;
            setup)
                cat "$WORK/doc-block.$n" >>"$setup" ;;
            example)
                examples=$((examples + 1))
                cp "$WORK/doc-block.$n" "$WORK/example.$examples"
                printf '%s\t%s\t%s\t%s\t%s\n' "$arg" "$rel" "$line" "$examples" "$setup" \
                    >>"$WORK/examples" ;;
            none)
                result not "$rel: the block at line $line is a tested file, setup or example (a marker on the line before it)" ;;
            dangling)
                result not "$rel: the marker at line $line is right before a block" ;;
            esac
        done <"$WORK/doc-blocks"
        grep -q '^file' "$WORK/doc-blocks" || result not "$rel: names at least one tested file"
    done
}

# What an example must have done on its database: run every job of the table
# once, under the token of the job's lease, and released that lease
EXAMPLE_DID_ITS_WRITE="
SELECT count(*) > 0 AND bool_and(j.runs = 1 AND l.token = j.done_by AND l.state = 'released')
  FROM jobs j LEFT JOIN dlock.leases l ON l.name = 'job:' || j.id"

# run_examples DIR: the examples whose runner is in DIR, each on an empty
# database of its own with dlock installed, directly and through pgbouncer
run_examples() {
    local dir=$1 runner rel line n setup way port db jdbc out rc did what
    while IFS=$'\t' read -r runner rel line n setup; do
        [ "$(dirname "$SRC_DIR/$runner")" = "$dir" ] || continue
        echo "$n" >>"$WORK/examples-run"
        if [ ! -x "$SRC_DIR/$runner" ]; then
            result not "$rel: $runner, named at line $line, is an executable"
            continue
        fi
        for way in direct "through pgbouncer"; do
            port=$PG_PORT
            [ "$way" = direct ] || port=$BOUNCER_PORT
            db=example_${n}_$port
            super -d postgres -c "CREATE DATABASE $db OWNER app"
            super -d "$db" -c "CREATE EXTENSION dlock"
            jdbc="jdbc:postgresql://127.0.0.1:$port/$db?user=app&password=pw"
            [ "$way" = direct ] || jdbc="$jdbc&prepareThreshold=0"
            out=$WORK/example.$n.out
            set +e
            # the setup as a reader runs it, with psql as the application
            # role, then the example
            {
                psql -X -q -v ON_ERROR_STOP=1 -d "postgresql://app:pw@127.0.0.1:$PG_PORT/$db" \
                    -f "$setup" &&
                    (cd "$DLOCK_SCRATCH" &&
                     DATABASE_URL="postgresql://app:pw@127.0.0.1:$port/$db" \
                     JDBC_DATABASE_URL=$jdbc timeout 120 "$SRC_DIR/$runner" "$WORK/example.$n")
            } </dev/null >"$out" 2>&1
            rc=$?
            did=$(super -d "$db" -c "$EXAMPLE_DID_ITS_WRITE" 2>&1)
            set -e
            what="$rel: the example at line $line runs as pasted on an empty database, $way, and does its write"
            if [ "$rc" -eq 0 ] && [ "$did" = t ]; then
                result ok "$what"
            else
                result not "$what"
                echo "#   exit status $rc; did its write: ${did%%$'\n'*}"
                tail -n 20 "$out" | sed 's/^/#   /'
                super -d "$db" -c "SELECT * FROM jobs" 2>/dev/null | sed 's/^/#   jobs: /' || true
            fi
            # pgbouncer first lets go of its server connections to the
            # database, which it would otherwise see killed under it
            [ "$way" = direct ] ||
                psql -X -q -d "$DLOCK_BOUNCER_ADMIN" -c "KILL $db" >/dev/null || true
            super -d postgres -c "DROP DATABASE $db WITH (FORCE)"
        done
    done <"$WORK/examples"
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
; any other database (the examples' empty ones) on the same server
* = host=127.0.0.1 port=$PG_PORT

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

say "docs/drivers: each block marked with a file equals it, every other is tested"
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
    # the docs' examples that this driver runs, now that its run has
    # installed what they need
    if grep -q "^${dir#"$SRC_DIR"/}/" "$WORK/examples"; then
        say "$name: the examples of docs/drivers/, as pasted"
        run_examples "$dir"
    fi
done

# an example whose runner is in no driver's directory was never run
while IFS=$'\t' read -r runner rel line n setup; do
    name=$(basename "$(dirname "$runner")")
    if [ -n "${DRIVERS:-}" ] && [[ " $DRIVERS " != *" $name "* ]]; then continue; fi
    grep -qx "$n" "$WORK/examples-run" ||
        result not "$rel: the example at line $line was run by a driver's run ($runner)"
done <"$WORK/examples"

[ "$failed" -eq 0 ] || { echo "# pgbouncer's log:"; tail -n 20 "$B/pgbouncer.log" | sed 's/^/# /'; }
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

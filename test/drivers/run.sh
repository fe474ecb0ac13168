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
#   DLOCK_EDITION       c or sql: the edition installed (below)
#   DLOCK_SQL_EDITION   the SQL edition's script, sql-edition/dlock.sql
# A run that makes a database of its own installs dlock in it as run.sh
# does: DLOCK_EDITION=c, CREATE EXTENSION dlock as the superuser; sql,
# psql -f "$DLOCK_SQL_EDITION" as the application role.
#
# DLOCK_EDITION=sql runs all of it against the SQL edition
# (sql-edition/dlock.sql), as on a managed service: the server runs from a
# copy of PostgreSQL's installation without dlock's module, control file
# and scripts (the way scripts/test-sql-edition.sh makes one), nothing is
# preloaded, and the application role, the databases' owner and no
# superuser, installs the SQL edition with psql wherever the C edition's
# run says CREATE EXTENSION.  Counted checks of the harness show it: no
# extension dlock, no preloaded library, no C function in the database, no
# dlock.so to load, and none mapped by a process of the server during the
# run.  The C edition's run (the default) checks the opposite (preloaded,
# mapped), which is what shows that those checks can see the module.
#
# CLUSTER_ROOT=DIR runs the server of a chroot that scripts/chroot.sh made
# for PG_MAJOR (a major this machine's release does not have), with the SQL
# edition only: the server's programs run in the chroot (scripts/common.sh,
# as_server_user), and the drivers, psql and pgbouncer are this machine's,
# over 127.0.0.1 and the socket directory, mounted at its own path in the
# chroot.  That is how CI runs the recipes on every major.
#
# Assumes dlock is installed (make test-drivers installs it first); installs
# the drivers' Debian packages when missing.  DRIVERS="python node" runs only
# those; DLOCK_DRIVERS_PORT sets the server's port (pgbouncer takes the next).
# The server is PG_BINDIR's, or else PG_CONFIG's (the installation that make
# install wrote to).  Nothing is left running: the cluster and pgbouncer are
# stopped by pid.

# PG_CONFIG alone names the installation: its server, not the default one
if [ -z "${PG_BINDIR:-}" ] && [ -n "${PG_CONFIG:-}" ]; then
    PG_BINDIR=$("$PG_CONFIG" --bindir)
fi
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"

EDITION=${DLOCK_EDITION:-c}
case $EDITION in
c|sql) ;;
*) echo "DLOCK_EDITION must be c or sql, not $EDITION" >&2; exit 2 ;;
esac
# psql for the clients: the server's own, or with the server in a chroot
# this machine's newest (a newer psql than the server is fine; an older
# one talks to it too, as the drivers do)
CLIENT_BINDIR=$PG_BINDIR
SERVER_BINDIR=$PG_BINDIR    # as named (the SQL edition runs a copy of it)
if [ -n "${CLUSTER_ROOT:-}" ]; then
    [ "$EDITION" = sql ] ||
        { echo "CLUSTER_ROOT runs the SQL edition only (DLOCK_EDITION=sql)" >&2; exit 2; }
    [ -x "$CLUSTER_ROOT$PG_BINDIR/postgres" ] ||
        { echo "$CLUSTER_ROOT has no server in $PG_BINDIR" >&2; exit 2; }
    # this machine needs no server of that major: only the clients
    DEBIAN_PACKAGES=(postgresql-client pgbouncer)
    CLIENT_BINDIR=$(ls -d /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -n 1)
    CLIENT_BINDIR=${CLIENT_BINDIR%/psql}
fi

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
            install_dlock "$db"
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

# The SQL edition's server: a copy of the installation without dlock's
# files, so that nothing can load the C edition, as on a managed service
PG_COPY=
preload=(shared_preload_libraries=dlock)
if [ "$EDITION" = sql ]; then
    preload=()
    PG_COPY=$(make_work_dir)
    trap 'rm -rf "$PG_COPY"' EXIT
    # the paths of the server's own installation (in its chroot: as seen
    # there, the copy being mounted at its own path there too)
    if [ -n "${CLUSTER_ROOT:-}" ]; then
        server_config() { bash "$SRC_DIR/scripts/chroot.sh" run "$CLUSTER_ROOT" "$PG_BINDIR/pg_config" "$@"; }
        CLUSTER_BIND=$PG_COPY
    else
        server_config=$PG_BINDIR/pg_config
        [ -x "$server_config" ] || server_config=$PG_CONFIG
        server_config() { "$server_config" "$@"; }
    fi
    pkglibdir=$(server_config --pkglibdir)
    sharedir=$(server_config --sharedir)
    for d in "$(dirname "$PG_BINDIR")" "$pkglibdir" "$sharedir"; do
        mkdir -p "$PG_COPY$(dirname "$d")"
        [ -e "$PG_COPY$d" ] || cp -a "${CLUSTER_ROOT:-}$d" "$PG_COPY$d"
    done
    rm -f "$PG_COPY$pkglibdir"/dlock.so "$PG_COPY$sharedir"/extension/dlock.control \
        "$PG_COPY$sharedir"/extension/dlock--*.sql
    PG_BINDIR=$PG_COPY$PG_BINDIR
    [ "$(id -un)" = "$RUN_USER" ] || chown -R "$RUN_USER": "$PG_COPY"
fi

say "starting a throwaway cluster on 127.0.0.1:$PG_PORT ($EDITION edition)"
# the C edition preloaded so that queue => true works; passwords checked for
# the application role (the superuser connects through trust), stored as
# SCRAM also where that is not the default (13)
start_cluster "$PG_PORT" "listen_addresses=127.0.0.1" "${preload[@]}" \
    "max_connections=60" "password_encryption=scram-sha-256"
BOUNCER_PID=
SAMPLER_PID=
stop_all() {
    if [ -n "$SAMPLER_PID" ] && kill -0 "$SAMPLER_PID" 2>/dev/null; then
        kill "$SAMPLER_PID"
        wait "$SAMPLER_PID" 2>/dev/null || true
    fi
    if [ -n "$BOUNCER_PID" ] && kill -0 "$BOUNCER_PID" 2>/dev/null; then
        kill -INT "$BOUNCER_PID"
        while kill -0 "$BOUNCER_PID" 2>/dev/null; do sleep 0.1; done
    fi
    stop_cluster
    [ -z "$PG_COPY" ] || rm -rf "$PG_COPY"
}
trap stop_all EXIT

# dlock_so_mapped: the maps file of each process of the server (the
# postmaster and its children) that has dlock.so mapped, one a line.  A
# sampler looks every 0.2 s for the whole run, so that backends that exit
# before the end are seen too (all but those that live less than that).
dlock_so_mapped() {
    local maps
    maps=$(pgrep -P "$CLUSTER_PID" | sed 's|.*|/proc/&/maps|' || true)
    # shellcheck disable=SC2086 # one word per file
    grep -l '/dlock\.so$' "/proc/$CLUSTER_PID/maps" $maps 2>/dev/null || true
}
(
    while :; do
        dlock_so_mapped >>"$WORK/dlock-so-mapped"
        echo >>"$WORK/dlock-so-samples"
        sleep 0.2
    done
) &
SAMPLER_PID=$!

sed -i '1i host all app 127.0.0.1/32 scram-sha-256' "$WORK/data/pg_hba.conf"
super() { as_run_user "$CLIENT_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$WORK" -p "$PG_PORT" -U postgres "$@"; }
# install_dlock DB: the edition into a database that app owns: the C
# edition's extension, made by the superuser, or the SQL edition's script,
# run by app as a reader on a managed service runs it
install_dlock() {
    if [ "$EDITION" = c ]; then
        super -d "$1" -c "CREATE EXTENSION dlock"
    else
        "$CLIENT_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 \
            -d "postgresql://app:pw@127.0.0.1:$PG_PORT/$1" -f "$SRC_DIR/sql-edition/dlock.sql" >/dev/null
    fi
}
super -d postgres -c "SELECT pg_reload_conf()" >/dev/null
super -d postgres <<EOF
CREATE ROLE app LOGIN PASSWORD 'pw';
CREATE DATABASE $DB OWNER app;
EOF
install_dlock "$DB"
super -d "$DB" <<'EOF'
-- What the recipes fence: one row per job, written by its lease's holder
CREATE TABLE jobs (id text PRIMARY KEY, done_by bigint, runs int NOT NULL DEFAULT 0,
                   at timestamptz DEFAULT clock_timestamp());
ALTER TABLE jobs OWNER TO app;
EOF

say "the $EDITION edition is the one installed"
# the server that answers is PG_BINDIR's (in a chroot: that chroot's)
want=$(as_server_user "$PG_BINDIR/postgres" --version | sed -E 's/^[^0-9]*([0-9]+).*/\1/')
got=$(super -d "$DB" -c "SELECT current_setting('server_version_num')::int / 10000")
what="the server is PostgreSQL ${want:-?}, from $SERVER_BINDIR${CLUSTER_ROOT:+ in the chroot of its release}"
if [ -n "$want" ] && [ "$got" = "$want" ]; then
    result ok "$what"
else
    result not "$what"
    echo "#   got: $got"
fi
if [ "$EDITION" = c ]; then
    got=$(super -d "$DB" -c "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'dlock')
                                      || ' ' || current_setting('shared_preload_libraries')")
    if [ "$got" = "$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$SRC_DIR/dlock.control") dlock" ]; then
        result ok "C edition: extension dlock at its default version, the module preloaded"
    else
        result not "C edition: extension dlock at its default version, the module preloaded"
        echo "#   got: $got"
    fi
else
    # installed by app: a login role, no superuser, the database's owner
    got=$(super -d "$DB" <<'EOF'
SELECT r.rolcanlogin AND NOT r.rolsuper AND d.datdba = r.oid AND n.nspowner = r.oid
       AND obj_description(n.oid, 'pg_namespace') LIKE '%SQL edition%'
  FROM pg_roles r, pg_database d, pg_namespace n
 WHERE r.rolname = 'app' AND d.datname = current_database() AND n.nspname = 'dlock'
EOF
)
    if [ "$got" = t ]; then
        result ok "SQL edition: schema dlock made by sql-edition/dlock.sql, run by app (a login role, no superuser, the database's owner)"
    else
        result not "SQL edition: schema dlock made by sql-edition/dlock.sql, run by app (a login role, no superuser, the database's owner)"
        echo "#   got: $got"
    fi
    got=$(super -d "$DB" <<'EOF'
SELECT NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'dlock')
       AND NOT EXISTS (SELECT FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
                        WHERE l.lanname = 'c' AND (p.probin LIKE '%dlock%'
                              OR p.pronamespace = 'dlock'::regnamespace))
       AND current_setting('shared_preload_libraries') = ''
       AND current_setting('session_preload_libraries') = ''
       AND current_setting('local_preload_libraries') = ''
EOF
)
    if [ "$got" = t ]; then
        result ok "SQL edition: no extension dlock, no C function of dlock, no library preloaded"
    else
        result not "SQL edition: no extension dlock, no C function of dlock, no library preloaded"
        echo "#   got: $got"
    fi
    # as on a managed service, the server has no module to load
    set +e
    ext=$(super -d "$DB" -c "CREATE EXTENSION dlock" 2>&1)
    load=$(super -d "$DB" -c "LOAD 'dlock'" 2>&1)
    set -e
    # (18 says the extension "is not available" where 13 to 17 name the file)
    if [[ $ext == *'dlock.control'*'No such file or directory'* ||
          $ext == *'extension "dlock" is not available'* ]] &&
        [[ $load == *'could not access file "dlock"'* ]]; then
        result ok "SQL edition: the server has no C edition to load (CREATE EXTENSION dlock and LOAD 'dlock' fail)"
    else
        result not "SQL edition: the server has no C edition to load (CREATE EXTENSION dlock and LOAD 'dlock' fail)"
        printf '#   got: %s\n#   and: %s\n' "$ext" "$load"
    fi
fi

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
export PATH=$CLIENT_BINDIR:$PATH
export DLOCK_EDITION=$EDITION DLOCK_SQL_EDITION=$SRC_DIR/sql-edition/dlock.sql
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

# The module in the server's processes, sampled for the whole run
kill "$SAMPLER_PID"
wait "$SAMPLER_PID" 2>/dev/null || true
SAMPLER_PID=
dlock_so_mapped >>"$WORK/dlock-so-mapped"
samples=$(wc -l <"$WORK/dlock-so-samples")
if [ "$EDITION" = c ]; then
    if [ "$samples" -ge 3 ] && grep -qx "/proc/$CLUSTER_PID/maps" "$WORK/dlock-so-mapped"; then
        result ok "C edition: dlock.so mapped by the postmaster (preloaded), seen by $samples samples of the server's processes"
    else
        result not "C edition: dlock.so mapped by the postmaster (preloaded), seen by $samples samples of the server's processes"
    fi
else
    dbs=$(super -d postgres -c "SELECT datname FROM pg_database WHERE datallowconn")
    with_ext=
    for d in $dbs; do
        [ -z "$(super -d "$d" -c "SELECT 1 FROM pg_extension WHERE extname = 'dlock'")" ] ||
            with_ext="$with_ext $d"
    done
    if [ "$samples" -ge 3 ] && [ ! -s "$WORK/dlock-so-mapped" ] && [ -z "$with_ext" ]; then
        result ok "SQL edition: dlock.so mapped by no process of the server in $samples samples of the whole run, and no database has extension dlock"
    else
        result not "SQL edition: dlock.so mapped by no process of the server in $samples samples of the whole run, and no database has extension dlock"
        sort -u "$WORK/dlock-so-mapped" | head -n 5 | sed 's/^/#   mapped: /'
        echo "#   databases with extension dlock:${with_ext:- none}"
    fi
fi

[ "$failed" -eq 0 ] || { echo "# pgbouncer's log:"; tail -n 20 "$B/pgbouncer.log" | sed 's/^/# /'; }
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

# shellcheck shell=bash
# Shared set-up for `make test`, `make demo`, the benchmarks and the tests
# on other majors: sourced, not run.
#
# Installs the Debian packages dlock needs when they are missing, builds and
# installs the extension, picks the unprivileged user that runs the
# throwaway clusters (initdb refuses to run as root), and runs one suite of
# installcheck and counts its results (run_suite, with scripts/tap.sh).

set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"

PG_MAJOR=${PG_MAJOR:-15}
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/$PG_MAJOR/bin}
PG_CONFIG=${PG_CONFIG:-$PG_BINDIR/pg_config}
# The server, its headers, and what the tests start for real: pg_cron (purge
# recipe), the Prometheus exporter (queries file), pgbouncer (polling behind
# a transaction pooler), libfaketime (clock steps)
DEBIAN_PACKAGES=(make gcc "postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR"
                 libipc-run-perl libfaketime "postgresql-$PG_MAJOR-cron"
                 prometheus-postgres-exporter pgbouncer)

SRC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

say() { printf '==> %s\n' "$*"; }

# as_root CMD...: run a command as root (directly, or through sudo)
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

ensure_packages() {
    local missing=() pkg
    for pkg in "${DEBIAN_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' ||
            missing+=("$pkg")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        local had_cluster=no
        [ -d "/etc/postgresql/$PG_MAJOR/main" ] && had_cluster=yes
        say "installing ${missing[*]}"
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${missing[@]}" >/dev/null
        # Installing the server package creates and starts a default cluster:
        # stop it only if this install made it, never one that was there before
        if [ "$had_cluster" = no ] &&
            as_root pg_ctlcluster "$PG_MAJOR" main status >/dev/null 2>&1; then
            as_root pg_ctlcluster "$PG_MAJOR" main stop || true
        fi
        # So may pgbouncer's package start a system-wide pgbouncer: the tests
        # start their own, so stop one that this install started
        local pidfile=/var/run/postgresql/pgbouncer.pid
        if [[ " ${missing[*]} " == *" pgbouncer "* ]] && [ -s "$pidfile" ] &&
            as_root kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            as_root service pgbouncer stop >/dev/null 2>&1 ||
                as_root kill -TERM "$(cat "$pidfile")" 2>/dev/null || true
        fi
    fi
}

# build_and_install: compile warning-free and install into PostgreSQL's tree
build_and_install() {
    say "building dlock"
    make -s -C "$SRC_DIR" PG_CONFIG="$PG_CONFIG" \
        PG_CFLAGS="-Wall -Wextra -Werror" >/dev/null
    say "installing dlock"
    as_root make -s -C "$SRC_DIR" PG_CONFIG="$PG_CONFIG" install >/dev/null
}

# The user that owns the throwaway clusters: the current one, or postgres
# when running as root
if [ "$(id -u)" -eq 0 ]; then RUN_USER=postgres; else RUN_USER=$(id -un); fi

as_run_user() {
    if [ "$(id -un)" = "$RUN_USER" ]; then "$@"; else runuser -u "$RUN_USER" -- "$@"; fi
}

# make_work_dir: a private temporary directory the run user owns
make_work_dir() {
    local dir
    dir=$(mktemp -d "${TMPDIR:-/tmp}/dlock.XXXXXX")
    chmod 755 "$dir"
    [ "$(id -un)" = "$RUN_USER" ] || chown "$RUN_USER": "$dir"
    printf '%s\n' "$dir"
}

# copy_source_tree DIR: the source tree, without what a build or a test
# run left in it, copied to DIR (made here) and given to the run user
copy_source_tree() {
    mkdir "$1"
    tar -C "$SRC_DIR" --exclude=.git --exclude='*.o' --exclude='*.bc' --exclude='*.so' \
        --exclude=results --exclude=output_iso --exclude=tmp_check -cf - . |
        tar -C "$1" -xf -
    [ "$(id -un)" = "$RUN_USER" ] || chown -R "$RUN_USER": "$1"
}

# as_server_user CMD...: a program of the cluster's server, run as the user
# that owns the cluster.  With CLUSTER_ROOT set (a chroot that
# scripts/chroot.sh made), PG_BINDIR is a path inside that chroot, and CMD
# runs there as its postgres user, with WORK and the directories of
# CLUSTER_BIND mounted into it at their own paths: the server and this
# machine's clients name the same files (the socket, the logs).  Otherwise
# CMD runs here as the run user.
as_server_user() {
    if [ -z "${CLUSTER_ROOT:-}" ]; then
        as_run_user "$@"
        return
    fi
    CHROOT_BIND="$WORK ${CLUSTER_BIND:-}" as_root bash "$SRC_DIR/scripts/chroot.sh" run \
        "$CLUSTER_ROOT" runuser -u postgres -- "$@"
}

# root_owner: the uid:gid of CLUSTER_ROOT's postgres user, which may differ
# from this machine's
root_owner() {
    awk -F: '$1 == "postgres" { print $3 ":" $4 }' "$CLUSTER_ROOT/etc/passwd"
}

# start_cluster PORT [SETTING...]: initdb and start a throwaway cluster in a
# new work directory, listening on a unix socket there only.  Sets WORK,
# CLUSTER_PID and PG* variables for psql; stop_cluster (installed as the EXIT
# trap) stops it by its pid and removes the directory.  CLUSTER_POSTGRES
# names another program to start instead of postgres (a wrapper that runs
# it under a profiler, say); CLUSTER_WAIT, pg_ctl's wait in seconds;
# CLUSTER_ROOT, a chroot whose server to run (as_server_user).
start_cluster() {
    local port=$1 setting opts=""
    shift
    WORK=$(make_work_dir)
    trap stop_cluster EXIT
    [ -z "${CLUSTER_ROOT:-}" ] || chown "$(root_owner)" "$WORK"
    for setting in "$@"; do opts="$opts -c $setting"; done
    as_server_user "$PG_BINDIR/initdb" -D "$WORK/data" -A trust -U postgres >/dev/null
    as_server_user "$PG_BINDIR/pg_ctl" -D "$WORK/data" -l "$WORK/server.log" -w \
        -t "${CLUSTER_WAIT:-60}" ${CLUSTER_POSTGRES:+-p "$CLUSTER_POSTGRES"} \
        -o "-c listen_addresses='' -k $WORK -p $port $opts" start >/dev/null
    CLUSTER_PID=$(head -n 1 "$WORK/data/postmaster.pid")
    export PGHOST=$WORK PGPORT=$port PGUSER=postgres PGDATABASE=postgres
}

stop_cluster() {
    local d
    if [ -n "${CLUSTER_PID:-}" ] && kill -0 "$CLUSTER_PID" 2>/dev/null; then
        kill -INT "$CLUSTER_PID"        # fast shutdown of the postmaster we started
        while kill -0 "$CLUSTER_PID" 2>/dev/null; do sleep 0.1; done
    fi
    [ -z "${WORK:-}" ] || rm -rf "$WORK"
    # the empty mount points that as_server_user made in the chroot
    if [ -n "${CLUSTER_ROOT:-}" ]; then
        for d in ${WORK:-} ${CLUSTER_BIND:-}; do
            rmdir "$CLUSTER_ROOT$d" 2>/dev/null || true
        done
    fi
}

# run_suite TITLE MAKE-ARGS...: one part of installcheck of the copy of the
# tree in $WORK/src (scripts/test.sh, scripts/test-major.sh), its results
# shown and added to passed and failed (tap_count: pg_regress's "test name
# ... ok" up to 15, "ok 1 - name" from 16 on, prove -v's "ok N - ...");
# SUITE_PREFIX starts its title
run_suite() {
    local title=$1 out rc f failed_before=$failed
    shift
    say "${SUITE_PREFIX:-}$title"
    out=$WORK/$title.out
    rm -f "$WORK/src/regression.diffs" "$WORK/src/output_iso/regression.diffs"
    set +e
    as_run_user make -C "$WORK/src" PG_CONFIG="$PG_CONFIG" "$@" >"$out" 2>&1
    rc=$?
    set -e
    tap_results "$out"
    tap_count "$rc" "$out"
    if [ "$failed" -gt "$failed_before" ]; then
        awk '/^not ok [0-9]+ / { n = 20 } n > 0 && /^#/ { print; n-- }' "$out" | head -n 60
        # a failure with no failed test to show: the end of what make said
        grep -qE '\.\.\. FAILED|^not ok [0-9]+ ' "$out" || tail -n 30 "$out"
    fi
    for f in regression.diffs output_iso/regression.diffs; do
        [ ! -s "$WORK/src/$f" ] || head -n 200 "$WORK/src/$f"
    done
}

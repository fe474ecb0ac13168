#!/usr/bin/env bash
# make test-faults: dlock under Patroni with faults beyond crashes.  etcd,
# three Patroni nodes (PostgreSQL 15, dlock in shared_preload_libraries)
# and the clients each run in a network namespace of their own, joined by
# veth pairs to a bridge in another namespace; the nemeses partition them
# (nftables inside the namespaces), drop packets, pause processes, set the
# nodes' clocks (libfaketime) and kill them.  Packets are delayed by a
# small NFQUEUE program (test/faults/delay.c) behind an iptables rule:
# kernels built without sch_netem have no tc netem.  See
# test/faults/faults.pl for the schedules and test/faults/FaultHistory.pm
# for what is checked.
#
# Needs root (ip netns).  Every address is in 10.77.0.0/24 inside the
# namespaces this script makes; none has a route out, and nothing is added
# to the machine's own network.  Installs what it needs (Debian packages),
# leaves no namespace, interface or process behind (also when interrupted:
# the namespaces carry this run's tag, and a cleanup finds them by it, and
# those of an earlier run that died), prints TAP lines and ends with
# "N passed, N failed".
#
#   FAULTS_MINUTES=3   only a seeded random schedule of that many minutes,
#                      a step of each nemesis family first, run in each mode
#                      (what .ci/run runs); unset: each nemesis alone in each
#                      mode, then a random schedule of FAULTS_RANDOM_MINUTES
#                      (default 5) in each mode
#   FAULTS_SEED=N      the seed of the schedules (printed by every run)
#   FAULTS_ONLY=a,b    only these nemeses (each alone, or the pool of the
#                      random schedule), and no random schedule after the
#                      nemeses alone unless FAULTS_RANDOM_MINUTES is set
#   FAULTS_MODES=sync  the modes (default sync,async)
#   FAULTS_KEEP=DIR    where the history of a failing run is kept
#                      (default: /tmp/dlock-faults-failed-SEED); check it
#                      again with perl -Itest/faults test/faults/check.pl
#                      DIR/hist/SEGMENT

. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"

started=$(date +%s)
if [ "$(id -u)" -ne 0 ]; then
    echo "test-faults: needs root for network namespaces (ip netns)" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

had_etcd=no had_patroni=no
dpkg-query -W -f='${Status}' etcd-server 2>/dev/null | grep -q 'ok installed' && had_etcd=yes
dpkg-query -W -f='${Status}' patroni 2>/dev/null | grep -q 'ok installed' && had_patroni=yes
DEBIAN_PACKAGES+=(patroni python3-etcd etcd-server libpq-dev iproute2 nftables iptables
                  libfaketime libnetfilter-queue-dev util-linux)
ensure_packages
if [ "$had_etcd" = no ] && /etc/init.d/etcd status >/dev/null 2>&1; then
    /etc/init.d/etcd stop >/dev/null 2>&1 || true
fi
if [ "$had_patroni" = no ] && /etc/init.d/patroni status >/dev/null 2>&1; then
    /etc/init.d/patroni stop >/dev/null 2>&1 || true
fi
build_and_install

# ---- namespaces: named dlfNNN-ROLE, NNN this script's pid ----
TAG="dlf$$"
ROLES=(br ctl etcd n1 n2 n3 c1 c2 c3)
declare -A ADDR=([ctl]=10.77.0.2 [etcd]=10.77.0.10 [n1]=10.77.0.11 [n2]=10.77.0.12
                 [n3]=10.77.0.13 [c1]=10.77.0.21 [c2]=10.77.0.22 [c3]=10.77.0.23)

# remove_namespaces TAG...: end every process in the namespaces of those
# tags and delete the namespaces (their veths and bridge go with them)
remove_namespaces() {
    local tag ns pids
    for tag in "$@"; do
        for ns in $(ip netns list | awk '{ print $1 }' | grep -E "^${tag}-[a-z0-9]+$" || true); do
            pids=$(ip netns pids "$ns" 2>/dev/null || true)
            [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break
                sleep 0.2
            done
            ip netns delete "$ns" 2>/dev/null || true
        done
    done
}

# leftovers of runs that died without cleaning up: a tag whose script is gone
stale_tags() {
    local tag pid
    for tag in $(ip netns list | awk '{ print $1 }' | sed -nE 's/^(dlf[0-9]+)-[a-z0-9]+$/\1/p' | sort -u); do
        pid=${tag#dlf}
        if ! grep -qs 'faults/run.sh' "/proc/$pid/cmdline"; then
            printf '%s\n' "$tag"
        fi
    done
}

WORK=$(make_work_dir)
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    # the controller first (it stops what it started by pid), then anything
    # left in this run's namespaces
    if [ -n "${CTL_PID:-}" ] && kill -0 "$CTL_PID" 2>/dev/null; then
        kill -TERM "$CTL_PID" 2>/dev/null || true
        for _ in $(seq 1 150); do kill -0 "$CTL_PID" 2>/dev/null || break; sleep 0.2; done
    fi
    remove_namespaces "$TAG"
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

stale=$(stale_tags)
if [ -n "$stale" ]; then
    say "removing namespaces left by earlier runs: $(echo $stale)"
    remove_namespaces $stale
fi

say "namespaces $TAG-{$(IFS=,; echo "${ROLES[*]}")} on a bridge, 10.77.0.0/24 inside them only"
BR="$TAG-br"
ip netns add "$BR"
ip -n "$BR" link set lo up
ip -n "$BR" link add br0 type bridge
ip -n "$BR" link set br0 up
for role in "${ROLES[@]}"; do
    [ "$role" = br ] && continue
    ns="$TAG-$role"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # both ends are made inside namespaces: nothing appears on the host
    ip -n "$ns" link add eth0 type veth peer name "v-$role" netns "$BR"
    ip -n "$BR" link set "v-$role" master br0 up
    ip -n "$ns" addr add "${ADDR[$role]}/24" dev eth0
    ip -n "$ns" link set eth0 up
done
# no default route anywhere: only 10.77.0.0/24 on the bridge is reachable
for role in "${ROLES[@]}"; do
    [ "$role" = br ] && continue
    if ip -n "$TAG-$role" route show default | grep -q .; then
        echo "namespace $TAG-$role has a default route" >&2
        exit 1
    fi
done

# the clients and the child of dlock run
cc -std=c99 -O2 -Wall -Wextra -Werror -I"$("$PG_CONFIG" --includedir)" \
    -o "$WORK/client" "$SRC_DIR/test/faults/client.c" "$SRC_DIR/test/lib/dlock_client.c" \
    -L"$("$PG_CONFIG" --libdir)" -lpq
# the packet delay (an NFQUEUE program: kernels without sch_netem have no
# tc netem)
cc -std=c99 -O2 -Wall -Wextra -Werror -o "$WORK/delay" "$SRC_DIR/test/faults/delay.c" -lnetfilter_queue
cp "$SRC_DIR/cli/dlock" "$WORK/dlock"
chown -R "$RUN_USER": "$WORK"

say "etcd and three Patroni nodes in namespaces; nemeses; checker"
set +e
ip netns exec "$TAG-ctl" env FAULTS_TAG="$TAG" FAULTS_WORK="$WORK" PG_BINDIR="$PG_BINDIR" \
    FAULTS_USER="$RUN_USER" FAULTS_CLIENT="$WORK/client" DLOCK_CLI="$WORK/dlock" FAULTS_DELAY="$WORK/delay" \
    PATRONI="$(command -v patroni)" ETCD="$(command -v etcd)" \
    FAULTS_LIBFAKETIME="$(dpkg -L libfaketime | grep -m1 '/libfaketime\.so\.1$')" \
    perl -I"$SRC_DIR/test/perl" -I"$SRC_DIR/test/faults" "$SRC_DIR/test/faults/faults.pl" > >(tee "$WORK/faults.log") 2>&1 &
CTL_PID=$!
wait "$CTL_PID"
rc=$?
set -e
sleep 0.5     # let tee finish
passed=$(grep -E '^ok [0-9]+' "$WORK/faults.log" | grep -vc '# TODO' || true)
# a known defect is a TODO test: shown, not counted as a failure
failed=$(grep -E '^not ok [0-9]+' "$WORK/faults.log" | grep -vc '# TODO' || true)
[ "$rc" -eq 0 ] || [ "$failed" -gt 0 ] || failed=1
echo "test-faults took $(( $(date +%s) - started )) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

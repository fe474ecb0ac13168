#!/usr/bin/env bash
# The Patroni part of make test-ha (called by test/ha/run.sh): a single-node
# etcd and three Patroni nodes on 127.0.0.1, with switchovers and crashes of
# the leader, synchronous mode on and off; see the header of
# test/ha/patroni/patroni.pl for what is checked.  Installs what it needs
# (Debian's patroni and etcd-server), runs as the unprivileged user
# (initdb refuses root), leaves nothing running, prints its TAP lines and
# ends with "Patroni: N passed, N failed in N s".

. "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/common.sh"

started=$(date +%s)

# The packages' own services: a system etcd (and a patroni, if it has a
# configuration) may be started by the install; the suite starts its own
# on other ports, so stop those that this install started
had_etcd=no had_patroni=no
dpkg-query -W -f='${Status}' etcd-server 2>/dev/null | grep -q 'ok installed' && had_etcd=yes
dpkg-query -W -f='${Status}' patroni 2>/dev/null | grep -q 'ok installed' && had_patroni=yes
DEBIAN_PACKAGES+=(patroni python3-etcd etcd-server libpq-dev)
ensure_packages
if [ "$had_etcd" = no ] && as_root /etc/init.d/etcd status >/dev/null 2>&1; then
    as_root /etc/init.d/etcd stop >/dev/null 2>&1 || true
fi
if [ "$had_patroni" = no ] && as_root /etc/init.d/patroni status >/dev/null 2>&1; then
    as_root /etc/init.d/patroni stop >/dev/null 2>&1 || true
fi
build_and_install

WORK=$(make_work_dir)
trap 'rm -rf "$WORK"' EXIT
cc -std=c99 -O2 -Wall -Wextra -Werror -I"$("$PG_CONFIG" --includedir)" \
    -o "$WORK/workload" "$SRC_DIR/test/ha/patroni/workload.c" "$SRC_DIR/test/lib/dlock_client.c" \
    -L"$("$PG_CONFIG" --libdir)" -lpq
cp "$SRC_DIR/test/ha/patroni/patroni.pl" "$SRC_DIR/test/perl/DlockHA.pm" "$SRC_DIR/cli/dlock" "$WORK/"
[ "$(id -un)" = "$RUN_USER" ] || chown -R "$RUN_USER": "$WORK"

say "Patroni: etcd and three nodes, switchover and crash of the leader, synchronous mode on and off"
set +e
(cd "$WORK" && as_run_user env TMPDIR="$WORK" PG_BINDIR="$PG_BINDIR" \
    PATRONI="$(command -v patroni)" PATRONICTL="$(command -v patronictl)" ETCD="$(command -v etcd)" \
    DLOCK_CLI="$WORK/dlock" HA_WORKLOAD="$WORK/workload" \
    prove -v -I "$WORK" "$WORK/patroni.pl") 2>&1 | tee "$WORK/patroni.log"
rc=${PIPESTATUS[0]}
set -e
passed=$(grep -cE '^ok [0-9]+' "$WORK/patroni.log" || true)
failed=$(grep -cE '^not ok [0-9]+' "$WORK/patroni.log" || true)
[ "$rc" -eq 0 ] || [ "$failed" -gt 0 ] || failed=1
echo "Patroni: $passed passed, $failed failed in $(( $(date +%s) - started )) s"
[ "$failed" -eq 0 ]

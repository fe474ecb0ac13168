#!/usr/bin/env bash
# make demo: the double-debit story, on a throwaway cluster.
#
# Two workers debit account 77 under the lease "account:77".  Worker 1 takes
# the lease with a 2-second ttl, then stalls for 3 seconds (a GC pause, a
# slow call) before it writes.  Its lease expires meanwhile; worker 2, which
# was waiting in dlock.acquire(), is granted the name with a newer token,
# debits and releases.  Worker 1 wakes up and writes with its old token:
# dlock.fence() in the WHERE clause refuses the write.  The account is
# debited exactly once.  Then the dlock command: a job runs under the same
# lease, and a second run of it is turned away with who holds the lease.
#
# The demo installs the extension only.  It runs the dlock command from the
# build tree (cli/dlock), so that it leaves no copy in /usr/local/bin to
# shadow the package's /usr/bin/dlock, and says which dlock is on PATH.

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ensure_packages
say "building dlock"
make -s -C "$SRC_DIR" PG_CONFIG="$PG_CONFIG" PG_CFLAGS="-Wall -Wextra -Werror" >/dev/null
say "installing the extension, not the dlock command"
as_root make -s -C "$SRC_DIR" PG_CONFIG="$PG_CONFIG" NO_CLI=1 install >/dev/null
DLOCK=$SRC_DIR/cli/dlock
say "the demo runs $DLOCK ($("$DLOCK" --version)); \"dlock\" on PATH: $(command -v dlock || echo none)"

say "starting a throwaway cluster (unix socket only)"
start_cluster 54329

sql() { as_run_user env PGHOST="$PGHOST" PGPORT="$PGPORT" psql -X -q -A -t -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"; }
t0=$(date +%s%N)
stamp() {
    local cs=$((($(date +%s%N) - t0) / 10000000))
    printf '%3d.%02ds' $((cs / 100)) $((cs % 100))
}
tell() { printf '[%s] %-9s %s\n' "$(stamp)" "$1" "$2"; }

sql <<'EOF'
CREATE EXTENSION dlock;
CREATE TABLE accounts (id int PRIMARY KEY, balance numeric NOT NULL);
INSERT INTO accounts VALUES (77, 500);
EOF
tell setup "account 77 has balance $(sql -c 'SELECT balance FROM accounts WHERE id = 77')"

# fenced_debit TOKEN: debit 120 under the fence; prints the rows changed
fenced_debit() {
    sql -c "UPDATE accounts SET balance = balance - 120
            WHERE id = 77 AND dlock.fence('account:77', $1)
            RETURNING 'changed'" | wc -l
}

worker1() {
    local token
    token=$(sql -c "SELECT token FROM dlock.acquire('account:77', '2s', 'worker-1')")
    tell worker-1 "acquired account:77 with token $token (ttl 2s)"
    tell worker-1 "reads balance $(sql -c 'SELECT balance FROM accounts WHERE id = 77'), decides to debit 120"
    tell worker-1 "stalls for 3s (GC pause) ..."
    sleep 3
    tell worker-1 "wakes up and debits 120 with its old token $token:"
    tell worker-1 "  UPDATE accounts SET balance = balance - 120 WHERE id = 77 AND dlock.fence('account:77', $token)"
    tell worker-1 "  -> $(fenced_debit "$token") row(s) changed: the fence refused the stale write"
    tell worker-1 "release with its owner: $(sql -c "SELECT dlock.release('account:77', 'worker-1')") (it no longer holds the lease)"
}

worker2() {
    sleep 0.5
    tell worker-2 "waits in dlock.acquire('account:77', '30s', 'worker-2', timeout => '10s') ..."
    local token
    token=$(sql -c "SELECT token FROM dlock.acquire('account:77', '30s', 'worker-2', timeout => '10s')")
    tell worker-2 "granted account:77 with token $token: worker 1's lease expired"
    tell worker-2 "debits 120 under dlock.fence('account:77', $token)"
    tell worker-2 "  -> $(fenced_debit "$token") row(s) changed"
    tell worker-2 "releases: $(sql -c "SELECT dlock.release('account:77', 'worker-2')")"
}

worker1 &
w1=$!
worker2 &
w2=$!
wait "$w1" "$w2"

balance=$(sql -c 'SELECT balance FROM accounts WHERE id = 77')
tell result "balance of account 77: $balance (500 - 120: debited exactly once)"
tell result "(a lock without the fence would have let worker 1's write through: 260)"
tell result "leases:"
sql -P tuples_only=off -P footer=off -P format=aligned -c "SELECT name, token, owner, state FROM dlock.leases" | sed 's/^/            /'
if [ "$balance" != "380" ]; then
    echo "demo failed: expected balance 380" >&2
    exit 1
fi

# The dlock command: a job under the lease, and a second run turned away
tell cli "dlock run account:77 --owner nightly-1 -- sleep 3   (in the background)"
"$DLOCK" run account:77 --owner nightly-1 --ttl 10s -- sleep 3 &
job=$!
until [ "$(sql -c "SELECT count(*) FROM dlock.leases WHERE name = 'account:77' AND state = 'live'")" = 1 ]; do
    sleep 0.1
done
tell cli "dlock run account:77 -- echo never   (a second run)"
rc=0
busy=$("$DLOCK" run account:77 -- echo never 2>&1) || rc=$?
tell cli "  -> exit $rc: $busy"
tell cli "dlock status account:77"
"$DLOCK" status account:77 | sed 's/^/            /'
wait "$job"
if [ "$rc" != 75 ] || [[ "$busy" != *'is busy: held by owner nightly-1 '* ]]; then
    echo "demo failed: expected the second run to exit 75 and name the holder" >&2
    exit 1
fi
say "done; stopping the throwaway cluster"

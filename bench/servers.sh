# The servers of the side-by-side benchmarks (bench/compare.sh,
# bench/invoice.sh): sourced after scripts/common.sh, not run.
#
#   ensure_bench_packages PKG...  installs the Debian packages that are
#                                 missing, and stops a system-wide Redis or
#                                 etcd that their install started
#   start_redis DIR PORT [OPT...] a throwaway Redis on 127.0.0.1:PORT, its
#                                 files in DIR (AOF on, appendfsync always,
#                                 no snapshots); sets REDIS_PID; redis CMD...
#                                 talks to it
#   stop_redis                    stops it by its pid
#   start_etcd DIR CLIENT_PORT PEER_PORT
#                                 a throwaway one-member etcd on 127.0.0.1,
#                                 data in DIR; sets ETCD_PID and ETCD_URL
#   stop_etcd                     stops it by its pid
#
# The caller installs its EXIT trap (stop the servers, then stop_cluster):
# the servers keep their files in the cluster's work directory.

ensure_bench_packages() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' ||
            missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return
    say "installing ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" >/dev/null
    # A package may have started a system-wide server: not ours to keep
    local service
    for service in redis-server etcd; do
        [[ " ${missing[*]} " == *" $service "* || " ${missing[*]} " == *" $service-server "* ]] || continue
        if command -v systemctl >/dev/null && systemctl is-active -q "$service" 2>/dev/null; then
            as_root systemctl stop "$service" || true
        elif command -v service >/dev/null && pgrep -x "$service" >/dev/null; then
            as_root service "$service" stop >/dev/null 2>&1 || true
        fi
    done
}

# port_free PORT: nothing listens on 127.0.0.1:PORT
port_free() {
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
        echo "port $1 is in use; the benchmark's server cannot start there" >&2
        return 1
    fi
}

# wait_gone PID: until the process has exited (a zombie counts as exited: a
# daemonized server is reaped by init, maybe late); KILL after 10 s
wait_gone() {
    for _ in $(seq 100); do
        case "$(ps -o stat= -p "$1" 2>/dev/null)" in '' | Z*) return 0 ;; esac
        sleep 0.1
    done
    kill -KILL "$1" 2>/dev/null || true
}

REDIS_PID=
redis() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

start_redis() {
    local dir=$1
    REDIS_PORT=$2
    shift 2
    port_free "$REDIS_PORT" || return 1
    as_run_user mkdir -p "$dir"
    # Loopback only, no snapshots, AOF on; callers switch appendfsync
    as_run_user redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --protected-mode yes \
        --dir "$dir" --save '' --appendonly yes --appendfsync always \
        --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" "$@"
    for _ in $(seq 100); do
        [ -s "$dir/redis.pid" ] && [ "$(redis ping 2>/dev/null)" = PONG ] && break
        sleep 0.1
    done
    REDIS_PID=$(cat "$dir/redis.pid" 2>/dev/null || true)
    if [ -z "$REDIS_PID" ] || [ "$(redis ping 2>/dev/null)" != PONG ]; then
        echo "Redis did not start:" >&2
        cat "$dir/redis.log" >&2 || true
        return 1
    fi
}

stop_redis() {
    [ -n "$REDIS_PID" ] || return 0
    kill -TERM "$REDIS_PID" 2>/dev/null || return 0
    wait_gone "$REDIS_PID"
}

ETCD_PID=
ETCD_URL=

start_etcd() {
    local dir=$1 client=$2 peer=$3
    port_free "$client" || return 1
    port_free "$peer" || return 1
    as_run_user mkdir -p "$dir"
    ETCD_URL=http://127.0.0.1:$client
    # One member, loopback only; etcd fsyncs its WAL before it answers a
    # write.  The shell writes its pid and becomes etcd, so that the pid is
    # etcd's own (not that of runuser's)
    as_run_user sh -c 'echo $$ >"$1/etcd.pid"; shift; exec "$@"' sh "$dir" \
        etcd --name bench --data-dir "$dir/data" \
        --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
        --listen-peer-urls "http://127.0.0.1:$peer" \
        --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "bench=http://127.0.0.1:$peer" >"$dir/etcd.log" 2>&1 &
    for _ in $(seq 50); do [ -s "$dir/etcd.pid" ] && break; sleep 0.1; done
    ETCD_PID=$(cat "$dir/etcd.pid" 2>/dev/null || true)
    for _ in $(seq 100); do
        curl -s -m 1 "$ETCD_URL/health" 2>/dev/null | grep -q '"health":"true"' && return 0
        [ -n "$ETCD_PID" ] && kill -0 "$ETCD_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "etcd did not start:" >&2
    tail -n 20 "$dir/etcd.log" >&2 || true
    return 1
}

stop_etcd() {
    [ -n "$ETCD_PID" ] || return 0
    kill -TERM "$ETCD_PID" 2>/dev/null || return 0
    wait_gone "$ETCD_PID"
}

# Shared set-up for `make test` and `make demo`: sourced, not run.
#
# Installs the Debian packages dlock needs when they are missing, builds and
# installs the extension, and picks the unprivileged user that runs the
# throwaway clusters (initdb refuses to run as root).

set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
PG_BINDIR=/usr/lib/postgresql/$PG_MAJOR/bin
PG_CONFIG=${PG_CONFIG:-$PG_BINDIR/pg_config}
DEBIAN_PACKAGES=(make gcc "postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR"
                 libipc-run-perl)

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
        say "installing ${missing[*]}"
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${missing[@]}" >/dev/null
        # Debian's package may have started a default cluster: not ours to keep
        if as_root pg_ctlcluster "$PG_MAJOR" main status >/dev/null 2>&1; then
            as_root pg_ctlcluster "$PG_MAJOR" main stop || true
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

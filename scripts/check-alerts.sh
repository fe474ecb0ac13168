#!/usr/bin/env bash
# check-alerts.sh: the Prometheus alerting rules of monitoring/alerts.yml.
#
#  1. promtool is there: Debian's prometheus package is installed when it
#     is missing (as root, or through sudo), and a prometheus service that
#     the install started is stopped.
#  2. promtool check rules accepts monitoring/alerts.yml.
#  3. Every metric the rules read is one that monitoring/prometheus-queries.yaml
#     makes the exporter serve (<query>_<column>, for its COUNTER and GAUGE
#     columns).
#  4. Every alert has a severity label and summary and description
#     annotations.
#  5. Every alert has a unit test where it fires and one where it must not.
#  6. promtool test rules passes each file of monitoring/tests/.
#  7. Each alert's tests fail once the alert is taken out of the rules:
#     they test it, and can fail.
#  8. monitoring/README.md names every alert, and docs/operations.md shows
#     each with the expression it has in the rules, and no other alert.
#
# Prints "ok N - ..." or "not ok N - ..." per check, then "N passed, N
# failed"; exits non-zero when one failed.

set -uo pipefail

SRC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RULES=$SRC_DIR/monitoring/alerts.yml
QUERIES=$SRC_DIR/monitoring/prometheus-queries.yaml
TESTS=$SRC_DIR/monitoring/tests
README=$SRC_DIR/monitoring/README.md
OPERATIONS=$SRC_DIR/docs/operations.md

passed=0
failed=0
. "$SRC_DIR/scripts/tap.sh"

say() { printf '==> %s\n' "$*"; }

# report ok|fail DESCRIPTION: one TAP line per check (scripts/tap.sh counts)
report() { tap_report "$@"; }

# finish: the summary line and the exit status
finish() {
    tap_summary
    exit
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# prometheus_running: whether a prometheus service runs (systemd, or the
# init script's pid file)
prometheus_running() {
    local pidfile=/run/prometheus/prometheus.pid
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        systemctl is-active --quiet prometheus 2>/dev/null && return 0
    fi
    [ -s "$pidfile" ] && as_root kill -0 "$(cat "$pidfile")" 2>/dev/null
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlock-alerts.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# 1. promtool
if ! command -v promtool >/dev/null 2>&1; then
    was_running=no
    prometheus_running && was_running=yes
    say "installing prometheus (for promtool)"
    if as_root apt-get update -qq &&
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends prometheus >"$WORK/apt.out" 2>&1; then
        # The package starts its service where it can: stop it if this
        # install started it, never one that ran before
        if [ "$was_running" = no ] && prometheus_running; then
            if [ -d /run/systemd/system ]; then
                as_root systemctl stop prometheus
            else
                as_root /etc/init.d/prometheus stop >/dev/null 2>&1 ||
                    as_root kill -TERM "$(cat /run/prometheus/prometheus.pid)"
            fi
        fi
    else
        tail -n 20 "$WORK/apt.out"
    fi
fi
if command -v promtool >/dev/null 2>&1; then
    report ok "promtool is installed: $(promtool --version 2>&1 | head -n 1)"
else
    report fail "promtool is installed (Debian package prometheus)"
    finish
fi

# 2. The rules file
if promtool check rules "$RULES" >"$WORK/check.out" 2>&1; then
    report ok "promtool check rules monitoring/alerts.yml: $(grep -o '[0-9]* rules found' "$WORK/check.out")"
else
    cat "$WORK/check.out"
    report fail "promtool check rules monitoring/alerts.yml"
fi

# exprs_of FILE: "alert expression" per alert of FILE, on one line (block
# scalars included); exprs FILE: the same with the expressions' white space
# removed
exprs_of() {
    awk '
        function flush() { if (alert != "") print alert, expr; alert = "" }
        inexpr && NF > 0 && match($0, /[^ ]/) > indent { expr = expr " " $0; next }
        { inexpr = 0 }
        /^ *- alert: / { flush(); alert = $3; expr = ""; next }
        /^ *expr:/ {
            indent = match($0, /[^ ]/)
            rest = $0
            sub(/^ *expr: */, "", rest)
            if (rest ~ /^[|>]/) inexpr = 1; else expr = rest
        }
        END { flush() }
    ' "$1"
}
exprs() {
    exprs_of "$1" | awk '{ a = $1; $1 = ""; gsub(/[ \t]/, ""); print a, $0 }'
}

# 3. The metrics the rules read, against those the queries file serves
awk '
    /^[a-z_][a-z0-9_]*:[ \t]*$/ { prefix = $1; sub(/:$/, "", prefix); next }
    /^    - [a-z_][a-z0-9_]*:[ \t]*$/ { column = $2; sub(/:$/, "", column); next }
    /^ +usage: *"(COUNTER|GAUGE)"/ { print prefix "_" column }
' "$QUERIES" | sort -u >"$WORK/served"
# (the expressions only, not comments or annotations)
exprs_of "$RULES" | cut -d' ' -f2- | grep -oE '\bdlock_[a-z0-9_]+' | sort -u >"$WORK/read"
unknown=$(comm -23 "$WORK/read" "$WORK/served" | paste -sd ' ' -)
if [ ! -s "$WORK/read" ]; then
    report fail "the rules read dlock's metrics (none found in their expressions)"
elif [ -z "$unknown" ]; then
    report ok "the $(wc -l <"$WORK/read") metrics the rules read are all served by prometheus-queries.yaml"
else
    report fail "metrics the rules read that prometheus-queries.yaml does not serve: $unknown"
fi

# 4. Labels and annotations
awk '
    function done() {
        if (alert != "")
            print alert, (severity ~ /^(critical|warning|info)$/ ? "ok" : "no-severity"),
                  (summary ? "ok" : "no-summary"), (description ? "ok" : "no-description")
    }
    /^ *- alert: / { done(); alert = $3; severity = ""; summary = description = 0; next }
    /^ *severity: / { severity = $2 }
    /^ *summary: / { summary = 1 }
    /^ *description: / { description = 1 }
    END { done() }
' "$RULES" >"$WORK/alerts"
cut -d' ' -f1 "$WORK/alerts" >"$WORK/names"
lacking=$(grep -v ' ok ok ok$' "$WORK/alerts" | tr '\n' ';')
if [ ! -s "$WORK/names" ]; then
    report fail "monitoring/alerts.yml holds alerts (none found)"
elif [ -z "$lacking" ]; then
    report ok "each of the $(wc -l <"$WORK/names") alerts has a severity (critical, warning, info), a summary and a description"
else
    report fail "alerts without a severity, summary or description: $lacking"
fi

# 5. A test where each alert fires and one where it must not: an
# alert_rule_test's exp_alerts lists alerts, or is [] (no alert of that
# name at that time)
shopt -s nullglob
test_files=("$TESTS"/*.yml)
shopt -u nullglob
if [ ${#test_files[@]} -gt 0 ]; then
    awk '
        /^ *alertname: / { name = $2; next }
        name != "" && /^ *exp_alerts:/ { print name, ($2 == "[]" ? "quiet" : "fires"); name = "" }
    ' "${test_files[@]}" | sort -u >"$WORK/tested"
else
    : >"$WORK/tested"
fi
untested=""
while read -r a; do
    grep -qx "$a fires" "$WORK/tested" || untested="$untested $a (fires)"
    grep -qx "$a quiet" "$WORK/tested" || untested="$untested $a (quiet)"
done <"$WORK/names"
if [ ${#test_files[@]} -eq 0 ]; then
    report fail "monitoring/tests/ holds unit tests (no *.yml found)"
elif [ -z "$untested" ]; then
    report ok "each alert has a test where it fires and one where it must not"
else
    report fail "alerts without such a test:$untested"
fi

# 6. The unit tests, one file at a time
for f in "${test_files[@]}"; do
    if promtool test rules "$f" >"$WORK/test.out" 2>&1; then
        report ok "promtool test rules monitoring/tests/$(basename "$f")"
    else
        cat "$WORK/test.out"
        report fail "promtool test rules monitoring/tests/$(basename "$f")"
    fi
done

# 7. Each alert taken out of a copy of the rules: the tests that name it
# must fail
mkdir -p "$WORK/copy/tests"
for f in "${test_files[@]}"; do cp "$f" "$WORK/copy/tests/"; done
while read -r a; do
    awk -v alert="$a" '
        /^ *- alert: / { skip = ($3 == alert) }
        !skip
    ' "$RULES" >"$WORK/copy/alerts.yml"
    mapfile -t naming < <(grep -lE "^ *alertname: $a *$" "$WORK/copy/tests/"*.yml 2>/dev/null)
    if [ ${#naming[@]} -eq 0 ]; then
        report fail "$a: no unit test names it"
    elif ! promtool test rules "${naming[@]}" >/dev/null 2>&1; then
        report ok "$a: its tests fail without it"
    else
        report fail "$a: its tests pass without it, so they do not test it"
    fi
done <"$WORK/names"

# 8. The documentation
missing=""
while read -r a; do
    grep -q "\`$a\`" "$README" || missing="$missing $a"
done <"$WORK/names"
if [ -z "$missing" ]; then
    report ok "monitoring/README.md names each alert"
else
    report fail "monitoring/README.md does not name:$missing"
fi
exprs "$RULES" | sort >"$WORK/exprs.rules"
exprs "$OPERATIONS" | sort >"$WORK/exprs.docs"
if [ ! -s "$WORK/exprs.docs" ]; then
    report fail "docs/operations.md shows the alerts (none found)"
elif cmp -s "$WORK/exprs.rules" "$WORK/exprs.docs"; then
    report ok "docs/operations.md shows each alert with its expression in monitoring/alerts.yml"
else
    diff "$WORK/exprs.rules" "$WORK/exprs.docs" | sed 's/^/# /'
    report fail "docs/operations.md shows each alert with its expression in monitoring/alerts.yml"
fi

finish

#!/usr/bin/env bash
# bench/charts.sh [CHART...]: SVG charts of the data files that the benchmarks
# write into BENCH_OUT (default bench/results).  CHART is one of
#
#   handoff   handoff-latency.svg: distribution (CDF) of the release-to-grant
#             and expiry-to-grant samples, from handoff-samples.tsv and
#             run-info.tsv (bench/run.sh)
#   cycles    cycle-rate.svg: lock cycles per second of each method in each
#             workload, from cycle-rate.tsv and compare-info.tsv
#             (bench/compare.sh)
#   kinds     kinds-rate.svg: cycles per second of shared leases and
#             semaphore permits, by method, from kinds.tsv; writer-wait.svg:
#             distribution (CDF) of a writer's waits behind readers, from
#             writer-samples.tsv; both with kinds-info.tsv (bench/compare.sh,
#             section kinds)
#   invoice   invoice.svg: the nightly-invoice run's seconds by method, and
#             the same chart as text, invoice.txt (gnuplot's dumb terminal),
#             from invoice.tsv and invoice-info.tsv (bench/invoice.sh)
#
# Without CHART, every chart whose data is there.  bench/run.sh and
# bench/compare.sh call it after writing their data; it can be run again by
# hand.  The titles give the date of the run and say "quick mode" when the
# data came from BENCH_QUICK=1.  Without gnuplot (Debian: gnuplot-nox) it
# prints a note and draws nothing.

set -euo pipefail

SRC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${BENCH_OUT:-$SRC_DIR/bench/results}

if ! command -v gnuplot >/dev/null; then
    echo "note: gnuplot is not installed (Debian package gnuplot-nox): no charts drawn;" \
        "the data files are in $OUT"
    exit 0
fi

# info FILE KEY: the value of KEY in a two-column info file
info() { awk -F '\t' -v k="$2" '$1 == k { print $2; exit }' "$1"; }

# subtitle FILE: the line under a chart's title, from its info file
subtitle() {
    local mode="" redis pg
    [ "$(info "$1" mode)" = quick ] && mode="QUICK MODE (smoke run, figures mean nothing) - "
    redis=$(info "$1" redis)
    pg=$(info "$1" postgres)
    printf '%s%s; PostgreSQL %s%s, %s CPUs' "$mode" "$(info "$1" date)" \
        "${pg%% *}" "${redis:+, Redis $redis}" "$(info "$1" cpus)"
}

# has_rows FILE: FILE exists and has data below its header line
has_rows() { [ -f "$1" ] && [ "$(wc -l <"$1")" -gt 1 ]; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/charts.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

TERMINAL='set terminal svg size 1200,700 dynamic noenhanced font "sans,13" background "#ffffff"'

# --- handoff latency ----------------------------------------------------------

chart_handoff() {
    local data=$OUT/handoff-samples.tsv meta=$OUT/run-info.tsv plot="" i=0 title
    # One block per workload, in the order the file has them: each sample with
    # the share of its workload's samples at or below it (from 0 at the first)
    tail -n +2 "$data" |
        awk -F '\t' '!(($1 FS $2) in order) { order[$1 FS $2] = ++n } { print order[$1 FS $2] "\t" $0 }' |
        sort -t "$(printf '\t')" -k1,1n -k4,4g >"$TMP/sorted.tsv"
    awk -F '\t' 'NR == FNR { count[$1]++; next }
                 $1 != last { if (last != "") printf "\n\n"; last = $1; i = 0; printf "%s\t0\n", $4 }
                 { printf "%s\t%.6f\n", $4, ++i / count[$1] }' "$TMP/sorted.tsv" "$TMP/sorted.tsv" \
        >"$TMP/cdf.tsv"
    while IFS=$'\t' read -r kind waiters n; do
        case $kind in
            release) title="release-to-grant, $waiters waiter$([ "$waiters" = 1 ] || echo s)" ;;
            expiry) title="expiry-to-grant (server clock), $waiters waiter" ;;
            *) title="$kind, $waiters" ;;
        esac
        plot+="${plot:+, }'$TMP/cdf.tsv' index $i using 1:2 with steps lw 2 title '$title ($n samples)'"
        i=$((i + 1))
    done < <(tail -n +2 "$data" |
        awk -F '\t' '!(($1 FS $2) in n) { order[++k] = $1 FS $2 } { n[$1 FS $2]++ }
                     END { for (i = 1; i <= k; i++) print order[i] "\t" n[order[i]] }')
    gnuplot <<EOF
$TERMINAL
set output '$OUT/handoff-latency.svg'
set datafile separator "\t"
set title "dlock: time from one holder to the next\n$(subtitle "$meta")"
set xlabel 'latency (ms, log scale)'
set ylabel 'share of samples at or below the latency'
set logscale x
set format x '%g'
set xtics (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
set yrange [0:1.03]
set ytics 0, 0.1, 1
set grid xtics ytics lc rgb '#dddddd'
set rmargin 8
set arrow from graph 0, first 0.5 to graph 1, first 0.5 nohead dt 2 lc rgb '#888888'
set arrow from graph 0, first 0.99 to graph 1, first 0.99 nohead dt 2 lc rgb '#888888'
set label 'median' at graph 1.01, first 0.5 left textcolor rgb '#555555'
set label 'p99' at graph 1.01, first 0.99 left textcolor rgb '#555555'
set key left top box opaque
plot $plot
EOF
    echo "chart: $OUT/handoff-latency.svg"
}

# --- cycle rate ---------------------------------------------------------------

# Method keys, in bar order, and their legend titles and colours (dlock's stands out)
METHODS=(floor advisory_xact advisory_session shedlock plpgsql dlock dlock_grants_off redis redis_pg)
declare -A METHOD_TITLE=(
    [floor]="durable floor (2 or 3 one-row UPDATE commits)"
    [advisory_xact]="pg_advisory_xact_lock"
    [advisory_session]="pg_advisory_lock + unlock"
    [shedlock]="ShedLock-style upsert + UPDATE"
    [plpgsql]="PL/pgSQL lease with token"
    [dlock]="dlock"
    [dlock_grants_off]="dlock, durable_grants = off"
    [redis]="Redis SET NX PX + EVAL delete (AOF)"
    [redis_pg]="Redis lock (AOF) + PostgreSQL UPDATE"
)
declare -A METHOD_COLOR=(
    [floor]="#7f7f7f" [advisory_xact]="#9ecae1" [advisory_session]="#4292c6"
    [shedlock]="#fdae6b" [plpgsql]="#e6550d" [dlock]="#a50f15" [redis]="#31a354"
    [dlock_grants_off]="#fb6a4a" [redis_pg]="#74c476"
)

chart_cycles() {
    local data=$OUT/cycle-rate.tsv meta=$OUT/compare-info.tsv plot="" col m methods=() nm x xtic ymin ymax
    # Which methods the file has, in bar order
    for m in "${METHODS[@]}"; do
        awk -F '\t' -v m="$m" 'NR > 1 && $5 == m { found = 1 } END { exit !found }' "$data" &&
            methods+=("$m")
    done
    nm=${#methods[@]}
    # One row a workload (in the order run), one column a method: the x
    # label's three lines, then cycles per second
    awk -F '\t' -v list="${methods[*]}" '
        BEGIN { nm = split(list, m, " ") }
        NR == 1 { next }
        !(($2 FS $3 FS $4) in row) {
            row[$2 FS $3 FS $4] = ++n
            what[n] = ($3 == 1 ? "hot name" : "random names") "\t" $2 " client" ($2 == 1 ? "" : "s")
            how[n] = ($4 == "cpu" ? "fsync off" : "sync " $4)
        }
        { ops[row[$2 FS $3 FS $4], $5] = $7 }
        END {
            for (r = 1; r <= n; r++) {
                line = what[r] "\t" how[r]
                for (j = 1; j <= nm; j++) line = line "\t" ops[r, m[j]]
                print line
            }
        }' "$data" >"$TMP/wide.tsv"
    # The y axis starts at the power of ten below the lowest bar
    # and leaves room above the highest for its label
    read -r ymin ymax < <(awk -F '\t' 'NR > 1 && $7 > 0 { if (min == "" || $7 < min + 0) min = $7; if ($7 > max + 0) max = $7 }
                        END { e = 1; while (e * 10 <= min) e *= 10; print e, max * 2.5 }' "$data")
    col=4
    for m in "${methods[@]}"; do
        x="(\$0 + ($((col - 4)) - ($nm - 1) / 2.0) * w)"
        xtic=""
        [ "$col" != 4 ] || xtic=':xtic(stringcolumn(1) . "\n" . stringcolumn(2) . "\n" . stringcolumn(3))'
        plot+="${plot:+, }'$TMP/wide.tsv' using $x:$col$xtic with boxes fs solid 0.9 noborder lc rgb '${METHOD_COLOR[$m]}' title '${METHOD_TITLE[$m]}'"
        plot+=", '' using $x:(column($col) * 1.12):(sprintf('%.0f', column($col))) with labels rotate by 90 left font ',9' textcolor rgb '#333333' notitle"
        col=$((col + 1))
    done
    gnuplot <<EOF
$TERMINAL
set output '$OUT/cycle-rate.svg'
set datafile separator "\t"
set title "Lock cycles (acquire + release) per second, by method and workload\n$(subtitle "$meta"); median of $(info "$meta" reps) run(s) of $(info "$meta" seconds_per_run) s each"
set ylabel 'cycles per second (log scale)'
set logscale y
set format y '%.0f'
set yrange [$ymin:$ymax]
w = 0.8 / $nm
set boxwidth w absolute
set xrange [-0.6:$(($(wc -l <"$TMP/wide.tsv") - 1)).6]
set xtics scale 0 font ',12'
set grid ytics mytics lc rgb '#e5e5e5'
set bmargin 11
set key at screen 0.5, screen 0.09 center center horizontal maxrows 3 samplen 2 font ",11"
set label 1 "sync on/off: synchronous_commit (Redis AOF appendfsync always/everysec); fsync off: no method waits for the disk (Redis appendfsync no).\nRandom names: out of 10,000; hot name: all clients on one name (the methods that cannot wait poll every 1 ms)." at screen 0.01, screen 0.045 font ',10'
plot $plot
EOF
    echo "chart: $OUT/cycle-rate.svg"
}

# --- shared leases and semaphores ---------------------------------------------

# Method keys of kinds.tsv, in bar order, with their legend titles and colours
KIND_METHODS=(floor advisory_shared plpgsql_shared dlock_shared dlock_exclusive dlock_semaphore redis_semaphore)
declare -A KIND_TITLE=(
    [floor]="durable floor (2 one-row UPDATE commits, random rows)"
    [advisory_shared]="pg_advisory_xact_lock_shared"
    [plpgsql_shared]="PL/pgSQL shared lease with token"
    [dlock_shared]="dlock, shared => true"
    [dlock_exclusive]="dlock exclusive, random names (reference)"
    [dlock_semaphore]="dlock, max_holders"
    [redis_semaphore]="Redis sorted-set semaphore (AOF always)"
)
declare -A KIND_COLOR=(
    [floor]="#7f7f7f" [advisory_shared]="#9ecae1" [plpgsql_shared]="#e6550d"
    [dlock_shared]="#a50f15" [dlock_exclusive]="#fb6a4a" [dlock_semaphore]="#67000d"
    [redis_semaphore]="#31a354"
)
declare -A WRITER_TITLE=(
    [advisory]="pg_advisory_lock behind pg_advisory_xact_lock_shared"
    [plpgsql]="PL/pgSQL leases (the writer polls)"
    [dlock]="dlock.acquire (queues)"
)

chart_kinds() {
    local data=$OUT/kinds.tsv meta=$OUT/kinds-info.tsv samples=$OUT/writer-samples.tsv
    local plot="" col m methods=() nm x xtic ymax i=0 n
    for m in "${KIND_METHODS[@]}"; do
        awk -F '\t' -v m="$m" 'NR > 1 && $5 == m { found = 1 } END { exit !found }' "$data" &&
            methods+=("$m")
    done
    nm=${#methods[@]}
    # One row a table (workload and setting), one column a method: the x
    # label's three lines (the workload split at its comma), then cycles/s
    awk -F '\t' -v list="${methods[*]}" '
        BEGIN { nm = split(list, m, " ") }
        NR == 1 { next }
        !(($1 FS $4) in row) {
            row[$1 FS $4] = ++n
            what[n] = $1; sub(/, /, "\t", what[n])
            how[n] = ($4 == "cpu" ? "fsync off" : "sync " $4)
        }
        { ops[row[$1 FS $4], $5] = $7 }
        END {
            for (r = 1; r <= n; r++) {
                line = what[r] "\t" how[r]
                for (j = 1; j <= nm; j++) line = line "\t" ops[r, m[j]]
                print line
            }
        }' "$data" >"$TMP/kinds.tsv"
    ymax=$(awk -F '\t' 'NR > 1 && $7 > max + 0 { max = $7 } END { print max * 2.5 }' "$data")
    col=4
    for m in "${methods[@]}"; do
        x="(\$0 + ($((col - 4)) - ($nm - 1) / 2.0) * w)"
        xtic=""
        [ "$col" != 4 ] || xtic=':xtic(stringcolumn(1) . "\n" . stringcolumn(2) . "\n" . stringcolumn(3))'
        plot+="${plot:+, }'$TMP/kinds.tsv' using $x:$col$xtic with boxes fs solid 0.9 noborder lc rgb '${KIND_COLOR[$m]}' title '${KIND_TITLE[$m]}'"
        plot+=", '' using $x:(column($col) * 1.12):(sprintf('%.0f', column($col))) with labels rotate by 90 left font ',9' textcolor rgb '#333333' notitle"
        col=$((col + 1))
    done
    gnuplot <<EOF
$TERMINAL
set output '$OUT/kinds-rate.svg'
set datafile separator "\t"
set title "Shared leases and semaphore permits: cycles (acquire + release) per second\n$(subtitle "$meta"); median of $(info "$meta" reps) run(s) of $(info "$meta" seconds_per_run) s each"
set ylabel 'cycles per second (log scale)'
set logscale y
set format y '%.0f'
set yrange [100:$ymax]
w = 0.8 / $nm
set boxwidth w absolute
set xrange [-0.6:$(($(wc -l <"$TMP/kinds.tsv") - 1)).6]
set xtics scale 0 font ',12'
set grid ytics mytics lc rgb '#e5e5e5'
set bmargin 10
set key at screen 0.5, screen 0.07 center center horizontal maxrows 3 samplen 2 font ",11"
plot $plot
EOF
    echo "chart: $OUT/kinds-rate.svg"

    # The writer's waits: one CDF a method, in the order the file has them,
    # each wait with the share of its method's waits at or below it
    has_rows "$samples" || return 0
    plot=""
    tail -n +2 "$samples" |
        awk -F '\t' '!($1 in order) { order[$1] = ++n } { print order[$1] "\t" $0 }' |
        sort -t "$(printf '\t')" -k1,1n -k3,3g >"$TMP/wsorted.tsv"
    awk -F '\t' 'NR == FNR { count[$1]++; next }
                 $1 != last { if (last != "") printf "\n\n"; last = $1; i = 0; printf "%s\t0\n", $3 }
                 { printf "%s\t%.6f\n", $3, ++i / count[$1] }' "$TMP/wsorted.tsv" "$TMP/wsorted.tsv" \
        >"$TMP/wcdf.tsv"
    while IFS=$'\t' read -r m n; do
        plot+="${plot:+, }'$TMP/wcdf.tsv' index $i using 1:2 with steps lw 2 title '${WRITER_TITLE[$m]:-$m} ($n waits)'"
        i=$((i + 1))
    done < <(tail -n +2 "$samples" |
        awk -F '\t' '!($1 in n) { order[++k] = $1 } { n[$1]++ } END { for (i = 1; i <= k; i++) print order[i] "\t" n[order[i]] }')
    gnuplot <<EOF
$TERMINAL
set output '$OUT/writer-wait.svg'
set datafile separator "\t"
set title "A writer's wait for an exclusive lock of a name that readers keep taking shared\n$(subtitle "$meta")"
set xlabel 'wait (ms, log scale)'
set ylabel 'share of waits at or below the time'
set logscale x
set format x '%g'
set xtics (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
set yrange [0:1.03]
set ytics 0, 0.1, 1
set grid xtics ytics lc rgb '#dddddd'
set rmargin 8
set arrow from graph 0, first 0.5 to graph 1, first 0.5 nohead dt 2 lc rgb '#888888'
set arrow from graph 0, first 0.99 to graph 1, first 0.99 nohead dt 2 lc rgb '#888888'
set label 'median' at graph 1.01, first 0.5 left textcolor rgb '#555555'
set label 'p99' at graph 1.01, first 0.99 left textcolor rgb '#555555'
set key below box
plot $plot
EOF
    echo "chart: $OUT/writer-wait.svg"
}

# --- nightly invoices ---------------------------------------------------------

chart_invoice() {
    local data=$OUT/invoice.tsv meta=$OUT/invoice-info.tsv floor title
    floor=$(awk -F '\t' '$1 == "nolock" { print $3 }' "$data")
    title="Nightly invoices: $(info "$meta" accounts) accounts, $(info "$meta" workers) workers; run time by lock method (median of $(info "$meta" rounds) round(s))"
    # One row a method, in the table's order: label, seconds, bar colour
    # (0xRRGGBB as a number: grey no lock, blues advisory, reds dlock,
    # lighter with durable_grants off, greens Redis, purple etcd)
    awk -F '\t' 'NR > 1 {
        c = 10406625
        if ($1 ~ /^dlock/) c = ($1 ~ /_off$/ ? 16476746 : 10817301)
        if ($1 ~ /^redis/) c = 3253076
        if ($1 == "etcd") c = 7695281
        if ($1 == "nolock") c = 8355711
        printf "%s\t%s\t%d\n", $2, $3, c
    }' "$data" >"$TMP/invoice.tsv"
    gnuplot <<EOF
$TERMINAL
set output '$OUT/invoice.svg'
set datafile separator "\t"
set title "$title\n$(subtitle "$meta"), etcd $(info "$meta" etcd)"
set ylabel 'seconds for the night (less is better)'
set yrange [0:*]
set offsets 0, 0, graph 0.1, 0
set boxwidth 0.7
set style fill solid 0.9 noborder
set xtics rotate by -25 left scale 0 font ',11'
set grid ytics lc rgb '#e5e5e5'
set bmargin 13
set rmargin 30
${floor:+set arrow from graph 0, first $floor to graph 1, first $floor nohead dt 2 lc rgb '#555555'}
${floor:+set label 'no lock' at graph 1.005, first $floor left textcolor rgb '#555555'}
plot '$TMP/invoice.tsv' using 0:2:3:xtic(1) with boxes lc rgb variable notitle, \
     '' using 0:2:(sprintf('%.2f', column(2))) with labels offset 0, 0.7 font ',10' notitle
EOF
    echo "chart: $OUT/invoice.svg"
    # The same as text, for docs/performance.md: one bar a method, numbered
    gnuplot >"$OUT/invoice.txt" <<EOF
set terminal dumb size 90, 24 noenhanced
set datafile separator "\t"
set title "run time, s"
set yrange [0:*]
set xrange [-0.7:*]
set boxwidth 0.6
set style fill solid 1.0
set xtics scale 0
unset key
plot '$TMP/invoice.tsv' using 0:2:xtic(sprintf('%d', column(0) + 1)) with boxes
EOF
    awk -F '\t' '{ printf "%d: %s (%.2f s)\n", NR, $1, $2 }' "$TMP/invoice.tsv" >>"$OUT/invoice.txt"
    echo "chart: $OUT/invoice.txt"
}

charts=("$@")
if [ ${#charts[@]} -eq 0 ]; then
    has_rows "$OUT/handoff-samples.tsv" && charts+=(handoff)
    has_rows "$OUT/cycle-rate.tsv" && charts+=(cycles)
    has_rows "$OUT/kinds.tsv" && charts+=(kinds)
    has_rows "$OUT/invoice.tsv" && charts+=(invoice)
fi
for chart in "${charts[@]}"; do
    case $chart in
        handoff) has_rows "$OUT/handoff-samples.tsv" || { echo "charts: no data in $OUT/handoff-samples.tsv" >&2; exit 1; } ;;
        cycles) has_rows "$OUT/cycle-rate.tsv" || { echo "charts: no data in $OUT/cycle-rate.tsv" >&2; exit 1; } ;;
        kinds) has_rows "$OUT/kinds.tsv" || { echo "charts: no data in $OUT/kinds.tsv" >&2; exit 1; } ;;
        invoice) has_rows "$OUT/invoice.tsv" || { echo "charts: no data in $OUT/invoice.tsv" >&2; exit 1; } ;;
        *) echo "usage: charts.sh [handoff] [cycles] [kinds] [invoice]" >&2; exit 64 ;;
    esac
    "chart_$chart"
done

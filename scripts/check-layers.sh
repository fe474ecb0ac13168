#!/usr/bin/env bash
# check-layers.sh: the C files of src/ call only down, and never in a
# circle.  src/LAYERS names the layers, lowest first; the files of a layer
# are those of its folder, src/LAYER/*.c; src/dlock.c, the module's entry,
# stands above them all.
#
# From the object files (nm: which file defines each symbol another file
# uses), it draws the calls between src/ files and fails on
#   - a call from a file to a file of a higher layer, naming the symbol;
#   - a circle of calls among files (of one layer, since calls go only down
#     or sideways), naming the files;
#   - a C file of src/ outside the layer folders, or a folder of src/ that
#     src/LAYERS does not name (and a named layer without a folder).
# Calls within a layer are allowed as long as they form no circle.
#
# Usage: scripts/check-layers.sh [OBJECT-DIR]   (default: src, after make;
#                                               objects in its layer folders)
#        scripts/check-layers.sh --self-test    the check fails on a planted
#                                               upward call and circle
# Prints "ok N - ..." or "not ok N - ..." per check, then "N passed, N
# failed"; exits non-zero when one failed.  CHECK_LAYERS_ROOT names another
# tree (with src/LAYERS and src/LAYER/*.c) to check than this one.
set -euo pipefail
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

if [ "${1:-}" = --self-test ]; then
    # A tree of four files: low calls up into high, and the two sql files
    # call each other; the check must fail on both, naming the symbol and
    # the files, and pass once the planted calls are gone
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/src/low" "$tmp/src/high" "$tmp/src/sql"
    printf 'low\nhigh\nsql\n' >"$tmp/src/LAYERS"
    printf 'int high_fn(void);\nint low_fn(void) { return %s; }\n' "${PLANT:-high_fn()}" >"$tmp/src/low/low.c"
    printf 'int low_fn(void);\nint high_fn(void) { return low_fn(); }\n' >"$tmp/src/high/high.c"
    printf 'int b_fn(void);\nint a_fn(void) { return b_fn(); }\n' >"$tmp/src/sql/a.c"
    printf 'int a_fn(void);\nint b_fn(void) { return %s; }\n' "${PLANT:-a_fn()}" >"$tmp/src/sql/b.c"
    printf 'int a_fn(void);\nint main(void) { return a_fn(); }\n' >"$tmp/src/dlock.c"
    for f in low/low high/high sql/a sql/b dlock; do cc -c -o "$tmp/src/$f.o" "$tmp/src/$f.c"; done
    n=0 failed=0
    out=$(CHECK_LAYERS_ROOT=$tmp bash "$SELF" "$tmp/src" 2>&1 || true)
    n=$((n + 1))
    if grep -q 'not ok 2 - no call goes up a layer' <<<"$out" &&
        grep -q 'low (low) calls high_fn of high (high)' <<<"$out"; then
        echo "ok $n - a planted upward call fails the check, naming its symbol"
    else
        echo "not ok $n - a planted upward call fails the check, naming its symbol"; echo "$out"
        failed=$((failed + 1))
    fi
    n=$((n + 1))
    if grep -q 'not ok 3 - no circle of calls' <<<"$out" && grep -q '#   a b$' <<<"$out"; then
        echo "ok $n - a planted circle fails the check, naming its files"
    else
        echo "not ok $n - a planted circle fails the check, naming its files"; echo "$out"
        failed=$((failed + 1))
    fi
    printf 'int low_fn(void) { return 0; }\n' >"$tmp/src/low/low.c"
    printf 'int b_fn(void) { return 1; }\n' >"$tmp/src/sql/b.c"
    for f in low/low sql/b; do cc -c -o "$tmp/src/$f.o" "$tmp/src/$f.c"; done
    n=$((n + 1))
    if CHECK_LAYERS_ROOT=$tmp bash "$SELF" "$tmp/src" >/dev/null 2>&1; then
        echo "ok $n - without them it passes"
    else
        echo "not ok $n - without them it passes"
        failed=$((failed + 1))
    fi
    echo "$((n - failed)) passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
fi

cd "${CHECK_LAYERS_ROOT:-$(dirname "$SELF")/..}"
OBJ_DIR=${1:-src}

perl -e '
use strict;
use warnings;
my ($obj_dir) = @ARGV;
my (%layer_of, @layers, $n, $passed, $failed);
($n, $passed, $failed) = (0, 0, 0);
sub report { my ($ok, $what) = @_; $n++; if ($ok) { print "ok $n - $what\n"; $passed++ } else { print "not ok $n - $what\n"; $failed++ } }

open my $lf, "<", "src/LAYERS" or die "src/LAYERS: $!";
while (<$lf>)
{
	s/#.*//;
	push @layers, split;
}
close $lf;
my %layer_index = map { $layers[$_] => $_ } 0 .. $#layers;
# src/dlock.c, the module entry, above every layer
push @layers, "module";

# a file is named by its base name (unique in src/), its layer by its folder
sub place
{
	my ($path) = @_;
	my ($dir, $f) = $path =~ m{^\Q$obj_dir\E/(?:([^/]+)/)?([^/]+)\.[co]$} or return;
	return ($f, $dir) if defined $dir;
	return ($f, undef);
}

# defined and used symbols of each object file
my (%defines, %uses);
# (of src/ itself only the entry point: other objects there are left over
# from a build of another layout)
my @objects = (glob("$obj_dir/*/*.o"), grep { -e } "$obj_dir/dlock.o");
die "no object files in $obj_dir (run make first)\n" unless @objects;
for my $o (@objects)
{
	my ($f) = place($o);
	for (`nm -P "$o"`)
	{
		my ($sym, $type) = split;
		next unless defined $type;
		if ($type =~ /^[TDBRCG]$/) { $defines{$sym} = $f }
		elsif ($type eq "U") { $uses{$f}{$sym} = 1 }
	}
}

my (@misplaced, %seen_layer);
for my $c (glob("$obj_dir/*.c"), glob("$obj_dir/*/*.c"))
{
	my ($f, $dir) = place($c);
	if (!defined $dir)
	{
		if ($f eq "dlock") { $layer_of{$f} = $#layers } else { push @misplaced, "$f.c (outside the layer folders)" }
	}
	elsif (exists $layer_index{$dir}) { $layer_of{$f} = $layer_index{$dir}; $seen_layer{$dir} = 1 }
	else { push @misplaced, "$dir/$f.c (src/LAYERS names no layer $dir)" }
}
my @empty = grep { !$seen_layer{$_} } @layers[0 .. $#layers - 1];
report(!@misplaced && !@empty, "every C file of src/ is in a layer that src/LAYERS names"
	. (@misplaced ? "; not placed: @misplaced" : "") . (@empty ? "; no files: @empty" : ""));

# the calls between files
my (%calls, @upward);
for my $f (sort keys %uses)
{
	for my $sym (sort keys %{ $uses{$f} })
	{
		my $g = $defines{$sym} // next;
		next if $g eq $f;
		$calls{$f}{$g}{$sym} = 1;
		next unless exists $layer_of{$f} && exists $layer_of{$g};
		push @upward, "$f ($layers[$layer_of{$f}]) calls $sym of $g ($layers[$layer_of{$g}])"
		  if $layer_of{$g} > $layer_of{$f};
	}
}
report(!@upward, "no call goes up a layer" . (@upward ? ":\n#   " . join("\n#   ", @upward) : ""));

# circles: the strongly connected components of more than one file (Tarjan)
my ($index, %idx, %low, %on, @stack, @circles) = (0);
my $visit;
$visit = sub {
	my ($v) = @_;
	$idx{$v} = $low{$v} = $index++;
	push @stack, $v;
	$on{$v} = 1;
	for my $w (sort keys %{ $calls{$v} // {} })
	{
		if (!exists $idx{$w}) { $visit->($w); $low{$v} = $low{$w} if $low{$w} < $low{$v} }
		elsif ($on{$w}) { $low{$v} = $idx{$w} if $idx{$w} < $low{$v} }
	}
	if ($low{$v} == $idx{$v})
	{
		my @c;
		while (1) { my $w = pop @stack; $on{$w} = 0; push @c, $w; last if $w eq $v }
		push @circles, [ sort @c ] if @c > 1;
	}
};
$visit->($_) for grep { !exists $idx{$_} } sort(keys %calls, keys %uses);
report(!@circles, "no circle of calls between files"
	. (@circles ? ":\n#   " . join("\n#   ", map { "@$_" } @circles) : ""));

print "$passed passed, $failed failed\n";
exit($failed ? 1 : 0);
' "$OBJ_DIR"

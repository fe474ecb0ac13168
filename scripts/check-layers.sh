#!/usr/bin/env bash
# check-layers.sh: the C files of src/ call only down, and never in a
# circle.  src/LAYERS names the layers, lowest first, and the files of each.
#
# From the object files (nm: which file defines each symbol another file
# uses), it draws the calls between src/ files and fails on
#   - a call from a file to a file of a higher layer, naming the symbol;
#   - a circle of calls among files (of one layer, since calls go only down
#     or sideways), naming the files;
#   - a file of src/ that src/LAYERS does not place, or a placed one that
#     does not exist.
# Calls within a layer are allowed as long as they form no circle.
#
# Usage: scripts/check-layers.sh [OBJECT-DIR]   (default: src, after make)
# Prints "ok N - ..." or "not ok N - ..." per check, then "N passed, N
# failed"; exits non-zero when one failed.
set -euo pipefail
cd "$(dirname "$0")/.."
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
	next unless /\S/;
	my ($layer, @files) = split;
	$layer =~ s/:$//;
	push @layers, $layer;
	for my $f (@files)
	{
		die "src/LAYERS: $f is placed twice\n" if exists $layer_of{$f};
		$layer_of{$f} = $#layers;
	}
}
close $lf;

# defined and used symbols of each object file
my (%defines, %uses);
my @objects = glob("$obj_dir/*.o");
die "no object files in $obj_dir (run make first)\n" unless @objects;
for my $o (@objects)
{
	(my $f = $o) =~ s{.*/}{};
	$f =~ s/\.o$//;
	for (`nm -P "$o"`)
	{
		my ($sym, $type) = split;
		next unless defined $type;
		if ($type =~ /^[TDBRCG]$/) { $defines{$sym} = $f }
		elsif ($type eq "U") { $uses{$f}{$sym} = 1 }
	}
}

my @sources = map { s{.*/}{}r =~ s/\.c$//r } glob("src/*.c");
my @unplaced = grep { !exists $layer_of{$_} } @sources;
my @missing = grep { my $f = $_; !grep { $_ eq $f } @sources } sort keys %layer_of;
report(!@unplaced && !@missing, "src/LAYERS places every C file of src/"
	. (@unplaced ? "; not placed: @unplaced" : "") . (@missing ? "; no such file: @missing" : ""));

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

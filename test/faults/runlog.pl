# The messages of one "dlock run -v" of test/faults (its standard error, on
# standard input here) go to standard output with the wall time in front,
# and what the checker needs of them goes into the history file HISTORY as
# operations of PROCESS (the name of the run's child, so that the checker
# joins them):
#
#   WALL MONO PROCESS ok renew NAME - - - EXPIRES   a renew succeeded; EXPIRES
#                                                   is the expiry the server
#                                                   returned (its clock), with
#                                                   "T" for the space
#   WALL MONO PROCESS ok lost NAME - - - -          dlock run gave the lease up
#                                                   and stops its child
#
# The times are when the message was read, just after dlock run wrote it.
#
#   perl runlog.pl HISTORY PROCESS
use strict;
use warnings;

use IO::Handle;
use Time::HiRes qw(clock_gettime CLOCK_REALTIME CLOCK_MONOTONIC);

my ($file, $proc) = @ARGV;
die "usage: runlog.pl HISTORY PROCESS\n" unless defined $proc;
open my $hist, '>>', $file or die "$file: $!";
$hist->autoflush(1);
STDOUT->autoflush(1);

while (my $line = <STDIN>)
{
	my ($wall, $mono) = (clock_gettime(CLOCK_REALTIME), clock_gettime(CLOCK_MONOTONIC));
	printf '%.6f %s', $wall, $line;
	my ($f, $name, $detail);
	if ($line =~ /renewed lease "([^"\s]+)" until (\S+ \S+)/)
	{
		($f, $name, $detail) = ('renew', $1, $2);
		$detail =~ s/ /T/;
	}
	elsif ($line =~ /lease "([^"\s]+)" lost: /)
	{
		($f, $name, $detail) = ('lost', $1, '-');
	}
	next unless $f;
	printf $hist "%.6f %.6f %s ok %s %s - - - %s\n", $wall, $mono, $proc, $f, $name, $detail;
}

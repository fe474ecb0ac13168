# FaultHistory - reads the histories the clients of test/faults record
# (see test/faults/client.c for the line format) and checks them against
# what the database holds at the end.
#
# An operation is an invoke line and the outcome line after it from the
# same process (each process does one thing at a time).  Times are the
# machine's clocks, which every namespace shares; the servers' clocks, which
# the clock nemesis moves, are never used.  NODE of an answer is
# "ADDRESS/TIMELINE": an epoch is one server on one timeline, the time it
# was primary.
#
# check() gives the verdicts and figures of one history:
#  - acknowledged: writes answered ok (one row came back: the fence held);
#  - lost: acknowledged writes whose element is not in the table at the end;
#  - phantom: rows whose write failed for certain (fail, not unknown);
#  - stale: writes acknowledged although a grant of the same name with a
#    larger token had been acknowledged before the write was sent (its
#    token was superseded when it committed);
#  - order: the table's rows of a name, in insertion order (id), do not
#    have growing tokens; or two acknowledged writes of a name, one
#    finished before the other started, have tokens the other way round;
#  - refused: writes the fence refused (0 rows);
#  - unknown: operations with an unknown outcome;
#  - two primaries: the longest time in which two epochs both acknowledged
#    fenced writes (the later one's first write before the earlier one's
#    last), and whether the tokens the earlier epoch granted are all below
#    those of the later one (token_order);
#  - gaps: for each run of "dlock run" that lost its lease, the time from
#    its child's stop to the first grant of its name to the contender
#    (measured from when the contender sent the try_acquire that got it:
#    the grant came after that, so the true gap is at least this).

package FaultHistory;

use strict;
use warnings FATAL => 'all';

use List::Util qw(max min sum0);

# read_ops - the operations of every history file under DIR
sub read_ops
{
	my ($dir) = @_;
	my (@ops, %open);
	for my $file (sort glob "$dir/*.hist*")
	{
		open my $fh, '<', $file or die "$file: $!";
		while (my $line = <$fh>)
		{
			chomp $line;
			my ($wall, $mono, $proc, $type, $f, $name, $token, $elem, $node, $detail) = split / /, $line;
			next unless defined $detail;
			my $key = "$file $proc";
			if ($type eq 'invoke' || $type eq 'start')
			{
				my $op = { proc => $proc, f => $f, name => $name, token => $token, elem => $elem,
					node => $node, inv_wall => $wall, inv_mono => $mono, type => 'pending' };
				$op->{f} = 'start' if $type eq 'start';
				push @ops, $op;
				$open{$key} = $op unless $type eq 'start';
				next;
			}
			my $op = delete $open{$key};
			if (!$op || $op->{f} ne $f)
			{
				# an outcome without an invoke: the child's stop, which may
				# cut a write in flight (that one stays without an answer)
				$op = { proc => $proc, f => $f, name => $name, inv_wall => $wall, inv_mono => $mono };
				push @ops, $op;
			}
			@$op{qw(type end_wall end_mono detail)} = ($type, $wall, $mono, $detail);
			$op->{token} = $token if $token ne '-';
			$op->{node} = $node if $node ne '-';
		}
	}
	# an operation cut by the end of its process never got an answer
	$_->{type} = 'unknown', $_->{end_wall} = 9e9 for grep { $_->{type} eq 'pending' } @ops;
	return \@ops;
}

sub epoch_of { my ($node) = @_; return defined $node && $node =~ m{/} ? $node : undef }

# check - ROWS: [elem, name, token, id] of the table at the end
sub check
{
	my (%a) = @_;
	my $ops = $a{ops};
	my %row = map { $_->[0] => $_ } @{ $a{rows} };
	my @writes = grep { $_->{f} eq 'write' } @$ops;
	my @acked = grep { $_->{type} eq 'ok' } @writes;
	my @grants = sort { $a->{end_wall} <=> $b->{end_wall} }
	  grep { $_->{f} eq 'acquire' && $_->{type} eq 'ok' } @$ops;
	my %r;

	$r{operations} = scalar grep { $_->{f} =~ /^(acquire|write|release)$/ } @$ops;
	$r{acknowledged} = scalar @acked;
	$r{refused} = scalar grep { $_->{type} eq 'fail' && ($_->{detail} // '') eq 'fenced' } @writes;
	$r{unknown} = scalar grep { $_->{type} eq 'unknown' && $_->{f} =~ /^(acquire|write|release)$/ } @$ops;
	$r{lost_list} = [ grep { !$row{ $_->{elem} } } @acked ];
	$r{lost} = scalar @{ $r{lost_list} };
	$r{phantom_list} = [ grep { $_->{type} eq 'fail' && $row{ $_->{elem} } } @writes ];
	$r{phantom} = scalar @{ $r{phantom_list} };

	# stale: a larger token of the same name was acknowledged before the
	# write was sent
	my %grants_of;
	push @{ $grants_of{ $_->{name} } }, $_ for @grants;
	my @stale;
	for my $w (@acked)
	{
		for my $g (@{ $grants_of{ $w->{name} } // [] })
		{
			last if $g->{end_wall} >= $w->{inv_wall};
			if ($g->{token} > $w->{token})
			{
				push @stale, { write => $w, grant => $g };
				last;
			}
		}
	}
	$r{stale_list} = \@stale;
	$r{stale} = scalar @stale;

	# order in the table, per name
	my (%last, @disorder);
	for my $row (sort { $a->[3] <=> $b->[3] } @{ $a{rows} })
	{
		my ($elem, $name, $token) = @$row;
		push @disorder, "$name: $token after $last{$name}" if defined $last{$name} && $token < $last{$name};
		$last{$name} = $token;
	}
	# order in the history: a write that finished before another started
	my %acked_of;
	push @{ $acked_of{ $_->{name} } }, $_ for sort { $a->{end_wall} <=> $b->{end_wall} } @acked;
	for my $name (keys %acked_of)
	{
		my @w = @{ $acked_of{$name} };
		my $max_before = -1;
		my $j = 0;
		for my $w (sort { $a->{inv_wall} <=> $b->{inv_wall} } @w)
		{
			while ($j < @w && $w[$j]{end_wall} < $w->{inv_wall}) { $max_before = max($max_before, $w[$j]{token}); $j++ }
			push @disorder, "$name: $w->{elem} wrote $w->{token} after an acknowledged $max_before"
			  if $w->{token} < $max_before;
		}
	}
	$r{order_list} = \@disorder;
	$r{order} = scalar @disorder;

	# epochs: first and last acknowledged write, tokens granted
	my %ep;
	for my $w (@acked)
	{
		my $e = epoch_of($w->{node}) or next;
		$ep{$e}{first} = min($ep{$e}{first} // 9e9, $w->{end_wall});
		$ep{$e}{last} = max($ep{$e}{last} // 0, $w->{end_wall});
	}
	for my $g (@grants)
	{
		my $e = epoch_of($g->{node}) or next;
		$ep{$e}{first_grant} = min($ep{$e}{first_grant} // 9e9, $g->{end_wall});
		$ep{$e}{min_token} = min($ep{$e}{min_token} // 9e18, $g->{token});
		$ep{$e}{max_token} = max($ep{$e}{max_token} // 0, $g->{token});
	}
	my @epochs = sort { ($ep{$a}{first_grant} // $ep{$a}{first} // 9e9) <=> ($ep{$b}{first_grant} // $ep{$b}{first} // 9e9) } keys %ep;
	$r{epochs} = [ map { { name => $_, %{ $ep{$_} } } } @epochs ];
	$r{two_primaries} = 0;
	$r{token_order_list} = [];
	for my $i (0 .. $#epochs)
	{
		for my $j ($i + 1 .. $#epochs)
		{
			my ($o, $n) = @ep{ @epochs[ $i, $j ] };
			if (defined $o->{last} && defined $n->{first} && $n->{first} < $o->{last})
			{
				$r{two_primaries} = max($r{two_primaries}, $o->{last} - $n->{first});
			}
			if (defined $o->{max_token} && defined $n->{min_token} && $o->{max_token} >= $n->{min_token})
			{
				push @{ $r{token_order_list} }, "$epochs[$i] granted $o->{max_token}, $epochs[$j] later granted $n->{min_token}";
			}
		}
	}
	$r{token_order} = scalar @{ $r{token_order_list} };

	# the longest time without an acknowledged write
	my @t = sort { $a <=> $b } map { $_->{end_wall} } @acked;
	$r{longest_pause} = @t > 1 ? max(map { $t[$_] - $t[ $_ - 1 ] } 1 .. $#t) : 0;

	# failover: from FAULT_AT to the first write acknowledged by another
	# epoch than the one that had the last write before it
	if (defined $a{fault_at})
	{
		my ($before) = reverse grep { $_->{end_wall} < $a{fault_at} } sort { $a->{end_wall} <=> $b->{end_wall} } @acked;
		my ($after) = grep { $_->{end_wall} > $a{fault_at} && $before && epoch_of($_->{node}) && epoch_of($before->{node})
			  && $_->{node} ne $before->{node} } sort { $a->{end_wall} <=> $b->{end_wall} } @acked;
		$r{failover} = $after ? $after->{end_wall} - $a{fault_at} : undef;
	}

	# dlock run: gap between the child's stop and the next grant of its name
	my @gaps;
	for my $run (@{ $a{runs} // [] })
	{
		next unless defined $run->{token} && defined $run->{stop};
		my ($g) = sort { $a->{inv_wall} <=> $b->{inv_wall} }
		  grep { $_->{name} eq $run->{name} && $_->{token} > $run->{token} && $_->{proc} =~ /contend/ } @grants;
		push @gaps, { %$run, grant_at => $g ? $g->{inv_wall} : undef, gap => $g ? $g->{inv_wall} - $run->{stop} : undef,
			grant_node => $g ? $g->{node} : undef };
	}
	$r{gaps} = \@gaps;
	return \%r;
}

# runs - the dlock run children in OPS: {name, token, start, stop}
sub runs
{
	my ($ops) = @_;
	my %by;
	for my $op (grep { $_->{f} eq 'start' || $_->{f} eq 'stop' } @$ops)
	{
		my $r = $by{ $op->{proc} } //= { proc => $op->{proc}, name => $op->{name} };
		if ($op->{f} eq 'start') { $r->{token} = $op->{token}; $r->{start} = $op->{inv_wall} }
		else { $r->{stop} = $op->{end_wall} // $op->{inv_wall} }
	}
	return [ values %by ];
}

1;

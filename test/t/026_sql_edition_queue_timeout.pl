# A waiter of the SQL edition (sql-edition/dlock.sql) whose timeout runs
# out at the moment the name's queue is handed to it gives the queue back.
#
# acquire() and acquire_all() queue on a name's queue lock, a session-level
# advisory lock taken under lock_timeout.  PostgreSQL can grant that lock
# to a waiter and then raise the lock timeout all the same: when the
# timeout fires after the grant but before the waiter has seen it, the
# waiter keeps the lock (LockErrorCleanup keeps an awaited lock that was
# granted) and gets 55P03.  A session-level lock outlives the rollback of
# the PL/pgSQL block that took it, so unless the timed-out call gives it
# back, the waiter's session heads the name's queue until it ends, and
# nobody else is granted the name: try_acquire() is refused and acquire()
# raises 55P03 (other sessions are waiting).
#
# The moment is made deterministic by stopping the waiter's backend
# (SIGSTOP) while it waits for the queue lock, letting the head of the
# queue be granted the lease and hand the queue over to the stopped
# backend, and resuming it (SIGCONT) after its timeout has passed.  Three
# cases: acquire(); acquire_all() stopped on the first queue it joins; and
# acquire_all() stopped on its second queue while it holds the first.  In
# each, the waiter must get 55P03 and hold nothing of the names in
# dlock.locks afterwards; once the head has released, another session must
# be granted the names by try_acquire and by acquire with a timeout; and
# the waiter's own session must be able to acquire and release them,
# holding nothing afterwards.
#
# The edition is installed by the database's owner, a plain role, and used
# by another plain role, as on a managed service.  DLOCK_SQL_EDITION_SCRIPT
# names another script to install instead of sql-edition/dlock.sql (a
# changed copy under test).

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use DlockTest qw(locks_left sql_edition_install);


# The waiter's timeout: long enough for the test to see it wait and stop
# it first on a loaded machine
my $timeout = 2;

# Backends stopped by the test; resumed whatever happens, so that no
# backend stays stopped when the test dies
my %stopped;
END { kill 'CONT', $_ for keys %stopped; }

my $node = PostgreSQL::Test::Cluster->new('sql_queue_timeout');
$node->init;
$node->start;
sql_edition_install($node, 'app', 'regress_owner', 'regress_app');

# A psql session of its own (as the superuser when $role is undef), fed
# statements one at a time; errors do not end it
sub session
{
	my ($role, $appname) = @_;
	my $s = { in => '', out => '', err => '', n => 0, name => $appname };
	local $ENV{PGAPPNAME} = $appname;
	$s->{h} = IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-q', '-v', 'VERBOSITY=verbose',
		  (defined $role ? ('-U', $role) : ()), '-d', $node->connstr('app') ],
		'<', \$s->{in}, '>', \$s->{out}, '2>', \$s->{err});
	return $s;
}

# Sends statements and returns at once, with a marker for result()
sub send_sql
{
	my ($s, $sql) = @_;
	my $marker = "done $s->{name} " . ++$s->{n};
	$s->{in} .= "$sql\n;\n\\echo '$marker'\n\\warn '$marker'\n";
	$s->{h}->pump_nb;
	return $marker;
}

# Waits up to $seconds for statements sent with send_sql to finish; returns
# their (stdout, stderr), without the marker
sub result
{
	my ($s, $marker, $seconds) = @_;
	$seconds //= 10;
	my $until = time + $seconds;
	my $done = sub { $s->{out} =~ /^\Q$marker\E$/m && $s->{err} =~ /^\Q$marker\E$/m };
	while (!$done->() && time < $until)
	{
		$s->{h}->pump_nb;
		sleep 0.005;
	}
	die "session $s->{name}: no answer within $seconds s\nstdout: $s->{out}\nstderr: $s->{err}"
	  unless $done->();
	my ($out, $err) = ($s->{out}, $s->{err});
	$s->{out} = $s->{err} = '';
	s/^\Q$marker\E\n//m for $out, $err;
	chomp $out;
	return ($out, $err);
}

sub ask { my ($s, $sql) = @_; return result($s, send_sql($s, $sql)); }

sub quit
{
	my ($s) = @_;
	$s->{in} .= "\\q\n";
	$s->{h}->finish;
}

my $observer = session(undef, 'observer');

# The observer's answer to one query, which must succeed
sub look
{
	my ($sql) = @_;
	my ($out, $err) = ask($observer, $sql);
	die "observer: $err" if $err ne '';
	return $out;
}

sub poll_until
{
	my ($sql, $seconds) = @_;
	my $until = time + $seconds;
	while (time < $until)
	{
		return 1 if look($sql) eq 't';
		sleep 0.01;
	}
	return 0;
}

# What a backend holds or waits for of some names, through dlock.locks
sub locks_of
{
	my ($pid, $array) = @_;
	return look(qq{SELECT coalesce(string_agg(kind || ' ' || name || ' ' || mode
	                                          || CASE WHEN granted THEN '' ELSE ' waiting' END, ', '
	                                          ORDER BY kind, name COLLATE "C", mode), '')
	                 FROM dlock.locks WHERE pid = $pid AND name = ANY ($array)});
}

# One case: the other session holds the names; the head waits for them as
# the head of the queues of @$heads; the waiter is stopped while it waits
# for the queue of $waits_on, holding those of @$joined; the other session
# releases, the head is granted and hands the queue over to the stopped
# waiter, whose timeout runs out before it resumes.
sub stopped_waiter
{
	my (%c) = @_;
	my @names = @{ $c{names} };
	my $array = 'ARRAY[' . join(', ', map { "'$_'" } @names) . ']';
	my $set = @names > 1;
	my $what = $c{what};
	# a grant to $owner of all the names, waiting up to $t seconds, and
	# its release, each answering the number of leases
	my $acquire = sub {
		my ($owner, $t) = @_;
		return $set
		  ? "SELECT count(*) FROM dlock.acquire_all($array, '1h', '$owner', timeout => '${t}s')"
		  : "SELECT count(token) FROM dlock.acquire('$names[0]', '1h', '$owner', timeout => '${t}s')";
	};
	my $try = sub {
		my ($owner) = @_;
		return $set
		  ? "SELECT count(*) FROM dlock.try_acquire_all($array, '1h', '$owner')"
		  : "SELECT count(*) FROM dlock.try_acquire('$names[0]', '1h', '$owner')";
	};
	my $release = sub {
		my ($owner) = @_;
		return "SELECT count(*) FILTER (WHERE dlock.release(n, '$owner')) FROM unnest($array) n";
	};
	my $n = scalar @names;
	my ($try_fn, $acquire_fn) = $set ? ('try_acquire_all', 'acquire_all') : ('try_acquire', 'acquire');

	note "$what: names @names; the head waits on the queues of @{ $c{heads} }; "
	  . "the waiter stops waiting on the queue of $c{waits_on}";
	my $other = session('regress_app', "other-$what");
	my $head = session('regress_app', "head-$what");
	my $waiter = session('regress_app', "waiter-$what");
	my ($head_pid) = ask($head, 'SELECT pg_backend_pid()');
	my ($pid) = ask($waiter, 'SELECT pg_backend_pid()');

	my ($out, $err) = ask($other, $try->('b'));
	die "$what: the other session was not granted the names: $out $err" unless $out eq $n && $err eq '';

	my $heads = 'ARRAY[' . join(', ', map { "'$_'" } @{ $c{heads} }) . ']';
	my $head_done = send_sql($head, $c{head});
	poll_until(qq{SELECT count(*) = cardinality($heads) FROM dlock.locks
		WHERE pid = $head_pid AND kind = 'queue' AND granted AND name = ANY ($heads)}, 10)
	  or die "$what: the head did not queue";

	my $started = time;
	my $waiter_done = send_sql($waiter, $acquire->('w', $timeout));
	my $waiting = poll_until(qq{SELECT EXISTS (SELECT FROM pg_stat_activity
	                                            WHERE pid = $pid AND wait_event_type = 'Lock')
	                               AND EXISTS (SELECT FROM dlock.locks WHERE pid = $pid AND kind = 'queue'
	                                            AND name = '$c{waits_on}' AND NOT granted)},
		$timeout);
	if ($waiting)
	{
		kill 'STOP', $pid or die "$what: cannot stop backend $pid: $!";
		$stopped{$pid} = 1;
	}
	my $stopped_after = time - $started;
	ok($waiting && $stopped_after < $timeout,
		"$what: the waiter is stopped while it waits for the queue, before its timeout")
	  or diag "after $stopped_after s";
	# (locks_of lists them by name)
	my %joined = map { $_ => "queue $_ ExclusiveLock" } @{ $c{joined} };
	is(locks_of($pid, $array),
		join(', ', map { $joined{$_} // "queue $_ ExclusiveLock waiting" }
			sort(@{ $c{joined} }, $c{waits_on})),
		"$what: the waiter waits for the queue of $c{waits_on}"
		  . (@{ $c{joined} } ? ", holding the queue of @{ $c{joined} }" : ''));

	($out, $err) = ask($other, $release->('b'));
	is("$out$err", $n, "$what: the other session releases the names");
	($out, $err) = result($head, $head_done);
	is("$out$err", $c{head_granted}, "$what: the head is granted");
	is(locks_of($pid, $array), join(', ', map { "queue $_ ExclusiveLock" } sort(@{ $c{joined} }, $c{waits_on})),
		"$what: the head handed the queue over to the stopped waiter");

	my $resume = $started + $timeout + 0.5 - time;
	sleep $resume if $resume > 0;
	kill 'CONT', $pid;
	delete $stopped{$pid};
	($out, $err) = result($waiter, $waiter_done);
	# The queue was the waiter's when it resumed, and yet its wait for the
	# queue timed out (a waiter that saw the grant would have timed out as
	# the head, waiting for the head's lease): the timeout came after the
	# grant, the moment under test
	like($err, $set
		? qr/ERROR:  55P03: could not acquire all $n leases within the timeout\nDETAIL:  Lease "$c{waits_on}" was not available: other sessions are waiting for it ahead of this one\./
		: qr/ERROR:  55P03: could not acquire lease "$names[0]" within the timeout\nDETAIL:  Other sessions are waiting for the lease ahead of this one\./,
		"$what: the waiter times out waiting for the queue: 55P03");
	is(locks_of($pid, $array), '', "$what: and the waiter holds nothing of the names in dlock.locks");

	($out, $err) = ask($head, $release->('a'));
	is("$out$err", $c{head_granted}, "$what: the head releases");
	($out, $err) = ask($other, $try->('c'));
	is("$out$err", $n, "$what: another session's $try_fn is granted");
	ask($other, $release->('c'));
	($out, $err) = ask($other, $acquire->('c', 1));
	is("$out$err", $n, "$what: another session's $acquire_fn with a timeout is granted");
	ask($other, $release->('c'));

	($out, $err) = ask($waiter, $acquire->('w', 1));
	is("$out$err", $n, "$what: the waiter's session is granted the names by $acquire_fn");
	($out, $err) = ask($waiter, $release->('w'));
	is("$out$err", $n, "$what: and releases them");
	is(locks_of($pid, $array), '', "$what: and then holds nothing of them in dlock.locks");

	quit($_) for $other, $head, $waiter;
}

stopped_waiter(what => 'acquire', names => ['r'],
	head => q{SELECT count(token) FROM dlock.acquire('r', '1h', 'a')}, head_granted => 1,
	heads => ['r'], joined => [], waits_on => 'r');

# acquire_all joins the queues in the order of the names' lock tags
# (docs/internals.md, I13): unsigned name keys, then bytes.  A case whose
# waiter does not wait where this order says fails its second check.
sub in_queue_order
{
	my @names = @_;
	my $array = 'ARRAY[' . join(', ', map { "'$_'" } @names) . ']';
	return split /\n/, look(qq{SELECT n FROM unnest($array) n
		ORDER BY dlock.name_key(n) # (-9223372036854775808)::bigint, n COLLATE "C"});
}

my @set = in_queue_order('s1', 's2');
stopped_waiter(what => 'acquire_all, first queue', names => \@set,
	head => qq{SELECT count(*) FROM dlock.acquire_all(ARRAY['s1', 's2'], '1h', 'a')}, head_granted => 2,
	heads => \@set, joined => [], waits_on => $set[0]);

@set = in_queue_order('t1', 't2');
stopped_waiter(what => 'acquire_all, second queue', names => \@set,
	head => qq{SELECT count(token) FROM dlock.acquire('$set[1]', '1h', 'a')}, head_granted => 1,
	heads => [ $set[1] ], joined => [ $set[0] ], waits_on => $set[1]);

quit($observer);
is(locks_left($node, dbname => 'app'), '', 'no dlock lock is left');
$node->stop;

done_testing();

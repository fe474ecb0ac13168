# The dlock command against the SQL edition (sql-edition/dlock.sql),
# installed by the database's owner in a database where extension dlock is
# not, and used by a plain role, as on a managed service.  What
# test/t/007_cli.pl checks against the C edition holds here too: run gives
# the child the lease's name, owner and token and releases the lease when
# the child exits, with the child's exit status; a busy run exits with the
# conflict exit code and says in one line who holds the lease and until
# when (not with -q), also during a lock-delay; --wait waits and then runs;
# shared runs run alongside each other, a semaphore's runs up to its limit;
# a signal ends a wait at once, leaving no waiter on the server and nothing
# in the queue; a force-release and an expiry stop the child within a
# second (79); status lists live leases with kind, owner and value (text
# and --json), shows the owner only to the roles dlock.leases shows it to,
# and exits 1 for a name with no lease; release and force-release; watch
# prints one line per change of the live lease (dlock.locks shows the
# watches once the name has a row, sql-edition/README.md).  --poll needs the places in
# queues of the C edition's shared memory: the server's 0A000 makes the run
# fail (70) before it runs anything, as the C edition without preloading
# (55000) does.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP;
use DlockTest qw(locks_left sql_edition_install);

my $dlock = $ENV{DLOCK_CLI} // "$ENV{TESTDIR}/cli/dlock";
plan skip_all => "the dlock command is not built ($dlock)" unless -x $dlock;
note "testing $dlock";

my $node = PostgreSQL::Test::Cluster->new('cli_sql');
$node->init;
$node->start;
sql_edition_install($node, 'app', 'regress_owner', 'regress_app', 'regress_other');
is($node->safe_psql('app', q{
	SELECT format('%s extension, SQL edition: %s',
	              (SELECT count(*) FROM pg_extension WHERE extname = 'dlock'),
	              to_regprocedure('dlock._token_next()') IS NOT NULL)}),
	'0 extension, SQL edition: t', 'the database has the SQL edition and not extension dlock');

$ENV{PGHOST} = $node->host;
$ENV{PGPORT} = $node->port;
$ENV{PGDATABASE} = 'app';
my $dir = $node->basedir;

# As the test's superuser
sub sql { return $node->safe_psql('app', $_[0]); }

sub state_of
{
	my ($name) = @_;
	return sql("SELECT coalesce((SELECT state FROM dlock.leases WHERE name = '$name'"
		  . " ORDER BY token DESC LIMIT 1), 'none')");
}

# The command as a role (regress_app unless given): run_dlock waits for it
# and returns (exit status, stdout, stderr); start_dlock returns its harness
sub run_dlock_as
{
	my ($role, @args) = @_;
	my ($out, $err) = ('', '');
	local $ENV{PGUSER} = $role;
	IPC::Run::run([ $dlock, @args ], '>', \$out, '2>', \$err);
	return ($? >> 8, $out, $err);
}
sub run_dlock { return run_dlock_as('regress_app', @_); }

sub start_dlock
{
	my ($args, @redirects) = @_;
	local $ENV{PGUSER} = 'regress_app';
	return IPC::Run::start([ $dlock, @$args ], @redirects);
}

# A child that appends a timestamp to a file every 50 ms until stopped
sub ticking_child
{
	my ($file, $seconds) = @_;
	return ('sh', '-c', "end=\$((\$(date +%s) + $seconds)); while [ \$(date +%s) -lt \$end ]; do date +%s.%N >> $file; sleep 0.05; done");
}

sub last_tick
{
	my ($file) = @_;
	open my $fh, '<', $file or return 0;
	my @lines = <$fh>;
	chomp(my $last = $lines[-1] // '0');
	return $last;
}

sub poll_until
{
	my ($q, $seconds) = @_;
	my $until = time + $seconds;
	while (time < $until)
	{
		return 1 if sql($q) eq 't';
		sleep 0.05;
	}
	return 0;
}

# dlock.acquire calls of the dlock command that the server is running
my $waiting_sql = q{SELECT count(*) FROM pg_stat_activity
	WHERE pid <> pg_backend_pid() AND state = 'active' AND query LIKE '%FROM dlock.acquire($1%'};

note 'the child sees the lease, and it is released on exit';
my ($rc, $out, $err) = run_dlock('run', 'job', '--owner', 'cron-1', '--',
	'sh', '-c', 'echo "$DLOCK_NAME $DLOCK_TOKEN $DLOCK_OWNER $DLOCK_EXPIRES_AT"; exit 3');
is($rc, 3, 'dlock exits with the child\'s status') or diag $err;
my ($name, $token, $owner, $expires_at) = split / /, $out, 4;
is("$name $owner", 'job cron-1', 'the child gets DLOCK_NAME and DLOCK_OWNER');
is($token, sql(q{SELECT token FROM dlock.leases WHERE name = 'job'}),
	'the child gets the lease\'s token in DLOCK_TOKEN');
like($expires_at, qr/^\d{4}-\d\d-\d\d/, 'and its expiry in DLOCK_EXPIRES_AT');
is(sql(q{SELECT holder_role::text || ' ' || state FROM dlock.leases WHERE name = 'job'}),
	'regress_app released', 'the lease was the caller\'s role\'s, and is released when the child exits');
($rc) = run_dlock('run', 'job', '--', 'sh', '-c', 'kill -KILL $$');
is($rc, 128 + 9, 'a child killed by a signal gives 128 + the signal');

note 'two runs of one name';
my $first = start_dlock([ 'run', 'two', '--owner', 'first-run', '--', 'sleep', '2' ]);
$node->poll_query_until('app', q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'two' AND state = 'live'})
  or die 'the first run did not start';
my $expires = sql(q{SELECT to_char(expires_at, 'YYYY-MM-DD HH24:MI:SS.MSOF') FROM dlock.leases
	WHERE name = 'two' AND state = 'live'});
($rc, $out, $err) = run_dlock('run', 'two', '--', 'true');
is($rc, 75, 'the second run gets the conflict exit code');
like($err, qr/^dlock: lease "two" is busy: held by owner first-run of role regress_app until \Q$expires\E \(in [0-9.]+ s\)\n\z/,
	'and says on stderr, in one line, which lease is held, by which owner and until when');
($rc, $out, $err) = run_dlock('run', 'two', '-q', '--', 'true');
is("$rc [$err]", '75 []', 'with -q: the same exit code, and nothing on stderr');
($rc, $out) = run_dlock('run', 'two', '--wait', '30s', '--', 'echo', 'second');
is("$rc $out", "0 second\n", 'with --wait the second run waits and then runs');
$first->finish;
is($first->full_result >> 8, 0, 'the first run ended normally');

note 'shared runs and a semaphore';
my @readers = map { start_dlock([ 'run', 'readers', '--shared', '--', 'sleep', '3' ]) } 1 .. 2;
$node->poll_query_until('app', q{SELECT count(*) = 2 FROM dlock.leases
		WHERE name = 'readers' AND state = 'live' AND shared})
  or die 'the shared runs did not start';
($rc, $out, $err) = run_dlock('run', 'readers', '--', 'true');
is($rc, 75, 'an exclusive run is refused while shared runs hold the name');
like($err, qr/^dlock: lease "readers" is busy: held by 2 holders: owner [0-9a-f]{32} of role regress_app until [^;]+; owner [0-9a-f]{32} of role regress_app until [^;]+\n\z/,
	'and names both holders');
($rc, $out) = run_dlock('run', 'readers', '--shared', '--', 'sh', '-c', 'echo $DLOCK_TOKEN');
like($out, qr/^\d+$/, 'a third shared run runs alongside them, with its own token');
($rc, $out) = run_dlock('status', 'readers');
like($out, qr/^readers\s+\d+\s+shared\s/m, 'status shows the kind') or diag $out;
($rc, $out) = run_dlock('run', 'readers', '--wait', '30s', '--', 'echo', 'writer');
is("$rc $out", "0 writer\n", 'an exclusive run with --wait runs once the shared runs end');
$_->finish for @readers;
my @permits = (start_dlock([ 'run', 'permits', '--max-holders', '2', '--', 'sleep', '3' ]));
$node->poll_query_until('app', q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'permits' AND state = 'live'})
  or die 'the first semaphore run did not start';
push @permits, start_dlock([ 'run', 'permits', '--max-holders', '2', '--', 'sleep', '3' ]);
$node->poll_query_until('app', q{SELECT count(*) = 2 FROM dlock.leases
		WHERE name = 'permits' AND state = 'live' AND max_holders = 2})
  or die 'the semaphore runs did not start';
($rc) = run_dlock('run', 'permits', '--max-holders', '2', '--', 'true');
is($rc, 75, 'a third run of a semaphore of 2 gets the conflict exit code');
($rc, $out, $err) = run_dlock('run', 'permits', '--max-holders', '3', '--', 'true');
is($rc, 64, 'a run with another max_holders is refused as bad arguments');
like($err, qr/max_holders = 2/, '... naming the live limit');
($rc, $out) = run_dlock('run', 'permits', '--max-holders', '2', '--wait', '30s', '--', 'echo', 'third');
is("$rc $out", "0 third\n", 'with --wait it runs once a permit is free');
$_->finish for @permits;

note 'a signal ends a wait for the lease at once';
{
	my $ran = "$dir/ran-after-TERM";
	sql(q{SELECT dlock.acquire('held', '1h', 'holder')});
	my $w = start_dlock([ 'run', 'held', '--wait', '5s', '--', 'touch', $ran ], '2>', \my $wait_err);
	poll_until("SELECT ($waiting_sql) = 1", 10) or die 'the run did not wait';
	my $sent = time;
	$w->signal('TERM');
	$w->pump_nb while $w->pumpable && time < $sent + 2 && sleep 0.01;
	my $took = time - $sent;
	is(sql($waiting_sql), '0', 'no acquire is left waiting on the server');
	is(sql(q{SELECT count(*) FROM dlock.locks WHERE kind = 'queue'}), '0', 'and nothing in the queue');
	sql(q{SELECT dlock.release('held', 'holder')});
	$w->finish;
	is($w->full_result >> 8, 128 + 15, 'dlock exits with 128 + 15');
	cmp_ok($took, '<', 1.0, 'at once');
	ok(!-e $ran, 'the command was not run when the lease came');
	is(sql(q{SELECT EXISTS (SELECT FROM dlock.try_acquire('held', '1h', 'other'))}), 't',
		'the released name is grantable at once: no waiter kept its place');
	sql(q{SELECT dlock.release('held', 'other')});
}

note 'force-release and expiry stop the child within a second';
foreach my $how ('force-release', 'expiry')
{
	my $ticks = "$dir/ticks-$how";
	my $h = start_dlock([ 'run', $how, '--ttl', '2s', '--', ticking_child($ticks, 30) ], '2>', \my $lost_err);
	$node->poll_query_until('app', qq{SELECT count(*) = 1 FROM dlock.leases WHERE name = '$how' AND state = 'live'})
	  or die "the run of $how did not start";
	sleep 0.3;
	my $at = time;
	sql($how eq 'expiry'
		? qq{UPDATE dlock.lease_state SET expires_at = clock_timestamp() WHERE name = '$how'}
		: qq{SELECT dlock.force_release('$how')});
	$h->finish;
	is($h->full_result >> 8, 79, "$how: dlock exits with 79, the lease lost");
	cmp_ok(last_tick($ticks) - $at, '<', 1.0, "$how: the child stopped within a second");
	like($lost_err, qr/lease "\Q$how\E" lost: the server says the lease is gone/, "$how: and says why on stderr");
}

note 'status, release, force-release';
sql(q{SET ROLE regress_app; SELECT dlock.acquire('manual', '1h', 'me', value => 'db1:5432')});
($rc, $out) = run_dlock('status');
like($out, qr/^manual\s+\d+\s+exclusive\s+regress_app\s+live\s.*\s[0-9.]+s\s+me\s+db1:5432$/m,
	'status lists live leases, with the owner and the value last') or diag $out;
unlike($out, qr/^(job|two|readers|permits)\s/m, 'and only live ones');
($rc, $out) = run_dlock('status', '--json');
my ($manual) = grep { $_->{name} eq 'manual' } @{ decode_json($out) };
is(join(' ', map { $_ // 'null' } @$manual{qw(holder_role state kind owner value)}),
	'regress_app live exclusive me db1:5432', 'status --json');
($rc) = run_dlock('release', 'manual', '--owner', 'someone-else');
is($rc, 1, 'release by another owner exits 1');
($rc) = run_dlock('release', 'manual', '--owner', 'me');
is($rc, 0, 'release by the owner exits 0');
is(state_of('manual'), 'released', 'and released the lease');
sql(q{SET ROLE regress_app; SELECT dlock.acquire('manual', '1h', 'me')});
($rc, $out, $err) = run_dlock_as('regress_other', 'force-release', 'manual');
is($rc, 70, 'force-release of another role\'s lease fails');
like($err, qr/permission denied to force-release lease "manual"/, 'as the server refuses it');
is(state_of('manual'), 'live', 'and the lease lives on');
($rc) = run_dlock('force-release', 'manual');
is($rc, 0, 'force-release by the holder\'s role exits 0');
is(state_of('manual'), 'force_released', 'and ended the lease');
($rc, $out, $err) = run_dlock('status', 'manual');
like("$rc $out", qr/^0 .*\nmanual\s+\d+\s+exclusive\s+regress_app\s+force_released\s/s,
	'status of a name whose leases have ended shows them, and exits 0');
($rc, $out, $err) = run_dlock('status', 'never-taken');
is("$rc $err", "1 dlock: no lease named \"never-taken\"\n", 'status of a name with no lease exits 1 and says so');
($rc, $out) = run_dlock('status', 'never-taken', '--json');
is("$rc $out", "1 []\n", 'with --json: exit 1 and an empty array');

note 'status and a busy run show the owner to the roles dlock.leases shows it to';
sql(q{SET ROLE regress_app; SELECT dlock.acquire('apps', '1h', 'app-owner', value => 'a-value')});
($rc, $out) = run_dlock_as('regress_other', 'status', 'apps', '--json');
my ($seen) = @{ decode_json($out) };
ok(exists $seen->{owner} && !defined $seen->{owner}, 'another role\'s status: owner null');
is($seen->{value}, 'a-value', 'the value, which is for everyone');
($rc, $out, $err) = run_dlock_as('regress_other', 'run', 'apps', '--', 'true');
like("$rc $err", qr/^75 dlock: lease "apps" is busy: held by a holder of role regress_app until \S+ \S+ \(in [0-9.]+ s\)\n\z/,
	'another role\'s busy run names the holder\'s role, not its owner');
($rc, $out) = run_dlock('status', 'apps', '--json');
($seen) = @{ decode_json($out) };
is($seen->{owner} // 'null', 'app-owner', 'the holder\'s role sees the owner');
sql(q{SET ROLE regress_app; SELECT dlock.release('apps', 'app-owner')});
sql(q{SET ROLE regress_app; SELECT dlock.acquire('delayed', '1h', 'gone', lock_delay => '1h')});
sql(q{SELECT dlock.force_release('delayed')});
($rc, $out, $err) = run_dlock('run', 'delayed', '--', 'true');
like("$rc $err", qr/^75 dlock: lease "delayed" is busy: its last lease \(owner gone\) was force-released, and its lock-delay runs until \S+ \S+ \(in [0-9.]+ s\)\n\z/,
	'a run refused during a lock-delay says until when it runs');

note 'run --value publishes a value; watch follows the live lease';
{
	my ($wout, $werr) = ('', '');
	my $watch = start_dlock([ 'watch', 'leader' ], '>', \$wout, '2>', \$werr);
	my $wjson_out = '';
	my $wjson = start_dlock([ 'watch', 'leader', '--json' ], '>', \$wjson_out);
	poll_until(q{SELECT count(*) = 2 FROM pg_stat_activity
		WHERE query LIKE '%dlock.watch(%' AND pid <> pg_backend_pid() AND state = 'active'}, 10)
	  or die 'watch did not start';
	# dlock.locks knows a name's keys from its rows (sql-edition/README.md)
	is(sql(q{SELECT count(*) FROM dlock.locks WHERE kind = 'watch'}), '0',
		'dlock.locks does not show the watch of a name that has no row yet');
	($rc, $out) = run_dlock('run', 'leader', '--owner', 'node-1', '--value', '10.0.0.1:5432',
		'--', 'sh', '-c', q{psql -XAtc "SELECT value FROM dlock.leases WHERE name = 'leader'"; sleep 0.3});
	is("$rc $out", "0 10.0.0.1:5432\n", 'the child sees the published value in dlock.leases');
	# (by the watching role, which dlock.leases shows the owner of its own leases)
	sql(q{SET ROLE regress_app; SELECT dlock.acquire('leader', '300ms', 'node-2')});
	ok(poll_until(q{SELECT state <> 'live' FROM dlock.leases WHERE name = 'leader' ORDER BY token DESC LIMIT 1}, 5),
		'the last lease expired');
	ok(poll_until(q{SELECT count(*) = 2 FROM dlock.locks WHERE kind = 'watch' AND name = 'leader'}, 5),
		'dlock.locks shows both watches once the name has a row');
	sleep 0.3;
	$watch->signal('INT');
	$watch->finish;
	is($? >> 8, 0, 'watch exits 0 on SIGINT');
	my @lines = split /\n/, $wout;
	is(scalar(@lines), 5, 'watch printed one line per change: none, run, none, node-2, none')
	  or diag $wout;
	like($lines[0] // '', qr/no live lease$/, 'first the state it found: none live');
	like($lines[1] // '', qr/token \d+  owner node-1  value 10\.0\.0\.1:5432  expires /,
		'then the run\'s lease with its owner and value');
	like($lines[2] // '', qr/no live lease$/, 'then its release');
	like($lines[3] // '', qr/owner node-2  value -/, 'then the next holder');
	like($lines[4] // '', qr/no live lease$/, 'then its expiry');
	$wjson->signal('TERM');
	$wjson->finish;
	like((split /\n/, $wjson_out)[1] // '',
		qr/^\{"observed_at": "[^"]+", "token": \d+, "owner": "node-1", "value": "10\.0\.0\.1:5432", "expires_at": "[^"]+"\}$/,
		'watch --json prints one JSON object per change');
	is(sql(q{SELECT count(*) FROM pg_stat_activity
		WHERE query LIKE '%dlock.watch(%' AND pid <> pg_backend_pid() AND state = 'active'}),
		'0', 'an interrupted watch leaves no query running on the server');
}

note '--poll needs the C edition';
{
	my $ran = "$dir/ran-poll";
	($rc, $out, $err) = run_dlock('run', 'polled', '--ttl', '2s', '--poll', '500ms', '--', 'touch', $ran);
	is($rc, 70, '--poll: the server\'s error ends the run (70)');
	like($err, qr/could not acquire lease "polled": ERROR:  queue => true needs the C edition of dlock/,
		'and says why');
	ok(!-e $ran, 'the command was not started');
	is(state_of('polled'), 'none', 'nor the lease taken');
	# the C edition, on this server that does not preload it, answers alike
	$node->safe_psql('postgres', 'CREATE DATABASE c_edition');
	$node->safe_psql('c_edition', 'CREATE EXTENSION dlock');
	($rc, $out, $err) = run_dlock('run', 'polled', '-d', 'dbname=c_edition', '--ttl', '2s', '--poll', '500ms',
		'--', 'touch', $ran);
	like("$rc $err", qr/^70 .*could not acquire lease "polled": ERROR:  queue => true needs dlock in shared_preload_libraries/s,
		'as the C edition without preloading does (55000, 70)');
	ok(!-e $ran, 'which does not start the command either');
}

is(locks_left($node, dbname => 'app'), '', 'no dlock lock is left');
$node->stop;

done_testing();

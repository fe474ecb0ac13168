# The dlock command: runs a command under a lease, gives it the token,
# releases on exit, stops it promptly when the lease is lost, survives a
# server restart, forwards signals, and rejects bad arguments.  A signal
# ends a wait for the lease at once and runs nothing; a signal between fork
# and exec is not lost; the command stops when dlock is killed; --wait rides
# out a server that is down at the start or restarts during the wait.
# watch waits without sending anything, also on a name with several
# holders; --poll keeps its place in the queue against a later acquire(),
# and a --poll too long for the ttl to keep it is refused, and reads a
# refusal alike from a database at 1.1 (a row of NULLs) and at 1.2 (no row).
# A busy run says on stderr who holds the lease and until when (not with
# -q); options may come before or after the command; --version prints
# META.json's version, built in from there; status shows owners where
# dlock.leases does, and values; make install-cli says which dlock runs when
# another dlock is on PATH.  The crontab lines of the README and of the
# manual run under cron's environment after make install and after the
# package alike; status NAME of a name with no lease says so and exits 1; a
# busy run without --wait counts in dlock.stats as a refusal, not a timeout;
# a message that ends with libpq's own newline leaves no empty line.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP;
use File::Copy qw(copy);
use File::Path qw(make_path);

# The command built in this tree; DLOCK_CLI picks another build (a package's
# /usr/bin/dlock, say).  Never whichever dlock comes first on PATH: an older
# copy left in /usr/local/bin would be tested instead of this build.
my $dlock = $ENV{DLOCK_CLI} // "$ENV{TESTDIR}/cli/dlock";
plan skip_all => "the dlock command is not built ($dlock)" unless -x $dlock;
note "testing $dlock";

my $node = PostgreSQL::Test::Cluster->new('cli');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
$ENV{PGHOST} = $node->host;
$ENV{PGPORT} = $node->port;
$ENV{PGDATABASE} = 'postgres';
my $dir = $node->basedir;

sub state_of
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce((SELECT state FROM dlock.leases WHERE name = '$name'), 'none')");
}

sub run_dlock
{
	my @args = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $dlock, @args ], '>', \$out, '2>', \$err);
	return ($? >> 8, $out, $err);
}

# A child that appends a timestamp to a file every 50 ms until stopped
sub ticking_child
{
	my ($file, $seconds) = @_;
	return ('sh', '-c', "end=\$((\$(date +%s) + $seconds)); while [ \$(date +%s) -lt \$end ]; do date +%s.%N >> $file; sleep 0.05; done");
}

# Poll a query every 50 ms until it returns 't', for at most $seconds
sub poll_until
{
	my ($sql, $seconds) = @_;
	my $until = time + $seconds;
	while (time < $until)
	{
		return 1 if $node->safe_psql('postgres', $sql) eq 't';
		sleep 0.05;
	}
	return 0;
}

# dlock.acquire calls of the dlock command that the server is running
my $waiting_sql = q{SELECT count(*) FROM pg_stat_activity
	WHERE pid <> pg_backend_pid() AND state = 'active' AND query LIKE '%FROM dlock.acquire($1%'};

sub last_tick
{
	my ($file) = @_;
	open my $fh, '<', $file or return 0;
	my @lines = <$fh>;
	chomp(my $last = $lines[-1] // '0');
	return $last;
}

note 'bad arguments';
foreach my $args ([], ['run'], [ 'run', 'x' ], [ 'run', 'x', '--' ], [ 'bogus' ],
	[ 'run', 'x', '--bogus', '--', 'true' ], [ 'run', 'x', '--conflict-exit-code=300', '--', 'true' ],
	[ 'release', 'x' ], [ 'status', 'a', 'b' ])
{
	my ($rc) = run_dlock(@$args);
	is($rc, 64, "dlock @$args: usage error 64");
}
my ($rc, $out, $err) = run_dlock('run', 'x', '--ttl', 'soon', '--', 'true');
is($rc, 64, 'a duration PostgreSQL does not accept is a usage error');
like($err, qr/invalid --ttl "soon"/, 'and says which option');
($rc) = run_dlock('run', 'x', '--ttl', '2 days', '--', 'true');
is($rc, 64, 'a ttl the server rejects (over dlock.max_ttl) is a usage error');
my $started = "$dir/short-ttl-started";
($rc, $out, $err) = run_dlock('run', 'short', '--ttl', '3ms', '--', 'touch', $started);
is($rc, 64, 'a ttl that leaves no validity past the first renew is a usage error');
like($err, qr/--ttl "3ms" is too short/, 'and says so');
ok(!-e $started, 'the command was not started');
is(state_of('short'), 'none', 'nor the lease taken');
($rc, $out) = run_dlock('--help');
is($rc, 0, '--help exits 0');
like($out, qr/Exit codes:/, '--help documents the exit codes');

note 'global options before or after the command';
# each global option, before the command, between it and NAME, after NAME
my $nodb = 'dbname=no_such_database';
foreach my $args (
	[ '-d', $nodb, 'run', 'opts', '--', 'true' ], [ 'run', '-d', $nodb, 'opts', '--', 'true' ],
	[ 'run', 'opts', '-d', $nodb, '--', 'true' ], [ "--dbname=$nodb", 'status' ],
	[ 'status', "--dbname=$nodb" ])
{
	($rc, $out, $err) = run_dlock(@$args);
	is($rc, 69, "dlock @$args: the connection option applies (69: no such database)");
}
# libpq's message ends in a newline of its own: no empty line after it
($rc, $out, $err) = run_dlock('status', '-d', $nodb);
like($err, qr/^dlock: could not connect to the database: [^\n]*FATAL:  database "no_such_database" does not exist\n\z/,
	'the server\'s FATAL message is one line on stderr, with no empty line after it');
foreach my $args ([ '-v', 'run', 'opts', '--', 'true' ], [ 'run', '-v', 'opts', '--', 'true' ],
	[ 'run', 'opts', '--verbose', '--', 'true' ])
{
	($rc, $out, $err) = run_dlock(@$args);
	like("$rc $err", qr/^0 .*acquired lease "opts"/s, "dlock @$args: verbose");
}
foreach my $args ([ '-q', '-d', $nodb, 'run', 'opts', '--', 'true' ], [ 'run', '--quiet', '-d', $nodb, 'opts', '--', 'true' ])
{
	($rc, $out, $err) = run_dlock(@$args);
	is("$rc [$err]", '69 []', "dlock @$args: quiet");
}
foreach my $args ([ '--json', 'status' ], [ 'status', '--json' ])
{
	($rc, $out) = run_dlock(@$args);
	like($out, qr/^\[/, "dlock @$args: JSON");
}
foreach my $args ([ '-h', 'run' ], [ 'run', 'x', '--help' ], [ 'status', '-h' ])
{
	($rc, $out) = run_dlock(@$args);
	like("$rc $out", qr/^0 dlock runs a command/, "dlock @$args: help");
}
foreach my $args ([ '--bogus', 'run', 'x', '--', 'true' ], [ 'run', '--bogus', 'x', '--', 'true' ],
	[ 'run', 'x', '--bogus', '--', 'true' ], [ '-Z', 'status' ], [ 'status', '-Z' ])
{
	($rc, $out, $err) = run_dlock(@$args);
	like("$rc $err", qr/^64 .*Try "dlock --help" for more information\.\n\z/s,
		"dlock @$args: an unknown option is a usage error, 64");
}
($rc, $out) = run_dlock('-q', 'run', 'opts', '--', 'echo', '-v', '--bogus');
is("$rc $out", "0 -v --bogus\n", 'after "--" the options are the command\'s');
($rc, $out) = run_dlock('run', 'opts', '-q', 'echo', '-v', '--bogus');
is("$rc $out", "0 -v --bogus\n", 'and so they are after a COMMAND given without "--"');

note '--version';
{
	my $meta = JSON::PP->new->decode(PostgreSQL::Test::Utils::slurp_file("$ENV{TESTDIR}/META.json"));
	my ($default_version) = PostgreSQL::Test::Utils::slurp_file("$ENV{TESTDIR}/dlock.control")
	  =~ /^default_version\s*=\s*'([^']+)'/m;
	like($meta->{version}, qr/^\Q$default_version\E\.\d+$/,
		"META.json's version is dlock.control's default_version with a patch level");
	foreach my $args ([ '--version' ], [ 'run', '--version' ], [ 'status', 'x', '--version' ])
	{
		($rc, $out) = run_dlock(@$args);
		is("$rc $out", "0 dlock $meta->{version}\n", "dlock @$args prints META.json's version");
	}
}

# make TARGET in directory DIR with PATH; returns (exit status, stderr).
# The make that runs this test passes its own settings down in MAKEFLAGS:
# they are not for this one.
sub run_make
{
	my ($dir, $path, @args) = @_;
	local %ENV = (%ENV, PATH => $path);
	delete @ENV{qw(MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES)};
	my ($mout, $merr) = ('', '');
	IPC::Run::run([ 'make', '-s', '-C', $dir, 'PG_CONFIG=' . ($ENV{PG_CONFIG} // 'pg_config'), @args ],
		'>', \$mout, '2>', \$merr);
	return ($? >> 8, $merr);
}

SKIP:
{
	skip 'no source tree with the Makefile', 8 unless -f "$ENV{TESTDIR}/Makefile" && -x "$ENV{TESTDIR}/cli/dlock";

	note 'the build takes the version from META.json, checked against dlock.control';
	my $copy = "$dir/version-build";
	make_path("$copy/cli", "$copy/scripts");
	copy("$ENV{TESTDIR}/$_", "$copy/$_") or die "copy $_: $!"
	  for 'Makefile', 'dlock.control', 'scripts/dlock-on-path.sh',
	  map { s{^\Q$ENV{TESTDIR}\E/}{}r } glob("$ENV{TESTDIR}/cli/*.[ch]");
	my $meta_text = PostgreSQL::Test::Utils::slurp_file("$ENV{TESTDIR}/META.json");
	my $control_version = (PostgreSQL::Test::Utils::slurp_file("$copy/dlock.control")
		  =~ /^default_version\s*=\s*'([^']+)'/m)[0];
	my $with_version = sub {
		my ($v) = @_;
		my $m = JSON::PP->new->decode($meta_text);
		$m->{version} = $m->{provides}{dlock}{version} = $v;
		open my $fh, '>', "$copy/META.json" or die $!;
		print $fh JSON::PP->new->pretty->encode($m);
		close $fh;
	};
	$with_version->("$control_version.77");
	my ($mrc, $merr) = run_make($copy, $ENV{PATH}, 'cli/dlock');
	is($mrc, 0, 'the command builds from a tree whose META.json says ' . "$control_version.77") or diag $merr;
	($rc, $out) = ('', '');
	IPC::Run::run([ "$copy/cli/dlock", '--version' ], '>', \$out);
	is($out, "dlock $control_version.77\n", 'and prints that version: META.json is its one source');
	unlink "$copy/cli/dlock";
	$with_version->('9.9.0');
	($mrc, $merr) = run_make($copy, $ENV{PATH}, 'cli/dlock');
	isnt($mrc, 0, "a META.json version that is not dlock.control's default_version.N fails the build");
	like($merr, qr/META.json's version "9\.9\.0" is not dlock.control's default_version "\Q$control_version\E"/,
		'and says why');
	ok(!-e "$copy/cli/dlock", 'and builds no command');

	note 'make install-cli says which dlock runs when another one is on PATH';
	# a packaged dlock of an older version, and make install-cli's CLI_BINDIR
	make_path("$dir/pkg", "$dir/local");
	open my $fake, '>', "$dir/pkg/dlock" or die $!;
	print $fake "#!/bin/sh\necho 'dlock 1.1.9'\n";
	close $fake;
	chmod 0755, "$dir/pkg/dlock";
	my $system = '/usr/bin:/bin';
	($mrc, $merr) = run_make($ENV{TESTDIR}, "$dir/local:$dir/pkg:$system", 'install-cli', "CLI_BINDIR=$dir/local");
	like($merr, qr/NOTE: \Q$dir\E\/local\/dlock comes first on PATH:.*shadows.*-> \Q$dir\E\/local\/dlock: dlock \S+\n.*\Q$dir\E\/pkg\/dlock: dlock 1\.1\.9\n/s,
		'installed ahead of another dlock on PATH: it says so, and names the one it shadows')
	  or diag $merr;
	($mrc, $merr) = run_make($ENV{TESTDIR}, "$dir/pkg:$dir/local:$system", 'install-cli', "CLI_BINDIR=$dir/local");
	like($merr, qr/WARNING: "dlock" on PATH runs \Q$dir\E\/pkg\/dlock,\s+not \Q$dir\E\/local\/dlock/,
		'installed behind another dlock on PATH: it warns that "dlock" runs the other one')
	  or diag $merr;
	($mrc, $merr) = run_make($ENV{TESTDIR}, "$dir/pkg:$system", 'install-cli',
		"CLI_BINDIR=$dir/staged", "DESTDIR=$dir/stage");
	is("$mrc [$merr]", '0 []', 'staged for a package (DESTDIR): nothing to say');
}

# The crontab lines of the README and the manual: the lines of their ```sh
# blocks that start with a schedule of five fields and run dlock
sub crontab_lines
{
	my ($file) = @_;
	my $text = PostgreSQL::Test::Utils::slurp_file($file);
	my @lines;
	while ($text =~ /^```sh\n(.*?)^```/msg)
	{
		push @lines, grep { /^(?:\S+\s+){5}.*\bdlock\b/ } split /\n/, $1;
	}
	return @lines;
}

# Run a crontab line as Debian's cron runs it, on a system whose files are
# under $root: the command part through /bin/sh -c, with nothing of this
# environment but cron's own (SHELL, HOME, LOGNAME, PATH=/usr/bin:/bin).
# The line's /usr/local/bin, /usr/bin and /bin, and cron's PATH, are taken
# to be $root's, so that a dlock of this machine is never found instead;
# the line's server is the test's.  Returns (exit status, stdout, stderr).
sub run_as_cron
{
	my ($root, $line) = @_;
	my $command = (split ' ', $line, 6)[5];
	my $under_root = sub { $_[0] =~ s{(?<![\w./-])(/usr/local/bin|/usr/bin|/bin)(?=[/:\s]|\z)}{$root$1}gr };
	$command = $under_root->($command);
	$command =~ s/\bPGHOST=\S+/'PGHOST=' . $node->host . ' PGPORT=' . $node->port/e
	  or die "no PGHOST= in the crontab line: $line";
	$command =~ s/\bPGDATABASE=\S+/PGDATABASE=postgres/ or die "no PGDATABASE= in the crontab line: $line";
	my ($cout, $cerr) = ('', '');
	IPC::Run::run([ 'env', '-i', 'SHELL=/bin/sh', "HOME=$dir", 'LOGNAME=' . getpwuid($<),
			'PATH=' . $under_root->('/usr/bin:/bin'), '/bin/sh', '-c', $command ],
		'>', \$cout, '2>', \$cerr);
	return ($? >> 8, $cout, $cerr);
}

SKIP:
{
	skip 'no source tree with the Makefile', 12 unless -f "$ENV{TESTDIR}/Makefile" && -x "$ENV{TESTDIR}/cli/dlock";

	note 'the documented crontab lines, run as cron runs them, after make install and after the package';
	my @documented = map { my $f = $_; map { [ $f, $_ ] } crontab_lines("$ENV{TESTDIR}/$f") }
	  'README.md', 'docs/dlock-cli.md';
	is(join(' ', sort map { $_->[0] } @documented), 'README.md docs/dlock-cli.md',
		'the README and the manual each give one crontab line');

	# make install with its defaults, into a directory; and the package's
	# install, as debian/rules makes it
	my %roots = ('make install' => "$dir/root-make-install", 'the package' => "$dir/root-package");
	my ($mrc, $merr);
	{
		local %ENV = %ENV;
		delete $ENV{CLI_BINDIR};
		($mrc, $merr) = run_make($ENV{TESTDIR}, $ENV{PATH}, 'install', "DESTDIR=$roots{'make install'}");
	}
	is($mrc, 0, 'make install into a directory') or diag $merr;
	ok(-x "$roots{'make install'}/usr/local/bin/dlock" && !-e "$roots{'make install'}/usr/bin/dlock",
		'make install puts dlock in /usr/local/bin, not in /usr/bin');
	($mrc, $merr) = run_make($ENV{TESTDIR}, $ENV{PATH}, 'install-cli', 'CLI_BINDIR=/usr/bin',
		"DESTDIR=$roots{'the package'}");
	is($mrc, 0, 'the package\'s install (CLI_BINDIR=/usr/bin) into a directory') or diag $merr;

	# the line the manual gave before, which named the package's dlock
	my $old = '*/5 * * * *  PGHOST=db.internal PGDATABASE=app /usr/bin/dlock run sync-invoices --ttl 1min -q -- /usr/local/bin/sync-invoices';

	# the jobs the lines run, in each root: they print the lease they run under
	foreach my $root (values %roots)
	{
		foreach my $job (map { m{ -- /usr/local/bin/(\S+)} } (map { $_->[1] } @documented), $old)
		{
			make_path("$root/usr/local/bin");
			open my $fh, '>', "$root/usr/local/bin/$job" or die $!;
			print $fh "#!/bin/sh\necho \"\$DLOCK_NAME \$DLOCK_TOKEN\"\n";
			close $fh;
			chmod 0755, "$root/usr/local/bin/$job";
		}
	}

	foreach my $doc (@documented)
	{
		my ($file, $line) = @$doc;
		my ($lease) = $line =~ /\bdlock run (\S+)/;
		foreach my $install (sort keys %roots)
		{
			($rc, $out, $err) = run_as_cron($roots{$install}, $line);
			like("$rc $out", qr/^0 \Q$lease\E \d+\n\z/,
				"$file\'s crontab line, after $install: the job runs under the lease")
			  or diag "$line\n$err";
		}
	}

	# the old line: cron does not find its dlock after make install; nor a
	# bare "dlock" on cron's own PATH
	($rc, $out, $err) = run_as_cron($roots{'the package'}, $old);
	like("$rc $out", qr/^0 sync-invoices \d+\n\z/, 'a line naming /usr/bin/dlock runs after the package');
	($rc, $out, $err) = run_as_cron($roots{'make install'}, $old);
	is("$rc [$out]", '127 []', 'but not after make install: the shell does not find the command (127)');
	like($err, qr{/usr/bin/dlock: .*not found}, 'and says so');
	(my $bare = $old) =~ s{/usr/bin/dlock}{dlock};
	($rc, $out, $err) = run_as_cron($roots{'make install'}, $bare);
	is("$rc [$out]", '127 []', 'nor does "dlock" without a PATH of its own: cron\'s PATH is /usr/bin:/bin');
}

note 'the child sees the lease, and it is released on exit';
($rc, $out) = run_dlock('run', 'job', '--owner', 'cron-1', '--',
	'sh', '-c', 'echo "$DLOCK_NAME $DLOCK_TOKEN $DLOCK_OWNER $DLOCK_EXPIRES_AT"; exit 3');
is($rc, 3, 'dlock exits with the child\'s status');
my ($name, $token, $owner) = split / /, $out;
is("$name $owner", 'job cron-1', 'the child gets DLOCK_NAME and DLOCK_OWNER');
is($token, $node->safe_psql('postgres', q{SELECT token FROM dlock.leases WHERE name = 'job'}),
	'the child gets the lease\'s token in DLOCK_TOKEN');
is(state_of('job'), 'released', 'the lease is released when the child exits');
($rc) = run_dlock('run', 'job', '--', 'sh', '-c', 'kill -KILL $$');
is($rc, 128 + 9, 'a child killed by a signal gives 128 + the signal');

note 'two runs of one name';
my $first = IPC::Run::start([ $dlock, 'run', 'shared', '--owner', 'first-run', '--', 'sleep', '2' ]);
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'shared' AND state = 'live'})
  or die 'first run did not start';
my $expires = $node->safe_psql('postgres',
	q{SELECT to_char(expires_at, 'YYYY-MM-DD HH24:MI:SS.MSOF') FROM dlock.leases WHERE name = 'shared' AND state = 'live'});
($rc, $out, $err) = run_dlock('run', 'shared', '--', 'true');
is($rc, 75, 'the second run gets the conflict exit code');
like($err, qr/^dlock: lease "shared" is busy: held by owner first-run of role \S+ until \Q$expires\E \(in [0-9.]+ s\)\n\z/,
	'and says on stderr, in one line, which lease is held, by which owner and until when');
($rc, $out, $err) = run_dlock('run', 'shared', '-q', '--', 'true');
is("$rc [$err]", '75 []', 'with -q: the same exit code, and nothing on stderr');
($rc, $out, $err) = run_dlock('run', 'shared', '--conflict-exit-code', '0', '--', 'false');
is($rc, 0, '--conflict-exit-code sets it');
like($err, qr/lease "shared" is busy: held by owner first-run /, 'and the run still says why');
my $t0 = time;
($rc, $out) = run_dlock('run', 'shared', '--wait', '30s', '--', 'echo', 'second');
is("$rc $out", "0 second\n", 'with --wait the second run waits and then runs');
$first->finish;
is($first->full_result >> 8, 0, 'the first run ended normally');

note 'shared runs and a semaphore';
my @readers = map { IPC::Run::start([ $dlock, 'run', 'readers', '--shared', '--', 'sleep', '3' ]) } 1 .. 2;
$node->poll_query_until('postgres', q{SELECT count(*) = 2 FROM dlock.leases
		WHERE name = 'readers' AND state = 'live' AND shared})
  or die 'shared runs did not start';
($rc, $out, $err) = run_dlock('run', 'readers', '--', 'true');
is($rc, 75, 'an exclusive run is refused while shared runs hold the name');
like($err, qr/^dlock: lease "readers" is busy: held by 2 holders: owner [0-9a-f]{32} of role \S+ until [^;]+; owner [0-9a-f]{32} of role \S+ until [^;]+\n\z/,
	'and names both holders');
($rc, $out) = run_dlock('run', 'readers', '--shared', '--', 'sh', '-c', 'echo $DLOCK_TOKEN');
like($out, qr/^\d+$/, 'a third shared run runs alongside them, with its own token');
($rc, $out) = run_dlock('status', 'readers');
like($out, qr/readers\s+\d+\s+shared\s/, 'status shows the kind');
($rc, $out) = run_dlock('run', 'readers', '--wait', '30s', '--', 'echo', 'writer');
is("$rc $out", "0 writer\n", 'an exclusive run with --wait runs once the shared runs end');
$_->finish for @readers;
# A semaphore's first permits are granted one at a time, and a run without
# --wait is refused while another is being granted: the second run starts
# once the first holds its permit
my @permits = (IPC::Run::start([ $dlock, 'run', 'permits', '--max-holders', '2', '--', 'sleep', '3' ]));
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'permits' AND state = 'live'})
  or die 'the first semaphore run did not start';
push @permits, IPC::Run::start([ $dlock, 'run', 'permits', '--max-holders', '2', '--', 'sleep', '3' ]);
$node->poll_query_until('postgres', q{SELECT count(*) = 2 FROM dlock.leases
		WHERE name = 'permits' AND state = 'live' AND max_holders = 2})
  or die 'semaphore runs did not start';
($rc) = run_dlock('run', 'permits', '--max-holders', '2', '--', 'true');
is($rc, 75, 'a third run of a semaphore of 2 gets the conflict exit code');
($rc, $out, $err) = run_dlock('run', 'permits', '--max-holders', '3', '--', 'true');
is($rc, 64, 'a run with another max_holders is refused as bad arguments');
like($err, qr/max_holders = 2/, '... naming the live limit');
($rc, $out) = run_dlock('run', 'permits', '--max-holders', '2', '--wait', '30s', '--', 'echo', 'third');
is("$rc $out", "0 third\n", 'with --wait it runs once a permit is free');
$_->finish for @permits;

note 'a signal ends a wait for the lease at once';
foreach my $sig ([ 'TERM', 15 ], [ 'INT', 2 ])
{
	my ($signame, $signo) = @$sig;
	my $ran = "$dir/ran-after-$signame";
	$node->safe_psql('postgres', q{SELECT dlock.acquire('held', '1h', 'holder')});
	my $w = IPC::Run::start([ $dlock, 'run', 'held', '--wait', '5s', '--', 'touch', $ran ],
		'2>', \my $wait_err);
	poll_until("SELECT ($waiting_sql) = 1", 10) or die 'run did not wait';
	my $sent = time;
	$w->signal($signame);
	$w->pump_nb while $w->pumpable && time < $sent + 2 && sleep 0.01;
	my $took = time - $sent;
	is($node->safe_psql('postgres', $waiting_sql), '0', "SIG$signame: no acquire is left waiting on the server");
	is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock.locks WHERE kind = 'queue'}), '0',
		"SIG$signame: and nothing in the queue");
	# the lease comes now: a run that is still waiting would take it
	$node->safe_psql('postgres', q{SELECT dlock.release('held', 'holder')});
	$w->finish;
	is($w->full_result >> 8, 128 + $signo, "SIG$signame while waiting: dlock exits with 128 + $signo");
	cmp_ok($took, '<', 1.0, "SIG$signame: at once");
	note sprintf 'SIG%s ended the wait in %.3f s', $signame, $took;
	ok(!-e $ran, "SIG$signame: the command was not run when the lease came");
	is($node->safe_psql('postgres', q{SELECT EXISTS (SELECT FROM dlock.try_acquire('held', '1h', 'other'))}), 't',
		"SIG$signame: the released name is grantable at once: no waiter kept its place");
	$node->safe_psql('postgres', q{SELECT dlock.release('held', 'other')});
}

# A fork() that makes the child wait SLOW_FORK_SECONDS before it returns,
# so that signals can be sent into the window between fork and exec
my $slowfork = "$dir/slowfork.so";
open my $src, '>', "$dir/slowfork.c" or die $!;
print $src <<'EOC';
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

pid_t
fork(void)
{
	pid_t		(*real_fork) (void) = (pid_t (*) (void)) dlsym(RTLD_NEXT, "fork");
	pid_t		pid = real_fork();
	const char *delay = getenv("SLOW_FORK_SECONDS");

	if (pid == 0 && delay != NULL)
	{
		struct timespec end;
		long		ms = (long) (atof(delay) * 1000);

		unsetenv("SLOW_FORK_SECONDS");
		unsetenv("LD_PRELOAD");
		clock_gettime(CLOCK_MONOTONIC, &end);
		end.tv_sec += ms / 1000 + (end.tv_nsec + (ms % 1000) * 1000000) / 1000000000;
		end.tv_nsec = (end.tv_nsec + (ms % 1000) * 1000000) % 1000000000;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL) != 0)
			;
	}
	return pid;
}
EOC
close $src;
my $have_slowfork = system($ENV{CC} // 'cc', '-shared', '-fPIC', '-o', $slowfork, "$dir/slowfork.c", '-ldl') == 0;

# Start a run whose child lingers 1.5 s between fork and exec
sub start_slow_fork
{
	my ($name, @command) = @_;
	local $ENV{LD_PRELOAD} = $slowfork;
	local $ENV{SLOW_FORK_SECONDS} = '1.5';
	my $run = IPC::Run::start([ $dlock, 'run', $name, '--', @command ]);
	$node->poll_query_until('postgres',
		qq{SELECT count(*) = 1 FROM dlock.leases WHERE name = '$name' AND state = 'live'})
	  or die 'run did not start';
	sleep 0.3;
	return $run;
}

SKIP:
{
	skip 'no C compiler for the fork() shim', 4 unless $have_slowfork;

	note 'a signal between fork and exec reaches the command';
	my $ran = "$dir/ran-after-fork";
	my $w = start_slow_fork('window', 'touch', $ran);
	$w->signal('TERM');
	$w->finish;
	is($w->full_result >> 8, 128 + 15, 'SIGTERM between fork and exec: the child dies of it, 128 + 15');
	ok(!-e $ran, 'and the command did not run');
	is(state_of('window'), 'released', 'the lease is released');

	note 'a child whose dlock died before exec does not start';
	$ran = "$dir/ran-orphaned";
	$w = start_slow_fork('orphaned', 'touch', $ran);
	$w->signal('KILL');
	$w->finish;
	sleep 1.7;
	ok(!-e $ran, 'dlock killed between fork and exec: the command did not run');
}

note 'the command stops when dlock is killed';
my $orphan_ticks = "$dir/ticks-orphan";
my $orphan = IPC::Run::start([ $dlock, 'run', 'orphan', '--ttl', '5s', '--', ticking_child($orphan_ticks, 10) ]);
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'orphan' AND state = 'live'})
  or die 'run did not start';
sleep 0.3;
my $orphaned_at = time;
$orphan->signal('KILL');
$orphan->finish;
sleep 1.5;
my $orphan_lag = last_tick($orphan_ticks) - $orphaned_at;
cmp_ok($orphan_lag, '<', 1.0, 'the child stopped within a second of the SIGKILL of dlock');
note sprintf 'last tick %.3f s after the SIGKILL', $orphan_lag;

note 'force-release stops the child within a second';
my $ticks = "$dir/ticks-force";
my $h = IPC::Run::start([ $dlock, 'run', 'forced', '--ttl', '2s', '--', ticking_child($ticks, 30) ],
	'2>', \my $force_err);
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'forced' AND state = 'live'})
  or die 'run did not start';
sleep 0.3;
my $forced_at = time;
$node->safe_psql('postgres', q{SELECT dlock.force_release('forced')});
$h->finish;
is($h->full_result >> 8, 79, 'dlock exits with 79 when the lease is lost');
cmp_ok(last_tick($ticks) - $forced_at, '<', 1.0, 'the child stopped within a second of the force-release');
like($force_err, qr/lease "forced" lost: the server says the lease is gone/, 'and says why on stderr');

note 'a server-side expiry stops the child within a second';
$ticks = "$dir/ticks-expiry";
$h = IPC::Run::start([ $dlock, 'run', 'expiring', '--ttl', '2s', '--', ticking_child($ticks, 30) ],
	'2>', \my $expiry_err);
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'expiring' AND state = 'live'})
  or die 'run did not start';
sleep 0.3;
my $expired_at = time;
$node->safe_psql('postgres', q{UPDATE dlock.lease_state SET expires_at = clock_timestamp() WHERE name = 'expiring'});
$h->finish;
is($h->full_result >> 8, 79, 'an expired lease is a lost lease');
cmp_ok(last_tick($ticks) - $expired_at, '<', 1.0, 'the child stopped within a second of the expiry');

note 'a server restart during a run';
$ticks = "$dir/ticks-restart";
$h = IPC::Run::start([ $dlock, 'run', 'restart', '--ttl', '6s', '-v', '--', ticking_child($ticks, 5) ],
	'2>', \my $restart_err);
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'restart' AND state = 'live'})
  or die 'run did not start';
$node->restart;
$h->finish;
is($h->full_result >> 8, 0, 'the child was kept and finished normally across the restart');
like($restart_err, qr/reconnected/, 'the client reconnected to renew');
cmp_ok(last_tick($ticks), '>', time - 1.5, 'the child ran to its end');
is(state_of('restart'), 'released', 'the lease was released after the restart');

note 'run -v: a FATAL message while renewing is one line, with no empty line after it';
{
	my ($vout, $verr) = ('', '');
	local $ENV{PGAPPNAME} = 'dlock-terminated';
	my $run = IPC::Run::start([ $dlock, 'run', 'terminated', '--ttl', '3s', '-v', '--', 'sleep', '2' ],
		'>', \$vout, '2>', \$verr);
	$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'terminated' AND state = 'live'})
	  or die 'run did not start';
	# before the first renew, at ttl/3
	$node->safe_psql('postgres',
		q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name = 'dlock-terminated' AND pid <> pg_backend_pid()});
	$run->finish;
	is($run->full_result >> 8, 0, 'the run rode out its terminated connection');
	is(scalar(grep { $_ eq '' } split /\n/, $verr), 0, 'stderr has no empty line') or diag $verr;
	my $lines = join '',
	  qr/dlock: acquired lease "terminated" with token \d+, owner [0-9a-f]{32}\n/,
	  # 13's libpq reports the closed connection, not the FATAL before it
	  qr/dlock: renew failed: (?:FATAL:  terminating connection due to administrator command\n|server closed the connection unexpectedly\n(?:\t[^\n]*\n)*)/,
	  qr/dlock: reconnected\n/,
	  qr/(?:dlock: renewed lease "terminated" until [^\n]+\n)+/,
	  qr/dlock: released lease "terminated"\n/;
	like($verr, qr/^$lines\z/,
		'stderr is exactly: acquired, renew failed (FATAL), reconnected, renewed, released') or diag $verr;
}

note 'a renewal whose commit was cut does not extend the lease';
{
	# The renew's commit waits for a synchronous standby that never comes;
	# its backend is terminated there: the row came back before the commit,
	# which may not be durable, so the run must count the renewal as failed
	my ($vout, $verr) = ('', '');
	# commits wait for synchronous standbys only where WAL senders may run
	$node->append_conf('postgresql.conf', "wal_level = replica\nmax_wal_senders = 2\n");
	$node->restart;
	local $ENV{PGAPPNAME} = 'dlock-cut-commit';
	my $run = IPC::Run::start([ $dlock, 'run', 'cut-commit', '--ttl', '3s', '-v', '--', 'sleep', '4' ],
		'>', \$vout, '2>', \$verr);
	$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'cut-commit' AND state = 'live'})
	  or die 'run did not start';
	$node->safe_psql('postgres', q{ALTER SYSTEM SET synchronous_standby_names = 'ghost'; SELECT pg_reload_conf()});
	$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
			WHERE application_name = 'dlock-cut-commit' AND wait_event = 'SyncRep'})
	  or die 'the renew did not wait for the synchronous standby';
	# terminated first: a reload that empties synchronous_standby_names
	# releases the wait, and the renew would then commit normally
	$node->safe_psql('postgres', q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		 WHERE application_name = 'dlock-cut-commit' AND wait_event = 'SyncRep'});
	$node->safe_psql('postgres', q{ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf()});
	$run->finish;
	like($verr, qr/might not have been replicated[^\n]*\ndlock: renew failed: /,
		'the renewal whose commit was cut is counted as failed') or diag $verr;
	my @renewed_before_cut = ($verr =~ /renewed lease "cut-commit".*\n(?=.*renew failed)/sg);
	is(scalar(@renewed_before_cut), 0, 'and was not reported renewed first') or diag $verr;
}

note "a server that does not answer: the command stops by the lease's deadline";
{
	# The backend and the postmaster are stopped: the renew gets no answer,
	# and a cancel would wait for them.  The command must be stopped by
	# the lease's validity deadline all the same (the cancel waits after).
	local $ENV{PGAPPNAME} = 'dlock-stopped-server';
	my $ticks = "$dir/ticks-stopped-server";
	my $run = IPC::Run::start([ $dlock, 'run', 'stopped-server', '--ttl', '3s', '--',
			ticking_child($ticks, 30) ], '2>', \my $stopped_err);
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'stopped-server' AND state = 'live'})
	  or die 'run did not start';
	my $granted = time;
	my $backend = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity
		   WHERE application_name = 'dlock-stopped-server' AND pid <> pg_backend_pid()});
	my ($postmaster) = split /\n/, slurp_file($node->data_dir . '/postmaster.pid');
	like("$backend $postmaster", qr/^\d+ \d+$/, 'the run\'s backend and the postmaster, to stop')
	  or die 'no pids';
	kill 'STOP', $backend, $postmaster;
	sleep 5;
	my $last = last_tick($ticks);
	kill 'CONT', $postmaster, $backend;
	$run->finish;
	cmp_ok($last - $granted, '<', 3.0,
		'the command stopped within the lease\'s ttl of 3 s, though the server answered nothing')
	  or diag $stopped_err;
	is($run->full_result >> 8, 79, 'and the run ended as a lost lease');
}

note 'signals are forwarded';
my $trap = "$dir/trapped";
$h = IPC::Run::start([ $dlock, 'run', 'signals', '--', 'sh', '-c',
	"trap 'echo term > $trap; exit 7' TERM; sleep 20 & wait" ]);
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'signals' AND state = 'live'})
  or die 'run did not start';
sleep 0.3;
$h->signal('TERM');
$h->finish;
is($h->full_result >> 8, 7, 'SIGTERM reaches the child, and dlock exits with its status');
ok(-e $trap, 'the child handled SIGTERM');
is(state_of('signals'), 'released', 'the lease is released afterwards');

note 'a crashed dlock';
$h = IPC::Run::start([ $dlock, 'run', 'crashed', '--ttl', '2s', '--', 'sleep', '30' ]);
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'crashed' AND state = 'live'})
  or die 'run did not start';
$h->signal('KILL');
$h->finish;
# the server's clock after the crash: no renew came later
my $after_crash = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
is(state_of('crashed'), 'live', 'the lease of a crashed dlock stays until its ttl');
ok(poll_until(q{SELECT state = 'expired' FROM dlock.leases WHERE name = 'crashed'}, 10),
	'then it expires');
is($node->safe_psql('postgres', qq{SELECT expires_at <= '$after_crash'::timestamptz + interval '2s'
		FROM dlock.leases WHERE name = 'crashed'}),
	't', 'and not longer: at its ttl from the last renew before the crash');
$h = IPC::Run::start([ $dlock, 'run', 'bound', '--ttl', '1h', '--session-bound', '--', 'sleep', '30' ]);
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.leases WHERE name = 'bound' AND state = 'live'})
  or die 'run did not start';
$h->signal('KILL');
$h->finish;
ok($node->poll_query_until('postgres', q{SELECT state = 'session_ended' FROM dlock.leases WHERE name = 'bound'}),
	'with --session-bound, the lease ends with the crashed dlock');

note '--wait rides out a server that is down or restarts';
$node->stop;
($rc, $out, $err) = run_dlock('run', 'down', '--', 'true');
is($rc, 69, 'without --wait, a server that is down gives 69');
like($err, qr/could not connect to the database/, 'and says so');
$t0 = time;
($rc) = run_dlock('run', 'down', '--wait', '1s', '--', 'true');
my $waited = time - $t0;
is($rc, 69, 'with --wait 1s, 69 once the wait ran out');
cmp_ok($waited, '>=', 0.9, 'after retrying for all of the wait');
cmp_ok($waited, '<', 3, 'and not much longer');
$h = IPC::Run::start([ $dlock, 'run', 'down', '--wait', '20s', '--', 'true' ], '2>', \my $down_err);
sleep 0.5;
$t0 = time;
$h->signal('TERM');
$h->finish;
is($h->full_result >> 8, 128 + 15, 'SIGTERM while retrying the connection: 128 + 15');
cmp_ok(time - $t0, '<', 1.0, 'at once');
$h = IPC::Run::start([ $dlock, 'run', 'down', '--wait', '20s', '--', 'echo', 'up' ],
	'>', \my $up_out, '2>', \my $up_err);
sleep 2;
$node->start;
my $up_at = time;
$h->finish;
is($h->full_result >> 8, 0, 'a run started while the server was down gets the lease once it is up')
  or diag $up_err;
is($up_out, "up\n", 'and runs the command');
note sprintf 'the command ran %.2f s after the server was up', time - $up_at;

$node->safe_psql('postgres', q{SELECT dlock.acquire('restarted', '1h', 'holder')});
$h = IPC::Run::start([ $dlock, 'run', 'restarted', '--wait', '30s', '-v', '--', 'echo', 'got it' ],
	'>', \my $rs_out, '2>', \my $rs_err);
poll_until("SELECT ($waiting_sql) = 1", 10) or die 'run did not wait';
$node->restart;
ok(poll_until("SELECT ($waiting_sql) = 1", 10), 'after a server restart, the run waits again');
$node->safe_psql('postgres', q{SELECT dlock.release('restarted', 'holder')});
$h->finish;
is($h->full_result >> 8, 0, 'and gets the lease when the holder releases it') or diag $rs_err;
is($rs_out, "got it\n", 'and runs the command');
like($rs_err, qr/reconnected/, 'having reconnected');

note 'status, release, force-release';
$node->safe_psql('postgres', q{SELECT dlock.acquire('manual', '1h', 'me', value => 'db1:5432')});
($rc, $out) = run_dlock('status');
like($out, qr/^manual\s+\d+\s+exclusive\s+\S+\s+live\s/m, 'status lists live leases');
like($out, qr/^manual\s.*\s[0-9.]+s\s+me\s+db1:5432$/m, 'with the owner and the value last');
($rc, $out) = run_dlock('status', '--json');
like($out, qr/"name": "manual", "token": \d+, "holder_role": "[^"]+", "state": "live"/, 'status --json');
my ($manual) = grep { $_->{name} eq 'manual' } @{ decode_json($out) };
is(join(' ', map { $_ // 'null' } $manual->{owner}, $manual->{value}), 'me db1:5432', 'status --json has owner and value');
($rc) = run_dlock('release', 'manual', '--owner', 'someone-else');
is($rc, 1, 'release by another owner exits 1');
($rc) = run_dlock('release', 'manual', '--owner', 'me');
is($rc, 0, 'release by the owner exits 0');
$node->safe_psql('postgres', q{SELECT dlock.acquire('manual', '1h', 'me')});
($rc) = run_dlock('force-release', 'manual');
is($rc, 0, 'force-release exits 0');
is(state_of('manual'), 'force_released', 'and ended the lease');
($rc, $out, $err) = run_dlock('status', 'manual');
like("$rc $out", qr/^0 .*\nmanual\s+\d+\s+exclusive\s+\S+\s+force_released\s/s,
	'status of a name whose leases have ended shows them, and exits 0');
is($err, '', 'and says nothing on stderr');
($rc, $out, $err) = run_dlock('status', 'never-taken');
is($rc, 1, 'status of a name with no lease exits 1');
is($err, "dlock: no lease named \"never-taken\"\n", 'and says so on stderr');
is(scalar(() = $out =~ /\n/g), 1, 'with the header alone on stdout');
($rc, $out, $err) = run_dlock('status', 'never-taken', '--json');
is("$rc $out", "1 []\n", 'with --json: exit 1 and an empty array');
($rc, $out, $err) = run_dlock('status', 'never-taken', '-q');
is("$rc [$err]", '1 []', 'with -q: exit 1, and nothing on stderr');

note 'status and a busy run show the owner to the roles dlock.leases shows it to';
{
	$node->safe_psql('postgres', q{CREATE ROLE regress_cli_alice LOGIN; CREATE ROLE regress_cli_bob LOGIN});
	# alice's lease, under an owner that the server makes up
	$node->safe_psql('postgres',
		q{SET ROLE regress_cli_alice; SELECT dlock.acquire('alices', '1h', value => 'a-value')});
	my $owner = $node->safe_psql('postgres', q{SELECT owner FROM dlock.leases WHERE name = 'alices'});
	my $as = sub {
		my ($role, @args) = @_;
		local $ENV{PGUSER} = $role;
		return run_dlock(@args);
	};
	($rc, $out) = $as->('regress_cli_bob', 'status', 'alices', '--json');
	my ($seen) = @{ decode_json($out) };
	ok(exists $seen->{owner} && !defined $seen->{owner},
		'another role\'s status: owner null, as dlock.leases shows it to that role');
	is($seen->{value}, 'a-value', 'the value, which is for everyone');
	($rc, $out) = $as->('regress_cli_bob', 'status', 'alices');
	like($out, qr/^alices\s.*\slive\s.*\s-\s+a-value$/m, 'and "-" in the text');
	($rc, $out, $err) = $as->('regress_cli_bob', 'run', 'alices', '--', 'true');
	like("$rc $err", qr/^75 dlock: lease "alices" is busy: held by a holder of role regress_cli_alice until \S+ \S+ \(in [0-9.]+ s\)\n\z/,
		'another role\'s busy run names the holder\'s role, not its owner');
	($rc, $out) = $as->('regress_cli_alice', 'status', 'alices', '--json');
	($seen) = @{ decode_json($out) };
	is($seen->{owner} // 'null', $owner, 'the holder\'s role sees the owner in status');
	($rc, $out, $err) = $as->('regress_cli_alice', 'run', 'alices', '--', 'true');
	like($err, qr/^dlock: lease "alices" is busy: held by owner \Q$owner\E of role regress_cli_alice /,
		'and in a busy run');
	($rc) = $as->('regress_cli_alice', 'release', 'alices', '--owner', $seen->{owner} // '');
	is($rc, 0, 'so it can release the lease with the owner that status shows');
	is(state_of('alices'), 'released', 'which ends it');

	$node->safe_psql('postgres', q{SELECT dlock.acquire('delayed', '1h', 'gone', lock_delay => '1h')});
	$node->safe_psql('postgres', q{SELECT dlock.force_release('delayed')});
	($rc, $out, $err) = run_dlock('run', 'delayed', '--', 'true');
	like("$rc $err", qr/^75 dlock: lease "delayed" is busy: its last lease \(owner gone\) was force-released, and its lock-delay runs until \S+ \S+ \(in [0-9.]+ s\)\n\z/,
		'a run refused during a lock-delay says until when it runs');
	$node->safe_psql('postgres', q{SELECT dlock.acquire('newline', '1h', E'two\nlines')});
	($rc, $out, $err) = run_dlock('run', 'newline', '--', 'true');
	like($err, qr/^dlock: lease "newline" is busy: held by owner two\?lines of role [^\n]+\n\z/,
		'in one line, whatever the owner holds');
}

note 'run --value publishes a value; watch follows the live lease';
{
	my ($wout, $werr) = ('', '');
	my $watch = IPC::Run::start([ $dlock, 'watch', 'leader' ], '>', \$wout, '2>', \$werr);
	my $wjson_out = '';
	my $wjson = IPC::Run::start([ $dlock, 'watch', 'leader', '--json' ], '>', \$wjson_out);
	$node->poll_query_until('postgres', q{SELECT count(*) = 2 FROM dlock.locks WHERE kind = 'watch'})
	  or die 'watch did not start';
	($rc, $out) = run_dlock('run', 'leader', '--owner', 'node-1', '--value', '10.0.0.1:5432',
		'--', 'sh', '-c', q{psql -XAtc "SELECT value FROM dlock.leases WHERE name = 'leader'"; sleep 0.3});
	is($rc, 0, 'run --value exits with the child\'s status');
	is($out, "10.0.0.1:5432\n", 'the child sees the published value in dlock.leases');
	$node->safe_psql('postgres', q{SELECT dlock.acquire('leader', '300ms', 'node-2')});
	ok(poll_until(q{SELECT state <> 'live' FROM dlock.leases WHERE name = 'leader'}, 5),
		'the last lease expired');
	sleep 0.2;
	$watch->signal('INT');
	$watch->finish;
	is($? >> 8, 0, 'watch exits 0 on SIGINT');
	my @lines = split /\n/, $wout;
	is(scalar(@lines), 5, 'watch printed one line per change: none, run, none, node-2, none')
	  or diag $wout;
	like($lines[0], qr/no live lease$/, 'first the state it found: none live');
	like($lines[1], qr/token \d+  owner node-1  value 10\.0\.0\.1:5432  expires /,
		'then the run\'s lease with its owner and value');
	like($lines[2], qr/no live lease$/, 'then its release');
	like($lines[3], qr/owner node-2  value -/, 'then the next holder');
	like($lines[4], qr/no live lease$/, 'then its expiry');
	$wjson->signal('TERM');
	$wjson->finish;
	like((split /\n/, $wjson_out)[1],
		qr/^\{"observed_at": "[^"]+", "token": \d+, "owner": "node-1", "value": "10\.0\.0\.1:5432", "expires_at": "[^"]+"\}$/,
		'watch --json prints one JSON object per change');
	is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity
		WHERE query LIKE '%dlock.watch(%' AND pid <> pg_backend_pid() AND state = 'active'}),
		'0', 'an interrupted watch leaves no query running on the server');
	($rc, $out, $err) = run_dlock('watch', 'leader', 'extra');
	is($rc, 64, 'watch with an extra argument is a usage error');
	($rc, $out, $err) = run_dlock('watch');
	is($rc, 64, 'watch without a NAME is a usage error');
}

note 'watch on a name with several holders waits too';
{
	# three shared holders; dlock.watch() compares the newest live token
	my @tokens = map {
		$node->safe_psql('postgres', "SELECT token FROM dlock.try_acquire('many', '1h', 'r$_', shared => true)")
	} 1 .. 3;
	my ($wout, $werr) = ('', '');
	my $log_from = -s $node->logfile;
	# every statement of this watch is logged, under its own application name
	local $ENV{PGAPPNAME} = 'watch-many';
	local $ENV{PGOPTIONS} = '-c log_statement=all';
	my $watch = IPC::Run::start([ $dlock, 'watch', 'many' ], '>', \$wout, '2>', \$werr);
	my $statements = sub {
		my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_from);
		return scalar(() = $log =~ /\] watch-many LOG:  (?:statement|execute)/g);
	};
	ok(poll_until(q{SELECT count(*) = 1 FROM dlock.locks WHERE kind = 'watch'}, 10),
		'watch waits in dlock.watch()');
	sleep 0.3;
	$watch->pump_nb;
	like($wout, qr/^\S+ \S+  token $tokens[2]  owner r3 /, 'it shows the newest of the live leases');
	my $before = $statements->();
	sleep 2;
	my $idle = $statements->() - $before;
	cmp_ok($idle, '<=', 2, 'and sends (almost) nothing in 2 s while nothing changes')
	  or diag "$idle statements in 2 s";
	note "$idle statements in 2 s with nothing changing (after $before to start)";
	# wait_lines(n): until watch has printed n lines, for at most 5 s
	my $wait_lines = sub {
		my ($n) = @_;
		my $until = time + 5;
		$watch->pump_nb while (() = $wout =~ /\n/g) < $n && time < $until && sleep 0.05;
	};
	my $fourth = $node->safe_psql('postgres',
		q{SELECT token FROM dlock.try_acquire('many', '1h', 'r4', shared => true)});
	$wait_lines->(2);
	$node->safe_psql('postgres', q{SELECT dlock.release('many', 'r4')});
	$wait_lines->(3);
	# the older holders go first: the newest live lease stays r3's
	$node->safe_psql('postgres', "SELECT dlock.release('many', 'r$_')") for 1 .. 3;
	$wait_lines->(4);
	sleep 0.3;
	$watch->signal('INT');
	$watch->finish;
	my @lines = split /\n/, $wout;
	like($lines[1] // '', qr/  token $fourth  owner r4 /, 'a newer holder is a change, and is printed');
	like($lines[2] // '', qr/  token $tokens[2]  owner r3 /,
		'so is its release: the newest live lease is r3\'s again');
	like($lines[3] // '', qr/no live lease$/, 'and the end of the last one');
	is(scalar(@lines), 4, 'and nothing else: the older holders\' releases change nothing it shows')
	  or diag $wout;
}

SKIP:
{
	my ($valgrind) = grep { -x } map { "$_/valgrind" } split /:/, $ENV{PATH};
	skip 'valgrind is not installed', 1 unless $valgrind;
	my ($vout, $verr) = ('', '');
	IPC::Run::run([ $valgrind, '--leak-check=full', '--errors-for-leak-kinds=definite',
		'--error-exitcode=99', $dlock, 'run', 'vg', '--', 'true' ], '>', \$vout, '2>', \$verr);
	is($? >> 8, 0, 'no leaks or memory errors under valgrind for a run with a short child')
	  or diag $verr;
}

$node->stop;

note 'run --poll: the place in the queue outlives every gap between polls';
{
	# places in queues need dlock preloaded
	my $pnode = PostgreSQL::Test::Cluster->new('cli_poll');
	$pnode->init;
	$pnode->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
	$pnode->start;
	$pnode->safe_psql('postgres', 'CREATE EXTENSION dlock');
	local $ENV{PGHOST} = $pnode->host;
	local $ENV{PGPORT} = $pnode->port;

	# the server keeps a place for ttl from each poll; ttl 2 s leaves a
	# validity of 1.778 s after the drift allowance and the safety margin
	foreach my $poll ('3s', '2s', '1.9s')
	{
		my $ran = "$dir/ran-poll-$poll";
		($rc, $out, $err) = run_dlock('run', 'polled', '--ttl', '2s', '--poll', $poll, '--', 'touch', $ran);
		is($rc, 64, "--poll $poll with --ttl 2s: a usage error, 64");
		like($err, qr/--poll "\Q$poll\E" is too long for --ttl "2s": the server keeps the place in the queue for ttl from each poll/,
			'and says why');
		ok(!-e $ran, 'the command was not started');
	}
	is($pnode->safe_psql('postgres', q{SELECT count(*) FROM dlock.leases WHERE name = 'polled'}), '0',
		'nor the lease taken');
	($rc, $out) = run_dlock('run', 'polled', '--ttl', '2s', '--poll', '1.7s', '--', 'echo', 'ran');
	is("$rc $out", "0 ran\n", 'a --poll within the validity is accepted');

	note 'dlock.stats counts a busy run without --wait as a refusal, one that waited in vain as a timeout';
	$pnode->safe_psql('postgres', q{SELECT dlock.acquire('counted', '1h', 'holder')});
	my $counts = sub {
		$pnode->safe_psql('postgres',
			q{SELECT format('refusals=%s waits=%s timeouts=%s', refusals, waits, timeouts) FROM dlock.stats WHERE name = 'counted'});
	};
	($rc) = run_dlock('run', 'counted', '--', 'true');
	is($rc, 75, 'a busy run without --wait: the conflict exit code');
	is($counts->(), 'refusals=1 waits=0 timeouts=0', 'and dlock.stats counts a refusal, not a timeout');
	($rc) = run_dlock('run', 'counted', '--wait', '0s', '--', 'true');
	is($counts->(), 'refusals=2 waits=0 timeouts=0', 'so it does with --wait 0s');
	($rc) = run_dlock('run', 'counted', '--wait', '200ms', '--', 'true');
	is($rc, 75, 'a busy run whose --wait runs out: the conflict exit code');
	is($counts->(), 'refusals=2 waits=1 timeouts=1', 'and dlock.stats counts a wait and a timeout');
	$pnode->safe_psql('postgres', q{SELECT dlock.release('counted', 'holder')});

	$pnode->safe_psql('postgres', q{SELECT dlock.acquire('queued', '1h', 'holder')});
	my ($pout, $perr) = ('', '');
	my $poller = IPC::Run::start([ $dlock, 'run', 'queued', '--ttl', '2s', '--poll', '400ms',
		'--wait', '30s', '-v', '--', 'sh', '-c', 'echo $DLOCK_TOKEN; sleep 0.5' ],
		'>', \$pout, '2>', \$perr);
	my $until = time + 10;
	$poller->pump_nb while $perr !~ /polling again/ && time < $until && sleep 0.05;
	like($perr, qr/lease "queued" is busy; polling again/, 'the poller has polled: it has a place');
	my ($late_out, $late_err) = ('', '');
	my $late = IPC::Run::start([ 'psql', '-XAtq', '-d', 'postgres', '-c',
		q{SELECT token FROM dlock.acquire('queued', '10s', 'late', timeout => '30s')} ],
		'>', \$late_out, '2>', \$late_err);
	$pnode->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
		WHERE state = 'active' AND query LIKE '%dlock.acquire(''queued'', ''10s'', ''late''%'})
	  or die 'the later acquire() did not wait';
	# more than twice the ttl: the place lasts only as long as the polls keep it
	sleep 5;
	$pnode->safe_psql('postgres', q{SELECT dlock.release('queued', 'holder')});
	$poller->finish;
	$late->finish;
	is($poller->full_result >> 8, 0, 'the poller got the lease and ran') or diag $perr;
	chomp $pout;
	chomp $late_out;
	like($late_out, qr/^\d+$/, 'the later acquire() got it after the poller') or diag $late_err;
	cmp_ok($pout, '<', $late_out,
		'the poller, first in the queue, kept its place over 2.5 ttls against a later acquire()');

	# try_acquire refuses with a row of NULLs at 1.1 and with no row from
	# 1.2 on: a poller reads both as busy, and takes the lease when it is free
	$pnode->safe_psql('postgres', 'CREATE DATABASE at_1_1');
	$pnode->safe_psql('at_1_1', q{CREATE EXTENSION dlock VERSION '1.1'});
	foreach my $db ('at_1_1', 'postgres')
	{
		my $version = $pnode->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'dlock'});
		$pnode->safe_psql($db, q{SELECT dlock.acquire('busy', '1h', 'holder')});
		my $refusal = $pnode->safe_psql($db,
			q{SELECT count(*) || ' row(s), ' || count(token) || ' token(s)' FROM dlock.try_acquire('busy', '1h', 'other')});
		note "at $version, try_acquire refuses with $refusal";
		my $ran = "$dir/ran-poll-$db";
		($rc, $out, $err) = run_dlock('run', 'busy', '-d', "dbname=$db", '--ttl', '2s', '--poll', '300ms',
			'--wait', '1s', '--', 'touch', $ran);
		is($rc, 75, "--poll on a busy name at $version: the conflict exit code");
		ok(!-e $ran, "at $version: the command did not run");
		like($err, qr/^dlock: lease "busy" is busy: held by owner holder /, "at $version: and says who holds it");
		($rc, $out, $err) = run_dlock('run', 'busy', '-d', "dbname=$db", '--', 'touch', $ran);
		like("$rc $err", qr/^75 dlock: lease "busy" is busy: held by owner holder /,
			"at $version: a run without --wait reads the refusal as busy too");
		ok(!-e $ran, "at $version: and did not run the command");
		$pnode->safe_psql($db, q{SELECT dlock.release('busy', 'holder')});
		($rc, $out) = run_dlock('run', 'busy', '-d', "dbname=$db", '--ttl', '2s', '--poll', '300ms',
			'--wait', '5s', '--', 'sh', '-c', 'echo $DLOCK_TOKEN');
		like("$rc $out", qr/^0 \d+\n\z/, "at $version: once free, the poller takes it and runs with its token");
	}
	$pnode->stop;
}

done_testing();

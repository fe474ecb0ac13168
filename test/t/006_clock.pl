# Clock steps.  The server runs under libfaketime with a file-driven offset,
# so the test can step the server's wall clock while it runs.
#
# A forward step makes leases expire early, yet fenced writes of different
# grants never overlap and tokens stay ordered.  A backward step makes leases
# last longer, yet nothing is granted twice and no token repeats.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my ($faketime) = glob('/usr/lib/*/faketime/libfaketime.so.1');
plan skip_all => 'libfaketime is not installed' unless $faketime;

my $node = PostgreSQL::Test::Cluster->new('clock');
$node->init;
my $offset_file = $node->basedir . '/clock_offset';

# The server's processes read the offset file at every clock reading
# (FAKETIME_NO_CACHE), and newer libfaketime releases (Debian 13's and
# later) end the process that finds it empty.  So the new offset is written to
# another file and renamed over the old one: a reader sees the old offset or
# the new one, never the moment between truncating and writing the file.
sub write_offset
{
	my ($offset) = @_;
	my $tmp = "$offset_file.new";
	open my $fh, '>', $tmp or die "could not write $tmp: $!";
	print $fh "$offset\n";
	close $fh or die "could not write $tmp: $!";
	rename $tmp, $offset_file or die "could not rename $tmp: $!";
}

sub step_clock
{
	my ($seconds) = @_;
	write_offset($seconds >= 0 ? "+$seconds" : $seconds);

	# The server must see the new offset before the test goes on: in a new
	# backend, both the transaction's start (now()) and the clock read
	# during the statement (clock_timestamp()) are the real time, read
	# here at each try, plus the offset, within 5 s
	my $stepped = 0;
	for (my $try = 0; $try < 60 && !$stepped; $try++)
	{
		sleep 1 if $try > 0;
		my $real = time();
		$stepped = $node->safe_psql('postgres',
			"SELECT abs(extract(epoch FROM now()) - $real - ($seconds)) < 5
			    AND abs(extract(epoch FROM clock_timestamp()) - $real - ($seconds)) < 5") eq 't';
	}
	ok($stepped, "the server's clock reads the real time plus $seconds s")
	  or die "server clock did not step to $seconds s";
}

write_offset('+0');
{
	# Only the server runs on the fake clock; its monotonic clock, which
	# times latch waits and lock timeouts, stays real
	local $ENV{LD_PRELOAD} = $faketime;
	local $ENV{FAKETIME_TIMESTAMP_FILE} = $offset_file;
	local $ENV{FAKETIME_NO_CACHE} = '1';
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
	$node->start;
}
$node->safe_psql('postgres', q{
	CREATE EXTENSION dlock;
	CREATE TABLE account (id int PRIMARY KEY, balance int NOT NULL);
	INSERT INTO account VALUES (1, 1000);
	-- every fenced write appends its token; row locks make this commit order
	CREATE TABLE writes (id int PRIMARY KEY, tokens bigint[] NOT NULL);
	INSERT INTO writes VALUES (1, '{}');
});
step_clock(0);

sub fenced_write
{
	my ($session, $token) = @_;
	return qq{UPDATE writes SET tokens = tokens || ${token}::bigint
		WHERE id = 1 AND dlock.fence('res', $token)};
}

note 'forward step past the ttl';
my $t1 = $node->safe_psql('postgres', q{SELECT token FROM dlock.acquire('res', '30s', 'A')});
my $sa = $node->background_psql('postgres');
$sa->query_safe('BEGIN');
is($sa->query_safe(fenced_write($sa, $t1) . ' RETURNING 1'), '1', 'A writes under its live lease');

step_clock(60);
is($node->safe_psql('postgres', q{SELECT state FROM dlock.leases WHERE name = 'res'}),
	'expired', 'after the step A\'s lease has expired early');
is($node->safe_psql('postgres', q{SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('res', '30s', 'B'))}),
	't', 'yet B is refused while A\'s fenced transaction is open');

my $sb = $node->background_psql('postgres');
$sb->query_until(qr/started/, qq{\\echo started
SELECT 'granted-' || token FROM dlock.acquire('res', '30s', 'B');
});
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE query LIKE '%dlock.acquire(''res''%' AND wait_event_type = 'Lock'})
  or die 'B did not wait';
is($sa->query_safe(fenced_write($sa, $t1) . ' RETURNING 1'), '1',
	'A\'s transaction keeps its pin after the step');
$sa->query_safe('COMMIT');
my ($t2) = $sb->query_until(qr/granted-\d+/, '') =~ /granted-(\d+)/;
cmp_ok($t2, '>', $t1, 'B is granted once A committed, with a larger token');
is($sb->query_safe(fenced_write($sb, $t2) . ' RETURNING 1'), '1', 'B writes under its lease');
is($node->safe_psql('postgres', fenced_write($node, $t1) . ' RETURNING 1'), '',
	'A\'s late write with the old token changes nothing');

# A waiter sleeping until a far expiry notices a forward step
$node->safe_psql('postgres', q{SELECT dlock.acquire('res2', '1h', 'X')});
my $w = $node->background_psql('postgres');
$w->query_until(qr/started/, qq{\\echo started
SELECT 'granted-' || owner FROM dlock.acquire('res2', '1h', 'W');
});
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE query LIKE '%dlock.acquire(''res2''%' AND wait_event_type = 'Extension'})
  or die 'W did not wait';
step_clock(60 + 7200);
like($w->query_until(qr/granted-W/, ''), qr/granted-W/,
	'a waiter is granted soon after a forward step expires the holder\'s lease');
$w->quit;

note 'backward step';
step_clock(-3600);
is($node->safe_psql('postgres', q{SELECT state FROM dlock.leases WHERE name = 'res'}),
	'live', 'after a backward step B\'s lease is live longer');
is($node->safe_psql('postgres', q{SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('res', '30s', 'C'))}),
	't', 'C is refused: nothing is granted twice');
is($sb->query_safe(q{SELECT dlock.release('res', 'B')}), 't', 'B releases');
my $t3 = $node->safe_psql('postgres', q{SELECT token FROM dlock.acquire('res', '30s', 'C')});
cmp_ok($t3, '>', $t2, 'C\'s token is larger than B\'s although its clock reads earlier');
is($node->safe_psql('postgres', fenced_write($node, $t3) . ' RETURNING 1'), '1', 'C writes');
is($node->safe_psql('postgres', fenced_write($node, $t2) . ' RETURNING 1'), '',
	'B\'s old token is refused');

note 'back to the real time';
step_clock(0);
my $t4 = $node->safe_psql('postgres', q{SELECT token FROM dlock.acquire('res', '30s', 'D')});
cmp_ok($t4, '>', $t3, 'D\'s token is larger than C\'s');

my $tokens = $node->safe_psql('postgres', q{SELECT array_to_string(tokens, ' ') FROM writes});
my @tokens = split / /, $tokens;
is(scalar @tokens, 4, 'four fenced writes committed');
is(join(' ', sort { $a <=> $b } @tokens), $tokens, 'fenced writes committed in token order');
is(scalar(keys %{ { map { $_ => 1 } ($t1, $t2, $t3, $t4) } }), 4, 'no token repeats');
is($node->safe_psql('postgres',
	q{SELECT count(*) = count(DISTINCT token) FROM dlock.lease_state}), 't',
	'no token appears twice in the lease table');

$sa->quit;
$sb->quit;
$node->stop;
done_testing();

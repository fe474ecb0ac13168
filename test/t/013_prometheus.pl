# The Prometheus queries of monitoring/: the Debian exporter
# (prometheus-postgres-exporter) runs them against a cluster with dlock
# preloaded and serves dlock's metrics with the values of a known workload.

use strict;
use warnings FATAL => 'all';

use File::Basename qw(dirname);
use IO::Socket::INET;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $exporter = '/usr/bin/prometheus-postgres-exporter';
plan skip_all => "$exporter is not installed (Debian package prometheus-postgres-exporter)"
  unless -x $exporter;

my $queries = dirname(__FILE__) . '/../../monitoring/prometheus-queries.yaml';
$queries = File::Spec->rel2abs($queries);
ok(-r $queries, 'the queries file is there');

my $node = PostgreSQL::Test::Cluster->new('prometheus');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

# The workload: 3 grants, 1 refusal, 2 stale fences (of one stale token,
# in two transactions), one live lease and one waiter
$node->safe_psql('postgres', q{
	SELECT dlock.try_acquire('prom:a', '1h', 'w1');
	SELECT dlock.try_acquire('prom:a', '1h', 'w2');
	SELECT dlock.try_acquire('prom:b', '1h', 'w1');
	SELECT dlock.release('prom:b', 'w1');
	SELECT dlock.try_acquire('prom:b', '1h', 'w2');
});
my $stale = $node->safe_psql('postgres',
	q{SELECT token - 1 FROM dlock.leases WHERE name = 'prom:b'});
$node->safe_psql('postgres', "SELECT dlock.fence('prom:b', $stale)") for 1 .. 2;

my $waiter = $node->background_psql('postgres');
$waiter->query_until(qr/started/, q{\echo started
SELECT dlock.acquire('prom:a', '1h', 'w3', timeout => '1min');
});
$node->poll_query_until('postgres',
	q{SELECT count(DISTINCT pid) = 1 FROM dlock.locks WHERE kind = 'queue'})
  or die 'the waiter did not queue';

# The exporter, on a free port of 127.0.0.1, over the node's unix socket
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $log = "$PostgreSQL::Test::Utils::tmp_check/exporter.log";
my $pid = fork();
die "fork: $!" unless defined $pid;
if ($pid == 0)
{
	$ENV{DATA_SOURCE_NAME} = sprintf('host=%s port=%d user=%s dbname=postgres sslmode=disable',
		$node->host, $node->port, scalar getpwuid($<));
	open(STDOUT, '>', $log) or die;
	open(STDERR, '>&', \*STDOUT) or die;
	exec($exporter, "--web.listen-address=127.0.0.1:$port",
		"--extend.query-path=$queries", '--disable-default-metrics',
		'--disable-settings-metrics', '--log.level=warn')
	  or die "exec: $!";
}

# http_get(path): the body of a GET from the exporter, or undef
sub http_get
{
	my ($path) = @_;
	my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
		Proto => 'tcp', Timeout => 5) or return undef;
	print $sock "GET $path HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
	local $/;
	my $response = <$sock>;
	close $sock;
	return undef unless defined $response && $response =~ m{^HTTP/1\.[01] 200};
	$response =~ s/^.*?\r\n\r\n//s;
	return $response;
}

my $metrics;
for (1 .. 100)
{
	$metrics = http_get('/metrics');
	last if defined $metrics && $metrics =~ /^dlock_stats_grants/m;
	select(undef, undef, undef, 0.1);
}

# metric(name, labels): the value of one sample (labels: a regex part)
sub metric
{
	my ($name, $labels) = @_;
	$labels //= '';
	return $1 if $metrics =~ /^\Q$name\E\{(?=[^}]*$labels)[^}]*\} (\S+)$/m;
	return undef;
}

ok(defined $metrics, 'the exporter serves /metrics') or diag(slurp_file($log));
is(metric('dlock_stats_grants'), '3', 'total grants');
is(metric('dlock_stats_refusals'), '1', 'total refusals');
is(metric('dlock_stats_fence_refused'), '2', 'stale fences refused');
is(metric('dlock_stats_released'), '1', 'releases');
is(metric('dlock_stats_top_grants', 'name="prom:b"'), '2', 'the top names carry their name');
is(metric('dlock_stats_top_fence_refused', 'name="prom:b"'), '2', 'stale fences of the name');
is(metric('dlock_leases_leases', 'state="live"'), '2', 'live leases');
is(metric('dlock_leases_leases', 'state="released"'), '0', 'states without leases are 0');
is(metric('dlock_locks_queued'), '1', 'the waiter is in the queue');
is(metric('dlock_places_max'), '1000', 'the places: the pool of dlock.max_queue_places');
is(metric('dlock_places_live') . ' ' . metric('dlock_places_role_share'), '0 250',
	'none live, and a role may keep a quarter of them');
my $largest = $node->safe_psql('postgres', 'SELECT max(token) FROM dlock.leases');
cmp_ok(metric('dlock_tokens_largest'), '==', $largest, 'the largest token');
cmp_ok(metric('dlock_tokens_ahead_of_clock_seconds'), '<', 0, 'behind the clock, as tokens are');
cmp_ok(metric('dlock_held_seconds', 'name="prom:a"'), '>=', 0, 'how long prom:a has been held');

kill 'TERM', $pid;
waitpid($pid, 0);
is($? & 127, POSIX::SIGTERM(), 'the exporter stopped on SIGTERM')
  or diag(slurp_file($log));

$node->safe_psql('postgres', q{SELECT dlock.release('prom:a', 'w1')});
$waiter->quit;
$node->stop;
done_testing();

# Bad input, at random: a few thousand calls of every dlock function with
# arguments of every shape (NULLs anywhere, names and owners of every length
# and byte, durations of every sign, unit and size, tokens of every size),
# mixed with valid calls so that leases exist and change, from a superuser
# and two unprivileged roles, some in read-only transactions.  It proves that
# the server never crashes, that every error dlock raises has a documented
# SQLSTATE (the one the documented rules give for bad input), that input
# literals PostgreSQL itself rejects never reach dlock, and that a failed
# call, or one that grants or ends nothing, leaves the lease table, the
# token counter and the session's locks as they were.
#
# DLOCK_FUZZ_SEED picks the random seed (printed at the start) and
# DLOCK_FUZZ_CALLS the number of calls.  The same seed gives the same calls,
# except for the names, owners and tokens taken from leases granted earlier
# in the run, which depend on timing.  Every failing call is printed as a
# statement that can be run by hand, and all of them are written to
# fuzz_failures.sql in the test's directory.

use strict;
use warnings FATAL => 'all';

use File::Spec;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $seed = $ENV{DLOCK_FUZZ_SEED} // 5150;
my $ncalls = $ENV{DLOCK_FUZZ_CALLS} // 4000;
die "DLOCK_FUZZ_SEED must be an integer" unless $seed =~ /^\d+$/;
die "DLOCK_FUZZ_CALLS must be an integer" unless $ncalls =~ /^\d+$/;
srand($seed);
note "random seed $seed (replay with DLOCK_FUZZ_SEED=$seed), $ncalls calls";

my $node = PostgreSQL::Test::Cluster->new('fuzz');
$node->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
# The calls carry names of up to 100 kB: do not log every statement
$node->append_conf('postgresql.conf', "log_statement = none\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

my $max_ttl_s = $node->safe_psql('postgres',
	q{LOAD 'dlock'; SELECT setting FROM pg_settings WHERE name = 'dlock.max_ttl'});
die "dlock.max_ttl is not defined" unless $max_ttl_s =~ /^\d+$/;
my $max_ttl_us = $max_ttl_s * 1_000_000;
note "dlock.max_ttl is $max_ttl_s s";

# The harness, in schema fuzz:
#  * fuzz.snap(): what a failed call must leave alone: a checksum of the lease
#    table, the token counter, and this backend's locks in dlock's spaces
#    (read as the superuser that owns it, for any caller);
#  * fuzz.expect(): the SQLSTATE the documented rules give for the arguments
#    (README, Errors and Limits), or 'ok' when they are acceptable;
#  * fuzz.call(): casts the argument literals (an error there is PostgreSQL's
#    input function speaking, not dlock), runs the call in a subtransaction,
#    catches its error, and reports one line:
#      seq|phase|outcome|expected|changed|result|rule|message (hex)
#    changed lists what differs after the call: T (table), C (counter),
#    L (locks); rule names a broken rule of a lease that came back (its
#    name, owner and token).
# The arguments travel as text literals and reach dlock as typed parameters
# of an EXECUTE, so no byte of a name can change the statement.
$node->safe_psql('postgres', qq{
CREATE ROLE fuzz_a;
CREATE ROLE fuzz_b;
CREATE SCHEMA fuzz;
GRANT USAGE ON SCHEMA fuzz TO PUBLIC;

CREATE FUNCTION fuzz.snap(OUT tbl text, OUT counter bigint, OUT called boolean, OUT locks text)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS \$\$
  SELECT (SELECT coalesce(md5(string_agg(s::text, E'\\n' ORDER BY s.name)), '')
            FROM dlock.lease_state s),
         q.last_value, q.is_called,
         (SELECT coalesce(string_agg(k, ' ' ORDER BY k), '')
            FROM (SELECT l.objsubid || '/' || l.classid || '/' || l.objid || '/' || l.mode AS k
                    FROM pg_locks l
                   WHERE l.locktype = 'advisory' AND l.objsubid BETWEEN 17484 AND 17487
                     AND l.pid = pg_backend_pid() AND l.granted) k)
    FROM dlock.token_seq q
\$\$;

CREATE FUNCTION fuzz.name_token(n text) RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS \$\$
  SELECT token FROM dlock.lease_state WHERE name = n
\$\$;

-- NULL when a duration is acceptable: finite, no month part, not negative
-- (not zero unless allow_zero), at most dlock.max_ttl when bounded
CREATE FUNCTION fuzz.span_error(span interval, allow_zero boolean, bounded boolean)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS \$\$
DECLARE
  us numeric;
BEGIN
  IF NOT isfinite(span) THEN RETURN '22023'; END IF;
  IF extract(year FROM span) * 12 + extract(month FROM span) <> 0 THEN RETURN '22023'; END IF;
  us := extract(epoch FROM span) * 1000000;
  IF us < 0 OR (us = 0 AND NOT allow_zero) THEN RETURN '22023'; END IF;
  IF bounded AND us > $max_ttl_us THEN RETURN '22023'; END IF;
  RETURN NULL;
END \$\$;

CREATE FUNCTION fuzz.text_error(t text, max_bytes int) RETURNS text
LANGUAGE sql IMMUTABLE AS \$\$
  SELECT CASE WHEN t IS NULL OR octet_length(t) BETWEEN 1 AND max_bytes THEN NULL ELSE '22023' END
\$\$;

CREATE FUNCTION fuzz.expect(fn text, p_name text, ttl interval, p_owner text,
                            timeout interval, delay interval, bound boolean, token bigint)
RETURNS text LANGUAGE plpgsql STABLE AS \$\$
DECLARE
  e text;
BEGIN
  IF fn = 'holder_alive' THEN RETURN 'ok'; END IF;   -- STRICT: NULL gives NULL
  IF p_name IS NULL THEN RETURN '22004'; END IF;
  e := fuzz.text_error(p_name, 1024);
  IF e IS NOT NULL THEN RETURN e; END IF;
  IF fn = 'fence' THEN
    RETURN CASE WHEN token IS NULL THEN '22004' ELSE 'ok' END;
  END IF;
  IF fn IN ('try_acquire', 'acquire') THEN
    IF ttl IS NULL THEN RETURN '22004'; END IF;
    e := coalesce(fuzz.span_error(ttl, false, true),
                  fuzz.text_error(p_owner, 256),
                  fuzz.span_error(delay, true, true));
    IF e IS NOT NULL THEN RETURN e; END IF;
    IF bound IS NULL THEN RETURN '22004'; END IF;
    IF fn = 'acquire' THEN
      e := fuzz.span_error(timeout, true, false);
      IF e IS NOT NULL THEN RETURN e; END IF;
    END IF;
  ELSIF fn IN ('renew', 'release') THEN
    IF p_owner IS NULL THEN RETURN '22004'; END IF;
    e := fuzz.text_error(p_owner, 256);
    IF e IS NOT NULL THEN RETURN e; END IF;
    IF fn = 'renew' THEN
      IF ttl IS NULL THEN RETURN '22004'; END IF;
      e := fuzz.span_error(ttl, false, true);
      IF e IS NOT NULL THEN RETURN e; END IF;
    END IF;
  END IF;
  IF current_setting('transaction_read_only')::boolean THEN RETURN '25006'; END IF;
  RETURN 'ok';
END \$\$;

CREATE FUNCTION fuzz.hex(t text) RETURNS text LANGUAGE sql IMMUTABLE AS \$\$
  SELECT encode(convert_to(t, 'UTF8'), 'hex')
\$\$;

CREATE FUNCTION fuzz.call(seq int, fn text, stmt text, p_name text, p_ttl text, p_owner text,
                          p_timeout text, p_delay text, p_bound text, p_token text)
RETURNS text LANGUAGE plpgsql AS \$\$
DECLARE
  v_ttl interval;
  v_timeout interval;
  v_delay interval;
  v_bound boolean;
  v_token bigint;
  expected text;
  b record;
  a record;
  tok_before bigint;
  r_token bigint;
  r_owner text;
  r_name text;
  r_bool boolean;
  result text;
  outcome text := 'ok';
  msg text;
  changed text := '';
  rule text;
BEGIN
  BEGIN
    v_ttl := p_ttl::interval;
    v_timeout := p_timeout::interval;
    v_delay := p_delay::interval;
    v_bound := p_bound::boolean;
    v_token := p_token::bigint;
  EXCEPTION WHEN OTHERS THEN
    RETURN format('%s|input|%s||||||%s', seq, SQLSTATE, fuzz.hex(left(SQLERRM, 200)));
  END;

  expected := fuzz.expect(fn, p_name, v_ttl, p_owner, v_timeout, v_delay, v_bound, v_token);
  IF fn IN ('try_acquire', 'acquire', 'renew') AND octet_length(p_name) BETWEEN 1 AND 1024 THEN
    tok_before := fuzz.name_token(p_name);
  END IF;
  SELECT * INTO b FROM fuzz.snap();
  BEGIN
    IF fn IN ('try_acquire', 'acquire', 'renew') THEN
      EXECUTE stmt INTO r_token, r_owner, r_name
        USING p_name, v_ttl, p_owner, v_timeout, v_delay, v_bound, v_token;
      result := CASE WHEN r_token IS NULL THEN 'null'
                     ELSE r_token || ':' || fuzz.hex(r_owner) END;
    ELSE
      EXECUTE stmt INTO r_bool
        USING p_name, v_ttl, p_owner, v_timeout, v_delay, v_bound, v_token;
      result := coalesce(r_bool::text, 'null');
    END IF;
  EXCEPTION WHEN OTHERS THEN
    outcome := SQLSTATE;
    msg := fuzz.hex(left(SQLERRM, 200));
  END;
  SELECT * INTO a FROM fuzz.snap();
  IF a.tbl IS DISTINCT FROM b.tbl THEN changed := changed || 'T'; END IF;
  IF (a.counter, a.called) IS DISTINCT FROM (b.counter, b.called) THEN changed := changed || 'C'; END IF;
  IF a.locks IS DISTINCT FROM b.locks THEN changed := changed || 'L'; END IF;

  -- A lease comes back with the holder's token (counter untouched), or,
  -- for a new grant, with the counter's next value; it is stored under the
  -- very name asked for, and held by the owner given
  IF r_token IS NOT NULL THEN
    IF r_name IS DISTINCT FROM p_name THEN
      rule := 'the lease has another name';
    ELSIF fuzz.name_token(p_name) IS DISTINCT FROM r_token THEN
      rule := 'the name does not hold the token returned';
    ELSIF p_owner IS NOT NULL AND r_owner IS DISTINCT FROM p_owner THEN
      rule := 'the lease has another owner';
    ELSIF p_owner IS NULL AND fn <> 'renew' AND r_owner !~ '^[0-9a-f]{32}\$' THEN
      rule := 'a generated owner is not 32 hex digits';
    ELSIF position('C' IN changed) = 0 THEN
      IF r_token IS DISTINCT FROM tok_before THEN rule := 'token not kept'; END IF;
    ELSIF fn = 'renew' THEN
      rule := 'renew drew a token';
    ELSIF NOT (a.called AND r_token = a.counter AND (NOT b.called OR r_token > b.counter)) THEN
      rule := 'token is not the next one';
    END IF;
  END IF;
  RETURN format('%s|call|%s|%s|%s|%s|%s|%s', seq, outcome, expected, changed, result, rule, msg);
END \$\$;
});

# ---------------------------------------------------------------------------
# Random values
# ---------------------------------------------------------------------------

# choose([weight, value or code], ...): a weighted pick; code is called
sub choose
{
	my $total = 0;
	$total += $_->[0] foreach @_;
	my $r = rand($total);
	foreach my $c (@_)
	{
		$r -= $c->[0];
		next if $r >= 0;
		return ref($c->[1]) eq 'CODE' ? $c->[1]->() : $c->[1];
	}
	my $last = $_[-1][1];
	return ref($last) eq 'CODE' ? $last->() : $last;
}

sub any_of { return $_[ int(rand(@_)) ]; }

# UTF-8 bytes of a text and back.  Perl's own (lax) coding, because the
# strict one would turn noncharacters such as U+FFFE, which PostgreSQL
# accepts, into U+FFFD.
sub to_bytes { my ($s) = @_; utf8::encode($s); return $s; }
sub from_bytes { my ($s) = @_; utf8::decode($s) or die "not UTF-8: $s"; return $s; }

sub nbytes { return defined $_[0] ? length(to_bytes($_[0])) : -1; }

# Characters any UTF-8 text may hold: never NUL, never a surrogate
my @odd_chars = map { chr } (0x85, 0xA0, 0xE9, 0x0300, 0x200B, 0x2028, 0x202E,
	0x4E2D, 0xFEFF, 0xFFFD, 0xFFFE, 0xFFFF, 0x1F600, 0x10FFFF);
my @punct = (q{'}, q{"}, '\\', '%', ' ', ';', '$', ':', '`', '{', '}', '_', '*',
	'?', '[', ']', '(', ')', ',', '|', '&', '#', '-', '/');

sub rand_char
{
	my ($kind) = @_;
	$kind //= choose([ 30, 'ascii' ], [ 15, 'punct' ], [ 8, 'control' ],
		[ 12, 'two' ], [ 12, 'three' ], [ 10, 'four' ], [ 8, 'odd' ]);
	return chr(0x20 + int(rand(95))) if $kind eq 'ascii';
	return any_of(@punct) if $kind eq 'punct';
	return chr(any_of(1 .. 31, 0x7F)) if $kind eq 'control';
	return chr(0x80 + int(rand(0x780))) if $kind eq 'two';
	if ($kind eq 'three')
	{
		my $cp = 0x800 + int(rand(0x10000 - 0x800));
		$cp += 0x800 if $cp >= 0xD800 && $cp <= 0xDFFF;
		return chr($cp);
	}
	return chr(0x10000 + int(rand(0x100000))) if $kind eq 'four';
	return any_of(@odd_chars);
}

# A kind of text: one character class, or all of them mixed
sub rand_kind
{
	return choose([ 3, undef ], [ 2, 'ascii' ], [ 1, 'punct' ], [ 1, 'control' ],
		[ 1, 'two' ], [ 1, 'three' ], [ 1, 'four' ], [ 1, 'odd' ]);
}

sub rand_text
{
	my ($nchars, $kind) = @_;
	return join '', map { rand_char($kind) } 1 .. $nchars;
}

# Text of about $bytes bytes (up to 3 more, when a wide character ends it)
sub text_of_bytes
{
	my ($bytes, $kind) = @_;
	my ($s, $n) = ('', 0);
	while ($n < $bytes)
	{
		my $c = rand_char($kind);
		$s .= $c;
		$n += nbytes($c);
	}
	return $s;
}

# Very long text, made by repeating a random piece
sub huge_text
{
	my ($bytes) = @_;
	my $piece = text_of_bytes(200 + int(rand(800)), rand_kind());
	my $s = $piece x (1 + int($bytes / nbytes($piece)));
	return $s . rand_text(1 + int(rand(3)));
}

# Text around a byte limit, both sides of it, ending on characters of every
# width so that some straddle the limit
sub edge_text
{
	my ($limit) = @_;
	return choose(
		[ 3, sub { text_of_bytes($limit - 8 + int(rand(14)), rand_kind()) } ],
		[ 1, sub { 'x' x ($limit - 1 + int(rand(3))) } ],
		[ 1, sub { "\x{e9}" x (int($limit / 2) + int(rand(2))) } ],
		[ 1, sub { ('x' x ($limit - 1)) . any_of("\x{e9}", "\x{20ac}", "\x{1f600}", 'y') } ],
		[ 1, sub { ('x' x ($limit - 4 + int(rand(3)))) . "\x{1f600}" } ],
		[ 1, sub { ("\x{20ac}" x int($limit / 3)) . any_of('', 'x', "\x{e9}", "\x{20ac}") } ],
		[ 1, sub { "\x{1f600}" x (int($limit / 4) + int(rand(2))) } ]);
}

# Names: a few hot ones, so that leases are granted, held, contested, renewed
# and released; names of granted leases; and random ones of every length
my @hot_names = (
	'job:1', 'job:2', 'job:3', 'x', ' ', q{it's "quoted"}, 'back\\slash\\',
	'100% %s%d%n', "tab\there\nnewline\r\x01\x1b", "\x{e9}t\x{e9}",
	"\x{4e2d}\x{6587}\x{1f600}", "\x{feff}bom\x{200b}", 'x' x 1024,
	"\x{e9}" x 512, ("\x{20ac}" x 341) . 'x', "\x{1f600}" x 256);
my @pool;    # granted leases: { name, owner, token, sess, bound }
my $fresh = 0;

# Leases granted so far depend on timing (short ttls, waits), so picks among
# them draw from a stream of their own: the main stream, and with it every
# generated argument, stays the same for a given seed
my $pool_state = $seed % 2147483648;

sub pool_rand
{
	my ($n) = @_;
	$pool_state = ($pool_state * 1103515245 + 12345) % 2147483648;
	return int($pool_state / 2147483648 * $n);
}

sub pool_entry { return @pool ? $pool[ pool_rand(scalar @pool) ] : undef; }

# A recent lease (more likely still live), taken by session $sess if given
sub recent_entry
{
	my ($sess) = @_;
	my @c = grep { !defined $sess || $_->{sess} eq $sess } @pool[ -(@pool < 40 ? @pool : 40) .. -1 ];
	return @c ? $c[ pool_rand(scalar @c) ] : undef;
}

sub random_name
{
	return choose(
		[ 5, '' ],
		[ 8, sub { rand_char() } ],
		[ 35, sub { rand_text(2 + int(rand(40)), rand_kind()) } ],
		[ 30, sub { edge_text(1024) } ],
		[ 10, sub { text_of_bytes(1025 + int(rand(4000)), rand_kind()) } ],
		[ 3, sub { huge_text(20_000 + int(rand(80_001))) } ]);
}

sub gen_name
{
	return choose(
		[ 6, undef ],
		[ 40, sub { any_of(@hot_names) } ],
		[ 16, sub { my $p = pool_entry(); $p ? $p->{name} : 'job:1' } ],
		[ 38, \&random_name ]);
}

# A name never used before: nobody holds it, so even a call that may wait
# without limit is granted at once
sub fresh_name
{
	$fresh++;
	return "fresh:$seed:$fresh:" . rand_text(int(rand(20)), rand_kind());
}

sub gen_owner
{
	return choose(
		[ 12, undef ],
		[ 6, '' ],
		[ 25, sub { any_of('w1', 'w2', 'w3', 'o', "\x{e9}", q{o'wner}, "c\\tl\n") } ],
		[ 20, sub { my $p = pool_entry(); $p ? $p->{owner} : 'w1' } ],
		[ 17, sub { edge_text(256) } ],
		[ 14, sub { rand_text(1 + int(rand(30)), rand_kind()) } ],
		[ 6, sub { choose([ 3, sub { text_of_bytes(300 + int(rand(3000))) } ],
				[ 1, sub { huge_text(100_000) } ]) } ]);
}

# Durations. Accepted ttls, short ones so that leases come and go
sub good_ttl
{
	return choose(
		[ 30, sub { (1 + int(rand(400))) . ' ms' } ],
		[ 5, sub { (1 + int(rand(1000))) . ' microseconds' } ],
		[ 25, sub { any_of('2s', '30 seconds', '5 min', '1h', '23:59:59.999999',
				'1 day', '86400 s', '1440 minutes', 'PT10M', 'P1D', '@ 3 minutes',
				'1 day -23 hours', '-1 hour 2 hours', '12 months -1 year 1 s',
				'0.5 s', '1.000001 s', '1 week -6 days') } ]);
}

# Durations dlock must refuse as a ttl (and some of them as anything)
my @bad_spans = ('0', '-1 microsecond', '-1s', '1 day -24 hours',
	'1 day -24 hours -1 microsecond', '-100000000 days', '1 mon', '1 year',
	'1 mon -30 days', '-1 mon', '1 decade', '1 century', '1 millennium',
	'5 millennia', '2 days', '1 day 1 microsecond', '100000000 days',
	'2147483647 days 2562047788 hours', '-2147483648 days -2562047788 hours',
	'2147483647 days', '-2147483648 days', '2147483647 months',
	'-2147483648 months', '1 year -12 months', '0.5 mon', '1.5 months',
	'0.0000001 s', '@ 1 hour ago', '2562047788 hours', '-2562047788 hours',
	'1 day -2562047788 hours', '106751991 days', '106751992 days',
	'-178000000 years', '178000000 years', '00:00:00');

# Literals the interval input function itself rejects
my @unparsable_spans = ('infinity', '-infinity', '', 'abc', '1 fortnight',
	'2147483648 days', '-2147483649 days', '9999999999 hours',
	'2562047789 hours', '1e400 s', '178956971 years', '1 day 1 day', '%',
	"1\x{e9} s", '5 millennium 5 millennium 5 centuries foo');

sub gen_ttl
{
	return choose(
		[ 6, undef ],
		[ 55, \&good_ttl ],
		[ 32, sub { any_of(@bad_spans) } ],
		[ 7, sub { any_of(@unparsable_spans) } ]);
}

sub gen_lock_delay
{
	return choose(
		[ 30, undef ],
		[ 20, sub { any_of('0', '1 ms', '5 ms', '50 ms', '00:00:00.1') } ],
		[ 3, sub { any_of('2 s', '1 day', '86400 s') } ],
		[ 20, sub { any_of(@bad_spans) } ],
		[ 5, sub { any_of(@unparsable_spans) } ]);
}

# Timeouts come with a class: 'short' waits a few milliseconds at most,
# 'bad' is refused before any wait, 'long' may wait for a long time or
# forever (NULL) and is only ever combined with a fresh name
sub gen_timeout
{
	return choose(
		[ 25, [ '0', 'short' ] ],
		[ 25, sub { [ (1 + int(rand(10))) . ' ms', 'short' ] } ],
		[ 5, sub { [ any_of('1 microsecond', '00:00:00.002', '1 year -12 months',
					'0.0000001 s', '1 day -24 hours 3 ms', '-1 ms 2 ms'), 'short' ] } ],
		[ 17, sub { [ any_of('-1 ms', '-1 microsecond', '-100000000 days', '1 mon',
					'-1 mon', '1 mon -30 days', '1 year', '1 millennium', '-2147483648 days',
					'-2147483648 days -2562047788 hours', '1 day -24 hours -1 microsecond'),
					'bad' ] } ],
		[ 6, sub { [ any_of(@unparsable_spans), 'bad' ] } ],
		[ 12, sub { [ any_of(undef, '1 hour', '0.5 mon', '100000000 days',
					'2147483647 days 2562047788 hours', '2147483647 days',
					'2562047788 hours', '1 year -12 months 1 day'), 'long' ] } ]);
}

sub gen_bound
{
	return choose(
		[ 40, 'true' ],
		[ 35, 'false' ],
		[ 12, undef ],
		[ 8, sub { any_of('on', 'off', 'yes', 'no', '1', '0', 't', 'f', ' TRUE ') } ],
		[ 5, sub { any_of('maybe', '2', '', 'truth', 'nul') } ]);
}

my @odd_tokens = ('0', '-1', '1', '9223372036854775807', '-9223372036854775808',
	' 42 ', '+3', '-0', '2147483648', '4294967296');
my @unparsable_tokens = ('9223372036854775808', '-9223372036854775809', '1e3',
	'1.5', '', 'abc', '0x10', '1_000', '--1', "\x{661}");

sub gen_token
{
	return choose(
		[ 8, undef ],
		[ 40, sub { my $p = pool_entry(); $p ? $p->{token} : '1' } ],
		[ 10, sub { my $d = any_of(-1, 1); my $p = pool_entry(); $p ? $p->{token} + $d : '2' } ],
		[ 32, sub { any_of(@odd_tokens) } ],
		[ 10, sub { any_of(@unparsable_tokens) } ]);
}

# ---------------------------------------------------------------------------
# Calls
# ---------------------------------------------------------------------------

# The placeholder of each argument in fuzz.call's USING list
my %placeholder = (name => 1, ttl => 2, owner => 3, timeout => 4,
	lock_delay => 5, session_bound => 6, token => 7);
my %cast = (1 => 'text', 2 => 'interval', 3 => 'text', 4 => 'interval',
	5 => 'interval', 6 => 'boolean', 7 => 'bigint');
# Parameters of each function, and how many are required
my %signature = (
	try_acquire => [ 2, qw(name ttl owner lock_delay session_bound) ],
	acquire => [ 2, qw(name ttl owner timeout lock_delay session_bound) ],
	renew => [ 3, qw(name owner ttl) ],
	release => [ 2, qw(name owner) ],
	force_release => [ 1, qw(name) ],
	fence => [ 2, qw(name token) ],
	holder_alive => [ 1, qw(token) ]);
my %returns_lease = (try_acquire => 1, acquire => 1, renew => 1);
# What an omitted optional argument means
my %default = (owner => undef, timeout => undef, lock_delay => undef,
	session_bound => 'false');

# The statement: positional, named or mixed notation; a lease either from
# FROM or from the select list
sub statement
{
	my ($fn, $given) = @_;
	my ($nreq, @params) = @{ $signature{$fn} };
	my @args;
	my $style = choose([ 5, 'positional' ], [ 3, 'named' ], [ 2, 'mixed' ]);
	if ($style eq 'positional')
	{
		my $last = $#params;
		$last-- while $last >= $nreq && !$given->{ $params[$last] };
		# a positional call passes every parameter up to the last given one
		$given->{$_} = 1 foreach @params[ 0 .. $last ];
		@args = map { '$' . $placeholder{$_} } @params[ 0 .. $last ];
	}
	else
	{
		my $npos = $style eq 'mixed' ? 1 + int(rand($nreq)) : 0;
		my @named = grep { $given->{$_} } @params[ $npos .. $#params ];
		foreach my $i (reverse 1 .. $#named)
		{
			my $j = int(rand($i + 1));
			@named[ $i, $j ] = @named[ $j, $i ];
		}
		@args = ((map { '$' . $placeholder{$_} } @params[ 0 .. $npos - 1 ]),
			map { "$_ => \$$placeholder{$_}" } @named);
		$given->{$_} = 1 foreach @params[ 0 .. $npos - 1 ];
	}
	my $call = "dlock.$fn(" . join(', ', @args) . ')';
	return "SELECT $call" unless $returns_lease{$fn};
	return choose(
		[ 1, "SELECT token, owner, name FROM $call" ],
		[ 1, "SELECT (l).token, (l).owner, (l).name FROM (SELECT $call AS l OFFSET 0) s" ]);
}

# One call: function, statement and the seven argument literals
sub gen_call
{
	my ($sess) = @_;
	my $fn = choose([ 22, 'try_acquire' ], [ 18, 'acquire' ], [ 14, 'renew' ],
		[ 13, 'release' ], [ 9, 'force_release' ], [ 16, 'fence' ],
		[ 8, 'holder_alive' ]);
	my %v;
	my ($nreq, @params) = @{ $signature{$fn} };
	my %given = map { $_ => rand() < 0.6 } @params;
	$given{$_} = 1 foreach @params[ 0 .. $nreq - 1 ];

	if ($fn eq 'try_acquire' || $fn eq 'acquire')
	{
		# a recent lease is likely held: contested, or extended by its owner
		my $p = rand() < 0.2 ? recent_entry() : undef;
		$v{name} = gen_name();
		$v{name} = $p->{name} if $p;
		$v{ttl} = gen_ttl();
		$v{owner} = gen_owner();
		$v{lock_delay} = gen_lock_delay();
		$v{session_bound} = gen_bound();
		if ($fn eq 'acquire')
		{
			my ($timeout, $class) = @{ gen_timeout() };
			$v{timeout} = $timeout;
			$class = 'long' unless $given{timeout};
			$v{name} = fresh_name() if $class eq 'long';
		}
	}
	elsif ($fn eq 'renew' || $fn eq 'release')
	{
		my $p = choose([ 50, sub { recent_entry($sess) } ], [ 15, \&pool_entry ],
			[ 35, undef ]);
		my $real_owner = rand() < 0.8;
		$v{name} = gen_name();
		$v{owner} = gen_owner();
		$v{name} = $p->{name} if $p;
		$v{owner} = $p->{owner} if $p && $real_owner;
		$v{ttl} = rand() < 0.5 ? good_ttl() : gen_ttl();
	}
	elsif ($fn eq 'force_release')
	{
		my @others = grep { $_->{sess} ne $sess } @pool;
		$v{name} = choose(
			[ 40, sub { @others ? $others[ pool_rand(scalar @others) ]{name} : 'job:2' } ],
			[ 60, \&gen_name ]);
	}
	elsif ($fn eq 'fence')
	{
		my $p = choose([ 35, sub { recent_entry() } ], [ 15, \&pool_entry ], [ 50, undef ]);
		my $real_token = rand() < 0.7;
		$v{name} = gen_name();
		$v{token} = gen_token();
		$v{name} = $p->{name} if $p;
		$v{token} = $p->{token} if $p && $real_token;
	}
	else
	{
		my @bound = grep { $_->{bound} } @pool;
		my $real_token = rand() < 0.5;
		$v{token} = gen_token();
		$v{token} = $bound[ pool_rand(scalar @bound) ]{token} if @bound && $real_token;
	}

	my $stmt = statement($fn, \%given);
	foreach my $param (keys %placeholder)
	{
		next if $given{$param} && grep { $_ eq $param } @params;
		$v{$param} = $default{$param};
	}
	return { fn => $fn, stmt => $stmt, v => \%v,
		read_only => rand() < 0.07, sess => $sess };
}

# An SQL literal for any text without NUL: doubled quotes, and an escape
# string when it holds control characters
sub literal
{
	my ($s) = @_;
	return 'NULL' unless defined $s;
	if ($s =~ /[\x00-\x1f\x7f]/)
	{
		(my $e = $s) =~ s/(['\\])/$1 eq "'" ? "''" : '\\\\'/ge;
		$e =~ s/([\x00-\x1f\x7f])/sprintf('\\x%02x', ord($1))/ge;
		return "E'$e'";
	}
	(my $q = $s) =~ s/'/''/g;
	return "'$q'";
}

my @param_order = qw(name ttl owner timeout lock_delay session_bound token);

sub call_sql
{
	my ($seq, $c) = @_;
	my $sql = "SELECT fuzz.call($seq, '$c->{fn}', " . literal($c->{stmt}) . ', '
	  . join(', ', map { literal($c->{v}{$_}) } @param_order) . ');';
	return $c->{read_only} ? "BEGIN READ ONLY; $sql COMMIT;" : $sql;
}

# The call as a statement to run by hand
sub replay_sql
{
	my ($c) = @_;
	(my $s = $c->{stmt}) =~ s/\$(\d)/'(' . literal($c->{v}{ $param_order[ $1 - 1 ] }) . ")::$cast{$1}"/ge;
	$s = "BEGIN READ ONLY; $s; COMMIT;" if $c->{read_only};
	return "-- as $c->{sess}\n$s";
}

# Short description of a call for the test output
sub describe
{
	my ($c) = @_;
	my @a;
	foreach my $p (@param_order)
	{
		my $x = $c->{v}{$p};
		next unless grep { $_ eq $p } @{ $signature{ $c->{fn} } };
		my $shown = !defined $x ? 'NULL'
		  : length($x) <= 60 ? literal($x)
		  : literal(substr($x, 0, 24)) . '...' . literal(substr($x, -12))
		  . ' (' . nbytes($x) . ' bytes)';
		push @a, "$p=$shown";
	}
	return "$c->{stmt} [as $c->{sess}" . ($c->{read_only} ? ', read only' : '')
	  . '] ' . join(', ', @a);
}

# ---------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------

my $start_time = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
my $log_offset = -s $node->logfile;

my %session;
my %session_pid;
my %session_role = (su => undef, a => 'fuzz_a', b => 'fuzz_b');
foreach my $s (sort keys %session_role)
{
	my $bg = $node->background_psql('postgres', on_error_stop => 0);
	my $setup = "SET client_encoding = 'UTF8'; SET statement_timeout = '20s';";
	$setup .= " SET ROLE $session_role{$s};" if defined $session_role{$s};
	# another interval style changes how some literals read
	$setup .= " SET intervalstyle = 'sql_standard';" if $s eq 'b';
	$bg->query_safe($setup);
	$session{$s} = $bg;
	$session_pid{$s} = $bg->query_safe('SELECT pg_backend_pid()');
}

my (%calls, %successes, %effective, %errors, %input_errors, %input_by_fn, %errors_by_fn);
my (@failures, @psql_errors);
my $bad_codes = 0;
my $input_bad_codes = 0;
my $rule_breaks = 0;
my $changed_on_error = 0;
my $changed_on_noop = 0;
my $wrong_sqlstate = 0;
my $done = 0;
my %allowed_input = map { $_ => 1 } qw(22003 22007 22008 22015 22P02);
# what a call with acceptable arguments may raise
my %allowed_runtime = (acquire => { '55P03' => 1 }, force_release => { '42501' => 1 });

sub fail_call
{
	my ($c, $why) = @_;
	push @failures, [ $c, $why ];
}

my $builder = Test::More->builder;
my $test_output = $builder->output;
open(my $quiet, '>', File::Spec->devnull) or die "devnull: $!";
my $t0 = time;
my $seq = 0;
my $batch_size = 25;
note 'running calls';
while ($seq < $ncalls)
{
	my $sess = any_of(sort keys %session);
	my @batch;
	while (@batch < $batch_size && $seq < $ncalls)
	{
		push @batch, gen_call($sess);
		$batch[-1]{seq} = ++$seq;
	}
	my $sql = join("\n", map { call_sql($_->{seq}, $_) } @batch);

	# The psql session notes every query, which would be megabytes here
	$builder->output($quiet);
	my ($out, $stderr_seen) = eval { $session{$sess}->query(to_bytes($sql)) };
	my $died = $@;
	$builder->output($test_output);
	if ($died || $stderr_seen)
	{
		push @psql_errors, $died || $session{$sess}{stderr};
		last;
	}

	my @lines = split /\n/, $out;
	if (@lines != @batch)
	{
		push @psql_errors, 'expected ' . scalar(@batch) . ' result lines, got '
		  . scalar(@lines) . ": $out";
		last;
	}
	foreach my $i (0 .. $#batch)
	{
		my $c = $batch[$i];
		my ($rseq, $phase, $outcome, $expected, $changed, $result, $rule, $msg) =
		  split /\|/, $lines[$i], -1;
		if (!defined $msg || $rseq ne $c->{seq})
		{
			push @psql_errors, "unreadable result: $lines[$i]";
			next;
		}
		$msg = from_bytes(pack('H*', $msg));
		$done++;
		my $fn = $c->{fn};
		$calls{$fn}++;
		if ($phase eq 'input')
		{
			$input_errors{$outcome}++;
			$input_by_fn{$fn}++;
			if (!$allowed_input{$outcome})
			{
				$input_bad_codes++;
				fail_call($c, "input literal rejected with $outcome: $msg");
			}
			next;
		}

		if ($outcome eq 'ok')
		{
			$successes{$fn}++;
			$effective{$fn}++ if $result ne 'null' && $result ne 'false';
		}
		else
		{
			$errors{$outcome}++;
			$errors_by_fn{$fn}{$outcome}++;
		}

		if ($expected ne 'ok')
		{
			if ($outcome ne $expected)
			{
				$wrong_sqlstate++;
				fail_call($c, "expected $expected, got $outcome $msg");
			}
		}
		elsif ($outcome ne 'ok'
			&& !($allowed_runtime{$fn}{$outcome}
				&& !($outcome eq '42501' && $sess eq 'su')))
		{
			$bad_codes++;
			fail_call($c, "unexpected $outcome: $msg");
		}

		if ($outcome ne 'ok')
		{
			if ($changed ne '')
			{
				$changed_on_error++;
				fail_call($c, "failed with $outcome but changed $changed");
			}
		}
		else
		{
			# a call that grants or ends nothing changes nothing; a fence
			# that holds takes its lock
			my $noop = $fn eq 'fence' || $fn eq 'holder_alive'
			  || $result eq 'null' || $result eq 'false';
			my $allowed = $fn eq 'fence' && $result eq 'true' ? 'L' : '';
			if ($noop && $changed ne '' && $changed ne $allowed)
			{
				$changed_on_noop++;
				fail_call($c, "returned $result but changed $changed");
			}
		}
		if ($rule ne '')
		{
			$rule_breaks++;
			fail_call($c, "$rule (result $result)");
		}

		if ($outcome eq 'ok' && $result =~ /^(\d+):([0-9a-f]*)$/)
		{
			my ($token, $owner_hex) = ($1, $2);
			my $bound = ($c->{v}{session_bound} // '') =~ /^\s*(?:t|on|y|1)/i ? 1 : 0;
			push @pool, { name => $c->{v}{name}, token => $token,
				owner => from_bytes(pack('H*', $owner_hex)),
				sess => $sess, bound => $bound };
			shift @pool if @pool > 300;
		}
	}
}
my $elapsed = time - $t0;

# ---------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------

note sprintf('%d calls in %.1f s', $done, $elapsed);
note 'ok: no error; effective: a lease, or true, came back; input: a literal was refused';
note sprintf('  %-14s %6s %6s %6s %9s  %s', 'function', 'calls', 'input', 'ok',
	'effective', 'errors by SQLSTATE');
foreach my $fn (sort keys %signature)
{
	note sprintf('  %-14s %6d %6d %6d %9d  %s', $fn, $calls{$fn} // 0,
		$input_by_fn{$fn} // 0, $successes{$fn} // 0, $effective{$fn} // 0,
		join(', ', map { "$_: $errors_by_fn{$fn}{$_}" } sort keys %{ $errors_by_fn{$fn} // {} }));
}
note 'errors raised by dlock, by SQLSTATE: '
  . join(', ', map { "$_: $errors{$_}" } sort keys %errors);
note 'input literals rejected by PostgreSQL before the call, by SQLSTATE: '
  . join(', ', map { "$_: $input_errors{$_}" } sort keys %input_errors);
note 'leases granted or renewed: ' . scalar(@pool) . ' kept as current values';

if (@failures)
{
	my $file = "$PostgreSQL::Test::Utils::tmp_check/fuzz_failures.sql";
	open(my $fh, '>', $file) or die "$file: $!";
	foreach my $f (@failures)
	{
		print $fh to_bytes("-- call $f->[0]{seq}: " . ($f->[1] =~ s/\n/ /gr) . "\n"
			  . replay_sql($f->[0]) . "\n\n");
	}
	close $fh;
	my $shown = 0;
	foreach my $f (@failures)
	{
		last if ++$shown > 20;
		diag(to_bytes("call $f->[0]{seq}: $f->[1]\n  " . describe($f->[0])));
	}
	diag(scalar(@failures) . " failing calls, replayable statements in $file");
}

is(join("\n", @psql_errors), '', 'every call ran and reported through the wrapper');
is($done, $ncalls, "all $ncalls calls were made");

note 'the server and the sessions';
is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'),
	$start_time, 'the postmaster never restarted');
foreach my $s (sort keys %session)
{
	my $pid = eval { $session{$s}->query_safe('SELECT pg_backend_pid()') } // 'gone';
	is($pid, $session_pid{$s}, "session $s kept its backend");
}
my $log = slurp_file($node->logfile, $log_offset);
my @crash = grep {
	/terminated by signal|server process .* (?:was terminated|exited with exit code)|PANIC|TRAP|WARNING|terminating any other active/
} split /\n/, $log;
is(join("\n", @crash), '', 'the server log shows no crash, assertion failure or warning');

note 'errors';
is($bad_codes, 0,
	'dlock raised no SQLSTATE beyond 55P03 (acquire) and 42501 (force_release) for acceptable arguments');
is($wrong_sqlstate, 0,
	'bad arguments and read-only transactions raise the documented SQLSTATE (22004, 22023, 25006)');
is($input_bad_codes, 0,
	'literals rejected before the call are rejected by input functions (22003, 22007, 22008, 22015, 22P02)');
my %documented = map { $_ => 1 } qw(22004 22023 55P03 42501 25006);
is(join(', ', grep { !$documented{$_} } sort keys %errors), '',
	'every error dlock raised is one of 22004, 22023, 55P03, 42501, 25006');
SKIP:
{
	# the run reached every documented error and every function's success
	skip 'too few calls to expect every outcome', 12 if $ncalls < 2000;
	foreach my $code (sort keys %documented)
	{
		ok($errors{$code}, "the run raised $code at least once");
	}
	foreach my $fn (sort keys %signature)
	{
		ok($successes{$fn}, "dlock.$fn succeeded at least once");
	}
}

note 'state';
is($changed_on_error, 0,
	'a failed call changed neither the lease table, nor the token counter, nor its locks');
is($changed_on_noop, 0,
	'a call that granted or ended nothing changed nothing');
is($rule_breaks, 0,
	'every lease returned carries the holder\'s token or the counter\'s next value');

my $sanity = $node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE octet_length(name) NOT BETWEEN 1 AND 1024
	                           OR octet_length(owner) NOT BETWEEN 1 AND 256
	                           OR token < 1 OR expires_at <= acquired_at
	                           OR lock_delay < interval '0'),
	       count(*) = count(DISTINCT token),
	       coalesce(max(token), 0) <= (SELECT last_value FROM dlock.token_seq),
	       count(*)
	  FROM dlock.lease_state});
my ($bad_rows, $distinct, $below_counter, $rows) = split /\|/, $sanity;
note "$rows names in dlock.lease_state";
is($bad_rows, '0', 'every stored lease is within the limits');
is($distinct, 't', 'no token was issued to two names');
is($below_counter, 't', 'no stored token is ahead of the counter');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock.leases
	WHERE state = 'session_ended' AND expires_at > clock_timestamp()}),
	'0', 'no unexpired session-bound lease lost its holder while every session lived');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock.locks
	WHERE kind IN ('name', 'queue')}),
	'0', 'no name or queue lock is left behind');

$_->quit foreach values %session;
$node->stop;
done_testing();

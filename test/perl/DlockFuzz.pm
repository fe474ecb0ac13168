=pod

=head1 NAME

DlockFuzz - the fuzz test of dlock's SQL API, for either edition

=head1 SYNOPSIS

  use DlockFuzz qw(run_fuzz);
  run_fuzz(edition => 'c', calls => 4000);      # test/t/005_fuzz.pl
  run_fuzz(edition => 'sql', calls => 2400);    # test/t/025_sql_edition_fuzz.pl

=head1 DESCRIPTION

Bad input, at random: a few thousand calls of every function of dlock 1.1
(try_acquire and acquire with every argument: value, queue, shared,
max_holders, session_bound; renew with value; release, force_release,
fence, holder_alive; the set functions; watch; purge; name_key, the
statistics and lease_states; dlock.holder's input and output functions,
operators, support functions and casts; reads of the views) with
arguments of every shape (NULLs anywhere, names, owners and values of
every length and byte, name arrays empty, too long, of two dimensions or
with NULLs, durations of every sign, unit and size, tokens, limits and
OIDs of every size, role names quoted, qualified or unknown), mixed with
valid calls so that leases of every kind exist and change, from several
roles, some in read-only transactions.  It proves that the server never
crashes, that no call raises an internal error (XX000), that every error
dlock raises has a documented SQLSTATE (the one the documented rules give
for bad input), that input literals PostgreSQL itself rejects never reach
dlock, that a failed call, or one that grants or ends nothing, leaves the
lease table, the token counter and the session's locks (every space of
dlock.locks) as they were, and that once the sessions are gone nothing is
left in dlock.locks.  Then random bytes go through dlock.holder's binary
input function by binary COPY, and each must load what the text form gives.

The calls, the arguments and the checks are the same for both editions;
C<edition> says which one the cluster has and where the two differ by
design (sql-edition/README.md, "Differences from the C edition"):

=over

=item C<c>

The C edition, preloaded (queue places and statistics need it), in
database postgres.  Sessions: a superuser and two plain roles reached by
SET ROLE.  The binary form of dlock.holder is its text form in the client's
encoding (holder_recv).

=item C<sql>

The SQL edition (sql-edition/dlock.sql, or C<script>), installed by a
plain role that owns the database, in a cluster that never loads dlock's
library.  Sessions log in as that owner, two plain roles and a superuser.
What needs the C edition raises 0A000 with a message that names the C
edition (dlock.stats, stats(), and stats_reset() for the roles that may
execute it; try_acquire(queue => true)); dlock.holder is a domain over regrole: its text input raises
regrole's errors (42602, 42704) where the C edition's reads an unknown
name as no role or raises 22P02, the C edition's holder_in, holder_out,
holder_cmp, holder_hash, holder_lt/le/gt/ge and operators dlock.< and
dlock.>= do not exist (42883), and its binary form is regrole's, the OID
in four bytes: a binary COPY loads the role whose OID the four bytes are,
as the text form of that number does, and any other length fails (22P03,
08P01).

=back

DLOCK_FUZZ_SEED picks the random seed (printed at the start) and
DLOCK_FUZZ_CALLS the number of calls (and half as many binary COPYs of a
dlock.holder follow them).  The same seed gives the same calls, except
for the names, owners and tokens taken from leases granted earlier in the
run, which depend on timing.  Every failing call is printed as a
statement that can be run by hand, and all of them are written to
fuzz_failures.sql in the test's directory.

=cut

package DlockFuzz;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use File::Spec;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use DlockTest qw(locks_left);

our @EXPORT_OK = qw(run_fuzz);

# The run: its edition, seed, size, cluster and database
my ($edition, $seed, $ncalls, $node, $db, $max_ttl_us);
# Leases granted so far (below), and the failing calls
my (@pool, $fresh, $pool_state, @failures);

=pod

=head2 run_fuzz(%options)

Makes the cluster, runs the calls and the binary COPYs, and makes every
assertion.  Options: C<edition>, C<c> or C<sql>; C<calls>, the number of
calls when DLOCK_FUZZ_CALLS is not set; C<script>, the SQL edition's
script (default sql-edition/dlock.sql of the source tree).

=cut

sub run_fuzz
{
	my (%options) = @_;
	$edition = $options{edition} // die 'run_fuzz: edition is required';
	die "run_fuzz: unknown edition $edition" unless $edition =~ /^(?:c|sql)$/;
	$seed = $ENV{DLOCK_FUZZ_SEED} // 5150;
	$ncalls = $ENV{DLOCK_FUZZ_CALLS} // $options{calls} // 4000;
	die "DLOCK_FUZZ_SEED must be an integer" unless $seed =~ /^\d+$/;
	die "DLOCK_FUZZ_CALLS must be an integer" unless $ncalls =~ /^\d+$/;
	srand($seed);
	$pool_state = $seed % 2147483648;
	@pool = ();
	$fresh = 0;
	@failures = ();
	note "random seed $seed (replay with DLOCK_FUZZ_SEED=$seed), $ncalls calls";

	setup_cluster($options{script} // "$ENV{TESTDIR}/sql-edition/dlock.sql");
	run_calls();
	binary_copies();
	$node->stop;
	done_testing();
}

# The cluster, dlock, its roles and the harness.  In the SQL edition the
# database's owner installs dlock and the harness, as on a managed service;
# the superuser only makes the roles and the database.
sub setup_cluster
{
	my ($script) = @_;
	$node = PostgreSQL::Test::Cluster->new($edition eq 'c' ? 'fuzz' : 'fuzz_sql');
	$node->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
	# The calls carry names of up to 100 kB: do not log every statement.
	# Preloaded: queue places and statistics need it.
	$node->append_conf('postgresql.conf', $edition eq 'c' ? qq{log_statement = none
shared_preload_libraries = 'dlock'
} : qq{log_statement = none
});
	$node->start;
	my $as_owner;    # the role the harness is made as
	if ($edition eq 'c')
	{
		$db = 'postgres';
		$node->safe_psql($db, 'CREATE EXTENSION dlock');
		$node->safe_psql($db, 'CREATE ROLE fuzz_a; CREATE ROLE fuzz_b;');
		$as_owner = [];
		my $max_ttl_s = $node->safe_psql($db,
			q{LOAD 'dlock'; SELECT setting FROM pg_settings WHERE name = 'dlock.max_ttl'});
		die "dlock.max_ttl is not defined" unless $max_ttl_s =~ /^\d+$/;
		$max_ttl_us = $max_ttl_s * 1_000_000;
	}
	else
	{
		$db = 'fuzz';
		die "the SQL edition's script is missing: $script" unless -f $script;
		note "installing $script";
		$node->safe_psql('postgres', 'CREATE ROLE fuzz_owner LOGIN; CREATE ROLE fuzz_a LOGIN; CREATE ROLE fuzz_b LOGIN;');
		$node->safe_psql('postgres', "CREATE DATABASE $db OWNER fuzz_owner");
		$node->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-U', 'fuzz_owner',
				'-d', $node->connstr($db), '-f', $script ],
			'the database owner, a plain role, installs the SQL edition');
		$as_owner = [ '-U', 'fuzz_owner' ];
		is($node->safe_psql($db, q{
			SELECT format('superuser %s, extension %s, SQL edition %s, preloaded %L',
			              (SELECT rolsuper FROM pg_roles WHERE rolname = 'fuzz_owner'),
			              (SELECT count(*) FROM pg_extension WHERE extname = 'dlock'),
			              to_regprocedure('dlock._token_next()') IS NOT NULL,
			              current_setting('shared_preload_libraries'))}),
			"superuser f, extension 0, SQL edition t, preloaded ''",
			'the SQL edition is installed by a plain role, without extension dlock and without preloading');
		# dlock.max_ttl as the SQL edition reads it (a placeholder, default 1 day)
		my $max_ttl_s = $node->safe_psql($db, 'SELECT dlock._max_ttl_s()', extra_params => $as_owner);
		die "dlock.max_ttl is not read" unless $max_ttl_s =~ /^\d+$/;
		$max_ttl_us = $max_ttl_s * 1_000_000;
	}
	note "dlock.max_ttl is " . ($max_ttl_us / 1_000_000) . ' s';

	# The harness, in schema fuzz:
	#  * fuzz.snap(): what a failed call must leave alone: a checksum of the lease
	#    table, the token counter, and this backend's locks in dlock.locks (every
	#    lock space), read as the role that owns the harness (the superuser; in
	#    the SQL edition dlock's owner, who owns the table and the counter), for
	#    any caller;
	#  * fuzz.expect(): the SQLSTATE the documented rules give for the arguments
	#    (docs/reference.md, Errors and Limits), or 'ok' when they are acceptable;
	#    in the SQL edition, also the 0A000 and 42883 of what it lacks by design
	#    (sql-edition/README.md);
	#  * fuzz.call(): casts the argument literals (an error there is PostgreSQL's
	#    input function speaking, not dlock), runs the call in a subtransaction,
	#    catches its error, and reports one line:
	#      seq|phase|outcome|expected|changed|result|rule|message (hex)
	#    changed lists what differs after the call: T (table), C (counter),
	#    L (locks); rule names a broken rule of a lease that came back (its
	#    name, owner and token) or of a set (one token for all its names).
	# The arguments travel as text literals and reach dlock as typed parameters
	# of an EXECUTE, so no byte of a name can change the statement.
	$node->safe_psql($db, qq{
CREATE SCHEMA fuzz;
GRANT USAGE ON SCHEMA fuzz TO PUBLIC;

CREATE FUNCTION fuzz.snap(OUT tbl text, OUT counter bigint, OUT called boolean, OUT locks text)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS \$\$
  SELECT (SELECT coalesce(md5(string_agg(s::text, E'\\n' ORDER BY s.name, s.slot)), '')
            FROM dlock.lease_state s),
         q.last_value, q.is_called,
         (SELECT coalesce(md5(string_agg(k, E'\\n' ORDER BY k)), '')
            FROM (SELECT l.kind || '/' || coalesce(l.name, '') || '/' || coalesce(l.token::text, '')
                         || '/' || l.mode AS k
                    FROM dlock.locks l
                   WHERE l.pid = pg_backend_pid() AND l.granted) k)
    FROM dlock.token_seq q
\$\$;

CREATE FUNCTION fuzz.name_tokens(n text) RETURNS bigint[]
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS \$\$
  SELECT coalesce(array_agg(token), '{}') FROM dlock.lease_state WHERE name = n
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

-- The names array of the *_all functions: NULL, more than one dimension,
-- empty, each element in order, then more than 64 distinct names (a name
-- given twice counts once)
CREATE FUNCTION fuzz.names_error(names text[]) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS \$\$
DECLARE
  n text;
BEGIN
  IF names IS NULL THEN RETURN '22004'; END IF;
  IF array_ndims(names) > 1 THEN RETURN '22023'; END IF;
  IF coalesce(cardinality(names), 0) = 0 THEN RETURN '22023'; END IF;
  FOREACH n IN ARRAY names LOOP
    IF n IS NULL THEN RETURN '22004'; END IF;
    IF fuzz.text_error(n, 1024) IS NOT NULL THEN RETURN '22023'; END IF;
  END LOOP;
  IF (SELECT count(DISTINCT u COLLATE "C") FROM unnest(names) u) > 64 THEN RETURN '22023'; END IF;
  RETURN NULL;
END \$\$;

CREATE FUNCTION fuzz.expect(fn text, p_name text, ttl interval, p_owner text,
                            timeout interval, delay interval, bound boolean, token bigint,
                            p_value text, queue boolean, shared boolean, max_holders int,
                            names text[], older_than interval, stmt text)
RETURNS text LANGUAGE plpgsql STABLE AS \$\$
DECLARE
  e text;
  ro boolean := current_setting('transaction_read_only')::boolean;
BEGIN
  -- The SQL edition, by design: no shared memory (statistics), and
  -- dlock.holder a domain over regrole, without the C edition's functions
  -- and ordering operators; stats_reset() stays its owner's.  (A read of
  -- dlock.stats WHERE name = NULL never calls dlock.stats(): the planner
  -- sees that no row can match.)
  IF '$edition' = 'sql' THEN
    IF fn = 'stats' OR (fn = 'views' AND stmt LIKE '%FROM dlock.stats %' AND p_name IS NOT NULL) THEN
      RETURN '0A000';
    END IF;
    IF fn = 'stats_reset' THEN
      RETURN CASE WHEN has_function_privilege('dlock.stats_reset()', 'EXECUTE') THEN '0A000' ELSE '42501' END;
    END IF;
    IF fn = 'holder' AND stmt ~ 'dlock\\.holder_(in|out|cmp|hash|lt|le|gt|ge)\\(|OPERATOR\\(dlock\\.(<|>=)\\)' THEN
      RETURN '42883';
    END IF;
  END IF;
  -- STRICT, or no arguments dlock checks: NULL gives NULL
  IF fn IN ('holder_alive', 'name_key', 'stats', 'lease_states', 'views', 'holder') THEN
    RETURN 'ok';
  END IF;
  IF fn = 'stats_reset' THEN
    RETURN CASE WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN 'ok' ELSE '42501' END;
  END IF;
  IF fn = 'purge' THEN
    IF older_than IS NULL THEN RETURN '22004'; END IF;
    e := fuzz.span_error(older_than, true, false);
    IF e IS NOT NULL THEN RETURN e; END IF;
    IF NOT pg_has_role(current_user, (SELECT datdba FROM pg_database WHERE datname = current_database()),
                       'USAGE') THEN
      RETURN '42501';
    END IF;
    RETURN CASE WHEN ro THEN '25006' ELSE 'ok' END;
  END IF;
  IF fn IN ('try_acquire_all', 'acquire_all', 'release_all') THEN
    e := fuzz.names_error(names);
    IF e IS NOT NULL THEN RETURN e; END IF;
    IF fn = 'release_all' THEN
      IF p_owner IS NULL THEN RETURN '22004'; END IF;
      e := fuzz.text_error(p_owner, 256);
    ELSE
      IF ttl IS NULL THEN RETURN '22004'; END IF;
      e := coalesce(fuzz.span_error(ttl, false, true), fuzz.text_error(p_owner, 256));
      IF e IS NULL AND fn = 'acquire_all' THEN e := fuzz.span_error(timeout, true, false); END IF;
    END IF;
    IF e IS NOT NULL THEN RETURN e; END IF;
    RETURN CASE WHEN ro THEN '25006' ELSE 'ok' END;
  END IF;
  IF p_name IS NULL THEN RETURN '22004'; END IF;
  e := fuzz.text_error(p_name, 1024);
  IF e IS NOT NULL THEN RETURN e; END IF;
  IF fn = 'fence' THEN
    RETURN CASE WHEN token IS NULL THEN '22004' ELSE 'ok' END;
  END IF;
  IF fn = 'watch' THEN
    RETURN coalesce(fuzz.span_error(timeout, true, false), 'ok');
  END IF;
  IF fn IN ('try_acquire', 'acquire') THEN
    IF ttl IS NULL THEN RETURN '22004'; END IF;
    e := coalesce(fuzz.span_error(ttl, false, true),
                  fuzz.text_error(p_owner, 256),
                  fuzz.span_error(delay, true, true));
    IF e IS NOT NULL THEN RETURN e; END IF;
    IF bound IS NULL THEN RETURN '22004'; END IF;
    IF octet_length(p_value) > 1024 THEN RETURN '22023'; END IF;
    IF fn = 'try_acquire' AND queue IS NULL THEN RETURN '22004'; END IF;
    IF fn = 'try_acquire' AND queue AND '$edition' = 'sql' THEN RETURN '0A000'; END IF;
    IF shared IS NULL OR max_holders IS NULL THEN RETURN '22004'; END IF;
    IF max_holders NOT BETWEEN 1 AND 1000 OR (shared AND max_holders > 1) THEN RETURN '22023'; END IF;
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
      IF octet_length(p_value) > 1024 THEN RETURN '22023'; END IF;
    END IF;
  END IF;
  IF ro THEN RETURN '25006'; END IF;
  RETURN 'ok';
END \$\$;

CREATE FUNCTION fuzz.hex(t text) RETURNS text LANGUAGE sql IMMUTABLE AS \$\$
  SELECT encode(convert_to(t, 'UTF8'), 'hex')
\$\$;

-- p_lits: the argument literals, in the order of the placeholders \$1 ...
-- \$16 (see %placeholder below)
CREATE FUNCTION fuzz.call(seq int, fn text, stmt text, p_lits text[])
RETURNS text LANGUAGE plpgsql AS \$\$
DECLARE
  p_name text := p_lits[1];
  p_owner text := p_lits[3];
  p_value text := p_lits[8];
  p_holder text := p_lits[14];
  p_holder2 text := p_lits[15];
  v_ttl interval;
  v_timeout interval;
  v_delay interval;
  v_bound boolean;
  v_token bigint;
  v_queue boolean;
  v_shared boolean;
  v_max int;
  v_names text[];
  v_older interval;
  v_oid oid;
  expected text;
  b record;
  a record;
  tok_before bigint[];
  r_token bigint;
  r_owner text;
  r_name text;
  r_text text;
  result text;
  outcome text := 'ok';
  msg text;
  changed text := '';
  rule text;
BEGIN
  BEGIN
    v_ttl := p_lits[2]::interval;
    v_timeout := p_lits[4]::interval;
    v_delay := p_lits[5]::interval;
    v_bound := p_lits[6]::boolean;
    v_token := p_lits[7]::bigint;
    v_queue := p_lits[9]::boolean;
    v_shared := p_lits[10]::boolean;
    v_max := p_lits[11]::int;
    v_names := p_lits[12]::text[];
    v_older := p_lits[13]::interval;
    v_oid := p_lits[16]::oid;
  EXCEPTION WHEN OTHERS THEN
    RETURN format('%s|input|%s||||||%s', seq, SQLSTATE, fuzz.hex(left(SQLERRM, 200)));
  END;

  expected := fuzz.expect(fn, p_name, v_ttl, p_owner, v_timeout, v_delay, v_bound, v_token,
                          p_value, v_queue, v_shared, v_max, v_names, v_older, stmt);
  IF fn IN ('try_acquire', 'acquire', 'renew') AND octet_length(p_name) BETWEEN 1 AND 1024 THEN
    tok_before := fuzz.name_tokens(p_name);
  END IF;
  SELECT * INTO b FROM fuzz.snap();
  BEGIN
    IF fn IN ('try_acquire', 'acquire', 'renew') THEN
      EXECUTE stmt INTO r_token, r_owner, r_name
        USING p_name, v_ttl, p_owner, v_timeout, v_delay, v_bound, v_token, p_value,
              v_queue, v_shared, v_max, v_names, v_older, p_holder, p_holder2, v_oid;
      result := CASE WHEN r_token IS NULL THEN 'null'
                     ELSE r_token || ':' || fuzz.hex(r_owner) END;
    ELSE
      EXECUTE stmt INTO r_text
        USING p_name, v_ttl, p_owner, v_timeout, v_delay, v_bound, v_token, p_value,
              v_queue, v_shared, v_max, v_names, v_older, p_holder, p_holder2, v_oid;
      result := coalesce(translate(r_text, E'|\\n\\r', '???'), 'null');
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
    ELSIF NOT r_token = ANY (fuzz.name_tokens(p_name)) THEN
      rule := 'the name does not hold the token returned';
    ELSIF p_owner IS NOT NULL AND r_owner IS DISTINCT FROM p_owner THEN
      rule := 'the lease has another owner';
    ELSIF p_owner IS NULL AND fn <> 'renew' AND r_owner !~ '^[0-9a-f]{32}\$' THEN
      rule := 'a generated owner is not 32 hex digits';
    ELSIF position('C' IN changed) = 0 THEN
      IF NOT r_token = ANY (tok_before) THEN rule := 'token not kept'; END IF;
    ELSIF fn = 'renew' THEN
      rule := 'renew drew a token';
    ELSIF NOT (a.called AND r_token = a.counter AND (NOT b.called OR r_token > b.counter)) THEN
      rule := 'token is not the next one';
    END IF;
  END IF;
  -- A set comes back as rows:distinct tokens:token:owner (hex), all under
  -- one token
  IF fn IN ('try_acquire_all', 'acquire_all') AND outcome = 'ok' AND split_part(result, ':', 2)::int > 1 THEN
    rule := 'a set has more than one token';
  END IF;
  RETURN format('%s|call|%s|%s|%s|%s|%s|%s', seq, outcome, expected, changed, result, rule, msg);
END \$\$;
	}, extra_params => $as_owner);
	}

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
# @pool: granted leases, { name, owner, token, sess, bound }; $fresh
# counts fresh names.
# Leases granted so far depend on timing (short ttls, waits), so picks among
# them draw from a stream of their own, $pool_state, started from the seed:
# the main stream, and with it every generated argument, stays the same for
# a given seed

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

# Arguments of version 1.1: values, the kind of lease, queue places, name
# arrays, purge's older_than, and role names and OIDs for dlock.holder
sub gen_value
{
	return choose(
		[ 30, undef ],
		[ 5, '' ],
		[ 25, sub { any_of('10.0.0.1:5432', 'leader', "h\x{e9}te", q{v'al"ue}, "\x{1f600}") } ],
		[ 20, sub { edge_text(1024) } ],
		[ 15, sub { rand_text(1 + int(rand(60)), rand_kind()) } ],
		[ 5, sub { text_of_bytes(1025 + int(rand(3000))) } ]);
}

sub gen_flag
{
	return choose([ 50, 'false' ], [ 30, 'true' ], [ 10, undef ],
		[ 7, sub { any_of('on', 'off', 't', '0', ' yes ') } ], [ 3, sub { any_of('maybe', '', '2') } ]);
}

sub gen_max_holders
{
	return choose(
		[ 30, '1' ],
		[ 35, sub { any_of('2', '3', '5') } ],
		[ 5, undef ],
		[ 15, sub { any_of('0', '-1', '1000', '1001', '2147483647', '-2147483648', ' 3 ', '+2') } ],
		[ 5, sub { any_of('2147483648', '1.5', 'abc', '', '3e2') } ]);
}

# An element of a names array in array-literal syntax
sub array_element
{
	my ($s) = @_;
	return 'NULL' unless defined $s;
	(my $e = $s) =~ s/(["\\])/\\$1/g;
	return "\"$e\"";
}

# A names array literal: one of the hot names, fresh names, random ones,
# NULL elements, duplicates, empty, too many, two dimensions, bad syntax
sub gen_names
{
	my ($fresh_only) = @_;
	my $pick = $fresh_only ? \&fresh_name : sub { choose([ 60, sub { any_of(@hot_names) } ],
			[ 15, sub { my $p = pool_entry(); $p ? $p->{name} : 'job:1' } ],
			[ 15, \&fresh_name ], [ 6, \&random_name ], [ 4, undef ]) };
	return choose(
		[ 70, sub { [ map { $pick->() } 1 .. 1 + int(rand(5)) ] } ],
		[ 6, sub { my $n = $pick->() // 'x'; [ $n, $n, $pick->() ] } ],
		[ 6, sub { [ map { $pick->() } 1 .. 60 + int(rand(10)) ] } ],
		[ 5, undef ],
		[ 5, '{}' ],
		[ 4, sub { '{{' . join(',', map { array_element($pick->()) } 1 .. 2) . '},{'
			  . join(',', map { array_element($pick->()) } 1 .. 2) . '}}' } ],
		[ 4, sub { any_of('{a', 'x', '{"a}', '{a,b}}', '[1:2]={a,b}', '{{a},{b,c}}') } ]);
}

# A names array as the literal that travels: array-literal text
sub names_literal
{
	my ($names) = @_;
	return $names if !defined $names || !ref $names;
	return '{' . join(',', map { array_element($_) } @$names) . '}';
}

sub gen_older_than
{
	return choose([ 30, sub { any_of('0', '1 ms', '1 s', '1 hour', '1 day', '00:00:00.5') } ],
		[ 5, undef ], [ 20, sub { any_of(@bad_spans) } ], [ 5, sub { any_of(@unparsable_spans) } ],
		[ 5, sub { any_of('106751991 days', '2147483647 days 2562047788 hours') } ]);
}

# Role names as dlock.holder reads them: real roles, quoted, qualified,
# unknown, empty, the no-role dash, long and odd ones
sub gen_holder
{
	return choose(
		[ 25, sub { any_of('fuzz_a', 'fuzz_b', 'postgres', 'pg_monitor', '-', 'FUZZ_A', '"fuzz_a"') } ],
		[ 20, sub { any_of('', ' ', '"', '""', '"a""b"', 'a.b', '"a.b"', '.', 'a b', '-x',
					'"unterminated', "tab\tx", 'public', 'x' x 70, '"' . ('y' x 70) . '"') } ],
		[ 15, sub { rand_text(1 + int(rand(20)), rand_kind()) } ],
		[ 5, undef ]);
}

sub gen_oid
{
	return choose([ 40, sub { any_of('0', '10', '1', '4294967295', '3373') } ],
		[ 20, sub { int(rand(20000)) } ], [ 5, undef ],
		[ 5, sub { any_of('-1', '4294967296', 'abc', '') } ]);
}

# ---------------------------------------------------------------------------
# Calls
# ---------------------------------------------------------------------------

# The placeholder of each argument in fuzz.call's USING list
my %placeholder = (name => 1, ttl => 2, owner => 3, timeout => 4,
	lock_delay => 5, session_bound => 6, token => 7, value => 8, queue => 9,
	shared => 10, max_holders => 11, names => 12, older_than => 13,
	holder => 14, holder2 => 15, oid => 16);
my %cast = (1 => 'text', 2 => 'interval', 3 => 'text', 4 => 'interval',
	5 => 'interval', 6 => 'boolean', 7 => 'bigint', 8 => 'text', 9 => 'boolean',
	10 => 'boolean', 11 => 'integer', 12 => 'text[]', 13 => 'interval',
	14 => 'text', 15 => 'text', 16 => 'oid');
my @param_order = sort { $placeholder{$a} <=> $placeholder{$b} } keys %placeholder;
# Parameters of each function, and how many are required.  holder stands
# for dlock.holder's input and output functions, operators, support
# functions and casts; views for reading dlock.leases, dlock.locks and
# dlock.stats.
my %signature = (
	try_acquire => [ 2, qw(name ttl owner lock_delay session_bound value queue shared max_holders) ],
	acquire => [ 2, qw(name ttl owner timeout lock_delay session_bound value shared max_holders) ],
	renew => [ 3, qw(name owner ttl value) ],
	release => [ 2, qw(name owner) ],
	force_release => [ 1, qw(name) ],
	fence => [ 2, qw(name token) ],
	holder_alive => [ 1, qw(token) ],
	try_acquire_all => [ 2, qw(names ttl owner) ],
	acquire_all => [ 2, qw(names ttl owner timeout) ],
	release_all => [ 2, qw(names owner) ],
	watch => [ 2, qw(name token timeout) ],
	purge => [ 0, qw(older_than) ],
	name_key => [ 1, qw(name) ],
	stats => [ 0 ],
	stats_reset => [ 0 ],
	lease_states => [ 0 ],
	views => [ 0, qw(name) ],
	holder => [ 0, qw(holder holder2 oid) ]);
my %returns = (try_acquire => 'lease', acquire => 'lease', renew => 'lease',
	try_acquire_all => 'set', acquire_all => 'set');
# What an omitted optional argument means
my %default = (owner => undef, timeout => undef, lock_delay => undef,
	session_bound => 'false', value => undef, queue => 'false', shared => 'false',
	max_holders => '1', older_than => '1 day');

# The statement: positional, named or mixed notation; a lease either from
# FROM or from the select list; a set as rows:tokens:token:owner
sub statement
{
	my ($fn, $given) = @_;
	return holder_statement() if $fn eq 'holder';
	return views_statement() if $fn eq 'views';
	return 'SELECT count(*)::text FROM dlock.stats()' if $fn eq 'stats';
	return 'SELECT dlock.stats_reset()::text' if $fn eq 'stats_reset';
	return 'SELECT count(*)::text FROM dlock.lease_states()' if $fn eq 'lease_states';
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
		my $npos = $style eq 'mixed' && $nreq > 0 ? 1 + int(rand($nreq)) : 0;
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
	my $kind = $returns{$fn} // 'text';
	return "SELECT ($call)::text" if $kind eq 'text';
	return "SELECT count(*) || ':' || count(DISTINCT token) || ':' || coalesce(min(token)::text, '')"
	  . " || ':' || coalesce(fuzz.hex(min(owner)), '') FROM $call" if $kind eq 'set';
	return choose(
		[ 1, "SELECT token, owner, name FROM $call" ],
		[ 1, "SELECT (l).token, (l).owner, (l).name FROM (SELECT $call AS l OFFSET 0) s" ]);
}

# dlock.holder: text in through holder_in, out through holder_out, the
# comparison operators and support functions, and the casts
sub holder_statement
{
	my $h1 = any_of('dlock.holder_in($14::cstring)', '$14::dlock.holder');
	my $h2 = any_of('dlock.holder_in($15::cstring)', '$15::dlock.holder', '$16::dlock.holder');
	return 'SELECT ' . any_of(
		"dlock.holder_out($h1)::text",
		"${h1}::text",
		"${h1}::oid::text",
		"${h1}::regrole::text",
		'$16::oid::dlock.holder::text',
		'$16::regrole::dlock.holder::text',
		"dlock.holder_cmp($h1, $h2)::text",
		"dlock.holder_hash($h1)::text",
		"dlock.holder_eq($h1, $h2)::text",
		"dlock.holder_ne($h1, $h2)::text",
		"dlock.holder_lt($h1, $h2)::text",
		"dlock.holder_le($h1, $h2)::text",
		"dlock.holder_gt($h1, $h2)::text",
		"dlock.holder_ge($h1, $h2)::text",
		"($h1 OPERATOR(dlock.=) $h2)::text",
		"($h1 OPERATOR(dlock.<>) $h2)::text",
		"($h1 OPERATOR(dlock.<) $h2)::text",
		"($h1 OPERATOR(dlock.>=) $h2)::text",
		"(SELECT count(DISTINCT h)::text FROM (VALUES ($h1), ($h2), ($h1)) v(h))",
		"(SELECT string_agg(h::text, ',' ORDER BY h) FROM (VALUES ($h1), ($h2)) v(h))");
}

sub views_statement
{
	return 'SELECT ' . any_of(
		'(SELECT count(*)::text FROM dlock.leases WHERE name = $1)',
		'(SELECT string_agg(state || coalesce(value, \'\'), \',\') FROM dlock.leases WHERE name = $1)',
		'(SELECT count(*)::text FROM dlock.locks WHERE name = $1 OR name IS NULL)',
		'(SELECT count(*)::text FROM dlock.stats WHERE name = $1)',
		'(SELECT count(*)::text FROM dlock.leases l JOIN dlock.locks k USING (name))');
}

# One call: function, statement and the argument literals
sub gen_call
{
	my ($sess) = @_;
	my $fn = choose([ 18, 'try_acquire' ], [ 14, 'acquire' ], [ 11, 'renew' ],
		[ 10, 'release' ], [ 6, 'force_release' ], [ 12, 'fence' ],
		[ 5, 'holder_alive' ], [ 6, 'try_acquire_all' ], [ 5, 'acquire_all' ],
		[ 4, 'release_all' ], [ 5, 'watch' ], [ 3, 'purge' ], [ 2, 'name_key' ],
		[ 1, 'stats' ], [ 1, 'stats_reset' ], [ 1, 'lease_states' ], [ 2, 'views' ],
		[ 5, 'holder' ]);
	my %v;
	my ($nreq, @params) = @{ $signature{$fn} };
	my %given = map { $_ => rand() < 0.6 } @params;
	$given{$_} = 1 foreach @params[ 0 .. $nreq - 1 ];

	if ($fn eq 'try_acquire' || $fn eq 'acquire')
	{
		# a recent lease is likely held: contested, or extended by its
		# owner, mostly as the same kind
		my $p = rand() < 0.2 ? recent_entry() : undef;
		$v{name} = gen_name();
		$v{name} = $p->{name} if $p;
		$v{ttl} = gen_ttl();
		$v{owner} = gen_owner();
		$v{lock_delay} = gen_lock_delay();
		$v{session_bound} = gen_bound();
		$v{value} = gen_value();
		$v{queue} = gen_flag() if $fn eq 'try_acquire';
		$v{shared} = gen_flag();
		$v{max_holders} = gen_max_holders();
		if ($p && rand() < 0.7)
		{
			$v{shared} = $p->{shared};
			$v{max_holders} = $p->{max_holders};
			$given{shared} = $given{max_holders} = 1;
		}
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
		$v{value} = gen_value();
	}
	elsif ($fn eq 'force_release')
	{
		my @others = grep { $_->{sess} ne $sess } @pool;
		$v{name} = choose(
			[ 40, sub { @others ? $others[ pool_rand(scalar @others) ]{name} : 'job:2' } ],
			[ 60, \&gen_name ]);
	}
	elsif ($fn eq 'fence' || $fn eq 'watch')
	{
		my $p = choose([ 35, sub { recent_entry() } ], [ 15, \&pool_entry ], [ 50, undef ]);
		my $real_token = rand() < 0.7;
		$v{name} = gen_name();
		$v{token} = gen_token();
		$v{name} = $p->{name} if $p;
		$v{token} = $p->{token} if $p && $real_token;
		if ($fn eq 'watch')
		{
			# a watch of a token that is live waits for its timeout: a long
			# one only where no lease is live and the token given is one
			my ($timeout, $class) = @{ gen_timeout() };
			$v{timeout} = $timeout;
			$class = 'long' unless $given{timeout};
			if ($class eq 'long')
			{
				$v{name} = fresh_name();
				$v{token} = any_of('1', '42', '-1', '9223372036854775807');
				$given{token} = 1;
			}
		}
	}
	elsif ($fn eq 'try_acquire_all' || $fn eq 'acquire_all' || $fn eq 'release_all')
	{
		my $class = 'short';
		if ($fn eq 'acquire_all')
		{
			($v{timeout}, $class) = @{ gen_timeout() };
			$class = 'long' unless $given{timeout};
		}
		my $names = gen_names($class eq 'long');
		$v{names} = names_literal($names);
		$v{name_list} = $names if ref $names;
		$v{ttl} = gen_ttl();
		$v{owner} = gen_owner();
		if ($fn eq 'release_all' && rand() < 0.5)
		{
			my $p = recent_entry($sess);
			$v{owner} = $p->{owner} if $p;
		}
	}
	elsif ($fn eq 'purge')
	{
		$v{older_than} = gen_older_than();
	}
	elsif ($fn eq 'name_key' || $fn eq 'views')
	{
		$v{name} = gen_name();
	}
	elsif ($fn eq 'holder')
	{
		$v{holder} = gen_holder();
		$v{holder2} = gen_holder();
		$v{oid} = gen_oid();
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
		next if $fn eq 'holder' || $fn eq 'views';
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

sub call_sql
{
	my ($seq, $c) = @_;
	my $sql = "SELECT fuzz.call($seq, '$c->{fn}', " . literal($c->{stmt}) . ', ARRAY['
	  . join(', ', map { literal($c->{v}{$_}) } @param_order) . ']::text[]);';
	return $c->{read_only} ? "BEGIN READ ONLY; $sql COMMIT;" : $sql;
}

# The call as a statement to run by hand
sub replay_sql
{
	my ($c) = @_;
	(my $s = $c->{stmt}) =~ s/\$(\d+)/'(' . literal($c->{v}{ $param_order[ $1 - 1 ] }) . ")::$cast{$1}"/ge;
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

# An acquire() with no owner that would wait only for leases its own session
# holds under owners it generated: refused with 55006
sub own_lease_wait
{
	my ($c, $outcome, $msg) = @_;
	return $outcome eq '55006' && $c->{fn} eq 'acquire' && !defined $c->{v}{owner}
	  && $msg =~ /is already held by this session/;
}

sub fail_call
{
	my ($c, $why) = @_;
	push @failures, [ $c, $why ];
}

# The calls, from every session, and the verdicts on them
sub run_calls
{
	my $start_time = $node->safe_psql($db, 'SELECT pg_postmaster_start_time()');
	my $log_offset = -s $node->logfile;

	# The sessions and their roles: in the C edition a superuser's sessions,
	# two of them with SET ROLE; in the SQL edition sessions that log in as
	# dlock's owner, as the two plain roles and as the superuser
	my %session;
	my %session_pid;
	my %session_role = (su => undef, a => 'fuzz_a', b => 'fuzz_b');
	$session_role{own} = 'fuzz_owner' if $edition eq 'sql';
	foreach my $s (sort keys %session_role)
	{
		my $login = $edition eq 'sql' && defined $session_role{$s} ? [ '-U', $session_role{$s} ] : [];
		my $bg = $node->background_psql($db, on_error_stop => 0, extra_params => $login);
		my $setup = "SET client_encoding = 'UTF8'; SET statement_timeout = '20s';";
		$setup .= " SET ROLE $session_role{$s};" if defined $session_role{$s} && $edition eq 'c';
		# another interval style changes how some literals read
		$setup .= " SET intervalstyle = 'sql_standard';" if $s eq 'b';
		$bg->query_safe($setup);
		$session{$s} = $bg;
		$session_pid{$s} = $bg->query_safe('SELECT pg_backend_pid()');
	}

	my (%calls, %successes, %effective, %errors, %input_errors, %input_by_fn, %errors_by_fn);
	my @psql_errors;
	my $bad_codes = 0;
	my $input_bad_codes = 0;
	my $rule_breaks = 0;
	my $changed_on_error = 0;
	my $changed_on_noop = 0;
	my $wrong_sqlstate = 0;
	my $done = 0;
	my %allowed_input = map { $_ => 1 } qw(22003 22007 22008 22015 22P02);
	# what a call with acceptable arguments may raise
	# (22023 only for a kind other than the live one's, a set's exclusive
	# leases included: see $kind_error; 53400
	# when every queue place is taken; 22P02 from dlock.holder's input function;
	# and 55006 from an owner-less acquire() that would wait only for leases this
	# session holds under owners it generated: see own_lease_wait).  The SQL
	# edition keeps no queue places (no 53400), and its dlock.holder is a
	# regrole, whose input raises 42602 (invalid name syntax) or 42704 (no
	# such role) where the C edition's raises 22P02
	my %allowed_runtime = (
		try_acquire => { '22023' => 1, '53400' => 1 },
		acquire => { '55P03' => 1, '22023' => 1 },
		try_acquire_all => { '22023' => 1 },
		acquire_all => { '55P03' => 1, '22023' => 1 },
		force_release => { '42501' => 1 },
		holder => { '22P02' => 1 });
	if ($edition eq 'sql')
	{
		delete $allowed_runtime{try_acquire}{'53400'};
		$allowed_runtime{holder} = { '42602' => 1, '42704' => 1 };
	}
	my $kind_error = qr/as another kind of lease|does not match the live leases/;
	# Functions that never change a lease, the counter or a lock (a true fence
	# takes its lock)
	my %reads_only = map { $_ => 1 } qw(fence holder_alive watch name_key stats
	  stats_reset lease_states views holder);

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
				elsif ($outcome eq '0A000' && $msg !~ /the C edition/)
				{
					# what the SQL edition lacks says where to find it
					$wrong_sqlstate++;
					fail_call($c, "0A000 that does not name the C edition: $msg");
				}
			}
			elsif ($outcome ne 'ok'
				&& !own_lease_wait($c, $outcome, $msg)
				&& !($allowed_runtime{$fn}{$outcome}
					&& !($outcome eq '42501' && $sess eq 'su')
					&& !($outcome eq '22023' && $msg !~ $kind_error)))
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
				# that holds takes its lock; a purge deletes rows, and holds the
				# locks of the names it purged until its transaction ends
				my $noop = $reads_only{$fn} || $result eq 'null' || $result eq 'false'
				  || ($fn =~ /_all$|^purge$/ && $result =~ /^0(?::|$)/);
				my $allowed = $fn eq 'fence' && $result eq 'true' ? 'L' : '';
				if ($fn eq 'purge' && $changed !~ /^T?L?$/)
				{
					$changed_on_noop++;
					fail_call($c, "purge changed $changed");
				}
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

			if ($outcome eq 'ok' && $returns{$fn} && $returns{$fn} eq 'lease'
				&& $result =~ /^(\d+):([0-9a-f]*)$/)
			{
				my ($token, $owner_hex) = ($1, $2);
				my $bound = ($c->{v}{session_bound} // '') =~ /^\s*(?:t|on|y|1)/i ? 1 : 0;
				push @pool, { name => $c->{v}{name}, token => $token,
					owner => from_bytes(pack('H*', $owner_hex)),
					sess => $sess, bound => $bound,
					shared => $c->{v}{shared}, max_holders => $c->{v}{max_holders} };
			}
			elsif ($outcome eq 'ok' && $returns{$fn} && $result =~ /^[1-9]\d*:1:(\d+):([0-9a-f]*)$/)
			{
				my ($token, $owner_hex) = ($1, $2);
				push @pool, { name => $_, token => $token, owner => from_bytes(pack('H*', $owner_hex)),
					sess => $sess, bound => 0, shared => 'false', max_holders => '1' }
				  foreach grep { defined } @{ $c->{v}{name_list} // [] };
			}
			shift @pool while @pool > 300;
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
	is($node->safe_psql($db, 'SELECT pg_postmaster_start_time()'),
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
	is($bad_codes, 0, $edition eq 'c'
		? 'for acceptable arguments dlock raised only 55P03 (a wait timed out), 42501 (force_release, purge), 22023 (another kind than the live one), 53400, 22P02 (dlock.holder input), or 55006 (an owner-less acquire() that would wait for its own session)'
		: 'for acceptable arguments dlock raised only 55P03 (a wait timed out), 42501 (force_release, purge), 22023 (another kind than the live one), 42602 or 42704 (dlock.holder input, regrole\'s), or 55006 (an owner-less acquire() that would wait for its own session)');
	is($wrong_sqlstate, 0, $edition eq 'c'
		? 'bad arguments and read-only transactions raise the documented SQLSTATE (22004, 22023, 25006)'
		: 'bad arguments, read-only transactions and what needs the C edition raise the documented SQLSTATE (22004, 22023, 25006, 0A000 naming the C edition; 42501 for stats_reset(), 42883 for the C edition\'s dlock.holder functions)');
	is($input_bad_codes, 0,
		'literals rejected before the call are rejected by input functions (22003, 22007, 22008, 22015, 22P02)');
	is($errors{XX000} // 0, 0, 'no call raised an internal error (XX000)');
	my @documented = $edition eq 'c'
	  ? qw(22004 22023 55P03 42501 25006 22P02 53400 55006)
	  : qw(22004 22023 55P03 42501 25006 55006 0A000 42602 42704 42883);
	my %documented = map { $_ => 1 } @documented;
	is(join(', ', grep { !$documented{$_} } sort keys %errors), '', $edition eq 'c'
		? 'every error dlock raised is one of 22004, 22023, 55P03, 42501, 25006, 22P02 (dlock.holder input), 53400, 55006'
		: 'every error dlock raised is one of 22004, 22023, 55P03, 42501, 25006, 55006, 0A000 (needs the C edition), 42602, 42704 (dlock.holder input), 42883 (the C edition\'s dlock.holder functions)');
	my @must_raise = $edition eq 'c'
	  ? qw(22004 22023 55P03 42501 25006 22P02)
	  : qw(22004 22023 55P03 42501 25006 0A000 42602 42704 42883);
	# what needs the C edition cannot succeed in the SQL edition: it must
	# have raised 0A000 instead
	my %c_only = $edition eq 'sql' ? map { $_ => 1 } qw(stats stats_reset) : ();
	SKIP:
	{
		# the run reached every documented error and every function's success
		skip 'too few calls to expect every outcome', @must_raise + keys %signature if $ncalls < 2000;
		foreach my $code (@must_raise)
		{
			ok($errors{$code}, "the run raised $code at least once");
		}
		foreach my $fn (sort keys %signature)
		{
			if ($c_only{$fn})
			{
				ok($errors_by_fn{$fn}{'0A000'}, "dlock.$fn raised 0A000 at least once");
				next;
			}
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

	my $sanity = $node->safe_psql($db, q{
		SELECT count(*) FILTER (WHERE octet_length(name) NOT BETWEEN 1 AND 1024
		                           OR octet_length(owner) NOT BETWEEN 1 AND 256
		                           OR token < 1 OR expires_at <= acquired_at
		                           OR lock_delay < interval '0' OR octet_length(value) > 1024
		                           OR max_holders NOT BETWEEN 1 AND 1000 OR (shared AND max_holders > 1)),
		       NOT EXISTS (SELECT FROM dlock.lease_state GROUP BY token HAVING count(DISTINCT owner) > 1),
		       coalesce(max(token), 0) <= (SELECT last_value FROM dlock.token_seq),
		       count(*)
		  FROM dlock.lease_state});
	my ($bad_rows, $distinct, $below_counter, $rows) = split /\|/, $sanity;
	note "$rows names in dlock.lease_state";
	is($bad_rows, '0', 'every stored lease is within the limits');
	is($distinct, 't', 'no token was issued to two owners');
	is($below_counter, 't', 'no stored token is ahead of the counter');
	is($node->safe_psql($db, q{SELECT count(*) FROM dlock.leases
		WHERE state = 'session_ended' AND expires_at > clock_timestamp()}),
		'0', 'no unexpired session-bound lease lost its holder while every session lived');
	is($node->safe_psql($db, q{SELECT count(*) FROM dlock.locks WHERE kind <> 'session'}),
		'0', 'between calls the sessions hold no dlock lock but those of their session-bound leases');
	never_loaded(\%session, \%session_pid) if $edition eq 'sql';

	$_->quit foreach values %session;
	$node->poll_query_until($db, q{SELECT count(*) = 0 FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()})
	  or die 'the sessions did not exit';
	is(locks_left($node, dbname => $db), '', 'once the sessions are gone nothing is left in dlock.locks');
}

# The SQL edition's cluster never loaded dlock's library: no session
# defines its settings (the SQL edition's are placeholders, which
# pg_settings does not list), no function of the database names the
# library, and, where /proc shows them, neither the postmaster nor a
# session's backend maps dlock.so
sub never_loaded
{
	my ($session, $session_pid) = @_;
	my @loaded;
	foreach my $s (sort keys %$session)
	{
		my $n = $session->{$s}->query_safe(
			q{SELECT count(*) FROM pg_settings WHERE name LIKE 'dlock.%'});
		push @loaded, "session $s: $n settings of dlock" if $n ne '0';
	}
	my $c_functions = $node->safe_psql($db,
		q{SELECT string_agg(oid::regprocedure::text, ', ') FROM pg_proc WHERE probin LIKE '%dlock%'});
	push @loaded, "functions of dlock's library: $c_functions" if $c_functions ne '';
	open(my $pidfile, '<', $node->data_dir . '/postmaster.pid') or die "postmaster.pid: $!";
	chomp(my $postmaster = <$pidfile>);
	close $pidfile;
	foreach my $pid ($postmaster, map { $session_pid->{$_} } sort keys %$session_pid)
	{
		open(my $maps, '<', "/proc/$pid/maps") or next;
		push @loaded, "process $pid maps dlock.so" if grep { m{/dlock\.so$} } <$maps>;
		close $maps;
	}
	is(join('; ', @loaded), '', 'no backend loaded dlock\'s library');
}

# ---------------------------------------------------------------------------
# dlock.holder's binary input function, which no call above reaches: random
# bytes as the one field of a binary COPY into a column of the type, in one
# of several client encodings.  Never an error but those below, never a
# crash.
#
# The C edition (holder_recv): the binary form is the text form in the
# client's encoding.  Every COPY either loads the value that the text form
# of the same bytes, read in that encoding, gives, or fails as that reading
# does: 22P02 (no role name), or for bytes that are no text in the encoding
# 22021 (not a valid byte sequence, NUL included) or 22P05 (a character the
# database's encoding lacks), whichever the reading meets first (the text
# form checks the whole input before converting it, so for bytes with both
# faults the two may name different ones).
#
# The SQL edition (a domain over regrole, by design): the binary form is
# regrole's, the OID in four bytes, whatever the client's encoding.  Every
# COPY of four bytes loads what the text form of that OID's number gives;
# every other length fails, 22P03 (bytes left over) or 08P01 (too few).
# ---------------------------------------------------------------------------

# Bytes of a holder: its text forms (real roles, quoted, unknown, long,
# odd), and bytes that are no text in some encoding: NUL, bytes that end
# or break a character, overlong forms, surrogates, beyond U+10FFFF, and
# text of other encodings; undef is a NULL field.  For the SQL edition, also
# binary OIDs: of the roles in @$role_oids, any, and one byte short or over
sub gen_holder_bytes
{
	my ($role_oids) = @_;
	my @oids = $edition eq 'c' ? () : (
		[ 25, sub { pack('N', any_of(@$role_oids, 0)) } ],
		[ 15, sub { pack('N', int(rand(4294967296))) } ],
		[ 5, sub { my $b = pack('N', any_of(@$role_oids)); any_of(substr($b, 1), $b . chr(int(rand(256)))) } ]);
	return choose(
		[ 30, sub { my $h = gen_holder(); defined $h ? to_bytes($h) : undef } ],
		[ 15, sub { join '', map { chr(int(rand(256))) } 1 .. int(rand(65)) } ],
		[ 10, sub { join '', map { chr(1 + int(rand(255))) } 1 .. 1 + int(rand(300)) } ],
		[ 15, sub { any_of('fuzz_a', '"fuzz_b"', 'postgres', 'x', '')
			  . any_of("\x00", "\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\xff", "\xfe",
				"\x80", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\xe9t\xe9",
				"\x82\xa0", "\x8e", "\xa4\xa2", "\x81")
			  . any_of('', 'x', 'fuzz_a', "\x00") } ],
		[ 10, sub { any_of("fuzz_a\x00", "\x00fuzz_a", "fu\x00zz_a", "-\x00", "\x00") } ],
		[ 10, sub { to_bytes(any_of('x' x (60 + int(rand(10))), '"' . ('y' x (60 + int(rand(10)))) . '"',
				"\x{e9}" x (30 + int(rand(5))), text_of_bytes(1000 + int(rand(9000)), rand_kind()))) } ],
		@oids,
		[ 5, undef ]);
}

# The binary COPY file of one row of one field: header, then the field as
# its length and bytes (length -1: NULL), then the trailer
sub copy_binary_row
{
	my ($bytes) = @_;
	my $field = defined $bytes ? pack('N', length $bytes) . $bytes : pack('N', 0xFFFFFFFF);
	return "PGCOPY\n\xff\r\n\x00" . pack('N N', 0, 0) . pack('n', 1) . $field . pack('n', 0xFFFF);
}

# The COPYs, as the superuser (COPY from a server file needs it)
sub binary_copies
{
	note 'dlock.holder binary input';
	my $recv_cases = int($ncalls / 2) || 1;
	my $recv_dir = $node->basedir . '/holder_recv';
	mkdir $recv_dir or die "mkdir $recv_dir: $!";
	$node->safe_psql($db, qq{
CREATE TABLE fuzz.holder_recv (h dlock.holder);

-- One binary COPY of the file at path, in client encoding enc; then what
-- the same bytes give as text: in the C edition, read as text in that
-- encoding (SQL_ASCII: as the database's encoding, which is what a server
-- checks such a client's text against); in the SQL edition, as regrole's
-- binary form, the number of the OID in four bytes ('length' for any other
-- length).  Reports seq|outcome|outcome of the text form|same value|a role
CREATE FUNCTION fuzz.recv_case(seq int, path text, enc text, payload bytea)
RETURNS text LANGUAGE plpgsql AS \$f\$
DECLARE
  got dlock.holder;
  want dlock.holder;
  outcome text := 'ok';
  oracle text := 'ok';
BEGIN
  PERFORM set_config('client_encoding', enc, true);
  BEGIN
    DELETE FROM fuzz.holder_recv;
    EXECUTE format('COPY fuzz.holder_recv FROM %L (FORMAT binary)', path);
    SELECT h INTO STRICT got FROM fuzz.holder_recv;
  EXCEPTION WHEN OTHERS THEN
    outcome := SQLSTATE;
  END;
  PERFORM set_config('client_encoding', 'UTF8', true);
  BEGIN
    IF '$edition' = 'c' THEN
      want := convert_from(payload, CASE enc WHEN 'SQL_ASCII' THEN 'UTF8' ELSE enc END)::dlock.holder;
    ELSIF octet_length(payload) <> 4 THEN
      oracle := 'length';
    ELSE
      want := (('x' || encode(payload, 'hex'))::bit(32)::bigint)::text::dlock.holder;
    END IF;
  EXCEPTION WHEN OTHERS THEN
    oracle := SQLSTATE;
  END;
  RETURN format('%s|%s|%s|%s|%s', seq, outcome, oracle,
                outcome <> 'ok' OR got::oid IS NOT DISTINCT FROM want::oid,
                coalesce(got::oid <> 0, false)
                  AND EXISTS (SELECT FROM pg_roles r WHERE r.oid = got::oid));
END \$f\$;
});
	my @role_oids = split /\n/, $node->safe_psql($db,
		q{SELECT oid FROM pg_roles WHERE rolname IN ('fuzz_a', 'fuzz_b', 'fuzz_owner') OR rolsuper ORDER BY oid});

	my $recv_start = $node->safe_psql($db, 'SELECT pg_postmaster_start_time()');
	my $recv_log_offset = -s $node->logfile;
	my (%recv_outcomes, @recv_failures);
	my ($recv_done, $recv_roles) = (0, 0);
	# how an outcome reads, and which ones a run must see
	my %class = $edition eq 'c'
	  ? (ok => 'ok', '22P02' => 'no role name', '22021' => 'no text', '22P05' => 'no text')
	  : (ok => 'ok', '22P03' => 'no OID', '08P01' => 'no OID', length => 'no OID');
	my @must_see = $edition eq 'c' ? qw(ok 22P02 22021) : qw(ok 22P03 08P01);
	for (my $first = 1; $first <= $recv_cases; $first += 100)
	{
		my @rows;
		my %case;
		foreach my $i ($first .. ($first + 99 < $recv_cases ? $first + 99 : $recv_cases))
		{
			my $bytes = gen_holder_bytes(\@role_oids);
			my $enc = choose([ 50, 'UTF8' ], [ 10, 'SQL_ASCII' ], [ 10, 'LATIN1' ],
				[ 10, 'WIN1252' ], [ 10, 'EUC_JP' ], [ 10, 'SJIS' ]);
			my $path = "$recv_dir/$i.bin";
			open(my $fh, '>:raw', $path) or die "$path: $!";
			print $fh copy_binary_row($bytes);
			close $fh or die "$path: $!";
			$case{$i} = [ $enc, $bytes ];
			push @rows, "($i, '$path', '$enc', "
			  . (defined $bytes ? "'\\x" . unpack('H*', $bytes) . "'" : 'NULL') . '::bytea)';
		}
		my $out = $node->safe_psql($db,
			'SELECT fuzz.recv_case(seq, path, enc, payload) FROM (VALUES '
			  . join(', ', @rows) . ') v(seq, path, enc, payload) ORDER BY seq');
		foreach my $line (split /\n/, $out)
		{
			my ($i, $outcome, $oracle, $same, $role) = split /\|/, $line;
			$recv_done++;
			$recv_outcomes{$outcome}++;
			$recv_roles++ if $role eq 't';
			my ($enc, $bytes) = @{ $case{$i} };
			my $shown = defined $bytes ? '\\x' . unpack('H*', substr($bytes, 0, 80))
			  . (length $bytes > 80 ? '... (' . length($bytes) . ' bytes)' : '') : 'NULL';
			push @recv_failures, "case $i ($enc, $shown): $outcome, the text form $oracle"
			  if !$class{$outcome} || ($class{$oracle} // '') ne $class{$outcome} || $same ne 't';
		}
	}
	note 'binary COPY outcomes: ' . join(', ', map { "$_: $recv_outcomes{$_}" } sort keys %recv_outcomes)
	  . "; $recv_roles loaded a role";
	diag($_) foreach @recv_failures[ 0 .. (@recv_failures > 20 ? 19 : $#recv_failures) ];
	is($recv_done, $recv_cases, "all $recv_cases binary COPYs of a dlock.holder were made");
	is(scalar(@recv_failures), 0, $edition eq 'c'
		? 'every binary COPY of a dlock.holder loads what its text form gives, or fails as it does, with 22P02, 22021 or 22P05'
		: 'every binary COPY of a dlock.holder (regrole\'s binary form) loads what the text form of the OID in its four bytes gives, or fails for another length, with 22P03 or 08P01');
	is($recv_outcomes{XX000} // 0, 0, 'no binary COPY of a dlock.holder raised an internal error (XX000)');
	SKIP:
	{
		skip 'too few binary COPYs to expect every outcome', 4 if $recv_cases < 500;
		ok($recv_outcomes{$_}, "a binary COPY of a dlock.holder ended with $_ at least once")
		  foreach @must_see;
		ok($recv_roles, 'a binary COPY of a dlock.holder loaded a role at least once');
	}
	is($node->safe_psql($db, 'SELECT pg_postmaster_start_time()'), $recv_start,
		'the postmaster never restarted during the binary COPYs');
	is(join("\n", grep {
		/terminated by signal|server process .* (?:was terminated|exited with exit code)|PANIC|TRAP|terminating any other active/
	} split /\n/, slurp_file($node->logfile, $recv_log_offset)), '',
		'the server log shows no crash during the binary COPYs');
}

1;

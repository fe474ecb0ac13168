# Bad input, at random, against the SQL edition of dlock
# (sql-edition/dlock.sql): the fuzz test of test/t/005_fuzz.pl, the same
# calls and the same checks (test/perl/DlockFuzz.pm), in a cluster that
# never loads dlock's library, where a plain role that owns the database
# installed the SQL edition, as on a managed service.  The calls come from
# that owner, two unprivileged roles and a superuser, each logged in as
# itself.  It proves that the server never crashes, that no call raises an
# internal error (XX000), that every error has the SQLSTATE the documented
# rules give, that a failed call, or one that grants or ends nothing, leaves
# the lease table, the token counter and the session's locks in dlock.locks
# as they were, that nothing is left in dlock.locks once the sessions are
# gone, and that no backend loaded dlock.so.
#
# The checks differ from the C edition's only where the editions differ by
# design (sql-edition/README.md, "Differences from the C edition"):
#  * statistics and places in queues need shared memory: dlock.stats,
#    dlock.stats() and try_acquire(queue => true) raise 0A000 with a
#    message that names the C edition, and so does dlock.stats_reset() for
#    the roles that may execute it (dlock's owner and the superuser; the
#    others get 42501, as from the C edition), where the preloaded C edition
#    succeeds (a read of dlock.stats WHERE name = NULL returns no row without
#    calling dlock.stats(), in both);
#  * dlock.holder is a domain over regrole: its text input raises regrole's
#    errors, 42602 (invalid name syntax) and 42704 (no such role), where the
#    C edition's reads an unknown name as no role or raises 22P02; the C
#    edition's holder_in, holder_out, holder_cmp, holder_hash,
#    holder_lt/le/gt/ge and operators dlock.< and dlock.>= do not exist
#    (42883); and its binary form is regrole's, the OID in four bytes, not
#    the text form: a binary COPY of four bytes loads the role whose OID
#    they are, as the text form of that number does, and any other length
#    fails (22P03, 08P01), whatever the client's encoding;
#  * dlock.locks shows the locks of names and tokens that have a row in
#    dlock.lease_state, which is what the checks of the session's locks see.
#
# DLOCK_FUZZ_SEED picks the random seed and DLOCK_FUZZ_CALLS the number of
# calls (default 2400, under a minute on two CPUs; half as many binary
# COPYs follow them).  DLOCK_SQL_EDITION_SCRIPT names another script to
# install instead of sql-edition/dlock.sql (a changed copy under test).
# Every failing call is printed as a statement that can be run by hand, and
# all of them are written to fuzz_failures.sql in the test's directory.

use strict;
use warnings FATAL => 'all';

use DlockFuzz qw(run_fuzz);

run_fuzz(edition => 'sql', calls => 2400,
	script => $ENV{DLOCK_SQL_EDITION_SCRIPT} // "$ENV{TESTDIR}/sql-edition/dlock.sql");

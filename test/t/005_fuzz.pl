# Bad input, at random, against the C edition of dlock, preloaded (queue
# places and statistics need it): a few thousand calls of every function
# with arguments of every shape, from a superuser and two unprivileged
# roles, some in read-only transactions, then random bytes through
# dlock.holder's binary input function (holder_recv) by binary COPY.  What
# it proves, and how, is in test/perl/DlockFuzz.pm, which
# test/t/025_sql_edition_fuzz.pl runs against the SQL edition.
#
# DLOCK_FUZZ_SEED picks the random seed (printed at the start) and
# DLOCK_FUZZ_CALLS the number of calls (default 4000; half as many binary
# COPYs of a dlock.holder follow them).  The same seed gives the same
# calls, except for the names, owners and tokens taken from leases granted
# earlier in the run, which depend on timing.  Every failing call is
# printed as a statement that can be run by hand, and all of them are
# written to fuzz_failures.sql in the test's directory.

use strict;
use warnings FATAL => 'all';

use DlockFuzz qw(run_fuzz);

run_fuzz(edition => 'c', calls => 4000);

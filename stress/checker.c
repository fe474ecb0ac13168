/*
 * checker.c
 *	  A Jepsen-style "lock-guarded set" test for dlock, and its counting
 *	  semaphore variant; the options, the schedule's helpers and the worker
 *	  processes that every mode shares (checker.h).
 *
 * The claim under test
 *	  A lease alone cannot give mutual exclusion: a holder can pause for longer
 *	  than its ttl and then act as if it still held the lock.  dlock claims
 *	  that writes guarded with dlock.fence() are exclusive anyway, because a
 *	  stale token matches no row and a fenced write commits before the next
 *	  grant.  For a counting semaphore of N permits it claims the same bound
 *	  with N in place of 1: a new grant into a slot cannot commit until the
 *	  transactions that fenced the slot's previous token have ended, so no
 *	  more than N transactions are ever inside a fenced write at once.  This
 *	  program tries hard to break those claims and checks the data (and, for
 *	  the semaphore, a count kept outside the database), not the holders.
 *
 * The schedule
 *	  N worker processes, each with its own connection, share one lease name
 *	  and one row holding a set of integers.  Each worker loops:
 *		1. dlock.acquire() with a short random ttl and a timeout;
 *		2. stalls, often past the ttl;
 *		3. in one transaction reads the set, pauses (now and then past the
 *		   ttl), and writes back what it read plus one element of its own, with
 *		   dlock.fence(name, token) in the WHERE clause.  The same UPDATE appends
 *		   the token to a second array, so the row records the order in which
 *		   writes committed;
 *		4. dlock.release().
 *	  Meanwhile the parent freezes a random worker with SIGSTOP for longer
 *	  than any ttl, as a GC pause or a descheduled VM would, then resumes it.
 *	  The write is a read-modify-write on purpose: a holder that writes back a
 *	  stale read silently drops whatever others added in between.
 *
 * The semaphore mode (--permits N)
 *	  The workers (3N unless --workers says otherwise, always more than N)
 *	  acquire permits of one name with max_holders => N, on the same schedule
 *	  and under the same SIGSTOPs.  Writers must be able to run concurrently,
 *	  so each worker has a row of its own: in one transaction it pauses (now
 *	  and then past the ttl), appends an element and its token to its row
 *	  with dlock.fence(name, token) in the WHERE clause, and works for a while
 *	  (now and then past the ttl) before COMMIT.  A counter in shared memory
 *	  is incremented once the fenced UPDATE has changed its row and
 *	  decremented just before COMMIT, and its largest value is kept.  With the
 *	  fence it can never exceed N: each worker counted holds a true fence on
 *	  its token until its transaction ends, which is after the decrement, and
 *	  a grant of the same slot commits only after that, before its holder's
 *	  own fence and increment.
 *
 * What is checked afterwards
 *	  lost          acknowledged elements (UPDATE changed 1 row and COMMIT
 *	                succeeded) missing from the final set: must be 0.
 *	  unexpected    elements in the set whose write was refused, rolled back
 *	                or never sent (in the semaphore mode, also elements in
 *	                another worker's row): must be 0.
 *	  order         the tokens, in commit order, must be strictly increasing: a
 *	                smaller token committed after a larger one means a holder
 *	                wrote after its lease had been granted to someone else.  In
 *	                the semaphore mode, within each worker's row (its grants
 *	                follow one another), and no token may be written twice.
 *	  commits       the row (the rows) must hold a token for every acknowledged
 *	                write, and no more than the writes that may have committed.
 *	  queue         a wait that ran out of time (55P03) must leave the name's
 *	                queue: a session that kept its place would make every later
 *	                acquire() of the name wait behind a head that waits for
 *	                nothing, and try_acquire() find the name busy, for as long
 *	                as the session lasts.  Read from dlock.locks after each
 *	                such timeout; a worker found holding a place is counted
 *	                and starts a new session, which gives the place back.
 *	                Must be 0 (in a control run too, or the control failed).
 *	  writers       in the semaphore mode, the most workers inside a fenced
 *	                transaction at once must be at most N.
 *	  It also reports how many workers *believed* they held the lease at the
 *	  same moment (holding intervals on CLOCK_MONOTONIC, from acquire's reply
 *	  to just before release): more than one (more than N for the semaphore)
 *	  shows that the schedule did produce stale holders, which is what makes
 *	  a pass mean something.  A semaphore run that never saw more than N
 *	  believed holders fails.
 *
 * The control
 *	  --no-fence runs the same schedule without the fence.  There the checker
 *	  must find lost elements or tokens out of order (for the semaphore: more
 *	  than N writers at once, or lost writes); if it finds nothing, it could
 *	  not tell a broken lock from a working one, and it exits 1.
 *
 * The mixed-kinds mode (--kinds)
 *	  Exclusive leases, shared leases, permits of two sizes and sets on the
 *	  same names at once; judged from fenced writes and from dlock.leases.
 *	  kinds.c owns it, and its header says what it checks and why.
 *
 * The editions
 *	  Every mode runs against either edition of dlock: the C edition
 *	  (extension dlock) or the SQL edition (sql-edition/dlock.sql, for
 *	  servers that load no C library), which has the same functions,
 *	  arguments, results and guarantees.  The checker calls only what both
 *	  have (no statistics, no places in a queue, nothing only a superuser
 *	  may read), so each check applies to both as it stands.  A database
 *	  with neither gets the C edition's extension created; the SQL edition
 *	  is installed beforehand, by the role that owns the database.
 *	  --edition c or --edition sql refuses a database that has the other,
 *	  so that a run meant for one edition cannot test the other unnoticed.
 *	  The role the checker runs as needs no superuser right: it creates its
 *	  tables, and the kinds mode calls dlock.purge(), which the database's
 *	  owner may.
 *
 * Usage
 *	  checker [--workers N] [--seconds S] [--soak] [--no-fence]
 *	          [--permits N | --kinds] [--edition c|sql] [--seed X]
 *	  The connection comes from the libpq environment (PGHOST, PGPORT, ...);
 *	  only a local server is accepted, since the tables stress_set,
 *	  stress_writers and stress_kinds_* are dropped and recreated.  Later options override
 *	  earlier ones.
 *	  Exit status: fenced mode 0 on PASS, 1 on FAIL; control mode 0 when the
 *	  expected anomalies were found, 1 otherwise.
 *
 * Rounds
 *	  A fenced run that found nothing wrong but tested too little (too few
 *	  grants of a kind, renews, stale holders: each mode says what it needs)
 *	  is undecided, not passed: it runs again, twice as long with the next
 *	  seed, up to UNDECIDED_ROUNDS rounds, and fails if none tested enough.
 *	  Each round is judged alone, from tables made afresh.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <libpq-fe.h>

#include "checker.h"

#define LEASE_NAME		"stress:set"
#define SEMAPHORE_NAME	"stress:permits"
#define TTL_MIN_MS		100
#define TTL_MAX_MS		300
#define MAX_PERMITS		(MAX_WORKERS - 1)
#define MAX_SECONDS		3600
#define DEFAULT_SECONDS 25
#define SOAK_SECONDS	300
/* rounds of a fenced run that keeps testing too little, before it fails */
#define UNDECIDED_ROUNDS 3

/* What became of one write attempt, by the worker's own account */
enum write_status
{
	W_UNSENT = 0,				/* never sent (also: failed before the UPDATE) */
	W_ABORTED,					/* rolled back after an error: not written */
	W_UNKNOWN,					/* COMMIT's outcome is unknown */
	W_REFUSED,					/* UPDATE 0: the fence said no */
	W_ACKED						/* UPDATE 1 and COMMIT succeeded */
};

struct worker_stats
{
	long		attempts;		/* acquire calls */
	long		granted;
	long		timeouts;		/* acquire ended with 55P03 */
	long		writes;			/* write attempts, also the next sequence number */
	long		acked;
	long		refused;
	long		aborted;
	long		unknown;
	long		released_late;	/* release() false: the lease had ended already */
	long		queue_kept;		/* a timed-out acquire left a place in the queue */
	long		errors;			/* anything else the server or libpq reported */
	long		n_held;			/* complete holding intervals recorded */
	int			overflow;
	char		first_error[256];
};

struct interval
{
	double		from;
	double		to;
};

static const char *const update_fenced =
"UPDATE stress_set SET elements = $1::int[] || $2::int, tokens = tokens || $3::bigint "
"WHERE id = 1 AND dlock.fence($4, $3::bigint)";
static const char *const update_unfenced =
"UPDATE stress_set SET elements = $1::int[] || $2::int, tokens = tokens || $3::bigint "
"WHERE id = 1";

/* The semaphore mode: each worker appends to its own row */
static const char *const append_fenced =
"UPDATE stress_writers SET elements = elements || $1::int, tokens = tokens || $2::bigint "
"WHERE worker = $3::int AND dlock.fence($4, $2::bigint)";
static const char *const append_unfenced =
"UPDATE stress_writers SET elements = elements || $1::int, tokens = tokens || $2::bigint "
"WHERE worker = $3::int";

int			n_workers = 8;
int			run_seconds = DEFAULT_SECONDS;
int			fenced = 1;
int			workers_given = 0;	/* --workers was on the command line */
static int	permits = 1;		/* > 1: the semaphore mode */
static int	kinds = 0;			/* --kinds: the mixed-kinds mode (kinds.c) */
enum edition edition_wanted = EDITION_ANY;
uint64_t	seed;
static long cap;				/* grants and writes one worker can record */

/*
 * Shared with the workers (MAP_SHARED), written by each worker in its own
 * slots only and read by the parent after it has reaped them.
 */
static struct worker_stats *stats;	/* [n_workers] */
static struct interval *held;	/* [n_workers * cap] */
static unsigned char *wstatus;	/* [n_workers * cap], by write sequence */

/*
 * The semaphore mode: workers inside a fenced transaction, from the moment
 * their fenced UPDATE changed their row to just before COMMIT.  Shared by
 * all the workers and changed only with atomic operations.
 */
struct occupancy
{
	int			inside;			/* right now */
	int			most;			/* the largest value inside ever had */
	long		over;			/* entries that made inside exceed permits */
};
static struct occupancy *occ;

static pid_t children[MAX_WORKERS];
static int	reaped[MAX_WORKERS];
static int	exit_status[MAX_WORKERS];
static int	n_children;
static pid_t stopped_child;		/* the worker frozen right now, or 0 */
volatile sig_atomic_t interrupted;

/* ---------- small helpers ---------- */

uint64_t	rng_state;

/* splitmix64: seedable per process, so a run's schedule can be repeated */
uint64_t
rng_next(void)
{
	uint64_t	z = (rng_state += UINT64_C(0x9E3779B97F4A7C15));

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

int
rand_between(int lo, int hi)
{
	return lo + (int) (rng_next() % (uint64_t) (hi - lo + 1));
}

int
chance(int percent)
{
	return (int) (rng_next() % 100) < percent;
}

/*
 * Sleep until an absolute CLOCK_MONOTONIC time.  An absolute deadline makes
 * EINTR (and SIGSTOP/SIGCONT, which may interrupt a sleep) harmless: we just
 * sleep again for what is left.  Returns 0 if the parent was asked to stop.
 */
int
sleep_until(double t_ms)
{
	struct timespec ts;
	int			rc;

	if (t_ms <= 0)
		return !interrupted;
	ts.tv_sec = (time_t) (t_ms / 1000.0);
	ts.tv_nsec = (long) ((t_ms - ts.tv_sec * 1000.0) * 1e6);
	if (ts.tv_nsec >= 1000000000L)
		ts.tv_nsec = 999999999L;
	while ((rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL)) != 0)
	{
		if (rc != EINTR || interrupted)
			break;
	}
	return !interrupted;
}

static void
on_signal(int signo)
{
	(void) signo;
	interrupted = 1;
}

/* Element values encode their writer, so the parent can look them up */
static long
element_of(int w, long seq)
{
	return seq * n_workers + w + 1;
}

/* ---------- worker side ---------- */

static void
note_error(struct worker_stats *st, const char *what, const char *msg)
{
	st->errors++;
	if (st->first_error[0] == '\0')
		dlc_message(st->first_error, sizeof(st->first_error), what, msg);
}

/* leave a failed or refused transaction; 0 if the connection is gone */
static int
rollback(PGconn *conn, struct worker_stats *st)
{
	PGresult   *res;
	int			ok;

	if (PQstatus(conn) != CONNECTION_OK)
		return 0;
	if (PQtransactionStatus(conn) == PQTRANS_IDLE)
		return 1;
	res = PQexec(conn, "ROLLBACK");
	ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok)
		note_error(st, "rollback", PQerrorMessage(conn));
	PQclear(res);
	return ok;
}

/*
 * guarded_write - the (fenced, unless the control) write of a transaction
 * in progress; 1 when it wrote its one row, else the transaction is rolled
 * back, *status says how it ended, and 0
 */
static int
guarded_write(PGconn *conn, struct worker_stats *st, const char *sql,
			  int nparams, const char *const *params, unsigned char *status)
{
	PGresult   *res;
	int			one_row;

	*status = W_UNKNOWN;
	res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		note_error(st, "update", PQerrorMessage(conn));
		PQclear(res);
		if (rollback(conn, st))
		{
			*status = W_ABORTED;
			st->aborted++;
		}
		else
			st->unknown++;
		return 0;
	}
	one_row = strcmp(PQcmdTuples(res), "1") == 0;
	PQclear(res);
	if (!one_row)
	{
		*status = W_REFUSED;
		st->refused++;
		rollback(conn, st);
		return 0;
	}
	return 1;
}

/*
 * commit_write - commit the transaction of a write that went through, and
 * record in *status whether it was acknowledged, rolled back or unknown
 */
static void
commit_write(PGconn *conn, struct worker_stats *st, unsigned char *status)
{
	PGresult   *res = PQexec(conn, "COMMIT");

	if (PQresultStatus(res) == PGRES_COMMAND_OK &&
		strcmp(PQcmdStatus(res), "COMMIT") == 0)
	{
		*status = W_ACKED;
		st->acked++;
	}
	else if (PQstatus(conn) == CONNECTION_OK &&
			 PQtransactionStatus(conn) == PQTRANS_IDLE)
	{
		/* the server answered, and what it answered was a rollback */
		note_error(st, "commit", PQresultStatus(res) == PGRES_COMMAND_OK ?
				   "transaction rolled back" : PQerrorMessage(conn));
		*status = W_ABORTED;
		st->aborted++;
	}
	else
	{
		note_error(st, "commit", PQerrorMessage(conn));
		st->unknown++;
	}
	PQclear(res);
}

/*
 * The read-modify-write.  Its outcome goes to wstatus before anything is
 * sent, so that a crash in between leaves "unknown", never "not sent".
 */
static void
write_element(PGconn *conn, struct worker_stats *st, int w, const char *token,
			  int think_ms)
{
	long		seq = st->writes++;
	unsigned char *status = &wstatus[(long) w * cap + seq];
	char		elem[24];
	char	   *read_value;
	const char *params[4];
	PGresult   *res;
	int			written;

	snprintf(elem, sizeof(elem), "%ld", element_of(w, seq));

	res = PQexec(conn, "BEGIN");
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		note_error(st, "begin", PQerrorMessage(conn));
		PQclear(res);
		rollback(conn, st);
		return;
	}
	PQclear(res);

	res = PQexec(conn, "SELECT elements FROM stress_set WHERE id = 1");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
		PQgetisnull(res, 0, 0))
	{
		note_error(st, "read", PQresultStatus(res) == PGRES_TUPLES_OK ?
				   "row 1 of stress_set is missing" : PQerrorMessage(conn));
		PQclear(res);
		rollback(conn, st);
		return;
	}
	read_value = strdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	if (read_value == NULL)
	{
		note_error(st, "read", "out of memory");
		rollback(conn, st);
		return;
	}

	/* the classic hazard: time passes between the read and the write */
	sleep_until(dlc_mono_ms() + think_ms);

	params[0] = read_value;
	params[1] = elem;
	params[2] = token;
	params[3] = LEASE_NAME;
	written = guarded_write(conn, st, fenced ? update_fenced : update_unfenced,
							fenced ? 4 : 3, params, status);
	free(read_value);
	if (!written)
		return;

	commit_write(conn, st, status);
}

/* A worker's fenced UPDATE changed its row: count it in */
static void
enter_writers(void)
{
	int			n = __atomic_add_fetch(&occ->inside, 1, __ATOMIC_SEQ_CST);
	int			most = __atomic_load_n(&occ->most, __ATOMIC_SEQ_CST);

	while (n > most &&
		   !__atomic_compare_exchange_n(&occ->most, &most, n, 0,
										__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
	if (n > permits)
		__atomic_add_fetch(&occ->over, 1, __ATOMIC_SEQ_CST);
}

static void
leave_writers(void)
{
	__atomic_sub_fetch(&occ->inside, 1, __ATOMIC_SEQ_CST);
}

/*
 * The semaphore mode's write: append an element and the token to the
 * worker's own row, so that permit holders do not wait for one another's
 * row locks, then work inside the transaction.  The worker counts itself
 * as a writer only while the fence it passed is in force: from after the
 * UPDATE answered to before COMMIT.  A worker frozen in there stays counted
 * while it is frozen; one frozen on either side of that window is not
 * counted, which can make the count smaller than the truth, never larger.
 */
static void
append_element(PGconn *conn, struct worker_stats *st, int w, const char *token,
			   int think_ms, int work_ms)
{
	long		seq = st->writes++;
	unsigned char *status = &wstatus[(long) w * cap + seq];
	char		elem[24];
	char		row[16];
	const char *params[4];
	PGresult   *res;

	snprintf(elem, sizeof(elem), "%ld", element_of(w, seq));
	snprintf(row, sizeof(row), "%d", w);

	res = PQexec(conn, "BEGIN");
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		note_error(st, "begin", PQerrorMessage(conn));
		PQclear(res);
		rollback(conn, st);
		return;
	}
	PQclear(res);

	/* the transaction is open and the permit may run out meanwhile */
	sleep_until(dlc_mono_ms() + think_ms);

	params[0] = elem;
	params[1] = token;
	params[2] = row;
	params[3] = SEMAPHORE_NAME;
	if (!guarded_write(conn, st, fenced ? append_fenced : append_unfenced,
					   fenced ? 4 : 3, params, status))
		return;

	enter_writers();
	sleep_until(dlc_mono_ms() + work_ms);
	leave_writers();

	commit_write(conn, st, status);
}

/*
 * The check after a wait that ran out of time.  Both editions show the
 * head of a name's queue in dlock.locks as kind 'queue' (and a look at it,
 * which lasts only while a call decides); between calls a session holds
 * none.  (The SQL edition shows only the locks of names that have rows in
 * dlock.lease_state, so a place kept in the queue of a name purged since is
 * not seen: the check can miss a place, never invent one.)
 */
int
queue_left(PGconn *conn, char *msg, size_t size)
{
	PGresult   *res = PQexec(conn,
							 "SELECT count(*), string_agg(coalesce(name, '(unnamed)') || ' '"
							 "   || mode || CASE WHEN granted THEN '' ELSE ' (waiting)' END, ', ')"
							 " FROM dlock.locks WHERE pid = pg_backend_pid() AND kind = 'queue'");
	int			left;

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		dlc_message(msg, size, "reading dlock.locks", PQerrorMessage(conn));
		PQclear(res);
		return -1;
	}
	left = strcmp(PQgetvalue(res, 0, 0), "0") == 0;
	if (!left)
		snprintf(msg, size, "after a wait that timed out (55P03), its session still "
				 "holds the queue of: %s", PQgetvalue(res, 0, 1));
	PQclear(res);
	return left;
}

/* One worker's life; the return value is its exit status */
static int
worker_main(int w, double deadline)
{
	struct worker_stats *st = &stats[w];
	char		owner[32];
	char		appname[40];
	PGconn	   *conn;
	int			rc = 0;

	snprintf(owner, sizeof(owner), "stress-w%d", w);
	snprintf(appname, sizeof(appname), "dlock-stress-w%d", w);
	conn = dlc_connect_as(appname);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		note_error(st, "connect", PQerrorMessage(conn));
		PQfinish(conn);
		return 2;
	}

	for (;;)
	{
		double		left = deadline - dlc_mono_ms();
		char		ttl_txt[32];
		char		timeout_txt[32];
		char		token[32];
		char		permits_txt[16];
		const char *params[5];
		PGresult   *res;
		double		granted_at;
		int			ttl;
		int			timeout;
		int			stall;
		int			think;
		struct interval *iv;

		if (left < 20)
			break;
		if (st->granted >= cap || st->writes >= cap)
		{
			st->overflow = 1;
			break;
		}

		ttl = rand_between(TTL_MIN_MS, TTL_MAX_MS);
		timeout = rand_between(200, 1500);
		if (timeout > left)
			timeout = (int) left;
		snprintf(ttl_txt, sizeof(ttl_txt), "%d ms", ttl);
		snprintf(timeout_txt, sizeof(timeout_txt), "%d ms", timeout);
		snprintf(permits_txt, sizeof(permits_txt), "%d", permits);
		params[0] = permits > 1 ? SEMAPHORE_NAME : LEASE_NAME;
		params[1] = ttl_txt;
		params[2] = owner;
		params[3] = timeout_txt;
		params[4] = permits_txt;

		st->attempts++;
		if (permits > 1)
			res = PQexecParams(conn,
							   "SELECT token FROM dlock.acquire($1, $2::interval, $3, "
							   "timeout => $4::interval, max_holders => $5::int)",
							   5, NULL, params, NULL, NULL, 0);
		else
			res = PQexecParams(conn,
							   "SELECT token FROM dlock.acquire($1, $2::interval, $3, "
							   "timeout => $4::interval)",
							   4, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			if (dlc_has_sqlstate(res, "55P03"))
			{
				char		msg[256];
				int			left;

				st->timeouts++;
				PQclear(res);
				left = queue_left(conn, msg, sizeof(msg));
				if (left < 0)
					note_error(st, "acquire", msg);
				else if (!left)
				{
					/* a new session gives the place back */
					st->queue_kept++;
					if (st->first_error[0] == '\0')
						snprintf(st->first_error, sizeof(st->first_error), "%s", msg);
					PQfinish(conn);
					conn = dlc_connect_as(appname);
				}
			}
			else
			{
				note_error(st, "acquire", PQerrorMessage(conn));
				PQclear(res);
			}
			if (PQstatus(conn) != CONNECTION_OK)
			{
				note_error(st, "connection", PQerrorMessage(conn));
				rc = 3;
				break;
			}
			continue;
		}
		if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
		{
			note_error(st, "acquire", "no token in the reply");
			PQclear(res);
			continue;
		}
		snprintf(token, sizeof(token), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		granted_at = dlc_mono_ms();
		iv = &held[(long) w * cap + st->granted];
		st->granted++;

		/*
		 * About a quarter of the holders stall past their ttl before their
		 * transaction begins; the others are quick.  Some also pause between
		 * the read and the write, the window in which an unfenced write drops
		 * elements that others added meanwhile.
		 */
		if (chance(25))
			stall = rand_between(ttl + 10, ttl + 150);
		else
			stall = rand_between(0, ttl / 2);
		if (chance(15))
			think = rand_between(ttl / 2, ttl + 100);
		else
			think = rand_between(0, 10);
		sleep_until(granted_at + stall);

		if (permits > 1)
		{
			/*
			 * The work after the fenced write takes a good part of the
			 * holding time, so that the permits' writers often overlap; now
			 * and then it outlasts the ttl, and the slot's next grant must
			 * wait for this transaction.  Drawn only in this mode, so that a
			 * seed gives the set test the schedule it always gave.
			 */
			int			work;

			if (chance(15))
				work = rand_between(ttl / 2, ttl + 100);
			else
				work = rand_between(ttl / 4, ttl / 2);
			append_element(conn, st, w, token, think, work);
		}
		else
			write_element(conn, st, w, token, think);
		if (PQstatus(conn) != CONNECTION_OK)
		{
			rc = 3;
			break;
		}

		iv->from = granted_at;
		iv->to = dlc_mono_ms();
		st->n_held++;

		params[1] = owner;
		res = PQexecParams(conn, "SELECT dlock.release($1, $2)",
						   2, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
			!PQgetisnull(res, 0, 0))
		{
			if (strcmp(PQgetvalue(res, 0, 0), "f") == 0)
				st->released_late++;
		}
		else
			note_error(st, "release", PQresultStatus(res) == PGRES_TUPLES_OK ?
					   "no answer" : PQerrorMessage(conn));
		PQclear(res);
		if (PQstatus(conn) != CONNECTION_OK)
		{
			rc = 3;
			break;
		}
	}

	PQfinish(conn);
	return rc;
}

/* ---------- parent side ---------- */

static void
usage(FILE *out)
{
	fprintf(out,
			"usage: checker [--workers N] [--seconds S] [--soak] [--no-fence]\n"
			"               [--permits N | --kinds] [--edition c|sql] [--seed X]\n"
			"  --workers N   worker processes, 1 to %d (default 8; 3 per permit with --permits,\n"
			"                12 with --kinds)\n"
			"  --seconds S   length of the run, 1 to %d (default %d)\n"
			"  --soak        a long run: --seconds %d\n"
			"  --no-fence    control: same schedule without dlock.fence(); must fail\n"
			"  --permits N   semaphore mode: N permits of one name, 2 to %d, fewer than\n"
			"                the workers; at most N fenced writers at once\n"
			"  --kinds       mixed-kinds mode: exclusive, shared, permits and sets on three\n"
			"                names; no conflicting holders inside at once (see kinds.c)\n"
			"  --edition E   the edition of dlock the database must have: c (extension dlock,\n"
			"                created if missing) or sql (schema dlock from sql-edition/dlock.sql,\n"
			"                installed beforehand); default: whichever it has, else c\n"
			"  --seed X      seed of the random schedule (default: from the clock)\n"
			"Connects with the libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE).\n",
			MAX_WORKERS, MAX_SECONDS, DEFAULT_SECONDS, SOAK_SECONDS, MAX_PERMITS);
}

static long
parse_number(const char *opt, const char *arg, long lo, long hi)
{
	char	   *end;
	long		v;

	if (arg == NULL)
	{
		fprintf(stderr, "checker: %s needs a value\n", opt);
		exit(1);
	}
	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno != 0 || end == arg || *end != '\0' || v < lo || v > hi)
	{
		fprintf(stderr, "checker: %s must be a number from %ld to %ld\n", opt, lo, hi);
		exit(1);
	}
	return v;
}

static void
parse_options(int argc, char **argv)
{
	seed = (uint64_t) time(NULL) ^ ((uint64_t) getpid() << 20);
	for (int i = 1; i < argc; i++)
	{
		const char *a = argv[i];

		if (strcmp(a, "--workers") == 0)
		{
			n_workers = (int) parse_number(a, argv[++i], 1, MAX_WORKERS);
			workers_given = 1;
		}
		else if (strcmp(a, "--seconds") == 0)
			run_seconds = (int) parse_number(a, argv[++i], 1, MAX_SECONDS);
		else if (strcmp(a, "--soak") == 0)
			run_seconds = SOAK_SECONDS;
		else if (strcmp(a, "--no-fence") == 0)
			fenced = 0;
		else if (strcmp(a, "--permits") == 0)
			permits = (int) parse_number(a, argv[++i], 2, MAX_PERMITS);
		else if (strcmp(a, "--kinds") == 0)
			kinds = 1;
		else if (strcmp(a, "--edition") == 0)
		{
			const char *e = argv[++i];

			if (e != NULL && strcmp(e, "c") == 0)
				edition_wanted = EDITION_C;
			else if (e != NULL && strcmp(e, "sql") == 0)
				edition_wanted = EDITION_SQL;
			else
			{
				fprintf(stderr, "checker: --edition must be c or sql\n");
				exit(1);
			}
		}
		else if (strcmp(a, "--seed") == 0)
		{
			char	   *end;

			if (argv[++i] == NULL)
			{
				fprintf(stderr, "checker: --seed needs a value\n");
				exit(1);
			}
			errno = 0;
			seed = strtoull(argv[i], &end, 10);
			if (errno != 0 || end == argv[i] || *end != '\0')
			{
				fprintf(stderr, "checker: --seed must be a non-negative integer\n");
				exit(1);
			}
		}
		else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
		{
			usage(stdout);
			exit(0);
		}
		else
		{
			fprintf(stderr, "checker: unknown option \"%s\"\n", a);
			usage(stderr);
			exit(1);
		}
	}
	if (kinds && permits > 1)
	{
		fprintf(stderr, "checker: --kinds and --permits are different modes\n");
		exit(1);
	}
	if (permits > 1)
	{
		/* more workers than permits, or no holder ever has to wait */
		if (!workers_given)
			n_workers = 3 * permits < MAX_WORKERS ? 3 * permits : MAX_WORKERS;
		if (n_workers <= permits)
		{
			fprintf(stderr, "checker: --permits %d needs more than %d workers, not %d\n",
					permits, permits, n_workers);
			exit(1);
		}
	}
}

static int
local_host_name(const char *h, size_t len)
{
	static const char *const ok[] = {"localhost", "127.0.0.1", "::1"};

	if (len == 0 || h[0] == '/' || h[0] == '@')
		return 1;				/* a unix socket (the default when empty) */
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (strlen(ok[i]) == len && strncmp(h, ok[i], len) == 0)
			return 1;
	return 0;
}

/* every entry of a comma-separated host list is local */
static int
local_host_list(const char *list)
{
	const char *p = list;

	if (list == NULL)
		return 1;
	for (;;)
	{
		const char *comma = strchr(p, ',');
		size_t		len = comma ? (size_t) (comma - p) : strlen(p);

		if (!local_host_name(p, len))
			return 0;
		if (comma == NULL)
			return 1;
		p = comma + 1;
	}
}

/*
 * The table is dropped and recreated: refuse anything but a local server,
 * judged from the connection settings before any connection is tried.
 */
static int
settings_are_local(void)
{
	PQconninfoOption *opts = PQconndefaults();
	int			local = 1;

	if (opts == NULL)
		return 0;
	for (PQconninfoOption *o = opts; o->keyword != NULL; o++)
	{
		if (strcmp(o->keyword, "host") == 0 || strcmp(o->keyword, "hostaddr") == 0)
		{
			if (o->val != NULL && !local_host_list(o->val))
			{
				fprintf(stderr, "checker: refusing %s \"%s\": local servers only\n",
						o->keyword, o->val);
				local = 0;
			}
		}
	}
	PQconninfoFree(opts);
	return local;
}

PGconn *
connect_parent(void)
{
	PGconn	   *conn;

	if (!settings_are_local())
		return NULL;
	conn = dlc_connect_as("dlock-stress");
	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "checker: connect: %s", PQerrorMessage(conn));
		PQfinish(conn);
		return NULL;
	}
	if (!local_host_list(PQhost(conn)))
	{
		fprintf(stderr, "checker: refusing to run against host \"%s\": local servers only\n",
				PQhost(conn));
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

/*
 * Which edition the database has: the C edition is an extension, the SQL
 * edition a schema dlock that no extension owns.  The role and whether it
 * is a superuser go on the line that names the edition, so that a log
 * shows what a run tested.
 */
int
use_dlock(PGconn *conn)
{
	PGresult   *res;
	int			extension;
	int			schema;
	const char *edition;

	res = PQexec(conn,
				 "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'dlock'),"
				 " EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = 'dlock'),"
				 " current_user, (SELECT rolsuper FROM pg_catalog.pg_roles"
				 "   WHERE rolname = current_user)");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		fprintf(stderr, "checker: looking for dlock: %s", PQerrorMessage(conn));
		PQclear(res);
		return 0;
	}
	extension = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	schema = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	if (!extension && schema)
		edition = "sql";
	else if (extension || edition_wanted != EDITION_SQL)
		edition = "c";
	else
	{
		fprintf(stderr, "checker: --edition sql: the database has no schema dlock "
				"(install sql-edition/dlock.sql first, as the database's owner)\n");
		PQclear(res);
		return 0;
	}
	if ((edition_wanted == EDITION_C && edition[0] != 'c') ||
		(edition_wanted == EDITION_SQL && edition[0] != 's'))
	{
		fprintf(stderr, "checker: --edition %s: the database has the %s edition of dlock\n",
				edition_wanted == EDITION_C ? "c" : "sql",
				edition[0] == 'c' ? "C" : "SQL");
		PQclear(res);
		return 0;
	}
	printf("edition=%s role=%s%s\n", edition, PQgetvalue(res, 0, 2),
		   strcmp(PQgetvalue(res, 0, 3), "t") == 0 ? " (superuser)" : " (not a superuser)");
	fflush(stdout);
	PQclear(res);
	if (extension || edition[0] != 'c')
		return 1;

	res = PQexec(conn, "CREATE EXTENSION dlock");
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		fprintf(stderr, "checker: CREATE EXTENSION dlock: %s", PQerrorMessage(conn));
		PQclear(res);
		return 0;
	}
	PQclear(res);
	return 1;
}

static int
setup_database(void)
{
	PGconn	   *conn = connect_parent();
	PGresult   *res;
	char		sql[512];
	int			ok;

	if (conn == NULL)
		return 0;
	if (!use_dlock(conn))
	{
		PQfinish(conn);
		return 0;
	}
	if (permits > 1)
	{
		/* one row per worker, numbered as the workers are */
		snprintf(sql, sizeof(sql),
				 "SET client_min_messages = warning;"
				 "DROP TABLE IF EXISTS stress_writers;"
				 "CREATE TABLE stress_writers (worker int PRIMARY KEY,"
				 " elements int[] NOT NULL, tokens bigint[] NOT NULL);"
				 "INSERT INTO stress_writers SELECT w, '{}', '{}'"
				 " FROM generate_series(0, %d) AS w;"
				 "SELECT dlock.force_release('" SEMAPHORE_NAME "');",
				 n_workers - 1);
		res = PQexec(conn, sql);
	}
	else
		res = PQexec(conn,
					 "SET client_min_messages = warning;"
					 "DROP TABLE IF EXISTS stress_set;"
					 "CREATE TABLE stress_set (id int PRIMARY KEY, elements int[] NOT NULL,"
					 " tokens bigint[] NOT NULL);"
					 "INSERT INTO stress_set VALUES (1, '{}', '{}');"
					 "SELECT dlock.force_release('" LEASE_NAME "');");
	ok = PQresultStatus(res) == PGRES_TUPLES_OK;
	if (!ok)
		fprintf(stderr, "checker: setup: %s", PQerrorMessage(conn));
	PQclear(res);
	PQfinish(conn);
	return ok;
}

void *
map_shared(size_t bytes)
{
	void	   *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
						 MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
	{
		perror("checker: mmap");
		exit(1);
	}
	return p;
}

static void
reap(int i, int blocking)
{
	int			status;
	pid_t		r;

	if (reaped[i])
		return;
	do
		r = waitpid(children[i], &status, blocking ? 0 : WNOHANG);
	while (r < 0 && errno == EINTR);
	if (r == children[i])
	{
		reaped[i] = 1;
		exit_status[i] = status;
	}
	else if (r < 0)
	{
		/* not our child any more (cannot happen): never signal that pid */
		reaped[i] = 1;
		exit_status[i] = -1;
	}
}

/*
 * Kill and reap every child still there.  SIGKILL also ends a stopped
 * process, so nobody is left frozen; SIGCONT is sent first for tidiness.
 */
void
kill_children(void)
{
	for (int i = 0; i < n_children; i++)
	{
		if (reaped[i])
			continue;
		kill(children[i], SIGCONT);
		kill(children[i], SIGKILL);
	}
	stopped_child = 0;
	for (int i = 0; i < n_children; i++)
		reap(i, 1);
}

static void
resume_stopped(void)
{
	if (stopped_child != 0)
	{
		kill(stopped_child, SIGCONT);
		stopped_child = 0;
	}
}

/*
 * Until the deadline, freeze a random live worker now and then for longer
 * than the longest ttl.  Returns 0 if interrupted.
 */
static int
pause_workers(double deadline, long *pauses)
{
	for (;;)
	{
		double		next = dlc_mono_ms() + rand_between(150, 600);
		int			alive[MAX_WORKERS];
		int			n_alive = 0;
		int			victim;

		if (next >= deadline)
			break;
		if (!sleep_until(next))
			return 0;
		for (int i = 0; i < n_children; i++)
		{
			reap(i, 0);
			if (!reaped[i])
				alive[n_alive++] = i;
		}
		if (n_alive == 0)
			return 1;
		victim = alive[rand_between(0, n_alive - 1)];
		if (kill(children[victim], SIGSTOP) != 0)
			continue;
		stopped_child = children[victim];
		(*pauses)++;
		sleep_until(dlc_mono_ms() + rand_between(TTL_MAX_MS + 50, TTL_MAX_MS + 400));
		resume_stopped();
		if (interrupted)
			return 0;
	}
	return sleep_until(deadline);
}

/* Wait for the workers to finish their last iteration; kill stragglers */
int
wait_children(double until)
{
	int			all_clean = 1;

	for (;;)
	{
		int			left = 0;

		for (int i = 0; i < n_children; i++)
		{
			reap(i, 0);
			left += !reaped[i];
		}
		if (left == 0 || interrupted || dlc_mono_ms() > until)
			break;
		sleep_until(dlc_mono_ms() + 20);
	}
	for (int i = 0; i < n_children; i++)
	{
		if (!reaped[i])
		{
			fprintf(stderr, "checker: worker %d did not finish in time; killed\n", i);
			all_clean = 0;
		}
	}
	kill_children();
	return all_clean;
}

static int
cmp_event(const void *a, const void *b)
{
	const double *x = a;
	const double *y = b;

	/* by time; at a tie an end (-1) sorts before a start (+1) */
	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return (x[1] > y[1]) - (x[1] < y[1]);
}

/* Most workers that believed at one moment that they held the lease */
static int
max_concurrent_holders(void)
{
	long		n = 0;
	long		k = 0;
	double	   *ev;
	int			cur = 0;
	int			best = 0;

	for (int w = 0; w < n_workers; w++)
		n += stats[w].n_held;
	if (n == 0)
		return 0;
	ev = malloc(sizeof(double) * 4 * n);
	if (ev == NULL)
	{
		fprintf(stderr, "checker: out of memory\n");
		return -1;
	}
	for (int w = 0; w < n_workers; w++)
	{
		for (long i = 0; i < stats[w].n_held; i++)
		{
			const struct interval *iv = &held[(long) w * cap + i];

			ev[2 * k] = iv->from;
			ev[2 * k + 1] = 1;
			k++;
			ev[2 * k] = iv->to;
			ev[2 * k + 1] = -1;
			k++;
		}
	}
	qsort(ev, k, 2 * sizeof(double), cmp_event);
	for (long i = 0; i < k; i++)
	{
		cur += (int) ev[2 * i + 1];
		if (cur > best)
			best = cur;
	}
	free(ev);
	return best;
}

struct verdict
{
	long		lost;
	long		unexpected;
	long		duplicates;
	long		recovered;		/* outcome unknown to the worker, found in the set */
	long		n_elements;
	long		n_tokens;
	long		disorder;		/* adjacent token pairs not increasing */
	long		disorder_at;	/* first such position, 1-based */
	int			disorder_row;	/* ... in this worker's row (semaphore mode) */
	long long	disorder_prev;
	long long	disorder_next;
	long		shared_tokens;	/* semaphore mode: tokens written twice or more */
	long		lost_sample[10];	/* a few lost elements, to look them up */
};

/*
 * Read the final row (the workers' rows in the semaphore mode) and compare
 * it with what the workers were told
 */
static int
verify(struct verdict *v)
{
	PGconn	   *conn = connect_parent();
	PGresult   *res;
	long		max_writes = 0;
	long		range;
	unsigned char *count;

	memset(v, 0, sizeof(*v));
	if (conn == NULL)
		return 0;

	for (int w = 0; w < n_workers; w++)
		if (stats[w].writes > max_writes)
			max_writes = stats[w].writes;
	range = max_writes * n_workers;
	count = calloc(range > 0 ? range : 1, 1);
	if (count == NULL)
	{
		fprintf(stderr, "checker: out of memory\n");
		PQfinish(conn);
		return 0;
	}

	if (permits > 1)
		res = PQexec(conn, "SELECT e, worker FROM stress_writers, unnest(elements) AS e");
	else
		res = PQexec(conn, "SELECT unnest(elements) FROM stress_set WHERE id = 1");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "checker: reading the set: %s", PQerrorMessage(conn));
		PQclear(res);
		free(count);
		PQfinish(conn);
		return 0;
	}
	v->n_elements = PQntuples(res);
	for (long i = 0; i < v->n_elements; i++)
	{
		long		e = strtol(PQgetvalue(res, (int) i, 0), NULL, 10);

		if (e < 1 || e > range)
		{
			v->unexpected++;	/* nobody ever tried to write it */
			continue;
		}
		if (permits > 1 &&
			(e - 1) % n_workers != strtol(PQgetvalue(res, (int) i, 1), NULL, 10))
		{
			v->unexpected++;	/* in a row its writer never touched */
			continue;
		}
		if (count[e - 1] == 1)
			v->duplicates++;
		if (count[e - 1] < 255)
			count[e - 1]++;
	}
	PQclear(res);

	for (int w = 0; w < n_workers; w++)
	{
		for (long seq = 0; seq < max_writes; seq++)
		{
			unsigned char st = seq < stats[w].writes ? wstatus[(long) w * cap + seq] : W_UNSENT;
			int			present = count[element_of(w, seq) - 1] > 0;

			if (st == W_ACKED && !present)
			{
				if (v->lost < 10)
					v->lost_sample[v->lost] = element_of(w, seq);
				v->lost++;
			}
			else if (st == W_UNKNOWN && present)
				v->recovered++;
			else if (st != W_ACKED && st != W_UNKNOWN && present)
				v->unexpected++;
		}
	}
	free(count);

	if (permits > 1)
		res = PQexec(conn, "SELECT t, worker FROM stress_writers, "
					 "unnest(tokens) WITH ORDINALITY AS u(t, n) ORDER BY worker, n");
	else
		res = PQexec(conn, "SELECT t FROM stress_set, unnest(tokens) WITH ORDINALITY AS u(t, n) "
					 "WHERE id = 1 ORDER BY n");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "checker: reading the tokens: %s", PQerrorMessage(conn));
		PQclear(res);
		PQfinish(conn);
		return 0;
	}
	v->n_tokens = PQntuples(res);
	for (long i = 1, at = 1; i < v->n_tokens; i++)
	{
		long long	prev = strtoll(PQgetvalue(res, (int) i - 1, 0), NULL, 10);
		long long	next = strtoll(PQgetvalue(res, (int) i, 0), NULL, 10);

		/* in the semaphore mode, each worker's row is a sequence of its own */
		if (permits > 1 &&
			strcmp(PQgetvalue(res, (int) i - 1, 1), PQgetvalue(res, (int) i, 1)) != 0)
		{
			at = 1;
			continue;
		}
		at++;
		if (next <= prev && v->disorder++ == 0)
		{
			v->disorder_at = permits > 1 ? at : i + 1;
			v->disorder_row = permits > 1 ? atoi(PQgetvalue(res, (int) i, 1)) : 0;
			v->disorder_prev = prev;
			v->disorder_next = next;
		}
	}
	PQclear(res);

	/* a token is one holder's: no two workers may have written the same */
	if (permits > 1)
	{
		res = PQexec(conn, "SELECT count(*) - count(DISTINCT t) "
					 "FROM stress_writers, unnest(tokens) AS t");
		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		{
			fprintf(stderr, "checker: reading the tokens: %s", PQerrorMessage(conn));
			PQclear(res);
			PQfinish(conn);
			return 0;
		}
		v->shared_tokens = strtol(PQgetvalue(res, 0, 0), NULL, 10);
		PQclear(res);
	}
	PQfinish(conn);
	return 1;
}

/* no SA_RESTART: a signal must cut the parent's sleeps short */
static void
catch_signals(void)
{
	dlc_catch_signal(SIGINT, on_signal);
	dlc_catch_signal(SIGTERM, on_signal);
	dlc_catch_signal(SIGHUP, on_signal);
}

int
start_workers(int (*body) (int w, double deadline), double deadline)
{
	catch_signals();
	fflush(stdout);
	fflush(stderr);
	/* a new round: the last round's workers have all been reaped */
	n_children = 0;
	stopped_child = 0;
	memset(reaped, 0, sizeof(reaped));
	memset(exit_status, 0, sizeof(exit_status));
	for (int w = 0; w < n_workers; w++)
	{
		pid_t		parent = getpid();
		pid_t		pid = fork();

		if (pid < 0)
		{
			perror("checker: fork");
			kill_children();
			return 0;
		}
		if (pid == 0)
		{
			signal(SIGINT, SIG_DFL);
			signal(SIGTERM, SIG_DFL);
			signal(SIGHUP, SIG_DFL);
#ifdef __linux__
			/* a worker must not outlive a parent that died without cleaning up */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
			if (getppid() != parent)
				_exit(1);
			rng_state = seed + UINT64_C(0x632BE59BD9B4E019) * (uint64_t) (w + 1);
			_exit(body(w, deadline));
		}
		children[n_children++] = pid;
	}
	return 1;
}

int
worker_exited_cleanly(int w)
{
	int			status = exit_status[w];

	if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 1;
	if (status != -1 && WIFSIGNALED(status))
		fprintf(stderr, "worker %d: killed by signal %d\n", w, WTERMSIG(status));
	else
		fprintf(stderr, "worker %d: exit status %d\n", w,
				status == -1 ? -1 : WEXITSTATUS(status));
	return 0;
}

/*
 * The set and semaphore modes' schedule: start the workers, freeze one now
 * and then until the deadline, wait for them.  1 if every worker finished
 * in time, 0 if not, -1 if interrupted.
 */
static int
run_schedule(long *pauses)
{
	double		deadline = dlc_mono_ms() + run_seconds * 1000.0;
	int			clean;

	stats = map_shared(sizeof(struct worker_stats) * n_workers);
	held = map_shared(sizeof(struct interval) * n_workers * cap);
	wstatus = map_shared((size_t) n_workers * cap);
	occ = map_shared(sizeof(struct occupancy));

	if (!start_workers(worker_main, deadline))
		return -1;
	if (!pause_workers(deadline, pauses) || interrupted)
	{
		resume_stopped();
		kill_children();
		fprintf(stderr, "checker: interrupted\n");
		return -1;
	}
	resume_stopped();
	clean = wait_children(deadline + GRACE_MS);
	if (interrupted)
	{
		fprintf(stderr, "checker: interrupted\n");
		return -1;
	}
	return clean;
}

/* Add up the workers' accounts; 0 if any of them went wrong */
static int
sum_stats(struct worker_stats *sum)
{
	int			clean = 1;

	memset(sum, 0, sizeof(*sum));
	for (int w = 0; w < n_workers; w++)
	{
		const struct worker_stats *st = &stats[w];

		sum->attempts += st->attempts;
		sum->granted += st->granted;
		sum->timeouts += st->timeouts;
		sum->writes += st->writes;
		sum->acked += st->acked;
		sum->refused += st->refused;
		sum->aborted += st->aborted;
		sum->unknown += st->unknown;
		sum->released_late += st->released_late;
		sum->queue_kept += st->queue_kept;
		sum->errors += st->errors;
		if (st->first_error[0] != '\0')
			fprintf(stderr, "worker %d: %ld error(s), %ld place(s) kept in a queue, first: %s\n",
					w, st->errors, st->queue_kept, st->first_error);
		if (st->overflow)
		{
			fprintf(stderr, "worker %d: ran out of room to record its history\n", w);
			clean = 0;
		}
		if (!worker_exited_cleanly(w))
			clean = 0;
	}
	return clean && sum->errors == 0;
}

static void
report(const struct worker_stats *sum, const struct verdict *v, int max_holders,
	   int commits_ok, long pauses)
{
	printf("attempts=%ld  granted=%ld  acquire_timeouts=%ld  writes=%ld  acknowledged=%ld  "
		   "refused_by_fence=%ld  aborted=%ld  indeterminate=%ld\n",
		   sum->attempts, sum->granted, sum->timeouts, sum->writes, sum->acked,
		   sum->refused, sum->aborted, sum->unknown);
	if (permits > 1)
		printf("final_set=%ld  lost=%ld  unexpected=%ld  duplicates=%ld  recovered=%ld  "
			   "max_concurrent_holders_seen=%d  max_concurrent_writers=%d  permits=%d\n",
			   v->n_elements, v->lost, v->unexpected, v->duplicates, v->recovered, max_holders,
			   occ->most, permits);
	else
		printf("final_set=%ld  lost=%ld  unexpected=%ld  duplicates=%ld  recovered=%ld  "
			   "max_concurrent_holders_seen=%d\n",
			   v->n_elements, v->lost, v->unexpected, v->duplicates, v->recovered, max_holders);
	printf("stale holders: leases ended before release=%ld  sigstop pauses=%ld  "
		   "commits recorded=%ld\n",
		   sum->released_late, pauses, v->n_tokens);
	if (permits > 1)
		printf("writers between their %s UPDATE and COMMIT at once: at most %d with "
			   "%d permits (entries past the permits: %ld)\n",
			   fenced ? "fenced" : "unfenced", occ->most, permits, occ->over);
	if (v->lost > 0)
	{
		printf("lost elements (element/worker, first %d):", v->lost < 10 ? (int) v->lost : 10);
		for (long i = 0; i < v->lost && i < 10; i++)
			printf(" %ld/w%ld", v->lost_sample[i], (v->lost_sample[i] - 1) % n_workers);
		printf("\n");
	}
	if (!commits_ok)
		printf("commits recorded in the %s: %ld, but %ld acknowledged and %ld indeterminate\n",
			   permits > 1 ? "rows" : "row", v->n_tokens, sum->acked, sum->unknown);
	if (permits > 1)
	{
		if (v->disorder == 0)
			printf("tokens in commit order strictly increasing in each worker's row: yes");
		else
			printf("tokens in commit order strictly increasing in each worker's row: no "
				   "(%ld inversions; first in the row of w%d at commit %ld: token %lld "
				   "after %lld)",
				   v->disorder, v->disorder_row, v->disorder_at, v->disorder_next,
				   v->disorder_prev);
		printf("; tokens written more than once: %ld\n", v->shared_tokens);
	}
	else if (v->disorder == 0)
		printf("tokens in commit order strictly increasing: yes\n");
	else
		printf("tokens in commit order strictly increasing: no (%ld inversions; first at "
			   "commit %ld: token %lld after %lld)\n",
			   v->disorder, v->disorder_at, v->disorder_next, v->disorder_prev);
}

/* The exit status: a fenced run must pass, a control run must not */
static int
judge(int anomalies, int clean, int max_holders, const struct worker_stats *sum)
{
	if (fenced)
	{
		/*
		 * A pass only means something if some holder did go stale; for the
		 * semaphore, if more workers than permits believed at once that they
		 * held one: otherwise the bound on the writers was never tested.
		 */
		int			stale_seen = permits > 1 ? max_holders > permits :
			max_holders > 1 || sum->refused > 0;

		if (!stale_seen && permits > 1)
			printf("the schedule never had more holders than permits: the run tested nothing\n");
		else if (!stale_seen)
			printf("the schedule never produced a stale holder: the run tested nothing\n");
		return result_line(anomalies, clean, stale_seen);
	}
	return result_line(anomalies, clean, 1);
}

int
result_line(int anomalies, int clean, int tested)
{
	if (fenced)
	{
		if (!anomalies && clean && tested)
		{
			printf("RESULT: PASS\n");
			return 0;
		}
		if (!anomalies && clean)
		{
			printf("RESULT: UNDECIDED (nothing wrong found, but the run tested too little)\n");
			return RUN_UNDECIDED;
		}
		printf("RESULT: FAIL\n");
		return 1;
	}
	if (!clean)
	{
		printf("RESULT: FAIL (the control run itself went wrong, see above)\n");
		return 1;
	}
	if (anomalies)
	{
		printf("RESULT: FAIL (expected for --no-fence)\n");
		return 0;
	}
	printf("RESULT: PASS (unexpected for --no-fence: the checker detected nothing)\n");
	return 1;
}

/* The lock-guarded set, or the semaphore with --permits */
static int
set_main(void)
{
	struct worker_stats sum;
	struct verdict v;
	long		pauses = 0;
	int			clean;
	int			max_holders;
	int			commits_ok;
	int			anomalies;

	cap = 256 + 250L * run_seconds;
	if (permits > 1)
		printf("mode=semaphore-%s permits=%d workers=%d duration=%ds seed=%" PRIu64 "\n",
			   fenced ? "fenced" : "no-fence", permits, n_workers, run_seconds, seed);
	else
		printf("mode=%s workers=%d duration=%ds seed=%" PRIu64 "\n",
			   fenced ? "fenced" : "no-fence", n_workers, run_seconds, seed);
	fflush(stdout);

	if (!setup_database())
		return 1;
	clean = run_schedule(&pauses);
	if (clean < 0)
		return 1;
	if (!sum_stats(&sum))
		clean = 0;

	max_holders = max_concurrent_holders();
	if (!verify(&v))
		return 1;
	/* every acknowledged write appended its token; an unknown one may have */
	commits_ok = v.n_tokens >= sum.acked && v.n_tokens <= sum.acked + sum.unknown;
	report(&sum, &v, max_holders, commits_ok, pauses);

	anomalies = v.lost > 0 || v.unexpected > 0 || v.duplicates > 0 ||
		v.disorder > 0 || !commits_ok;
	if (permits > 1 && (occ->most > permits || v.shared_tokens > 0))
		anomalies = 1;
	if (sum.queue_kept > 0)
	{
		/* a fault of the lock's in either run, not a missing fence's */
		printf("acquire() calls that timed out and left their session holding a place "
			   "in the queue: %ld\n", sum.queue_kept);
		if (fenced)
			anomalies = 1;
		else
			clean = 0;
	}
	if (sum.acked == 0)
	{
		printf("no write was acknowledged: the run tested nothing\n");
		clean = 0;
	}
	return judge(anomalies, clean, max_holders, &sum);
}

int
main(int argc, char **argv)
{
	int			rc;

	parse_options(argc, argv);
	for (int round = 1;; round++)
	{
		rng_state = seed;
		rc = kinds ? kinds_main() : set_main();
		if (rc != RUN_UNDECIDED || interrupted)
			break;

		/*
		 * A fenced run that found nothing wrong but whose schedule tested
		 * too little (a loaded machine slows every worker down) has shown
		 * nothing either way.  It runs again, from a fresh database and
		 * with the next seed, twice as long, and that round is judged
		 * alone: counts are never added across rounds, so a pass is always
		 * one round that tested enough and found nothing wrong.
		 */
		if (round == UNDECIDED_ROUNDS || run_seconds > MAX_SECONDS / 2)
		{
			printf("RESULT: FAIL (%d rounds tested too little)\n", round);
			break;
		}
		run_seconds *= 2;
		seed++;
		printf("running again for %d s with the next seed (round %d of at most %d)\n",
			   run_seconds, round + 1, UNDECIDED_ROUNDS);
		fflush(stdout);
	}
	return rc == RUN_UNDECIDED ? 1 : rc;
}

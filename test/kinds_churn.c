/*
 * kinds_churn.c
 *	  Churn of semaphore permits, shared and exclusive leases, for
 *	  test/t/019_kinds.pl.
 *
 * Each worker (a process with its own connection and owner) loops until the
 * time is up.  It asks either for a permit of "sem", a semaphore of three,
 * or for "rw", shared (a reader) or exclusive (a writer), with acquire or
 * try_acquire, a short random ttl (20 to 200 ms), at random a lock-delay or
 * session_bound, and a random timeout or none; at random it cancels its own
 * wait part-way with pg_cancel_backend() from a second connection.  With a
 * lease, in one transaction, it inserts its token into the table entries
 * under the fence (the guarded write; the table's key also catches a token
 * granted twice), and, when the fence was true, is "inside" for a random
 * time, sometimes past the lease's expiry (the fence's pin must then hold
 * off the regrant), before it commits and releases.  The checks:
 *
 *	- at most three permits inside at once; a writer inside alone; readers
 *	  inside only with readers;
 *	- every token a worker is granted for a name is larger than its
 *	  previous one for that name, and no token is inserted twice;
 *	- no other error, in particular no deadlock (40P01).
 *
 * How "inside" is counted, exactly.  A worker inside holds a marker: a
 * session-level advisory lock in share mode, key (17, its role), taken
 * after the fenced INSERT found the fence true and given back before
 * COMMIT.  dlock's pin of the token lasts from that true fence until the
 * transaction ends, so at any instant every marker held belongs to a
 * transaction that holds a true fence at that instant.  Right after taking
 * its marker, and again before giving it back, a worker counts the markers
 * in pg_locks: one consistent picture of the lock table (it takes every
 * partition lock at once), showing uncommitted transactions too.  A count
 * above the limit is therefore a real violation, never an artefact, and
 * an overlap is seen by whoever checks while it lasts.  Rows of a table
 * could not do this: under MVCC another transaction's uncommitted rows are
 * invisible, and a committed row outlives the pin (with ttls this short a
 * lease may end while it is still there).  Nor could transaction-level
 * markers: they are released with the pin at the end of the transaction,
 * partition by partition, so one could outlive its pin for a moment and be
 * counted by a newcomer admitted meanwhile.
 *
 * Cancels never reach the transaction that holds a marker: a worker sends
 * pg_cancel_backend() for its own backend while that one runs the acquire,
 * and reads the acquire's answer only once the signal has been sent, so a
 * cancel that comes too late finds the backend idle, and the server drops
 * it.  Any error inside is a failure.
 *
 * Prints one summary line per worker, and exits 1 if any check failed.
 *
 * Usage: kinds_churn WORKERS SECONDS SEED   (libpq environment)
 */
#define _DEFAULT_SOURCE

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "lib/dlock_client.h"

/* What a worker asks for; the marker's second key is the role + 1 */
typedef enum Role
{
	ROLE_PERMIT,
	ROLE_READER,
	ROLE_WRITER
} Role;

static const char *const role_names[] = {"permit", "reader", "writer"};

#define SEM_LIMIT	3

/* a statement that must succeed; NULL (after a message) when it did not */
static PGresult *
must(int worker, PGconn *conn, const char *sql, int nparams,
	 const char *const *params, ExecStatusType expected)
{
	PGresult   *res = dlc_exec(conn, sql, nparams, params);

	if (PQresultStatus(res) != expected)
	{
		dlc_failed(worker, sql, res);
		PQclear(res);
		return NULL;
	}
	return res;
}

/*
 * count the markers, and check them against the role's limit; *overstayed
 * is set when the lease's expiry has passed on the server clock
 */
static int
check_inside(int worker, PGconn *conn, Role role, const char *expires,
			 int *permits, int *readers, bool *overstayed)
{
	const char *params[1] = {expires};
	PGresult   *res = must(worker, conn,
						   "SELECT count(*) FILTER (WHERE objid = 1), "
						   "       count(*) FILTER (WHERE objid = 2), "
						   "       count(*) FILTER (WHERE objid = 3), "
						   "       clock_timestamp() > $1::timestamptz "
						   "  FROM pg_locks "
						   " WHERE locktype = 'advisory' AND classid = 17 AND objsubid = 2 "
						   "   AND granted AND database = "
						   "       (SELECT oid FROM pg_database WHERE datname = current_database())",
						   1, params, PGRES_TUPLES_OK);
	int			writers;
	char		msg[160];

	if (res == NULL)
		return 1;
	*permits = atoi(PQgetvalue(res, 0, 0));
	*readers = atoi(PQgetvalue(res, 0, 1));
	writers = atoi(PQgetvalue(res, 0, 2));
	*overstayed = strcmp(PQgetvalue(res, 0, 3), "t") == 0;
	PQclear(res);

	snprintf(msg, sizeof(msg), "a %s inside with %d permits, %d readers, %d writers",
			 role_names[role], *permits, *readers, writers);
	if ((role == ROLE_PERMIT && *permits < 1) ||
		(role == ROLE_READER && *readers < 1) ||
		(role == ROLE_WRITER && writers < 1))
		return dlc_failed(worker, "its own marker is missing", NULL);
	if ((role == ROLE_PERMIT && *permits > SEM_LIMIT) ||
		(role == ROLE_READER && writers > 0) ||
		(role == ROLE_WRITER && (writers > 1 || *readers > 0)))
		return dlc_failed(worker, msg, NULL);
	return 0;
}

/* what every worker is given */
typedef struct Churn
{
	double		deadline;
	unsigned	seed;
} Churn;

static int
run_worker(int worker, void *arg)
{
	const Churn *churn = arg;
	double		deadline = churn->deadline;
	unsigned	seed = churn->seed;
	PGconn	   *conn = PQconnectdb("");
	PGconn	   *side = PQconnectdb("");
	char		owner[32];
	char		worker_text[16];
	char		pid[16];
	long long	last_token[2] = {0, 0};
	long		inside[3] = {0, 0, 0},
				refused = 0,
				timeouts = 0,
				cancels = 0,
				cancelled = 0,
				fenced_out = 0,
				overstays = 0;
	int			max_permits = 0,
				max_readers = 0;

	if (PQstatus(conn) != CONNECTION_OK || PQstatus(side) != CONNECTION_OK)
	{
		fprintf(stderr, "worker %d: %s%s", worker, PQerrorMessage(conn), PQerrorMessage(side));
		return 1;
	}
	snprintf(owner, sizeof(owner), "kinds-%d", worker);
	snprintf(worker_text, sizeof(worker_text), "%d", worker);
	snprintf(pid, sizeof(pid), "%d", PQbackendPID(conn));
	srandom(seed * 7919 + worker);

	while (dlc_wall_s() < deadline)
	{
		Role		role = random() % 2 ? ROLE_PERMIT :
			random() % 2 ? ROLE_WRITER : ROLE_READER;
		const char *name = role == ROLE_PERMIT ? "sem" : "rw";
		int			ttl_ms = 20 + random() % 181;
		bool		waits = random() % 4 != 0;
		char		ttl[32],
					timeout[32],
					token[32],
					expires[64],
					marker[8];
		const char *params[8];
		const char *sql;
		PGresult   *res;
		bool		granted = false;

		snprintf(ttl, sizeof(ttl), "%d ms", ttl_ms);
		params[0] = name;
		params[1] = ttl;
		params[2] = owner;
		params[3] = random() % 4 == 0 ? "20 ms" : "0";
		params[4] = random() % 5 == 0 ? "true" : "false";
		params[5] = role == ROLE_READER ? "true" : "false";
		params[6] = role == ROLE_PERMIT ? "3" : "1";
		/*
		 * A timeout of 0 to 60 ms, or of 100 to 600 ms (a writer needs that
		 * to get its turn among readers), or none (then the cancel ends it)
		 */
		params[7] = NULL;
		switch (random() % 6)
		{
			case 0:
				break;
			case 1:
			case 2:
				snprintf(timeout, sizeof(timeout), "%ld ms", random() % 61);
				params[7] = timeout;
				break;
			default:
				snprintf(timeout, sizeof(timeout), "%ld ms", 100 + random() % 501);
				params[7] = timeout;
				break;
		}
		if (waits)
			sql = "SELECT token, expires_at FROM dlock.acquire($1, $2::interval, $3, "
				"lock_delay => $4::interval, session_bound => $5::boolean, "
				"shared => $6::boolean, max_holders => $7::integer, timeout => $8::interval)";
		else
			sql = "SELECT token, expires_at FROM dlock.try_acquire($1, $2::interval, $3, "
				"lock_delay => $4::interval, session_bound => $5::boolean, "
				"shared => $6::boolean, max_holders => $7::integer)";

		if (!PQsendQueryParams(conn, sql, waits ? 8 : 7, NULL, params, NULL, NULL, 0))
			return dlc_failed(worker, PQerrorMessage(conn), NULL);
		if (waits && (params[7] == NULL || random() % 4 == 0))
		{
			const char *cancel_params[1] = {pid};

			usleep(random() % 50000);
			res = must(worker, side, "SELECT pg_cancel_backend($1::int)", 1,
					   cancel_params, PGRES_TUPLES_OK);
			if (res == NULL)
				return 1;
			PQclear(res);
			cancels++;
		}
		res = PQgetResult(conn);
		dlc_drain(conn);

		if (PQresultStatus(res) == PGRES_TUPLES_OK && !PQgetisnull(res, 0, 0))
		{
			granted = true;
			dlc_copy_value(token, sizeof(token), res, 0, 0);
			dlc_copy_value(expires, sizeof(expires), res, 0, 1);
		}
		else if (PQresultStatus(res) == PGRES_TUPLES_OK)
			refused++;
		else if (dlc_has_sqlstate(res, "55P03"))
			timeouts++;
		else if (dlc_has_sqlstate(res, "57014"))
			cancelled++;
		else
			return dlc_failed(worker, "unexpected error", res);
		PQclear(res);
		if (!granted)
			continue;

		/* tokens grow per name */
		{
			long long	t = atoll(token);
			int			n = role == ROLE_PERMIT ? 0 : 1;

			if (t <= last_token[n])
				return dlc_failed(worker, "a token did not grow", NULL);
			last_token[n] = t;
		}

		/* the guarded write, then inside under a marker */
		res = must(worker, conn, "BEGIN", 0, NULL, PGRES_COMMAND_OK);
		if (res == NULL)
			return 1;
		PQclear(res);
		params[0] = token;
		params[1] = name;
		params[2] = worker_text;
		params[3] = role_names[role];
		res = must(worker, conn,
				   "INSERT INTO entries (token, name, worker, role) "
				   "SELECT $1::bigint, $2, $3::int, $4 WHERE dlock.fence($2, $1::bigint)",
				   4, params, PGRES_COMMAND_OK);
		if (res == NULL)
			return 1;
		if (strcmp(PQcmdTuples(res), "1") != 0)
		{
			/* the lease ended before the write: nothing was written */
			PQclear(res);
			res = must(worker, conn, "ROLLBACK", 0, NULL, PGRES_COMMAND_OK);
			if (res == NULL)
				return 1;
			PQclear(res);
			fenced_out++;
		}
		else
		{
			int			permits,
						readers;
			bool		overstayed;

			PQclear(res);
			snprintf(marker, sizeof(marker), "%d", (int) role + 1);
			params[0] = marker;
			res = must(worker, conn, "SELECT pg_advisory_lock_shared(17, $1::int)",
					   1, params, PGRES_TUPLES_OK);
			if (res == NULL)
				return 1;
			PQclear(res);
			if (check_inside(worker, conn, role, expires, &permits, &readers, &overstayed))
				return 1;
			if (permits > max_permits)
				max_permits = permits;
			if (readers > max_readers)
				max_readers = readers;
			/* up to 1.2 times the ttl: a sixth of the stays outlive the lease */
			usleep(random() % (ttl_ms * 1200));
			if (check_inside(worker, conn, role, expires, &permits, &readers, &overstayed))
				return 1;
			if (overstayed)
				overstays++;
			res = must(worker, conn, "SELECT pg_advisory_unlock_shared(17, $1::int)",
					   1, params, PGRES_TUPLES_OK);
			if (res == NULL)
				return 1;
			if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
				return dlc_failed(worker, "the marker was not held", NULL);
			PQclear(res);
			res = must(worker, conn, "COMMIT", 0, NULL, PGRES_COMMAND_OK);
			if (res == NULL)
				return 1;
			PQclear(res);
			inside[role]++;
		}

		/* false when it expired meanwhile */
		params[0] = name;
		params[1] = owner;
		res = must(worker, conn, DLC_RELEASE_SQL, 2, params, PGRES_TUPLES_OK);
		if (res == NULL)
			return 1;
		PQclear(res);
	}
	printf("worker %d: %ld permits, %ld reads, %ld writes inside; %ld refused, %ld timed out, "
		   "%ld cancels sent, %ld cancelled, %ld fenced out, %ld overstayed; "
		   "at most %d permits, %d readers inside at once\n",
		   worker, inside[ROLE_PERMIT], inside[ROLE_READER], inside[ROLE_WRITER],
		   refused, timeouts, cancels, cancelled, fenced_out, overstays,
		   max_permits, max_readers);
	fflush(stdout);
	PQfinish(side);
	PQfinish(conn);
	return 0;
}

int
main(int argc, char **argv)
{
	Churn		churn;

	dlc_progname = "kinds_churn";
	if (argc != 4)
	{
		fprintf(stderr, "usage: %s WORKERS SECONDS SEED\n", argv[0]);
		return 2;
	}
	churn.deadline = dlc_wall_s() + atof(argv[2]);
	churn.seed = (unsigned) atoi(argv[3]);
	return dlc_run_workers(atoi(argv[1]), run_worker, &churn);
}

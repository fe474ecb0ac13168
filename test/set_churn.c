/*
 * set_churn.c
 *	  Churn of overlapping sets and single leases, for test/t/016_sets.pl.
 *
 * Each worker (a process with its own connection and owner) loops until the
 * time is up: it picks one to four of the names n1..nK at random and asks
 * for them with acquire_all, try_acquire_all, acquire (the first name only)
 * or try_acquire, with a random timeout or none, and at random cancels the
 * call part-way (PQcancel) at a random moment.  Then it checks:
 *
 *	- all or nothing: a call that returns holds every distinct name it asked
 *	  for, under one token; a call that fails (55P03 timeout, 57014 cancel)
 *	  or refuses holds none of them, as dlock.leases shows right after;
 *	- exclusion per name: with the lease held, a fenced UPDATE marks each
 *	  name's row "inside" and must find every fence true and nobody else
 *	  inside; the mark is taken off before the release;
 *	- tokens grow per name: the same UPDATE only matches if the name's last
 *	  token is smaller;
 *	- no other error, in particular no deadlock (40P01).
 *
 * A late cancel request can reach a later statement: every check retries a
 * statement that was cancelled.  Prints one summary line per worker, and
 * exits 1 if any check failed.
 *
 * Usage: set_churn WORKERS SECONDS NAMES SEED   (libpq environment)
 */
#define _DEFAULT_SOURCE

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "lib/dlock_client.h"

/* run a query to the end, again as long as a stray cancel interrupts it */
static PGresult *
exec_retry(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
	for (;;)
	{
		PGresult   *res = dlc_exec(conn, sql, nparams, params);

		if (!dlc_has_sqlstate(res, "57014"))
			return res;
		PQclear(res);
	}
}

/* what every worker is given */
typedef struct Churn
{
	double		deadline;
	int			nnames;
	unsigned	seed;
} Churn;

static int
run_worker(int worker, void *arg)
{
	const Churn *churn = arg;
	double		deadline = churn->deadline;
	int			nnames = churn->nnames;
	unsigned	seed = churn->seed;
	PGconn	   *conn = PQconnectdb("");
	PGcancel   *cancel;
	char		owner[32];
	long		sets = 0,
				singles = 0,
				refused = 0,
				timeouts = 0,
				cancels = 0;

	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "worker %d: %s", worker, PQerrorMessage(conn));
		return 1;
	}
	cancel = PQgetCancel(conn);
	snprintf(owner, sizeof(owner), "churn-%d", worker);
	srandom(seed * 7919 + worker);

	while (dlc_wall_s() < deadline)
	{
		char		names[160] = "{";
		char		timeout[32];
		int			count = 1 + random() % 4;
		int			kind = random() % 4;
		bool		is_set = kind < 2;
		bool		waits = kind == 0 || kind == 2;
		const char *params[4];
		const char *sql;
		PGresult   *res;
		char		token[32] = "";
		int			distinct = 0;
		bool		seen[64] = {false};

		/* a single lease is a set of one name here */
		if (!is_set)
			count = 1;
		for (int i = 0; i < count; i++)
		{
			int			n = dlc_pick(nnames);

			if (!seen[n])
				distinct++;
			seen[n] = true;
			snprintf(names + strlen(names), sizeof(names) - strlen(names),
					 "%sn%d", i ? "," : "", n);
		}
		strcat(names, "}");

		/* a timeout of 0 to 30 ms, or none (then the cancel ends it) */
		params[0] = names;
		params[1] = owner;
		params[2] = NULL;
		if (random() % 4 != 0)
		{
			snprintf(timeout, sizeof(timeout), "%ld ms", random() % 31);
			params[2] = timeout;
		}
		switch (kind)
		{
			case 0:
				sql = "SELECT count(*), count(DISTINCT token), min(token) "
					"FROM dlock.acquire_all($1::text[], '10s', $2, $3::interval)";
				break;
			case 1:
				sql = "SELECT count(*), count(DISTINCT token), min(token) "
					"FROM dlock.try_acquire_all($1::text[], '10s', $2)";
				break;
			case 2:
				sql = "SELECT count(token), count(DISTINCT token), min(token) "
					"FROM dlock.acquire(($1::text[])[1], '10s', $2, $3::interval)";
				break;
			default:
				sql = "SELECT count(token), count(DISTINCT token), min(token) "
					"FROM dlock.try_acquire(($1::text[])[1], '10s', $2)";
				break;
		}

		if (!PQsendQueryParams(conn, sql, waits ? 3 : 2, NULL, params, NULL, NULL, 0))
			return dlc_failed(worker, PQerrorMessage(conn), NULL);
		if (waits && (params[2] == NULL || random() % 3 == 0))
		{
			char		errbuf[256];

			usleep(random() % 20000);
			PQcancel(cancel, errbuf, sizeof(errbuf));
			cancels++;
		}
		res = PQgetResult(conn);
		dlc_drain(conn);

		if (PQresultStatus(res) == PGRES_TUPLES_OK && strcmp(PQgetvalue(res, 0, 0), "0") != 0)
		{
			if (atoi(PQgetvalue(res, 0, 0)) != distinct || strcmp(PQgetvalue(res, 0, 1), "1") != 0)
				return dlc_failed(worker, "a grant did not hold every name under one token", NULL);
			dlc_copy_value(token, sizeof(token), res, 0, 2);
		}
		else if (PQresultStatus(res) == PGRES_TUPLES_OK)
			refused++;
		else if (dlc_has_sqlstate(res, "55P03"))
			timeouts++;
		else if (!dlc_has_sqlstate(res, "57014"))
			return dlc_failed(worker, "unexpected error", res);
		PQclear(res);

		if (token[0] == '\0')
		{
			/* nothing held: none of the names is this owner's */
			res = exec_retry(conn,
							 "SELECT count(*) FROM dlock.leases "
							 "WHERE name = ANY($1::text[]) AND owner = $2 AND state = 'live'",
							 2, params);
			if (PQresultStatus(res) != PGRES_TUPLES_OK)
				return dlc_failed(worker, "check after a failed call", res);
			if (strcmp(PQgetvalue(res, 0, 0), "0") != 0)
				return dlc_failed(worker, "a call that did not grant left names held", NULL);
			PQclear(res);
			continue;
		}
		if (is_set)
			sets++;
		else
			singles++;

		/* exclusion and token order, under the fence */
		params[1] = token;
		res = exec_retry(conn,
						 "UPDATE churn SET inside = inside + 1, last_token = $2::bigint "
						 " WHERE name = ANY($1::text[]) AND last_token < $2::bigint "
						 "   AND dlock.fence(name, $2::bigint) RETURNING inside",
						 2, params);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			return dlc_failed(worker, "fenced update", res);
		if (PQntuples(res) != distinct)
			return dlc_failed(worker, "a fence was false, or a token did not grow", NULL);
		for (int i = 0; i < PQntuples(res); i++)
			if (strcmp(PQgetvalue(res, i, 0), "1") != 0)
				return dlc_failed(worker, "two holders of one name at once", NULL);
		PQclear(res);
		usleep(random() % 2000);
		res = exec_retry(conn,
						 "UPDATE churn SET inside = inside - 1 WHERE name = ANY($1::text[])",
						 1, params);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			return dlc_failed(worker, "leaving", res);
		PQclear(res);
		params[1] = owner;
		res = exec_retry(conn, "SELECT dlock.release_all($1::text[], $2)", 2, params);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			return dlc_failed(worker, "release", res);
		if (atoi(PQgetvalue(res, 0, 0)) != distinct)
			return dlc_failed(worker, "release_all did not release every name held", NULL);
		PQclear(res);
	}
	printf("worker %d: %ld sets, %ld singles granted; %ld refused, %ld timed out, %ld cancels sent\n",
		   worker, sets, singles, refused, timeouts, cancels);
	fflush(stdout);
	PQfreeCancel(cancel);
	PQfinish(conn);
	return 0;
}

int
main(int argc, char **argv)
{
	Churn		churn;

	dlc_progname = "set_churn";
	if (argc != 5)
	{
		fprintf(stderr, "usage: %s WORKERS SECONDS NAMES SEED\n", argv[0]);
		return 2;
	}
	churn.deadline = dlc_wall_s() + atof(argv[2]);
	churn.nnames = atoi(argv[3]);
	churn.seed = (unsigned) atoi(argv[4]);
	if (churn.nnames < 1 || churn.nnames > 63)
		return 2;
	return dlc_run_workers(atoi(argv[1]), run_worker, &churn);
}

/*
 * client.h
 *	  What the test clients (test/set_churn.c, test/kinds_churn.c,
 *	  test/ha/ha_workload.c) share: the clock they time themselves with,
 *	  and how they look at errors.
 *
 * Each client is one file compiled on its own by the test that runs it;
 * these are static inline functions, so a client that uses only some of
 * them gets no unused-function warnings.
 */
#ifndef DLOCK_TEST_CLIENT_H
#define DLOCK_TEST_CLIENT_H

#include <stdio.h>
#include <sys/time.h>

#include <libpq-fe.h>

/* seconds since the epoch, as a double */
static inline double
now_s(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return tv.tv_sec + tv.tv_usec / 1e6;
}

/* the SQLSTATE of a result, "" when it has none */
static inline const char *
sqlstate(const PGresult *res)
{
	const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return s ? s : "";
}

/* report that a worker's check failed; returns 1, the failure count */
static inline int
failed(int worker, const char *what, const PGresult *res)
{
	fprintf(stderr, "worker %d: %s%s%s\n", worker, what,
			res ? ": " : "", res ? PQresultErrorMessage(res) : "");
	fflush(stderr);
	return 1;
}

#endif							/* DLOCK_TEST_CLIENT_H */

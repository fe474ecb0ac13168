/*
 * handoff.c
 *	  Measures how fast a dlock lease passes from one holder to the next.
 *
 *	  handoff release CONNINFO WAITERS CYCLES
 *		WAITERS sessions queue in dlock.acquire() for one name.  The holder
 *		releases; the time from the release's reply to the next waiter's
 *		grant reply is one sample.  The new holder releases next, the old
 *		one queues again, so WAITERS sessions always wait.
 *
 *	  handoff expiry CONNINFO CYCLES TTL_MS
 *		The holder never releases; one waiter is granted when the lease
 *		expires.  A sample is the new grant time minus the old expiry, both
 *		on the server's clock.
 *
 *	  handoff watch CONNINFO WATCHERS CYCLES
 *		WATCHERS sessions wait in dlock.watch() on one name; another
 *		session grants the name, then releases it, in turn.  A sample is
 *		the time from that change's reply to a watcher's reply.  Prints a
 *		second line with the same figures for the last watcher of each
 *		change to reply.
 *
 *	Prints "median_ms p99_ms max_ms samples" on one line.  With
 *	HANDOFF_SAMPLES=FILE in the environment, also writes every sample to
 *	FILE, in milliseconds, one a line, in the order they were taken.
 */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "../test/lib/dlock_client.h"

#define NAME "bench:handoff"

/* exec_one - run a query, return the first value (static buffer) */
static const char *
exec_one(PGconn *conn, const char *sql)
{
	static char value[256];
	PGresult   *res = PQexec(conn, sql);

	if (!dlc_result_ok(res))
		dlc_die(sql, conn);
	value[0] = '\0';
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0)
		dlc_copy_value(value, sizeof(value), res, 0, 0);
	PQclear(res);
	return value;
}

static void
send_acquire(PGconn *conn, int who)
{
	char		sql[256];

	snprintf(sql, sizeof(sql),
			 "SELECT token FROM dlock.acquire('" NAME "', '1min', 'w%d')", who);
	if (!PQsendQuery(conn, sql))
		dlc_die("send acquire", conn);
}

/* finish_query - collect the result of a sent query */
static void
finish_query(PGconn *conn)
{
	PGresult   *res;

	while ((res = PQgetResult(conn)) != NULL)
	{
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			dlc_die("acquire", conn);
		PQclear(res);
	}
}

/*
 * wait_sessions - until n sessions run a query that starts with call (a
 * dlock function called on NAME-like text) and wait, with a wait event
 * type in wait_types (an SQL list of strings)
 */
static void
wait_sessions(PGconn *monitor, int n, const char *call, const char *wait_types)
{
	char		sql[512];

	snprintf(sql, sizeof(sql),
			 "SELECT count(*) >= %d FROM pg_stat_activity "
			 "WHERE query LIKE '%%%s%%' AND state = 'active' "
			 "AND wait_event_type IN (%s)", n, call, wait_types);
	for (;;)
	{
		if (strcmp(exec_one(monitor, sql), "t") == 0)
			return;
		dlc_sleep_ms(0.2);
	}
}

/* wait_queued - until n sessions wait in dlock.acquire() */
static void
wait_queued(PGconn *monitor, int n)
{
	wait_sessions(monitor, n, "dlock.acquire(''" NAME "''", "'Lock', 'Extension'");
}

/* report - the figures of n samples (and each to HANDOFF_SAMPLES's file) */
static void
report(double *samples, int n)
{
	dlc_write_samples(getenv("HANDOFF_SAMPLES"), samples, n);
	dlc_sort(samples, n);
	printf("%.3f %.3f %.3f %d\n",
		   samples[n / 2], samples[(int) (n * 0.99)], samples[n - 1], n);
}

static int
bench_release(const char *conninfo, int waiters, int cycles)
{
	PGconn	   *monitor = dlc_connect_or_die(conninfo);
	PGconn	  **conns = calloc(waiters + 1, sizeof(PGconn *));
	struct pollfd *fds = calloc(waiters + 1, sizeof(struct pollfd));
	double	   *samples = calloc(cycles, sizeof(double));
	int			holder = 0;

	for (int i = 0; i <= waiters; i++)
		conns[i] = dlc_connect_or_die(conninfo);
	exec_one(monitor, "SELECT dlock.force_release('" NAME "')");
	exec_one(conns[0], "SELECT token FROM dlock.acquire('" NAME "', '1min', 'w0')");
	for (int i = 1; i <= waiters; i++)
		send_acquire(conns[i], i);

	for (int c = 0; c < cycles; c++)
	{
		char		sql[256];
		double		released;
		int			granted = -1;

		wait_queued(monitor, waiters);
		snprintf(sql, sizeof(sql), "SELECT dlock.release('" NAME "', 'w%d')", holder);
		if (strcmp(exec_one(conns[holder], sql), "t") != 0)
			dlc_die("release returned false", NULL);
		released = dlc_mono_ms();

		while (granted < 0)
		{
			int			n = 0;

			for (int i = 0; i <= waiters; i++)
			{
				fds[n].fd = PQsocket(conns[i]);
				fds[n].events = POLLIN;
				n++;
			}
			if (poll(fds, n, 10000) < 0 && errno != EINTR)
				dlc_die("poll", NULL);
			for (int i = 0; i <= waiters && granted < 0; i++)
			{
				if (i == holder || !(fds[i].revents & POLLIN))
					continue;
				if (!PQconsumeInput(conns[i]))
					dlc_die("consume", conns[i]);
				if (!PQisBusy(conns[i]))
					granted = i;
			}
		}
		samples[c] = dlc_mono_ms() - released;
		finish_query(conns[granted]);
		send_acquire(conns[holder], holder);
		holder = granted;
	}
	report(samples, cycles);

	/* Waiting backends do not notice a closed connection: cancel them */
	for (int i = 0; i <= waiters; i++)
	{
		if (i != holder)
			dlc_cancel_and_drain(conns[i]);
		PQfinish(conns[i]);
	}
	exec_one(monitor, "SELECT dlock.force_release('" NAME "')");
	PQfinish(monitor);
	return 0;
}

#undef NAME
#define NAME "bench:expiry"

static int
bench_expiry(const char *conninfo, int cycles, int ttl_ms)
{
	PGconn	   *a = dlc_connect_or_die(conninfo);
	PGconn	   *b = dlc_connect_or_die(conninfo);
	double	   *samples = calloc(cycles, sizeof(double));
	char		sql[512];

	exec_one(a, "SELECT dlock.force_release('" NAME "')");
	for (int c = 0; c < cycles; c++)
	{
		PGconn	   *holder = (c % 2) ? b : a;
		PGconn	   *waiter = (c % 2) ? a : b;

		snprintf(sql, sizeof(sql),
				 "SELECT extract(epoch FROM expires_at) FROM dlock.acquire('" NAME "', '%d ms', 'h%d')",
				 ttl_ms, c);
		double		expires = atof(exec_one(holder, sql));

		snprintf(sql, sizeof(sql),
				 "SELECT extract(epoch FROM expires_at - interval '1 min') FROM dlock.acquire('" NAME "', '1min', 'w%d')", c);
		double		granted = atof(exec_one(waiter, sql));

		samples[c] = (granted - expires) * 1000.0;
		snprintf(sql, sizeof(sql), "SELECT dlock.release('" NAME "', 'w%d')", c);
		exec_one(waiter, sql);
	}
	report(samples, cycles);
	PQfinish(a);
	PQfinish(b);
	return 0;
}

#undef NAME
#define NAME "bench:watch"

/* send_watch - watch the name, given what it is now (token or "" if none) */
static void
send_watch(PGconn *conn, const char *token)
{
	const char *params[1] = {token[0] ? token : NULL};

	if (!PQsendQueryParams(conn,
						   "SELECT dlock.watch('" NAME "', $1::bigint, '1min')",
						   1, NULL, params, NULL, NULL, 0))
		dlc_die("send watch", conn);
}

/* wait_watching - until n sessions sleep in dlock.watch() */
static void
wait_watching(PGconn *monitor, int n)
{
	wait_sessions(monitor, n, "dlock.watch(''" NAME "''", "'Extension'");
}

static int
bench_watch(const char *conninfo, int watchers, int cycles)
{
	PGconn	   *changer = dlc_connect_or_die(conninfo);
	PGconn	   *monitor = dlc_connect_or_die(conninfo);
	PGconn	  **conns = calloc(watchers, sizeof(PGconn *));
	struct pollfd *fds = calloc(watchers, sizeof(struct pollfd));
	bool	   *woken = calloc(watchers, sizeof(bool));
	double	   *samples = calloc((size_t) cycles * watchers, sizeof(double));
	double	   *last = calloc(cycles, sizeof(double));
	char		token[64] = "";
	int			nsamples = 0;

	exec_one(changer, "SELECT dlock.force_release('" NAME "')");
	for (int i = 0; i < watchers; i++)
	{
		conns[i] = dlc_connect_or_die(conninfo);
		send_watch(conns[i], token);
	}

	for (int c = 0; c < cycles; c++)
	{
		double		changed;
		int			left = watchers;

		wait_watching(monitor, watchers);
		if (token[0] == '\0')
			snprintf(token, sizeof(token), "%s",
					 exec_one(changer, "SELECT token FROM dlock.try_acquire('" NAME "', '1min', 'changer')"));
		else
		{
			exec_one(changer, "SELECT dlock.release('" NAME "', 'changer')");
			token[0] = '\0';
		}
		changed = dlc_mono_ms();

		memset(woken, 0, sizeof(bool) * watchers);
		while (left > 0)
		{
			for (int i = 0; i < watchers; i++)
			{
				fds[i].fd = PQsocket(conns[i]);
				fds[i].events = woken[i] ? 0 : POLLIN;
			}
			if (poll(fds, watchers, 10000) <= 0 && errno != EINTR)
				dlc_die("poll: a watcher was not woken within 10 s", NULL);
			for (int i = 0; i < watchers; i++)
			{
				if (woken[i] || !(fds[i].revents & POLLIN))
					continue;
				if (!PQconsumeInput(conns[i]))
					dlc_die("consume", conns[i]);
				if (PQisBusy(conns[i]))
					continue;
				woken[i] = true;
				left--;
				samples[nsamples++] = last[c] = dlc_mono_ms() - changed;
				finish_query(conns[i]);
			}
		}
		for (int i = 0; i < watchers; i++)
			send_watch(conns[i], token);
	}
	report(samples, nsamples);
	dlc_sort(last, cycles);
	printf("%.3f %.3f %.3f %d\n",
		   last[cycles / 2], last[(int) (cycles * 0.99)], last[cycles - 1], cycles);

	for (int i = 0; i < watchers; i++)
	{
		dlc_cancel_and_drain(conns[i]);
		PQfinish(conns[i]);
	}
	exec_one(changer, "SELECT dlock.force_release('" NAME "')");
	PQfinish(changer);
	PQfinish(monitor);
	return 0;
}

int
main(int argc, char **argv)
{
	dlc_progname = "handoff";
	if (argc == 5 && strcmp(argv[1], "release") == 0)
		return bench_release(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (argc == 5 && strcmp(argv[1], "expiry") == 0)
		return bench_expiry(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (argc == 5 && strcmp(argv[1], "watch") == 0)
		return bench_watch(argv[2], atoi(argv[3]), atoi(argv[4]));
	fprintf(stderr,
			"usage: handoff release CONNINFO WAITERS CYCLES\n"
			"       handoff expiry CONNINFO CYCLES TTL_MS\n"
			"       handoff watch CONNINFO WATCHERS CYCLES\n");
	return 64;
}

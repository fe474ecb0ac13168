/*
 * watch.c
 *	  "dlock watch": print one line per change of a name's live lease.
 *
 * The client asks the server with dlock.watch(), which returns when the
 * live token changes (a commit that grants or ends the lease, or its
 * expiry on the server's clock), and then reads the lease in a statement
 * of its own, so that what it prints is committed state as of that read.
 * Between changes it sends nothing.
 *
 * With several live holders (shared leases, permits) the live token that
 * dlock.watch() compares is the newest of them, so the read picks that
 * lease, and the token passed to the next dlock.watch() is the one it
 * compares: any other one differs from the server's at once, and the
 * client would call it in a loop.  A holder older than the newest that
 * comes or goes is therefore no change.  A lost connection is reconnected with
 * backoff; the state is read again then, and printed if it changed, so no
 * change that is still in effect is missed.  SIGINT, SIGTERM and SIGHUP
 * cancel the server's wait and end the command with status 0.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock_cli.h"

/* How long one dlock.watch() call waits before the client asks again */
#define WATCH_CALL_TIMEOUT	"30s"
#define RECONNECT_FIRST_S	0.1
#define RECONNECT_LAST_S	5.0

static volatile sig_atomic_t watch_stop = 0;
static PGcancel *volatile watch_cancel = NULL;

static void
watch_signal(int signo)
{
	char		errbuf[256];
	PGcancel   *cancel = watch_cancel;

	(void) signo;
	watch_stop = 1;
	/* PQcancel is safe in a signal handler */
	if (cancel != NULL)
		(void) PQcancel(cancel, errbuf, sizeof(errbuf));
}

/*
 * set_cancel - the cancel object the signal handler uses; the old one is
 * freed once the handler can no longer see it
 */
static void
set_cancel(PGcancel *cancel)
{
	PGcancel   *old = watch_cancel;

	watch_cancel = cancel;
	PQfreeCancel(old);
}

/* What the client knows of the live lease (the newest, with several) */
typedef struct WatchedLease
{
	bool		known;			/* read at least once */
	bool		live;
	char		token[32];
} WatchedLease;

/* json_or_null - a column as a JSON string, or null */
static void
json_or_null(const PGresult *res, int col)
{
	if (PQgetisnull(res, 0, col))
		fputs("null", stdout);
	else
		json_string(PQgetvalue(res, 0, col));
}

/*
 * print_lease - one line for the state that res (observed_at, token,
 * owner, value, expires_at; no row: none live) shows
 */
static void
print_lease(const PGresult *res, bool json)
{
	bool		live = !PQgetisnull(res, 0, 1);

	if (json)
	{
		fputs("{\"observed_at\": ", stdout);
		json_or_null(res, 0);
		printf(", \"token\": %s, \"owner\": ", live ? PQgetvalue(res, 0, 1) : "null");
		json_or_null(res, 2);
		fputs(", \"value\": ", stdout);
		json_or_null(res, 3);
		fputs(", \"expires_at\": ", stdout);
		json_or_null(res, 4);
		fputs("}\n", stdout);
	}
	else if (live)
		printf("%s  token %s  owner %s  value %s  expires %s\n",
			   PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1),
			   PQgetisnull(res, 0, 2) ? "-" : PQgetvalue(res, 0, 2),
			   PQgetisnull(res, 0, 3) ? "-" : PQgetvalue(res, 0, 3),
			   PQgetvalue(res, 0, 4));
	else
		printf("%s  no live lease\n", PQgetvalue(res, 0, 0));
	fflush(stdout);
}

/*
 * read_lease - read the live lease (the newest live one, as dlock.watch()
 * sees it) and print it if it differs from what *seen holds; false on a
 * server error (res left in *errres)
 */
static bool
read_lease(PGconn *conn, const char *name, bool json, WatchedLease *seen,
		   PGresult **errres)
{
	const char *params[1] = {name};
	PGresult   *res = db_exec(conn,
							  "SELECT to_char(clock_timestamp(), 'YYYY-MM-DD HH24:MI:SS.USOF'),"
							  "       l.token::text, l.owner, l.value,"
							  "       to_char(l.expires_at, 'YYYY-MM-DD HH24:MI:SS.USOF')"
							  "  FROM (SELECT) one"
							  "  LEFT JOIN (SELECT token, owner, value, expires_at"
							  "               FROM dlock.leases"
							  "              WHERE name = $1 AND state = 'live'"
							  "              ORDER BY token DESC LIMIT 1) l ON true",
							  1, params);
	bool		live;
	const char *token;

	if (!db_result_ok(res))
	{
		*errres = res;
		return false;
	}
	live = !PQgetisnull(res, 0, 1);
	token = live ? PQgetvalue(res, 0, 1) : "";
	if (!seen->known || seen->live != live || strcmp(seen->token, token) != 0)
	{
		print_lease(res, json);
		seen->known = true;
		seen->live = live;
		snprintf(seen->token, sizeof(seen->token), "%s", token);
	}
	PQclear(res);
	return true;
}

int
watch_command(const char *dbname, const char *name, bool json)
{
	struct sigaction sa;
	WatchedLease seen = {false, false, ""};
	PGconn	   *conn = db_connect(dbname, true);
	double		backoff = RECONNECT_FIRST_S;

	set_cancel(PQgetCancel(conn));

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = watch_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	while (!watch_stop)
	{
		PGresult   *res = NULL;
		const char *params[2];

		if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
		{
			PQfinish(conn);
			conn = db_connect(dbname, false);
			if (conn == NULL)
			{
				usleep((useconds_t) (backoff * 1e6));
				backoff = backoff * 2 > RECONNECT_LAST_S ? RECONNECT_LAST_S : backoff * 2;
				continue;
			}
			info("reconnected");
			backoff = RECONNECT_FIRST_S;
			set_cancel(PQgetCancel(conn));
		}

		if (!read_lease(conn, name, json, &seen, &res))
			goto failed;

		params[0] = name;
		params[1] = seen.live ? seen.token : NULL;
		res = db_exec(conn, "SELECT dlock.watch($1, $2::bigint, '" WATCH_CALL_TIMEOUT "')",
					  2, params);
		if (!db_result_ok(res))
			goto failed;
		PQclear(res);
		continue;

failed:
		if (watch_stop)
		{
			PQclear(res);
			break;
		}
		if (PQstatus(conn) == CONNECTION_OK)
		{
			int			code = strncmp(db_sqlstate(res), "22", 2) == 0 ?
				EXIT_USAGE : EXIT_SOFTWARE;

			complain("could not watch lease \"%s\": %s", name,
					 PQresultErrorMessage(res)[0] ? PQresultErrorMessage(res) : PQerrorMessage(conn));
			PQclear(res);
			set_cancel(NULL);
			PQfinish(conn);
			return code;
		}
		info("lost the connection: %s", PQerrorMessage(conn));
		PQclear(res);
	}
	set_cancel(NULL);
	PQfinish(conn);
	return EXIT_OK;
}

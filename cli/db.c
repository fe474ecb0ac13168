/*
 * db.c
 *	  Connecting to the database and running the client's few queries.
 *
 * Every query is parameterized; nothing the user passes is ever spliced
 * into SQL text.  Durations are interval text and are parsed by the server,
 * so the client accepts exactly what PostgreSQL accepts ('30s', '5 min',
 * '1h').
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock_cli.h"

/*
 * db_connect - connect with libpq's defaults plus dbname (a conninfo string
 * or URI); the application name defaults to "dlock"
 */
PGconn *
db_connect(const char *dbname, bool fatal)
{
	const char *keywords[] = {"dbname", "fallback_application_name", NULL};
	const char *values[] = {dbname, "dlock", NULL};
	PGconn	   *conn = PQconnectdbParams(keywords, values, 1);

	if (PQstatus(conn) != CONNECTION_OK)
	{
		if (fatal)
		{
			complain("could not connect to the database: %s", PQerrorMessage(conn));
			PQfinish(conn);
			exit(EXIT_UNAVAILABLE);
		}
		if (verbosity == VERBOSITY_VERBOSE)
			note("could not connect: %s", PQerrorMessage(conn));
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

/*
 * db_connect_start - begin a connection with the same settings as db_connect,
 * for the caller to drive with PQconnectPoll; NULL when out of memory
 */
PGconn *
db_connect_start(const char *dbname)
{
	const char *keywords[] = {"dbname", "fallback_application_name", NULL};
	const char *values[] = {dbname, "dlock", NULL};

	return PQconnectStartParams(keywords, values, 1);
}

/*
 * db_exec - run a parameterized query (text parameters, text results)
 */
PGresult *
db_exec(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
	return PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
}

bool
db_result_ok(PGresult *res)
{
	return res != NULL &&
		(PQresultStatus(res) == PGRES_TUPLES_OK ||
		 PQresultStatus(res) == PGRES_COMMAND_OK);
}

const char *
db_sqlstate(PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	return state ? state : "";
}

/*
 * db_duration - seconds in an interval text, as the server reads it; false
 * for text that is not an interval
 */
bool
db_duration(PGconn *conn, const char *text, double *seconds)
{
	const char *params[1] = {text};
	PGresult   *res = db_exec(conn, "SELECT extract(epoch FROM $1::interval)", 1, params);
	bool		ok = db_result_ok(res) && !PQgetisnull(res, 0, 0);

	if (ok)
		*seconds = strtod(PQgetvalue(res, 0, 0), NULL);
	PQclear(res);
	return ok;
}

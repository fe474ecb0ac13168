/*
 * main.c
 *	  The dlock command: option parsing, help, and the commands that are a
 *	  single query (status, release, force-release).  "run" lives in run.c,
 *	  "watch" in watch.c.
 */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock_cli.h"

/* the Makefile sets it from META.json, checked against dlock.control */
#ifndef DLOCK_VERSION
#error "DLOCK_VERSION is not defined: build the command with make"
#endif

Verbosity	verbosity = VERBOSITY_NORMAL;
const char *progname = "dlock";

static void vmessage(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/*
 * vmessage - one message on stderr, ended by exactly one newline.  The
 * newline is judged on the formatted text, not on fmt: libpq's messages
 * (PQerrorMessage, PQresultErrorMessage) end in a newline of their own,
 * and passed through "%s" they would otherwise leave an empty line.
 */
static void
vmessage(const char *fmt, va_list ap)
{
	char		buf[2048];
	char	   *text = buf;
	va_list		again;
	int			len;

	va_copy(again, ap);
	len = vsnprintf(buf, sizeof(buf), fmt, ap);
	if (len < 0)
		buf[0] = '\0';			/* an encoding error: no text to trust */
	else if (len >= (int) sizeof(buf) && (text = malloc(len + 1)) != NULL)
		vsnprintf(text, len + 1, fmt, again);
	else if (text == NULL)
		text = buf;				/* out of memory: the message cut short */
	va_end(again);
	len = (int) strlen(text);
	while (len > 0 && text[len - 1] == '\n')
		len--;
	fprintf(stderr, "%s: %.*s\n", progname, len, text);
	if (text != buf)
		free(text);
}

/* note - always shown */
void
note(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vmessage(fmt, ap);
	va_end(ap);
}

/* info - shown with --verbose only */
void
info(const char *fmt,...)
{
	va_list		ap;

	if (verbosity != VERBOSITY_VERBOSE)
		return;
	va_start(ap, fmt);
	vmessage(fmt, ap);
	va_end(ap);
}

/* complain - an error; shown unless --quiet */
void
complain(const char *fmt,...)
{
	va_list		ap;

	if (verbosity == VERBOSITY_QUIET)
		return;
	va_start(ap, fmt);
	vmessage(fmt, ap);
	va_end(ap);
}

static void
usage(FILE *out)
{
	fprintf(out,
			"dlock runs a command under a dlock lease, and shows and ends leases.\n"
			"\n"
			"Usage:\n"
			"  dlock run NAME [OPTION]... -- COMMAND [ARG]...\n"
			"  dlock status [NAME] [--json]\n"
			"  dlock watch NAME [--json]\n"
			"  dlock release NAME --owner OWNER\n"
			"  dlock force-release NAME\n"
			"  dlock --version\n"
			"Options may come before the command, after it, or after NAME, up to \"--\".\n"
			"\n"
			"run: acquire lease NAME, run COMMAND as a child in its own process group,\n"
			"renew the lease every ttl/3, release it when the child exits, and exit with\n"
			"the child's status.  The child gets DLOCK_NAME, DLOCK_TOKEN, DLOCK_OWNER and\n"
			"DLOCK_EXPIRES_AT in its environment, to fence its writes with dlock.fence().\n"
			"If the lease is busy, run says on stderr which lease is held, by which owner\n"
			"(where this role may see it) and until when, and exits 75 (--conflict-exit-code).\n"
			"If the lease is lost (a renew says it is gone, or no renew succeeded in time),\n"
			"the child's process group gets SIGTERM at once and SIGKILL after --kill-after.\n"
			"SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the child; before the\n"
			"child starts they end the run at once, leaving no waiter on the server.  If\n"
			"dlock itself dies, the child gets SIGTERM (on Linux).  --wait bounds all of\n"
			"the time before the child starts: within it a server that is down, restarts\n"
			"or fails over is reconnected to with backoff, and the wait goes on.\n"
			"\n"
			"status: the live leases (or NAME's, in any state): token, kind, holder role,\n"
			"state, acquired, expires in, owner (\"-\" where this role may not see it) and\n"
			"value.\n"
			"\n"
			"watch: print the live lease of NAME (token, owner where visible, value,\n"
			"expiry) and then one line each time it changes, until interrupted; with\n"
			"several holders, the newest live lease.  It waits on the server without\n"
			"polling and reconnects when the connection is lost.\n"
			"\n"
			"Options for run:\n"
			"      --ttl=DURATION            lease ttl (default 30s)\n"
			"      --wait=DURATION|forever   how long to wait for the server and the lease\n"
			"                                (default 0: try once)\n"
			"      --owner=OWNER             owner string (default: random)\n"
			"      --lock-delay=DURATION     lock-delay after expiry (default: server's)\n"
			"      --session-bound           the lease also ends with this connection\n"
			"      --value=TEXT              publish TEXT as the lease's value (a leader's\n"
			"                                address), shown in dlock.leases\n"
			"      --poll=DURATION           wait by polling every DURATION, keeping a place\n"
			"                                in the queue (behind a transaction pooler); the\n"
			"                                place lasts ttl from each poll, so DURATION must\n"
			"                                be shorter than the ttl less its safety margins\n"
			"      --shared                  a shared lease: runs alongside other shared\n"
			"                                holders, never with an exclusive one\n"
			"      --max-holders=N           one of at most N holders of the name at once (a\n"
			"                                counting semaphore)\n"
			"      --conflict-exit-code=N    exit code when the lease is busy (default 75)\n"
			"      --kill-after=DURATION     SIGTERM-to-SIGKILL grace (default 10s)\n"
			"\n"
			"Common options:\n"
			"  -d, --dbname=CONNINFO         database to connect to (conninfo or URI)\n"
			"  -q, --quiet                   no messages (not even why run is busy), only\n"
			"                                the exit code\n"
			"  -v, --verbose                 report each step on stderr\n"
			"      --json                    status or watch as JSON\n"
			"  -h, --help                    show this help and exit\n"
			"      --version                 show dlock's version and exit\n"
			"\n"
			"DURATION is PostgreSQL interval text: 30s, '5 min', 1h.  Connection settings\n"
			"also come from libpq's environment (PGHOST, PGPORT, PGDATABASE, PGUSER, ...);\n"
			"the application name defaults to dlock.\n"
			"\n"
			"Exit codes: the child's status for run (128+N if it died of signal N); 0 done;\n"
			"1 release: not held by OWNER; force-release: no live lease; status NAME: no\n"
			"lease of NAME; 64 bad arguments, a ttl too short to renew, or a --poll too long\n"
			"to keep the place in the queue;\n"
			"69 database unreachable (for run: until --wait ran out); 70 unexpected server\n"
			"error; 75 lease busy (--conflict-exit-code); 79 lease lost, child killed;\n"
			"128+N run stopped by signal N before the command started.\n");
}

static int	bad_usage(const char *fmt, const char *arg) __attribute__((format(printf, 1, 0)));

static int
bad_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "%s: ", progname);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry \"%s --help\" for more information.\n", progname);
	return EXIT_USAGE;
}

static int
server_error(PGconn *conn, PGresult *res)
{
	complain("%s", PQresultErrorMessage(res)[0] ? PQresultErrorMessage(res) : PQerrorMessage(conn));
	PQclear(res);
	PQfinish(conn);
	return EXIT_SOFTWARE;
}

/* json_string - print s as a JSON string (also used by watch.c) */
void
json_string(const char *s)
{
	putchar('"');
	for (; *s; s++)
	{
		unsigned char c = (unsigned char) *s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* value_or_dash - a column of a status line: its value, or "-" for NULL */
static const char *
value_or_dash(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? "-" : PQgetvalue(res, row, col);
}

/* json_or_null - a column as a JSON string, or null for NULL */
static void
json_or_null(const PGresult *res, int row, int col)
{
	if (PQgetisnull(res, row, col))
		fputs("null", stdout);
	else
		json_string(PQgetvalue(res, row, col));
}

/*
 * cmd_status - the leases of dlock.leases, as the caller may see them:
 * owner is NULL there for the leases of roles whose privileges the caller
 * does not have, and shown as "-" (null in JSON); the holder of a lease sees
 * its owner, which release needs
 */
static int
cmd_status(const char *dbname, const char *name, bool json)
{
	PGconn	   *conn = db_connect(dbname, true);
	const char *params[1] = {name};
	PGresult   *res = db_exec(conn,
							  "SELECT name, token::text, holder_role::text, state,"
							  "       to_char(acquired_at, 'YYYY-MM-DD HH24:MI:SS.MSOF'),"
							  "       CASE WHEN state = 'live' THEN"
							  "         round(extract(epoch FROM expires_at - clock_timestamp())::numeric, 3)::text END,"
							  "       owner,"
							  /* the kind columns and value are there from version 1.1 on */
							  "       CASE WHEN (to_jsonb(l) ->> 'shared')::boolean THEN 'shared'"
							  "            WHEN (to_jsonb(l) ->> 'max_holders')::integer > 1"
							  "            THEN 'semaphore/' || (to_jsonb(l) ->> 'max_holders')"
							  "            ELSE 'exclusive' END,"
							  "       to_jsonb(l) ->> 'value'"
							  "  FROM dlock.leases l"
							  " WHERE ($1::text IS NULL OR name = $1) AND (state = 'live' OR $1 IS NOT NULL)"
							  " ORDER BY name, token",
							  1, params);

	if (!db_result_ok(res))
		return server_error(conn, res);

	if (json)
	{
		printf("[");
		for (int i = 0; i < PQntuples(res); i++)
		{
			printf(i ? ",\n " : "");
			printf("{\"name\": ");
			json_string(PQgetvalue(res, i, 0));
			printf(", \"token\": %s, \"holder_role\": ", PQgetvalue(res, i, 1));
			json_string(PQgetvalue(res, i, 2));
			printf(", \"state\": ");
			json_string(PQgetvalue(res, i, 3));
			printf(", \"kind\": ");
			json_string(PQgetvalue(res, i, 7));
			printf(", \"acquired_at\": ");
			json_string(PQgetvalue(res, i, 4));
			/* owner and value come last: the earlier keys keep their places */
			printf(", \"expires_in_seconds\": %s, \"owner\": ",
				   PQgetisnull(res, i, 5) ? "null" : PQgetvalue(res, i, 5));
			json_or_null(res, i, 6);
			printf(", \"value\": ");
			json_or_null(res, i, 8);
			printf("}");
		}
		printf("]\n");
	}
	else
	{
		/* owner and value come last: the earlier columns keep their places */
		printf("%-30s %10s %-14s %-16s %-14s %-30s %-12s %-32s %s\n",
			   "NAME", "TOKEN", "KIND", "HOLDER ROLE", "STATE", "ACQUIRED",
			   "EXPIRES IN", "OWNER", "VALUE");
		for (int i = 0; i < PQntuples(res); i++)
		{
			char		expires[64] = "-";

			if (!PQgetisnull(res, i, 5))
				snprintf(expires, sizeof(expires), "%ss", PQgetvalue(res, i, 5));
			printf("%-30s %10s %-14s %-16s %-14s %-30s %-12s %-32s %s\n",
				   PQgetvalue(res, i, 0), PQgetvalue(res, i, 1), PQgetvalue(res, i, 7),
				   PQgetvalue(res, i, 2), PQgetvalue(res, i, 3), PQgetvalue(res, i, 4),
				   expires, value_or_dash(res, i, 6), value_or_dash(res, i, 8));
		}
	}

	/*
	 * A NAME with no lease at all (never taken, misspelt, or purged) is
	 * not an empty answer to pass over: a script that checks a lease by
	 * name gets a failure, and a person a line that says so.  The empty
	 * table or [] stays on stdout for readers of the output.
	 */
	if (name != NULL && PQntuples(res) == 0)
	{
		complain("no lease named \"%s\"", name);
		PQclear(res);
		PQfinish(conn);
		return EXIT_NOT_HELD;
	}
	PQclear(res);
	PQfinish(conn);
	return EXIT_OK;
}

static int
cmd_release(const char *dbname, const char *name, const char *owner, bool force)
{
	PGconn	   *conn = db_connect(dbname, true);
	const char *params[2] = {name, owner};
	PGresult   *res = force
		? db_exec(conn, "SELECT dlock.force_release($1)", 1, params)
		: db_exec(conn, "SELECT dlock.release($1, $2)", 2, params);
	bool		ended;

	if (!db_result_ok(res))
		return server_error(conn, res);
	ended = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	if (!ended && verbosity != VERBOSITY_QUIET)
		note(force ? "lease \"%s\" was not live" : "lease \"%s\" is not held by that owner", name);
	PQclear(res);
	PQfinish(conn);
	return ended ? EXIT_OK : EXIT_NOT_HELD;
}

enum
{
	OPT_TTL = 256, OPT_WAIT, OPT_OWNER, OPT_LOCK_DELAY, OPT_SESSION_BOUND,
	OPT_CONFLICT, OPT_KILL_AFTER, OPT_JSON, OPT_VALUE, OPT_POLL, OPT_SHARED,
	OPT_MAX_HOLDERS, OPT_VERSION
};

/* known_command - is this one of dlock's commands? */
static bool
known_command(const char *command)
{
	static const char *const commands[] = {
		"run", "status", "watch", "release", "force-release", "help"
	};

	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(command, commands[i]) == 0)
			return true;
	return false;
}

int
main(int argc, char **argv)
{
	static const struct option long_options[] = {
		{"dbname", required_argument, NULL, 'd'},
		{"quiet", no_argument, NULL, 'q'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, OPT_VERSION},
		{"ttl", required_argument, NULL, OPT_TTL},
		{"wait", required_argument, NULL, OPT_WAIT},
		{"owner", required_argument, NULL, OPT_OWNER},
		{"lock-delay", required_argument, NULL, OPT_LOCK_DELAY},
		{"session-bound", no_argument, NULL, OPT_SESSION_BOUND},
		{"conflict-exit-code", required_argument, NULL, OPT_CONFLICT},
		{"kill-after", required_argument, NULL, OPT_KILL_AFTER},
		{"json", no_argument, NULL, OPT_JSON},
		{"value", required_argument, NULL, OPT_VALUE},
		{"poll", required_argument, NULL, OPT_POLL},
		{"shared", no_argument, NULL, OPT_SHARED},
		{"max-holders", required_argument, NULL, OPT_MAX_HOLDERS},
		{NULL, 0, NULL, 0}
	};
	RunOptions	run = {
		.ttl = "30s", .wait = "0", .kill_after = "10s",
		.conflict_exit_code = EXIT_CONFLICT
	};
	const char *command = NULL;
	bool		json = false;
	int			rest = -1;		/* argv index of the first argument past
								 * the command and NAME */
	int			c;

	/*
	 * Options may come anywhere before "--": before the command, between
	 * it and NAME, or after NAME.  A leading "-" in the option string makes
	 * getopt_long return the operands in order, as option 1, without
	 * reordering argv (GNU and BSD alike; it overrides POSIXLY_CORRECT).
	 * The first operand is the command, the second NAME; a third ends the
	 * parsing, so that a COMMAND given without "--" keeps its own options.
	 */
	while (rest < 0 &&
		   (c = getopt_long(argc, argv, "-d:qvh", long_options, NULL)) != -1)
	{
		switch (c)
		{
			case 1:
				if (command == NULL)
				{
					command = optarg;
					if (!known_command(command))
						return bad_usage("unknown command \"%s\"", command);
				}
				else if (run.name == NULL)
					run.name = optarg;
				else
					rest = optind - 1;
				break;
			case 'd':
				run.dbname = optarg;
				break;
			case 'q':
				verbosity = VERBOSITY_QUIET;
				break;
			case 'v':
				verbosity = VERBOSITY_VERBOSE;
				break;
			case 'h':
				usage(stdout);
				return EXIT_OK;
			case OPT_VERSION:
				printf("%s %s\n", progname, DLOCK_VERSION);
				return EXIT_OK;
			case OPT_TTL:
				run.ttl = optarg;
				break;
			case OPT_WAIT:
				run.wait = strcmp(optarg, "forever") == 0 ? NULL : optarg;
				break;
			case OPT_OWNER:
				run.owner = optarg;
				break;
			case OPT_LOCK_DELAY:
				run.lock_delay = optarg;
				break;
			case OPT_SESSION_BOUND:
				run.session_bound = true;
				break;
			case OPT_CONFLICT:
				{
					char	   *end;
					long		code = strtol(optarg, &end, 10);

					if (*optarg == '\0' || *end != '\0' || code < 0 || code > 255)
						return bad_usage("invalid --conflict-exit-code \"%s\": give 0 to 255", optarg);
					run.conflict_exit_code = (int) code;
				}
				break;
			case OPT_KILL_AFTER:
				run.kill_after = optarg;
				break;
			case OPT_JSON:
				json = true;
				break;
			case OPT_VALUE:
				run.value = optarg;
				break;
			case OPT_SHARED:
				run.shared = true;
				break;
			case OPT_MAX_HOLDERS:
				run.max_holders = optarg;
				break;
			case OPT_POLL:
				run.poll = optarg;
				break;
			default:
				/* getopt_long has said what was wrong */
				fprintf(stderr, "Try \"%s --help\" for more information.\n", progname);
				return EXIT_USAGE;
		}
	}
	/* parsing ended at "--" or at the end: the rest follows */
	if (rest < 0)
		rest = optind;

	if (command == NULL)
	{
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(command, "help") == 0)
	{
		usage(stdout);
		return EXIT_OK;
	}
	if (strcmp(command, "status") == 0)
	{
		if (rest < argc)
			return bad_usage("unexpected argument \"%s\"", argv[rest]);
		return cmd_status(run.dbname, run.name, json);
	}
	if (run.name == NULL || run.name[0] == '\0')
		return bad_usage("%s: a lease NAME is required", command);

	if (strcmp(command, "watch") == 0)
	{
		if (rest < argc)
			return bad_usage("unexpected argument \"%s\"", argv[rest]);
		return watch_command(run.dbname, run.name, json);
	}
	if (strcmp(command, "release") == 0 || strcmp(command, "force-release") == 0)
	{
		bool		force = strcmp(command, "force-release") == 0;

		if (rest < argc)
			return bad_usage("unexpected argument \"%s\"", argv[rest]);
		if (!force && run.owner == NULL)
			return bad_usage("%s: --owner is required", command);
		return cmd_release(run.dbname, run.name, run.owner, force);
	}

	/* run: the COMMAND is what follows "--", or NAME without it */
	if (rest >= argc)
		return bad_usage("%s: a COMMAND to run is required after --", command);
	run.command = &argv[rest];
	return run_command(&run);
}

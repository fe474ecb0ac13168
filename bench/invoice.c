/*
 * invoice.c
 *	  The nightly-invoice workload of bench/invoice.sh: WORKERS threads
 *	  invoice accounts 1 .. ACCOUNTS, each account under a lock of one of
 *	  the methods below, and a separate measurement of one worker's acquire
 *	  + release alone.
 *
 *	  invoice run METHOD WORKERS ACCOUNTS    prints the run's seconds
 *	  invoice alone METHOD CYCLES ACCOUNTS   prints "ms_per_cycle accounts_per_cycle"
 *
 *	Environment: INVOICE_CONNINFO (libpq; empty: the PG* variables),
 *	INVOICE_SQL_CONNINFO (the same, for the methods against the SQL
 *	edition: a database where sql-edition/dlock.sql is installed; it must
 *	be set for them), INVOICE_REDIS_PORT (Redis on 127.0.0.1), INVOICE_ETCD_URL
 *	(http://127.0.0.1:PORT), INVOICE_BATCH (accounts per batch of the
 *	batch methods, at most 64, default 10).
 *
 *	The workers take the next account (or batch of accounts) from one
 *	counter, so no two workers ever ask for one account: the lock's cost is
 *	measured without waits.  Each account's work, whatever the method, is
 *	one statement: debit the balance by the monthly fee and insert the
 *	invoice (a data-modifying WITH), which must report one invoice per
 *	account; bench/invoice.sh then checks the tables (each invoice once,
 *	each balance debited once).  The methods, per account (batch: per batch):
 *
 *	  nolock       the write alone: 1 transaction, 1 round trip
 *	  nolock_batch the write of a batch of accounts (as dlock_c writes
 *	               them) alone: 1 transaction, 1 round trip a batch
 *	  advisory     the write takes pg_advisory_xact_lock(id) first (in the
 *	               same statement, before it reads the row): 1, 1
 *	  dlock_a      acquire; the fenced write; release: 3 transactions; the
 *	               write and the release go in one pipeline (the release
 *	               runs whether the write succeeded or not): 2 round trips
 *	  dlock_b      acquire; then the fenced write and the release in one
 *	               transaction, one pipeline: 2 transactions, 2 round trips
 *	  dlock_c      acquire_all of a batch's names (one token); then the
 *	               batch's fenced write and release_all in one transaction,
 *	               one pipeline: 2 transactions and 2 round trips a batch
 *	  dlock_d      one transaction: BEGIN and acquire (one round trip, the
 *	               token read back); then the fenced write, the release and
 *	               COMMIT in one pipeline: 1 transaction, 2 round trips; the
 *	               grant is committed (and flushed) with the write, and the
 *	               name's lock, held to the commit, keeps others out even
 *	               past the ttl (the cycle for work done in one transaction)
 *	  dlock_e      one transaction, one round trip: BEGIN, acquire, the
	               write, the release and COMMIT in one pipeline, nothing
	               read back in between.  The write is not fenced: the
	               grant commits with it, and the name's lock that the grant
	               holds to the commit orders it before any other grant
	               (docs/internals.md, I3); an acquire that fails (timeout)
	               aborts the transaction, write included
 *	  sqled_e      dlock_e against the SQL edition (INVOICE_SQL_CONNINFO):
 *	               the same API, the same pipeline
	  dlock_*_off  the same with dlock.durable_grants = off and
 *	               synchronous_commit = off in the session, the write's
 *	               transaction setting synchronous_commit = on for itself:
 *	               its commit makes the grant before it durable too
 *	  redis        SET NX PX 30000 with a value unique to the grant; the
 *	               write, unfenced (PostgreSQL cannot check a Redis lock);
 *	               EVAL of a compare-and-delete script: 3 round trips, 1
 *	               transaction (appendfsync is set by bench/invoice.sh)
 *	  etcd         v3 JSON gateway over HTTP/1.1, one keep-alive connection
 *	               per worker (libcurl): lease grant (ttl 30 s); txn: put the
 *	               key with the lease if it does not exist (create_revision
 *	               0); the revision of that txn is the token, which the write
 *	               checks as a fence in the application's table (accounts.
 *	               fence_token < token, set to the token); lease revoke,
 *	               which deletes the key: 4 round trips, 1 transaction
 *	  double       a self-test of the check: nolock, but account 1 is
 *	               invoiced twice; bench/invoice.sh expects its check to fail
 *
 *	Lock names: "account:ID"; owners: "wN-SERIAL" (dlock), unique values
 *	(Redis).  A lease that is lost (a fenced write of fewer rows than
 *	accounts, a release that finds nothing) is an error: the ttl is 30 s.
 *	Any error stops the program with status 1.
 */
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "../test/lib/dlock_client.h"

#define MAX_BATCH 64

typedef enum
{
	M_NOLOCK, M_ADVISORY, M_DLOCK_A, M_DLOCK_B, M_DLOCK_C, M_DLOCK_D, M_DLOCK_E,
	M_REDIS, M_ETCD,
	M_DOUBLE
} Shape;

typedef struct Method
{
	const char *key;
	Shape		shape;
	int			grants_off;
	int			batched;		/* a batch of accounts per cycle */
	int			sql_edition;	/* against the SQL edition's database */
} Method;

static const Method methods[] = {
	{"nolock", M_NOLOCK, 0, 0, 0},
	{"nolock_batch", M_NOLOCK, 0, 1, 0},
	{"advisory", M_ADVISORY, 0, 0, 0},
	{"dlock_a", M_DLOCK_A, 0, 0, 0},
	{"dlock_b", M_DLOCK_B, 0, 0, 0},
	{"dlock_c", M_DLOCK_C, 0, 1, 0},
	{"dlock_d", M_DLOCK_D, 0, 0, 0},
	{"dlock_e", M_DLOCK_E, 0, 0, 0},
	{"dlock_a_off", M_DLOCK_A, 1, 0, 0},
	{"dlock_b_off", M_DLOCK_B, 1, 0, 0},
	{"dlock_c_off", M_DLOCK_C, 1, 1, 0},
	{"dlock_e_off", M_DLOCK_E, 1, 0, 0},
	{"sqled_e", M_DLOCK_E, 0, 0, 1},
	{"redis", M_REDIS, 0, 0, 0},
	{"etcd", M_ETCD, 0, 0, 0},
	{"double", M_DOUBLE, 0, 0, 0},
};

/* The write: debit and invoice the accounts of $1 (int[]), in one statement */
#define WRITE_SQL(cte, set, guard) \
	"WITH " cte "d AS (UPDATE accounts SET balance = balance - monthly" set \
	" WHERE id = ANY ($1::integer[])" guard " RETURNING id, monthly)" \
	" INSERT INTO invoices (account, night, amount)" \
	" SELECT id, current_date, monthly FROM d"

static const char *write_sql = WRITE_SQL("", "", "");
/* the locks are taken (an InitPlan) before the scan reads a row */
static const char *write_advisory_sql =
	WRITE_SQL("l AS MATERIALIZED (SELECT pg_advisory_xact_lock(a) FROM unnest($1::integer[]) a), ",
			  "", " AND (SELECT count(*) FROM l) >= 0");
static const char *write_fenced_sql =
	WRITE_SQL("", "", " AND dlock.fence('account:' || id, $2::bigint)");
static const char *write_etcd_sql =
	WRITE_SQL("", ", fence_token = $2::bigint", " AND fence_token < $2::bigint");

typedef struct Worker
{
	int			id;
	pthread_t	thread;
	PGconn	   *pg;
	redisContext *redis;
	CURL	   *curl;
	char	   *body;			/* the last HTTP response */
	size_t		body_len;
	size_t		body_cap;
	unsigned long serial;
	int			failed;
} Worker;

static const Method *method;
static int	accounts;
static int	batch = 10;
static atomic_int next_account = 1;
static const char *etcd_url;

static void
die(Worker *w, const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "invoice %s: worker %d: ", method->key, w ? w->id : -1);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* --- PostgreSQL ------------------------------------------------------------ */

static void
pg_prepare(Worker *w, const char *name, const char *sql)
{
	PGresult   *res = PQprepare(w->pg, name, sql, 0, NULL);

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die(w, "prepare %s: %s", name, PQerrorMessage(w->pg));
	PQclear(res);
}

static void
pg_command(Worker *w, const char *sql)
{
	PGresult   *res = PQexec(w->pg, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die(w, "%s: %s", sql, PQerrorMessage(w->pg));
	PQclear(res);
}

static void
pg_connect(Worker *w)
{
	const char *conninfo = getenv(method->sql_edition ? "INVOICE_SQL_CONNINFO" : "INVOICE_CONNINFO");

	/* never the C edition's database by default, for a SQL edition method */
	if (method->sql_edition && (conninfo == NULL || conninfo[0] == '\0'))
		die(w, "INVOICE_SQL_CONNINFO is not set");
	w->pg = PQconnectdb(conninfo ? conninfo : "");
	if (PQstatus(w->pg) != CONNECTION_OK)
		die(w, "connect: %s", PQerrorMessage(w->pg));
	if (method->grants_off)
	{
		pg_command(w, "SET dlock.durable_grants = off");
		pg_command(w, "SET synchronous_commit = off");
	}
	else
		pg_command(w, "SET synchronous_commit = on");
	pg_prepare(w, "write", write_sql);
	switch (method->shape)
	{
		case M_ADVISORY:
			pg_prepare(w, "write_advisory", write_advisory_sql);
			pg_prepare(w, "lock_alone", "SELECT pg_advisory_xact_lock($1::bigint)");
			break;
		case M_DLOCK_A:
		case M_DLOCK_B:
		case M_DLOCK_C:
		case M_DLOCK_D:
		case M_DLOCK_E:
			pg_prepare(w, "write_fenced", write_fenced_sql);
			pg_prepare(w, "acquire",
					   "SELECT token FROM dlock.acquire($1, '30s'::interval, $2, timeout => '10s'::interval)");
			pg_prepare(w, "release", DLC_RELEASE_SQL);
			pg_prepare(w, "acquire_all",
					   "SELECT min(token), count(*) FROM dlock.acquire_all($1::text[], '30s'::interval, $2, timeout => '10s'::interval)");
			pg_prepare(w, "release_all", "SELECT dlock.release_all($1::text[], $2)");
			pg_prepare(w, "begin", "BEGIN");
			pg_prepare(w, "sync_on", "SET LOCAL synchronous_commit = on");
			pg_prepare(w, "commit", "COMMIT");
			break;
		case M_ETCD:
			pg_prepare(w, "write_etcd", write_etcd_sql);
			break;
		default:
			break;
	}
}

/* pg_value - one statement, one row: its first value (copied into buf) */
static void
pg_value(Worker *w, const char *stmt, int nparams, const char *const *params,
		 char *buf, size_t len)
{
	PGresult   *res = PQexecPrepared(w->pg, stmt, nparams, params, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		die(w, "%s: %s (%d rows)", stmt, PQerrorMessage(w->pg),
			PQresultStatus(res) == PGRES_TUPLES_OK ? PQntuples(res) : -1);
	dlc_copy_value(buf, len, res, 0, 0);
	PQclear(res);
}

/* pg_write - a write statement outside a pipeline; it must write n invoices */
static void
pg_write(Worker *w, const char *stmt, int nparams, const char *const *params, int n)
{
	PGresult   *res = PQexecPrepared(w->pg, stmt, nparams, params, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die(w, "%s: %s", stmt, PQerrorMessage(w->pg));
	if (atoi(PQcmdTuples(res)) != n)
		die(w, "%s wrote %s invoices of %d", stmt, PQcmdTuples(res), n);
	PQclear(res);
}

/*
 * A pipeline: statements sent at once, each followed or not by a sync (the
 * end of an implicit transaction); then every result read and checked.
 * expect: "W" a write of n invoices, "T" a result whose value is "t" (release)
 * or n (release_all), "R" a result of one row (acquire), "C" a command.
 */
typedef struct Step
{
	const char *stmt;
	int			nparams;
	const char *params[2];
	char		expect;
	int			sync_after;
} Step;

static void
pg_pipeline(Worker *w, const Step *steps, int nsteps, int n)
{
	char		nbuf[16];

	snprintf(nbuf, sizeof(nbuf), "%d", n);
	if (!PQenterPipelineMode(w->pg))
		die(w, "pipeline mode: %s", PQerrorMessage(w->pg));
	for (int i = 0; i < nsteps; i++)
	{
		if (!PQsendQueryPrepared(w->pg, steps[i].stmt, steps[i].nparams, steps[i].params,
								 NULL, NULL, 0))
			die(w, "send %s: %s", steps[i].stmt, PQerrorMessage(w->pg));
		if (steps[i].sync_after && !PQpipelineSync(w->pg))
			die(w, "sync: %s", PQerrorMessage(w->pg));
	}
	for (int i = 0; i < nsteps; i++)
	{
		PGresult   *res = PQgetResult(w->pg);
		ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;

		switch (steps[i].expect)
		{
			case 'W':
				if (st != PGRES_COMMAND_OK)
					die(w, "%s: %s", steps[i].stmt, PQerrorMessage(w->pg));
				if (atoi(PQcmdTuples(res)) != n)
					die(w, "%s wrote %s invoices of %d (lease lost)", steps[i].stmt,
						PQcmdTuples(res), n);
				break;
			case 'T':
				if (st != PGRES_TUPLES_OK || PQntuples(res) != 1)
					die(w, "%s: %s", steps[i].stmt, PQerrorMessage(w->pg));
				if (strcmp(PQgetvalue(res, 0, 0), n == 1 ? "t" : nbuf) != 0 &&
					strcmp(PQgetvalue(res, 0, 0), nbuf) != 0)
					die(w, "%s returned %s (lease lost)", steps[i].stmt, PQgetvalue(res, 0, 0));
				break;
			case 'R':
				if (st != PGRES_TUPLES_OK || PQntuples(res) != 1)
					die(w, "%s: %s", steps[i].stmt, PQerrorMessage(w->pg));
				break;
			default:
				if (st != PGRES_COMMAND_OK)
					die(w, "%s: %s", steps[i].stmt, PQerrorMessage(w->pg));
				break;
		}
		PQclear(res);
		if ((res = PQgetResult(w->pg)) != NULL)
			die(w, "%s: more than one result", steps[i].stmt);
		if (steps[i].sync_after)
		{
			res = PQgetResult(w->pg);
			if (res == NULL || PQresultStatus(res) != PGRES_PIPELINE_SYNC)
				die(w, "no sync after %s", steps[i].stmt);
			PQclear(res);
		}
	}
	if (!PQexitPipelineMode(w->pg))
		die(w, "leaving pipeline mode: %s", PQerrorMessage(w->pg));
}

/* --- etcd (v3 JSON gateway) ---------------------------------------------------- */

static size_t
collect(char *data, size_t size, size_t nmemb, void *arg)
{
	Worker	   *w = arg;
	size_t		n = size * nmemb;

	if (w->body_len + n + 1 > w->body_cap)
	{
		w->body_cap = (w->body_len + n + 1) * 2;
		w->body = realloc(w->body, w->body_cap);
		if (w->body == NULL)
			die(w, "out of memory");
	}
	memcpy(w->body + w->body_len, data, n);
	w->body_len += n;
	w->body[w->body_len] = '\0';
	return n;
}

static void
etcd_connect(Worker *w)
{
	w->curl = curl_easy_init();
	if (w->curl == NULL)
		die(w, "curl_easy_init failed");
	curl_easy_setopt(w->curl, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(w->curl, CURLOPT_WRITEDATA, w);
	curl_easy_setopt(w->curl, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(w->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(w->curl, CURLOPT_TIMEOUT, 30L);
}

/* etcd_post - POST json to the gateway's path (the connection is kept); the body */
static const char *
etcd_post(Worker *w, const char *path, const char *json)
{
	char		url[256];
	long		code = 0;
	CURLcode	rc;

	snprintf(url, sizeof(url), "%s%s", etcd_url, path);
	w->body_len = 0;
	curl_easy_setopt(w->curl, CURLOPT_URL, url);
	curl_easy_setopt(w->curl, CURLOPT_POSTFIELDS, json);
	rc = curl_easy_perform(w->curl);
	if (rc != CURLE_OK)
		die(w, "POST %s: %s", path, curl_easy_strerror(rc));
	curl_easy_getinfo(w->curl, CURLINFO_RESPONSE_CODE, &code);
	if (code != 200 || w->body == NULL)
		die(w, "POST %s: HTTP %ld: %s", path, code, w->body ? w->body : "");
	return w->body;
}

/* json_string - the value of "key":"value" or "key":value in body (copied) */
static int
json_value(const char *body, const char *key, char *buf, size_t len)
{
	char		pat[64];
	const char *p;
	size_t		n = 0;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	if ((p = strstr(body, pat)) == NULL)
		return 0;
	p += strlen(pat);
	if (*p == '"')
		p++;
	while (*p && *p != '"' && *p != ',' && *p != '}' && n + 1 < len)
		buf[n++] = *p++;
	buf[n] = '\0';
	return n > 0;
}

static void
base64(const char *in, char *out)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t		n = strlen(in);
	size_t		i;

	for (i = 0; i + 2 < n; i += 3)
	{
		unsigned	v = (unsigned char) in[i] << 16 | (unsigned char) in[i + 1] << 8 | (unsigned char) in[i + 2];

		*out++ = tab[v >> 18];
		*out++ = tab[(v >> 12) & 63];
		*out++ = tab[(v >> 6) & 63];
		*out++ = tab[v & 63];
	}
	if (i < n)
	{
		unsigned	v = (unsigned char) in[i] << 16 | (i + 1 < n ? (unsigned char) in[i + 1] << 8 : 0);

		*out++ = tab[v >> 18];
		*out++ = tab[(v >> 12) & 63];
		*out++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
		*out++ = '=';
	}
	*out = '\0';
}

/* etcd_acquire - lease grant, then put the key with it if absent; the revision */
static void
etcd_acquire(Worker *w, const char *name, char *lease, char *revision)
{
	char		key64[64];
	char		val64[64];
	char		value[48];
	char		json[512];
	const char *body;

	body = etcd_post(w, "/v3/lease/grant", "{\"TTL\":30}");
	if (!json_value(body, "ID", lease, 32))
		die(w, "lease grant: %s", body);
	base64(name, key64);
	snprintf(value, sizeof(value), "w%d-%lu", w->id, w->serial++);
	base64(value, val64);
	snprintf(json, sizeof(json),
			 "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}],"
			 "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%s\"}}]}",
			 key64, key64, val64, lease);
	body = etcd_post(w, "/v3/kv/txn", json);
	if (strstr(body, "\"succeeded\":true") == NULL)
		die(w, "%s is held: %s", name, body);
	if (!json_value(body, "revision", revision, 32))
		die(w, "txn: no revision: %s", body);
}

static void
etcd_release(Worker *w, const char *lease)
{
	char		json[64];

	snprintf(json, sizeof(json), "{\"ID\":\"%s\"}", lease);
	etcd_post(w, "/v3/lease/revoke", json);
}

/* --- the work of one account or batch ------------------------------------- */

/*
 * account_array - "{P1,...,Pn}" for the accounts first .. first+n-1, each
 * with prefix P: "" for the ids, "account:" for the lock names
 */
static void
account_array(const char *prefix, int first, int n, char *buf, size_t len)
{
	size_t		off = snprintf(buf, len, "{");

	for (int i = 0; i < n; i++)
		off += snprintf(buf + off, len - off, "%s%s%d", i ? "," : "", prefix, first + i);
	snprintf(buf + off, len - off, "}");
}

/*
 * cycle - one account's (or batch's) work: lock, write, unlock.  With
 * write 0, the lock and unlock alone (the "alone" measurement).
 */
static void
cycle(Worker *w, int first, int n, int write)
{
	char		ids[16 * MAX_BATCH];
	char		names[24 * MAX_BATCH];
	char		name[32];
	char		owner[48];
	char		token[32];
	char		lease[32];
	char		value[48];
	const char *p[2];
	int			off = method->grants_off;
	redisReply *reply;

	account_array("", first, n, ids, sizeof(ids));
	snprintf(name, sizeof(name), "account:%d", first);
	switch (method->shape)
	{
		case M_NOLOCK:
		case M_DOUBLE:
			p[0] = ids;
			pg_write(w, "write", 1, p, n);
			if (method->shape == M_DOUBLE && first == 1)
				pg_write(w, "write", 1, p, n);
			break;

		case M_ADVISORY:
			if (write)
			{
				p[0] = ids;
				pg_write(w, "write_advisory", 1, p, n);
			}
			else
			{
				snprintf(token, sizeof(token), "%d", first);
				p[0] = token;
				pg_value(w, "lock_alone", 1, p, value, sizeof(value));
			}
			break;

		case M_DLOCK_A:
		case M_DLOCK_B:
			snprintf(owner, sizeof(owner), "w%d-%lu", w->id, w->serial++);
			p[0] = name;
			p[1] = owner;
			pg_value(w, "acquire", 2, p, token, sizeof(token));
			{
				Step		s[6];
				int			k = 0;

				if (!write)
				{
					s[k++] = (Step) {"release", 2, {name, owner}, 'T', 1};
				}
				else if (method->shape == M_DLOCK_A)
				{
					/* the write its own transaction, then the release */
					if (off)
					{
						s[k++] = (Step) {"begin", 0, {NULL, NULL}, 'C', 0};
						s[k++] = (Step) {"sync_on", 0, {NULL, NULL}, 'C', 0};
					}
					s[k++] = (Step) {"write_fenced", 2, {ids, token}, 'W', !off};
					if (off)
						s[k++] = (Step) {"commit", 0, {NULL, NULL}, 'C', 1};
					s[k++] = (Step) {"release", 2, {name, owner}, 'T', 1};
				}
				else
				{
					/* the write and the release in one transaction */
					s[k++] = (Step) {"begin", 0, {NULL, NULL}, 'C', 0};
					if (off)
						s[k++] = (Step) {"sync_on", 0, {NULL, NULL}, 'C', 0};
					s[k++] = (Step) {"write_fenced", 2, {ids, token}, 'W', 0};
					s[k++] = (Step) {"release", 2, {name, owner}, 'T', 0};
					s[k++] = (Step) {"commit", 0, {NULL, NULL}, 'C', 1};
				}
				pg_pipeline(w, s, k, n);
			}
			break;

		case M_DLOCK_D:
			snprintf(owner, sizeof(owner), "w%d-%lu", w->id, w->serial++);
			{
				char		sql[256];
				PGresult   *res;
				Step		s[3];
				int			k = 0;

				/* names and owners are plain: no quoting needed */
				snprintf(sql, sizeof(sql),
						 "BEGIN; SELECT token FROM dlock.acquire('%s', '30s', '%s', timeout => '10s')",
						 name, owner);
				res = PQexec(w->pg, sql);
				if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
					die(w, "BEGIN; acquire: %s", PQerrorMessage(w->pg));
				dlc_copy_value(token, sizeof(token), res, 0, 0);
				PQclear(res);
				if (write)
					s[k++] = (Step) {"write_fenced", 2, {ids, token}, 'W', 0};
				s[k++] = (Step) {"release", 2, {name, owner}, 'T', 0};
				s[k++] = (Step) {"commit", 0, {NULL, NULL}, 'C', 1};
				pg_pipeline(w, s, k, n);
			}
			break;

		case M_DLOCK_E:
			snprintf(owner, sizeof(owner), "w%d-%lu", w->id, w->serial++);
			{
				Step		s[6];
				int			k = 0;

				s[k++] = (Step) {"begin", 0, {NULL, NULL}, 'C', 0};
				if (off && write)
					s[k++] = (Step) {"sync_on", 0, {NULL, NULL}, 'C', 0};
				s[k++] = (Step) {"acquire", 2, {name, owner}, 'R', 0};
				if (write)
					s[k++] = (Step) {"write", 1, {ids, NULL}, 'W', 0};
				s[k++] = (Step) {"release", 2, {name, owner}, 'T', 0};
				s[k++] = (Step) {"commit", 0, {NULL, NULL}, 'C', 1};
				pg_pipeline(w, s, k, n);
			}
			break;

		case M_DLOCK_C:
			snprintf(owner, sizeof(owner), "w%d-%lu", w->id, w->serial++);
			account_array("account:", first, n, names, sizeof(names));
			{
				PGresult   *res;
				Step		s[5];
				int			k = 0;

				p[0] = names;
				p[1] = owner;
				res = PQexecPrepared(w->pg, "acquire_all", 2, p, NULL, NULL, 0);
				if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
					atoi(PQgetvalue(res, 0, 1)) != n)
					die(w, "acquire_all: %s", PQerrorMessage(w->pg));
				dlc_copy_value(token, sizeof(token), res, 0, 0);
				PQclear(res);
				if (write)
				{
					s[k++] = (Step) {"begin", 0, {NULL, NULL}, 'C', 0};
					if (off)
						s[k++] = (Step) {"sync_on", 0, {NULL, NULL}, 'C', 0};
					s[k++] = (Step) {"write_fenced", 2, {ids, token}, 'W', 0};
					s[k++] = (Step) {"release_all", 2, {names, owner}, 'T', 0};
					s[k++] = (Step) {"commit", 0, {NULL, NULL}, 'C', 1};
				}
				else
					s[k++] = (Step) {"release_all", 2, {names, owner}, 'T', 1};
				pg_pipeline(w, s, k, n);
			}
			break;

		case M_REDIS:
			snprintf(value, sizeof(value), "w%d-%lu", w->id, w->serial++);
			reply = redisCommand(w->redis, "SET %s %s NX PX 30000", name, value);
			if (reply == NULL || reply->type != REDIS_REPLY_STATUS || strcmp(reply->str, "OK") != 0)
				die(w, "SET %s: %s", name, reply ? "not granted" : w->redis->errstr);
			freeReplyObject(reply);
			if (write)
			{
				p[0] = ids;
				pg_write(w, "write", 1, p, n);
			}
			reply = redisCommand(w->redis, "EVAL %s 1 %s %s", DLC_REDIS_RELEASE_SCRIPT, name, value);
			if (reply == NULL || reply->type != REDIS_REPLY_INTEGER || reply->integer != 1)
				die(w, "release of %s: %s", name, reply ? "not deleted" : w->redis->errstr);
			freeReplyObject(reply);
			break;

		case M_ETCD:
			etcd_acquire(w, name, lease, token);
			if (write)
			{
				p[0] = ids;
				p[1] = token;
				pg_write(w, "write_etcd", 2, p, n);
			}
			etcd_release(w, lease);
			break;
	}
}

static int
step_of(void)
{
	return method->batched ? batch : 1;
}

static void *
worker_main(void *arg)
{
	Worker	   *w = arg;
	int			step = step_of();

	for (;;)
	{
		int			first = atomic_fetch_add(&next_account, step);
		int			n;

		if (first > accounts)
			break;
		n = first + step - 1 <= accounts ? step : accounts - first + 1;
		cycle(w, first, n, 1);
	}
	return NULL;
}

static void
connect_worker(Worker *w, int id)
{
	const char *port = getenv("INVOICE_REDIS_PORT");

	w->id = id;
	pg_connect(w);
	if (method->shape == M_REDIS)
	{
		w->redis = redisConnect("127.0.0.1", port ? atoi(port) : 6379);
		if (w->redis == NULL || w->redis->err)
			die(w, "Redis connect: %s", w->redis ? w->redis->errstr : "out of memory");
	}
	if (method->shape == M_ETCD)
		etcd_connect(w);
}

int
main(int argc, char **argv)
{
	const char *env;
	int			nworkers;
	Worker	   *workers;
	double		t0;

	dlc_progname = "invoice";
	if (argc != 5)
	{
		fprintf(stderr, "usage: invoice run METHOD WORKERS ACCOUNTS | invoice alone METHOD CYCLES ACCOUNTS\n");
		return 64;
	}
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if (strcmp(argv[2], methods[i].key) == 0)
			method = &methods[i];
	if (method == NULL)
	{
		fprintf(stderr, "invoice: unknown method \"%s\"\n", argv[2]);
		return 64;
	}
	if ((env = getenv("INVOICE_BATCH")) != NULL)
		batch = atoi(env);
	if (batch < 1 || batch > MAX_BATCH)
	{
		fprintf(stderr, "invoice: INVOICE_BATCH must be 1 to %d\n", MAX_BATCH);
		return 64;
	}
	etcd_url = getenv("INVOICE_ETCD_URL");
	if (method->shape == M_ETCD && etcd_url == NULL)
	{
		fprintf(stderr, "invoice: INVOICE_ETCD_URL is not set\n");
		return 64;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);

	if (strcmp(argv[1], "run") == 0 && argc == 5)
	{
		nworkers = atoi(argv[3]);
		accounts = atoi(argv[4]);
		if (nworkers < 1 || accounts < 1)
		{
			fprintf(stderr, "invoice: bad arguments\n");
			return 64;
		}
		/* Connect everybody first, so that connecting is not timed */
		workers = calloc(nworkers, sizeof(Worker));
		for (int i = 0; i < nworkers; i++)
			connect_worker(&workers[i], i);
		t0 = dlc_mono_s();
		for (int i = 0; i < nworkers; i++)
			if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) != 0)
				die(NULL, "cannot start a thread");
		for (int i = 0; i < nworkers; i++)
			pthread_join(workers[i].thread, NULL);
		printf("%.3f\n", dlc_mono_s() - t0);
	}
	else if (strcmp(argv[1], "alone") == 0)
	{
		Worker		w = {0};
		int			cycles = atoi(argv[3]);
		int			step = step_of();

		accounts = atoi(argv[4]);
		if (cycles < 1 || accounts < step || method->shape == M_NOLOCK || method->shape == M_DOUBLE)
		{
			fprintf(stderr, "invoice: alone needs CYCLES > 0, ACCOUNTS >= a batch and a lock method\n");
			return 64;
		}
		connect_worker(&w, 0);
		/* one cycle first, so that the first statements' planning is not timed */
		cycle(&w, 1, step, 0);
		t0 = dlc_mono_s();
		for (int i = 0; i < cycles; i++)
			cycle(&w, 1 + (i * step) % (accounts - step + 1), step, 0);
		printf("%.4f %d\n", (dlc_mono_s() - t0) * 1000 / cycles, step);
	}
	else
	{
		fprintf(stderr, "usage: invoice run METHOD WORKERS ACCOUNTS | invoice alone METHOD CYCLES ACCOUNTS\n");
		return 64;
	}
	return 0;
}

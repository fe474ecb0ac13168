/*
 * redis_pg_guarded.c
 *	  Guarded-write cycles with a Redis lock and a PostgreSQL write, for
 *	  bench/compare.sh (section guarded).
 *
 *	  redis_pg_guarded HOST PORT CLIENTS SECONDS NAMES CONNINFO
 *
 *	Each of CLIENTS threads has its own Redis connection and its own
 *	PostgreSQL connection (CONNINFO, "" for the libpq environment) and, until
 *	SECONDS have passed, picks a name at random out of NAMES ("k1" ..
 *	"kNAMES") and runs one cycle:
 *
 *	  acquire: SET name value NX PX 10000, with a value unique to this grant;
 *	  write:   UPDATE accounts SET balance = balance - 1 WHERE id = N, one
 *			   transaction (prepared, with the session's synchronous_commit);
 *			   Redis has no fencing token, so nothing guards it in the
 *			   database;
 *	  release: a Lua script run by EVAL that deletes the key only if it still
 *			   holds that value.
 *
 *	A refused acquire ends the cycle; it counts as a cycle that did no work
 *	(a "miss"), and no latency is recorded for it.
 *
 *	Prints one line: "ops_per_s mean_ms p99_ms misses", where ops counts the
 *	completed cycles plus the cycles that did no work.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "../test/lib/dlock_client.h"

typedef struct Client
{
	int			id;
	pthread_t	thread;
	redisContext *redis;
	PGconn	   *pg;
	unsigned int seed;
	DlcSamples	latency_us;
	long		nowork;
	char		error[256];
} Client;

static int	names;
static double deadline_us;
static pthread_barrier_t start_line;

static double
now_us(void)
{
	return dlc_mono_ms() * 1000.0;
}

/* run_cycle - one acquire, write and release; false on error (in c->error) */
static int
run_cycle(Client *c, unsigned long serial)
{
	char		key[32];
	char		id[16];
	char		value[64];
	const char *params[1] = {id};
	double		start = now_us();
	redisReply *reply;
	PGresult   *res;
	int			ok;

	int			n = dlc_pick_r(&c->seed, names);

	snprintf(key, sizeof(key), "k%d", n);
	snprintf(id, sizeof(id), "%d", n);
	snprintf(value, sizeof(value), "client-%d-%lu", c->id, serial);

	reply = redisCommand(c->redis, "SET %s %s NX PX 10000", key, value);
	if (reply == NULL)
	{
		snprintf(c->error, sizeof(c->error), "SET: %s", c->redis->errstr);
		return 0;
	}
	if (reply->type == REDIS_REPLY_NIL)
	{
		freeReplyObject(reply);
		c->nowork++;
		return 1;
	}
	ok = reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0;
	freeReplyObject(reply);
	if (!ok)
	{
		snprintf(c->error, sizeof(c->error), "SET: unexpected reply");
		return 0;
	}

	res = PQexecPrepared(c->pg, "write", 1, params, NULL, NULL, 0);
	ok = PQresultStatus(res) == PGRES_COMMAND_OK && strcmp(PQcmdTuples(res), "1") == 0;
	if (!ok)
		snprintf(c->error, sizeof(c->error), "UPDATE: %s", PQerrorMessage(c->pg));
	PQclear(res);
	if (!ok)
		return 0;

	reply = redisCommand(c->redis, "EVAL %s 1 %s %s", DLC_REDIS_RELEASE_SCRIPT, key, value);
	if (reply == NULL)
	{
		snprintf(c->error, sizeof(c->error), "EVAL: %s", c->redis->errstr);
		return 0;
	}
	ok = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
	freeReplyObject(reply);
	if (!ok)
	{
		/* With a 10 s ttl and cycles of milliseconds, this means a bug */
		snprintf(c->error, sizeof(c->error), "release of %s did not delete it", key);
		return 0;
	}
	dlc_samples_add(&c->latency_us, now_us() - start);
	return 1;
}

static void *
client_main(void *arg)
{
	Client	   *c = arg;
	unsigned long serial = 0;

	pthread_barrier_wait(&start_line);
	while (now_us() < deadline_us)
	{
		if (!run_cycle(c, serial++))
			break;
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	const char *host;
	int			port;
	int			nclients;
	double		seconds;
	const char *conninfo;
	Client	   *clients;
	double		started;
	double		elapsed_s;
	double		mean;
	long		total = 0;
	long		nowork = 0;
	DlcSamples	all = {0};
	int			failed = 0;

	dlc_progname = "redis_pg_guarded";
	if (argc != 7)
	{
		fprintf(stderr, "usage: redis_pg_guarded HOST PORT CLIENTS SECONDS NAMES CONNINFO\n");
		return 64;
	}
	host = argv[1];
	port = atoi(argv[2]);
	nclients = atoi(argv[3]);
	seconds = atof(argv[4]);
	names = atoi(argv[5]);
	conninfo = argv[6];
	if (nclients < 1 || seconds <= 0 || names < 1)
	{
		fprintf(stderr, "redis_pg_guarded: bad arguments\n");
		return 64;
	}

	/* Connect everybody first, so that connecting is not timed */
	clients = calloc(nclients, sizeof(Client));
	for (int i = 0; i < nclients; i++)
	{
		Client	   *c = &clients[i];
		PGresult   *res;

		c->id = i;
		c->seed = 12345u + 7919u * (unsigned) i;
		c->redis = redisConnect(host, port);
		if (c->redis == NULL || c->redis->err)
		{
			fprintf(stderr, "redis_pg_guarded: Redis connect: %s\n",
					c->redis ? c->redis->errstr : "out of memory");
			return 1;
		}
		c->pg = PQconnectdb(conninfo);
		if (PQstatus(c->pg) != CONNECTION_OK)
		{
			fprintf(stderr, "redis_pg_guarded: PostgreSQL connect: %s", PQerrorMessage(c->pg));
			return 1;
		}
		res = PQprepare(c->pg, "write",
						"UPDATE accounts SET balance = balance - 1 WHERE id = $1::integer",
						1, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
		{
			fprintf(stderr, "redis_pg_guarded: prepare: %s", PQerrorMessage(c->pg));
			return 1;
		}
		PQclear(res);
	}

	pthread_barrier_init(&start_line, NULL, nclients + 1);
	for (int i = 0; i < nclients; i++)
		if (pthread_create(&clients[i].thread, NULL, client_main, &clients[i]) != 0)
		{
			fprintf(stderr, "redis_pg_guarded: cannot start a thread\n");
			return 1;
		}
	started = now_us();
	deadline_us = started + seconds * 1e6;
	pthread_barrier_wait(&start_line);
	for (int i = 0; i < nclients; i++)
		pthread_join(clients[i].thread, NULL);
	elapsed_s = (now_us() - started) / 1e6;

	for (int i = 0; i < nclients; i++)
	{
		total += clients[i].latency_us.n;
		nowork += clients[i].nowork;
		if (clients[i].error[0])
		{
			fprintf(stderr, "redis_pg_guarded: client %d: %s\n", i, clients[i].error);
			failed = 1;
		}
	}
	if (failed || total == 0)
	{
		if (!failed)
			fprintf(stderr, "redis_pg_guarded: no cycle completed\n");
		return 1;
	}
	for (int i = 0; i < nclients; i++)
	{
		dlc_samples_append(&all, &clients[i].latency_us);
		redisFree(clients[i].redis);
		PQfinish(clients[i].pg);
		free(clients[i].latency_us.v);
	}
	mean = dlc_mean(all.v, all.n);
	dlc_sort(all.v, all.n);

	printf("%.1f %.3f %.3f %ld\n",
		   (total + nowork) / elapsed_s, mean / 1000.0, dlc_rank(all.v, all.n, 0.99) / 1000.0, nowork);
	free(all.v);
	free(clients);
	return 0;
}

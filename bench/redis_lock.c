/*
 * redis_lock.c
 *	  Acquire + release cycles of a Redis lock, for bench/compare.sh.
 *
 *	  redis_lock HOST PORT CLIENTS SECONDS NAMES PAUSE_MS [PERMITS]
 *
 *	Each of CLIENTS threads has its own connection and, until SECONDS have
 *	passed, picks a name at random out of NAMES ("k1" .. "kNAMES") and runs
 *	one cycle:
 *
 *	  acquire: SET name value NX PX 10000, with a value unique to this grant,
 *			   so that a release can tell its own grant from a later one;
 *	  release: a Lua script run by EVAL that deletes the key only if it still
 *			   holds that value (compare-and-delete in one step).
 *
 *	With PERMITS, a cycle takes and gives back a permit of a counting
 *	semaphore of PERMITS on the name ("sem1" .. "semNAMES"), the usual
 *	sorted-set recipe: the key is a sorted set of the live permits, each
 *	member unique to its grant, scored by its expiry time in milliseconds
 *	on the client's clock;
 *
 *	  acquire: a Lua script run by EVAL (atomic, as Redis runs a script
 *			   alone) that removes the members whose expiry has passed,
 *			   and adds this one, expiring in 10 s, if fewer than PERMITS
 *			   are left;
 *	  release: ZREM of the member.
 *
 *	The expiry is only as good as the clients' clocks agree, and a permit
 *	has no token that a guarded write could check.
 *
 *	A refused acquire (the name is held) is handled like the PostgreSQL
 *	methods' pgbench scripts handle it:
 *
 *	  PAUSE_MS = 0: the cycle ends there; it counts as a cycle that did no
 *				work (a "miss"), and no latency is recorded for it;
 *	  PAUSE_MS > 0: the client polls, sleeping PAUSE_MS between attempts
 *				(each failed attempt is a "miss"), and the cycle's latency
 *				runs from its first attempt to the end of its release.
 *
 *	Prints one line: "ops_per_s mean_ms p99_ms misses", where ops counts the
 *	completed cycles plus, with PAUSE_MS = 0, the cycles that did no work.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "../test/lib/dlock_client.h"

/*
 * A permit's acquire: ARGV = the client's time now (ms), PERMITS, the ttl
 * (ms) and the member; 1 when granted, 0 when PERMITS are live
 */
static const char *permit_script =
	"local now = tonumber(ARGV[1]) "
	"redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) "
	"if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then "
	"redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[4]) "
	"return 1 end return 0";

typedef struct Client
{
	int			id;
	pthread_t	thread;
	redisContext *conn;
	unsigned int seed;
	DlcSamples	latency_us;		/* one per completed cycle */
	long		nowork;			/* cycles that ended with a refused acquire */
	long		polls;			/* refused attempts while polling */
	int			failed;
} Client;

static const char *host;
static int	port;
static int	names;
static int	pause_ms;
static int	permits;			/* 0: a lock, not a semaphore */
static double deadline_us;		/* CLOCK_MONOTONIC, set before the start */
static pthread_barrier_t start_line;

static double
now_us(void)
{
	return dlc_mono_ms() * 1000.0;
}

/* wall_ms - the client's wall clock, which the semaphore's scores use */
static long long
wall_ms(void)
{
	return (long long) (dlc_wall_s() * 1000);
}

/* try_grant - one acquire attempt: 1 granted, 0 refused, -1 error */
static int
try_grant(Client *c, const char *key, const char *value)
{
	redisReply *reply;
	int			granted;

	if (permits == 0)
	{
		reply = redisCommand(c->conn, "SET %s %s NX PX 10000", key, value);
		if (reply == NULL)
			return -1;
		granted = reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0;
		if (!granted && reply->type != REDIS_REPLY_NIL)
		{
			fprintf(stderr, "redis_lock: SET: unexpected reply type %d\n", reply->type);
			freeReplyObject(reply);
			return -1;
		}
	}
	else
	{
		reply = redisCommand(c->conn, "EVAL %s 1 %s %lld %d 10000 %s", permit_script,
							 key, wall_ms(), permits, value);
		if (reply == NULL)
			return -1;
		if (reply->type != REDIS_REPLY_INTEGER)
		{
			fprintf(stderr, "redis_lock: EVAL: unexpected reply type %d%s%s\n", reply->type,
					reply->type == REDIS_REPLY_ERROR ? ": " : "",
					reply->type == REDIS_REPLY_ERROR ? reply->str : "");
			freeReplyObject(reply);
			return -1;
		}
		granted = reply->integer == 1;
	}
	freeReplyObject(reply);
	return granted;
}

/* run_cycle - one acquire (polling if asked) and release; false on error */
static int
run_cycle(Client *c, unsigned long serial)
{
	char		key[32];
	char		value[64];
	double		start = now_us();
	redisReply *reply;
	int			granted = 0;

	snprintf(key, sizeof(key), "%s%d", permits ? "sem" : "k",
			 dlc_pick_r(&c->seed, names));
	snprintf(value, sizeof(value), "client-%d-%lu", c->id, serial);

	for (;;)
	{
		granted = try_grant(c, key, value);
		if (granted < 0)
			return 0;
		if (granted)
			break;
		if (pause_ms == 0)
		{
			c->nowork++;
			return 1;
		}
		c->polls++;
		/* A poll that would end after the deadline is not started */
		if (now_us() + pause_ms * 1000.0 >= deadline_us)
			return 1;
		dlc_sleep_ms(pause_ms);
	}

	if (permits == 0)
		reply = redisCommand(c->conn, "EVAL %s 1 %s %s", DLC_REDIS_RELEASE_SCRIPT, key, value);
	else
		reply = redisCommand(c->conn, "ZREM %s %s", key, value);
	if (reply == NULL)
		return 0;
	if (reply->type != REDIS_REPLY_INTEGER || reply->integer != 1)
	{
		/* With a 10 s ttl and cycles of milliseconds, this means a bug */
		fprintf(stderr, "redis_lock: release of %s did not delete it\n", key);
		freeReplyObject(reply);
		return 0;
	}
	freeReplyObject(reply);
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
		{
			fprintf(stderr, "redis_lock: client %d: %s\n", c->id,
					c->conn->err ? c->conn->errstr : "bad reply");
			c->failed = 1;
			break;
		}
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	int			nclients;
	double		seconds;
	Client	   *clients;
	double		started;
	double		elapsed_s;
	double		mean;
	long		total = 0;
	long		nowork = 0;
	long		polls = 0;
	DlcSamples	all = {0};
	int			failed = 0;

	dlc_progname = "redis_lock";
	if (argc != 7 && argc != 8)
	{
		fprintf(stderr, "usage: redis_lock HOST PORT CLIENTS SECONDS NAMES PAUSE_MS [PERMITS]\n");
		return 64;
	}
	host = argv[1];
	port = atoi(argv[2]);
	nclients = atoi(argv[3]);
	seconds = atof(argv[4]);
	names = atoi(argv[5]);
	pause_ms = atoi(argv[6]);
	permits = argc == 8 ? atoi(argv[7]) : 0;
	if (nclients < 1 || seconds <= 0 || names < 1 || pause_ms < 0 || (argc == 8 && permits < 1))
	{
		fprintf(stderr, "redis_lock: bad arguments\n");
		return 64;
	}

	/* Connect everybody first, so that connecting is not timed */
	clients = calloc(nclients, sizeof(Client));
	for (int i = 0; i < nclients; i++)
	{
		clients[i].id = i;
		clients[i].seed = 12345u + 7919u * (unsigned) i;
		clients[i].conn = redisConnect(host, port);
		if (clients[i].conn == NULL || clients[i].conn->err)
		{
			fprintf(stderr, "redis_lock: connect: %s\n",
					clients[i].conn ? clients[i].conn->errstr : "out of memory");
			return 1;
		}
	}

	pthread_barrier_init(&start_line, NULL, nclients + 1);
	for (int i = 0; i < nclients; i++)
		if (pthread_create(&clients[i].thread, NULL, client_main, &clients[i]) != 0)
		{
			fprintf(stderr, "redis_lock: cannot start a thread\n");
			return 1;
		}
	started = now_us();
	deadline_us = started + seconds * 1e6;
	pthread_barrier_wait(&start_line);
	for (int i = 0; i < nclients; i++)
		pthread_join(clients[i].thread, NULL);
	/* Cycles that started before the deadline finish after it: count that */
	elapsed_s = (now_us() - started) / 1e6;

	for (int i = 0; i < nclients; i++)
	{
		total += clients[i].latency_us.n;
		nowork += clients[i].nowork;
		polls += clients[i].polls;
		failed |= clients[i].failed;
	}
	if (failed || total == 0)
	{
		fprintf(stderr, "redis_lock: %s\n", failed ? "a client failed" : "no cycle completed");
		return 1;
	}
	for (int i = 0; i < nclients; i++)
	{
		dlc_samples_append(&all, &clients[i].latency_us);
		redisFree(clients[i].conn);
		free(clients[i].latency_us.v);
	}
	mean = dlc_mean(all.v, all.n);
	dlc_sort(all.v, all.n);

	printf("%.1f %.3f %.3f %ld\n",
		   (total + nowork) / elapsed_s, mean / 1000.0, dlc_rank(all.v, all.n, 0.99) / 1000.0,
		   pause_ms == 0 ? nowork : polls);
	free(all.v);
	free(clients);
	return 0;
}

/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Per-name statistics in shared memory (dlock.stats, dlock.stats_reset),
 *	  and the log line of stale tokens checked by dlock.fence()
 *	  (dlock.log_stale_fences).
 *
 * The statistics exist only when dlock is in shared_preload_libraries: the
 * postmaster then reserves a hash table of dlock.stats_max entries, one per
 * (database, name), guarded by one LWLock (shared to find an entry and count
 * into it, exclusive to add or remove entries) and a spinlock per entry for
 * its counters.  Nothing is written to disk: the counters survive
 * reconnects, and a server restart (or a crash) starts them from zero.
 *
 * Which names get an entry.  Only names that have rows in dlock.lease_state:
 * an entry is made by an event that shows the name has a row (a grant, a
 * renewal, a release, a force-release, a lost holder found, a fence() that
 * read a row of the name).  A refusal, a wait or a timeout, whose callers do
 * not say whether the name has a row, and a fence() of a name without rows
 * count only into an entry that exists.  So calls on names nobody was ever
 * granted (which cost any role nothing to make up) cannot fill the table.
 *
 * Eviction, per database.  When the table is full, a new entry takes the
 * place of less active ones, as in pg_stat_statements (each event adds one
 * to an entry's usage, every eviction pass ages all usages and removes the
 * lowest few percent), but only among the entries of the databases over
 * their fair share, dlock.stats_max divided by the number of databases with
 * entries (the one making the entry included):
 *	- a database at or over its share makes room among its own entries;
 *	- a database under its share takes room from the databases over theirs,
 *	  at most their excess.
 * A database under its share therefore keeps its entries, however busy the
 * others are: one database's traffic cannot evict another's statistics.
 * Within a database, roles share its part of the table.
 *
 * Events are counted when they happen, in the transaction that makes them,
 * whether it commits or not: the counters are attempts, including the ones
 * that rolled back.  An entry also remembers the last few tokens of its
 * name that were superseded by a grant, and how their leases ended; that
 * lets the stale-fence log line say how long ago an older token's lease
 * ended (see StaleFenceReport for the exact rule).
 *
 * The stale-fence log line is rate-limited per name: at most one line per
 * (database, name) every STALE_LOG_INTERVAL_S seconds; the next line of a
 * name says how many checks were not logged meanwhile.  A line takes one
 * of STALE_LOG_NAMES slots for its window, so a name in its window is
 * remembered.  With dlock preloaded the slots are the server's (in shared
 * memory, under log_lock), otherwise each backend's own.  The slots are
 * shared between databases as the statistics' table is:
 *	- a new name takes a slot whose window is over (the least recently
 *	  logged), whatever its database holds;
 *	- when every slot is in its window, a database under its share
 *	  (STALE_LOG_NAMES divided by the databases with a slot in its window,
 *	  itself included) takes the least recently logged slot of the
 *	  databases over their share, and one at or over its share logs no new
 *	  name;
 *	- the database that lost a slot in its window logs no line until that
 *	  slot's window is over: it no longer knows which name the slot held.
 * So one database logs at most STALE_LOG_NAMES names every window, and a
 * database flooding stale checks cannot keep another from its share.
 *
 * Without preloading, every counting call is one branch on
 * dlock_stats_counting (stats/stats.h) and reading the statistics fails.
 * Invariants of the lease itself are in docs/internals.md.
 *
 * Invariants: I18 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/stats/stats.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "stats/stats.h"
#include "dlock_compat.h"

PG_FUNCTION_INFO_V1(dlock_stats);
PG_FUNCTION_INFO_V1(dlock_stats_reset);

/* Superseded tokens remembered per name, for the stale-fence log line */
#define STATS_PAST_LEASES		4

/* Eviction: the share of entries removed per pass, and the ageing factor */
#define STATS_EVICT_PERCENT		5
#define STATS_USAGE_DECAY		0.99

/*
 * The stale-fence log line: at most one line per name in this many seconds,
 * and this many slots of such a window, shared by the databases (at most
 * this many names of one database in a window)
 */
#define STALE_LOG_INTERVAL_S	10
#define STALE_LOG_NAMES			64

#define STATS_TRANCHE_NAME		"dlock stats"

/* How a lease that is no longer live ended, as remembered */
typedef enum PastEnd
{
	PAST_RELEASED,
	PAST_FORCE_RELEASED,
	PAST_EXPIRED,
	PAST_SESSION_ENDED
} PastEnd;

typedef struct PastLease
{
	int64		token;			/* 0: empty slot */
	TimestampTz ended_at;		/* for PAST_SESSION_ENDED: when it was noticed */
	PastEnd		how;
} PastLease;

/* Hash key; memset before use, since the padding is hashed too */
typedef struct StatsKey
{
	Oid			dbid;
	uint64		name_hash;
} StatsKey;

typedef struct StatsEntry
{
	StatsKey	key;			/* hash key: must be first */
	slock_t		mutex;			/* protects everything below but the name */
	double		usage;
	TimestampTz since;			/* when the entry was made */
	int64		counts[DLOCK_STAT_NUM_EVENTS];
	double		wait_total_ms;
	double		wait_max_ms;
	TimestampTz last_grant_at;	/* 0: none */
	int64		last_lost_token;	/* newest token counted as expired or
									 * session_ended, so each is counted once */
	PastLease	past[STATS_PAST_LEASES];
	int			past_next;
	int			name_len;		/* set once, when made */
	char		name[DLOCK_MAX_NAME_BYTES];
} StatsEntry;

/* When a name's stale-fence line was last logged, and what was not since */
typedef struct StaleLogSlot
{
	Oid			dbid;
	uint64		name_hash;
	TimestampTz logged_at;		/* 0: a free slot */
	TimestampTz quiet_until;	/* the database logs no line before this
								 * (StaleLogAdmit); 0: none */
	int64		unlogged;		/* stale checks of the name not logged since */
} StaleLogSlot;

typedef struct StaleLog
{
	int64		unlogged_others;	/* not logged, and no longer in a slot:
									 * every slot was busy, or the name's
									 * slot was given to another name */
	StaleLogSlot slot[STALE_LOG_NAMES];
} StaleLog;

typedef struct StatsShared
{
	LWLock	   *lock;			/* the hash table */
	LWLock	   *log_lock;		/* stale_log */
	StaleLog	stale_log;
} StatsShared;

/* GUCs (defined in dlock.c) */
bool		dlock_stats_enabled = true;
int			dlock_stats_max = 1000;
bool		dlock_log_stale_fences = true;

/* Preloaded, attached and dlock.stats on: the one branch of every call */
bool		dlock_stats_counting = false;

static StatsShared *Stats = NULL;
static HTAB *StatsHash = NULL;

/* This backend's own rate limit of the stale-fence line, when not preloaded */
static StaleLog LocalStaleLog;

static Size
StatsShmemSize(void)
{
	return add_size(MAXALIGN(sizeof(StatsShared)),
					hash_estimate_size(dlock_stats_max, sizeof(StatsEntry)));
}

/*
 * DlockStatsShmemRequest - reserve the statistics' shared memory (dlock.c,
 * while the module is preloaded)
 */
void
DlockStatsShmemRequest(void)
{
	RequestAddinShmemSpace(StatsShmemSize());
	RequestNamedLWLockTranche(STATS_TRANCHE_NAME, 2);
}

/*
 * DlockStatsShmemInit - create or attach to it (dlock.c, holding
 * AddinShmemInitLock)
 */
void
DlockStatsShmemInit(void)
{
	bool		found;
	HASHCTL		info;

	Stats = ShmemInitStruct("dlock stats", sizeof(StatsShared), &found);
	if (!found)
	{
		LWLockPadded *locks = GetNamedLWLockTranche(STATS_TRANCHE_NAME);

		Stats->lock = &locks[0].lock;
		Stats->log_lock = &locks[1].lock;
		memset(&Stats->stale_log, 0, sizeof(StaleLog));
	}
	info.keysize = sizeof(StatsKey);
	info.entrysize = sizeof(StatsEntry);
	StatsHash = ShmemInitHash("dlock stats hash",
							  dlock_stats_max, dlock_stats_max,
							  &info, HASH_ELEM | HASH_BLOBS);
	dlock_stats_counting = dlock_stats_enabled;
}

/*
 * DlockStatsEnabledAssign - assign hook of dlock.stats
 */
void
DlockStatsEnabledAssign(bool newval, void *extra pg_attribute_unused())
{
	dlock_stats_counting = newval && StatsHash != NULL;
}

/* An entry and its usage, as eviction sees them */
typedef struct StatsVictim
{
	double		usage;
	StatsEntry *entry;
} StatsVictim;

/*
 * The entries of one database, as eviction counts them (or its slots in
 * their window, as StaleLogAdmit counts them)
 */
typedef struct StatsDbCount
{
	Oid			dbid;			/* hash key: must be first */
	int			entries;
} StatsDbCount;

/*
 * SelectLeastUsed - reorder v[0..n) so that its k (1 <= k <= n) least used
 * entries come first, in no particular order (quickselect: linear on
 * average, where a sort of every entry would cost n log n on each pass)
 */
static void
SelectLeastUsed(StatsVictim *v, int n, int k)
{
	int			lo = 0;
	int			hi = n - 1;

	while (lo < hi)
	{
		double		pivot = v[lo + (hi - lo) / 2].usage;
		int			i = lo;
		int			j = hi;

		/* Hoare partition: v[lo..j] <= pivot <= v[i..hi] */
		while (i <= j)
		{
			while (v[i].usage < pivot)
				i++;
			while (v[j].usage > pivot)
				j--;
			if (i <= j)
			{
				StatsVictim tmp = v[i];

				v[i++] = v[j];
				v[j--] = tmp;
			}
		}
		if (k - 1 <= j)
			hi = j;
		else if (k - 1 >= i)
			lo = i;
		else
			break;				/* v[j+1..i-1] all equal the pivot */
	}
}

/*
 * StatsEvict - make room for an entry of database dbid: age every entry,
 * then remove the least active among the entries of the databases over
 * their share (see the header comment); the caller holds the lock
 * exclusively
 */
static void
StatsEvict(Oid dbid)
{
	HASH_SEQ_STATUS seq;
	HASHCTL		ctl;
	HTAB	   *dbs;
	StatsDbCount *db;
	StatsVictim *v;
	StatsEntry *entry;
	int			n = 0;
	int			ndbs;
	int			share;
	int			own;
	int			excess = 0;
	int			ncand = 0;
	int			nvictims;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(StatsDbCount);
	ctl.hcxt = CurrentMemoryContext;
	dbs = hash_create("dlock stats eviction", 16, &ctl,
					  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	v = palloc(hash_get_num_entries(StatsHash) * sizeof(StatsVictim));
	hash_seq_init(&seq, StatsHash);
	db = NULL;
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		/* Exclusive lock: no one counts meanwhile, the spinlock is not needed */
		entry->usage *= STATS_USAGE_DECAY;
		v[n].usage = entry->usage;
		v[n++].entry = entry;

		/*
		 * Most entries are of the database the previous one was of (often
		 * there is one): look the count up only when the database changes
		 * (dynahash entries do not move)
		 */
		if (db == NULL || db->dbid != entry->key.dbid)
		{
			bool		found;

			db = hash_search(dbs, &entry->key.dbid, HASH_ENTER, &found);
			if (!found)
				db->entries = 0;
		}
		db->entries++;
	}

	/* The share of each database, the one making the entry included */
	db = hash_search(dbs, &dbid, HASH_FIND, NULL);
	own = db != NULL ? db->entries : 0;
	ndbs = hash_get_num_entries(dbs) + (db == NULL ? 1 : 0);
	share = Max(1, dlock_stats_max / ndbs);

	/*
	 * The candidates go first in v.  A full table with dbid under its share
	 * has some database over its share, or the sum would be short of full;
	 * the loop below still falls back to every entry rather than rely on it.
	 */
	db = NULL;
	for (int i = 0; i < n; i++)
	{
		Oid			owner = v[i].entry->key.dbid;
		bool		candidate;

		if (own >= share)
			candidate = (owner == dbid);
		else
		{
			if (db == NULL || db->dbid != owner)
				db = hash_search(dbs, &owner, HASH_FIND, NULL);
			candidate = (db->entries > share);
		}
		if (candidate)
		{
			StatsVictim tmp = v[ncand];

			v[ncand++] = v[i];
			v[i] = tmp;
		}
	}
	if (own < share)
	{
		hash_seq_init(&seq, dbs);
		while ((db = hash_seq_search(&seq)) != NULL)
			excess += Max(0, db->entries - share);
	}
	if (ncand == 0)
		ncand = n;

	nvictims = Max(1, ncand * STATS_EVICT_PERCENT / 100);
	if (own < share && excess > 0)
		nvictims = Min(nvictims, excess);
	nvictims = Min(nvictims, ncand);
	if (nvictims > 0)
		SelectLeastUsed(v, ncand, nvictims);
	for (int i = 0; i < nvictims; i++)
		hash_search(StatsHash, &v[i].entry->key, HASH_REMOVE, NULL);
	pfree(v);
	hash_destroy(dbs);
}

/*
 * StatsEntryFor - the entry of a name in this database, made if create and
 * missing (create only for a name known to have rows: see the header
 * comment); NULL when there is none, or on a 64-bit hash collision with
 * another name (its events are not counted).  Returns with the lock held
 * (shared, or exclusive when the entry was just made); the caller releases
 * it.
 */
static StatsEntry *
StatsEntryFor(const LeaseName *name, bool create)
{
	StatsKey	key;
	StatsEntry *entry;
	bool		found;

	memset(&key, 0, sizeof(key));
	key.dbid = MyDatabaseId;
	key.name_hash = name->hash;

	LWLockAcquire(Stats->lock, LW_SHARED);
	entry = hash_search(StatsHash, &key, HASH_FIND, NULL);
	if (entry == NULL && create)
	{
		LWLockRelease(Stats->lock);
		LWLockAcquire(Stats->lock, LW_EXCLUSIVE);
		entry = hash_search(StatsHash, &key, HASH_FIND, NULL);
		if (entry == NULL)
		{
			if (hash_get_num_entries(StatsHash) >= dlock_stats_max)
				StatsEvict(MyDatabaseId);
			entry = hash_search(StatsHash, &key, HASH_ENTER, &found);
			Assert(!found);
			memset((char *) entry + sizeof(StatsKey), 0,
				   sizeof(StatsEntry) - sizeof(StatsKey));
			SpinLockInit(&entry->mutex);
			entry->usage = 1.0;
			entry->since = GetCurrentTimestamp();
			entry->name_len = name->len;
			memcpy(entry->name, name->data, name->len);
		}
		/* Keep the exclusive lock: the caller releases it either way */
	}
	if (entry != NULL &&
		(entry->name_len != name->len ||
		 memcmp(entry->name, name->data, name->len) != 0))
		entry = NULL;
	return entry;
}

/*
 * EventShowsRows - whether an event can only happen to a name that has rows
 * in dlock.lease_state; the other events count only into existing entries
 */
static bool
EventShowsRows(DlockStatsEvent event)
{
	switch (event)
	{
		case DLOCK_STAT_GRANT:
		case DLOCK_STAT_RENEWAL:
		case DLOCK_STAT_RELEASE:
		case DLOCK_STAT_FORCE_RELEASE:
		case DLOCK_STAT_EXPIRED:
		case DLOCK_STAT_SESSION_ENDED:
		case DLOCK_STAT_FENCE_OK:
			return true;
		case DLOCK_STAT_REFUSAL:
		case DLOCK_STAT_WAIT:
		case DLOCK_STAT_TIMEOUT:
		case DLOCK_STAT_FENCE_REFUSED:
		case DLOCK_STAT_NUM_EVENTS:
			break;
	}
	return false;
}

/*
 * DlockStatsCountEvent - count one event of a name (DlockStatsCount); an
 * entry is made only for the events that show the name has rows
 */
void
DlockStatsCountEvent(const LeaseName *name, DlockStatsEvent event)
{
	DlockStatsCountRead(name, event, EventShowsRows(event));
}

/*
 * DlockStatsCountRead - count one event of a name whose caller read the
 * name's rows: has_rows says whether it has any (DlockStatsCountKnown)
 */
void
DlockStatsCountRead(const LeaseName *name, DlockStatsEvent event, bool has_rows)
{
	StatsEntry *entry = StatsEntryFor(name, has_rows);

	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		entry->counts[event]++;
		entry->usage += 1.0;
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(Stats->lock);
}

/*
 * DlockStatsWaitEnded - an acquire() that waited got the lease or timed
 * out: add its wait, from start until now, to the name's entry if it has
 * one (a wait does not show that the name has rows; a granted one made the
 * entry by its grant)
 */
void
DlockStatsWaitEnded(const LeaseName *name, TimestampTz start)
{
	double		ms = (double) (GetCurrentTimestamp() - start) / 1000.0;
	StatsEntry *entry = StatsEntryFor(name, false);

	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		/* Made during the wait (by its grant): the wait's start found none */
		if (entry->since > start)
			entry->counts[DLOCK_STAT_WAIT]++;
		entry->wait_total_ms += ms;
		entry->wait_max_ms = Max(entry->wait_max_ms, ms);
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(Stats->lock);
}

/*
 * LostEnd - how a row's lease ended when it ended without a release: by
 * expiry or with its holder's session.  False for a row with no such end
 * (none, still live, or released/force-released).  The caller holds the
 * name's lock (LeaseHolderAlive probes the session lock).
 */
static bool
LostEnd(const LeaseRow *row, TimestampTz now, PastEnd *how, TimestampTz *ended_at)
{
	LeaseClassification lease;

	if (!row->found || row->ended)
		return false;
	LeaseClassify(row, now, LeaseHolderAlive(row), &lease);
	switch (lease.state)
	{
		case LEASE_STATE_SESSION_ENDED:
			*how = PAST_SESSION_ENDED;
			*ended_at = now;
			return true;
		case LEASE_STATE_EXPIRED:
			*how = PAST_EXPIRED;
			*ended_at = row->expires_at;
			return true;
		default:
			return false;
	}
}

/* Count a lost lease once per token; the caller holds entry->mutex */
static void
CountLostOnce(StatsEntry *entry, int64 token, PastEnd how)
{
	if (token <= entry->last_lost_token)
		return;
	entry->last_lost_token = token;
	entry->counts[how == PAST_SESSION_ENDED ? DLOCK_STAT_SESSION_ENDED : DLOCK_STAT_EXPIRED]++;
	entry->usage += 1.0;
}

/*
 * DlockStatsGranted - a new token is being issued for name over old, the
 * row as it was (the caller holds the name's grant lock)
 *
 * Counts the grant, and an expiry or a session end that nobody had noticed
 * yet; remembers the superseded token and how its lease ended.
 */
void
DlockStatsGranted(const LeaseName *name, const LeaseRow *old, TimestampTz now)
{
	PastLease	past = {0, 0, PAST_RELEASED};
	bool		lost = false;
	StatsEntry *entry;

	if (old->found)
	{
		past.token = old->token;
		if (old->ended)
		{
			past.how = old->end_reason == LEASE_END_RELEASED ?
				PAST_RELEASED : PAST_FORCE_RELEASED;
			past.ended_at = old->ended_at;
		}
		else
			lost = LostEnd(old, now, &past.how, &past.ended_at);
	}

	entry = StatsEntryFor(name, true);
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		entry->counts[DLOCK_STAT_GRANT]++;
		entry->usage += 1.0;
		entry->last_grant_at = now;
		if (lost)
			CountLostOnce(entry, past.token, past.how);
		if (past.token != 0)
		{
			entry->past[entry->past_next] = past;
			entry->past_next = (entry->past_next + 1) % STATS_PAST_LEASES;
		}
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(Stats->lock);
}

/*
 * DlockStatsHolderLost - the holder of row's lease asked to renew or
 * release it and found it no longer live (the caller holds the name's lock)
 */
void
DlockStatsHolderLost(const LeaseName *name, const LeaseRow *row, TimestampTz now)
{
	PastEnd		how;
	TimestampTz ended_at;
	StatsEntry *entry;

	if (!LostEnd(row, now, &how, &ended_at))
		return;
	entry = StatsEntryFor(name, true);
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		CountLostOnce(entry, row->token, how);
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(Stats->lock);
}

/*
 * PastLeaseOf - what the statistics remember about an older token of name
 */
static bool
PastLeaseOf(const LeaseName *name, int64 token, PastLease *result)
{
	StatsEntry *entry;
	bool		found = false;

	if (StatsHash == NULL)
		return false;
	entry = StatsEntryFor(name, false);
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		for (int i = 0; i < STATS_PAST_LEASES; i++)
		{
			if (entry->past[i].token == token)
			{
				*result = entry->past[i];
				found = true;
				break;
			}
		}
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(Stats->lock);
	return found;
}

static const char *
PastEndVerb(PastEnd how)
{
	switch (how)
	{
		case PAST_RELEASED:
			return "was released";
		case PAST_FORCE_RELEASED:
			return "was force-released";
		case PAST_EXPIRED:
			return "expired";
		case PAST_SESSION_ENDED:
			break;
	}
	return "ended with its session";
}

/* Whether slot s holds a line logged less than the interval ago */
static inline bool
StaleSlotInWindow(const StaleLogSlot *s, TimestampTz now)
{
	/* A clock set back does not keep a slot until it catches up */
	return s->logged_at != 0 && now >= s->logged_at &&
		now - s->logged_at < STALE_LOG_INTERVAL_S * USECS_PER_SEC;
}

/*
 * StaleLogAdmit - whether a stale check of name may be logged now (see the
 * header comment for the limits); if so, *unlogged is how many checks of
 * the name were not logged since its previous line, and *unlogged_others
 * how many of names no longer in the table, since the previous line of any
 * name
 *
 * A slot in its window is never given to a name of the same database: that
 * would forget that its name was logged.  A database under its share may
 * take a slot in its window from a database over its share; that database
 * then forgets one of its names logged in the window, so it logs no line at
 * all until that name's window is over (quiet_until).  The slot taken is
 * the least recently logged of the databases over their share, so the
 * slots its database keeps stay in their window at least that long, and
 * they carry quiet_until until it has passed.
 */
static bool
StaleLogAdmit(const LeaseName *name, int64 *unlogged, int64 *unlogged_others)
{
	StaleLog   *log = Stats != NULL ? &Stats->stale_log : &LocalStaleLog;
	StaleLogSlot *slot = NULL;
	StaleLogSlot *free_slot = NULL;
	TimestampTz now;
	TimestampTz quiet_until = 0;
	const TimestampTz interval = STALE_LOG_INTERVAL_S * USECS_PER_SEC;
	bool		quiet;
	bool		admit;

	/* Slots in their window, per database (at most one database a slot) */
	StatsDbCount dbs[STALE_LOG_NAMES];
	int			ndbs = 0;
	int			own = 0;

	if (Stats != NULL)
		LWLockAcquire(Stats->log_lock, LW_EXCLUSIVE);

	/*
	 * Read under the lock, so that the times written into the slots grow in
	 * the order the backends take it: a time read before another backend's
	 * later one would look like a clock set back
	 */
	now = GetCurrentTimestamp();

	for (int i = 0; i < STALE_LOG_NAMES; i++)
	{
		StaleLogSlot *s = &log->slot[i];

		if (s->logged_at == 0)
		{
			if (free_slot == NULL || free_slot->logged_at != 0)
				free_slot = s;
			continue;
		}
		if (s->dbid == MyDatabaseId)
		{
			if (s->name_hash == name->hash)
				slot = s;
			quiet_until = Max(quiet_until, s->quiet_until);
		}
		if (StaleSlotInWindow(s, now))
		{
			int			d = 0;

			while (d < ndbs && dbs[d].dbid != s->dbid)
				d++;
			if (d == ndbs)
			{
				dbs[ndbs].dbid = s->dbid;
				dbs[ndbs++].entries = 0;
			}
			dbs[d].entries++;
			if (s->dbid == MyDatabaseId)
				own++;
		}
		else if (free_slot == NULL ||
				 (free_slot->logged_at != 0 && s->logged_at < free_slot->logged_at))
			free_slot = s;		/* the least recently logged */
	}

	/* As for the slots, a clock set back ends the quiet time */
	quiet = quiet_until != 0 && now < quiet_until && quiet_until - now <= interval;

	if (slot != NULL)
	{
		if (StaleSlotInWindow(slot, now) || quiet)
		{
			slot->unlogged++;
			slot = NULL;
		}
	}
	else
	{
		/*
		 * A new name: the free slot least recently logged; with none, every
		 * slot is in its window, and a database under its share takes the
		 * least recently logged of the databases over theirs
		 */
		if (!quiet && free_slot == NULL)
		{
			int			share = Max(1, STALE_LOG_NAMES / (ndbs + (own == 0 ? 1 : 0)));

			if (own < share)
			{
				for (int i = 0; i < STALE_LOG_NAMES; i++)
				{
					StaleLogSlot *s = &log->slot[i];
					int			d = 0;

					while (d < ndbs && dbs[d].dbid != s->dbid)
						d++;
					if (d < ndbs && dbs[d].entries > share &&
						(free_slot == NULL || s->logged_at < free_slot->logged_at))
						free_slot = s;
				}
			}

			/*
			 * Its database forgets the name logged there: it stays quiet
			 * until that name's window is over, and every slot it keeps
			 * (all logged later, so in their window as long) says so
			 */
			if (free_slot != NULL)
			{
				Oid			victim_db = free_slot->dbid;
				TimestampTz victim_quiet = free_slot->logged_at + interval;

				for (int i = 0; i < STALE_LOG_NAMES; i++)
					if (log->slot[i].dbid == victim_db)
						victim_quiet = Max(victim_quiet, log->slot[i].quiet_until);
				for (int i = 0; i < STALE_LOG_NAMES; i++)
					if (log->slot[i].dbid == victim_db)
						log->slot[i].quiet_until = victim_quiet;
			}
		}
		if (quiet || free_slot == NULL)
			log->unlogged_others++;
		else
		{
			slot = free_slot;
			log->unlogged_others += slot->unlogged;
			slot->dbid = MyDatabaseId;
			slot->name_hash = name->hash;
			slot->quiet_until = 0;
			slot->unlogged = 0;
		}
	}

	admit = slot != NULL;
	if (admit)
	{
		*unlogged = slot->unlogged;
		*unlogged_others = log->unlogged_others;
		slot->logged_at = now;
		slot->unlogged = 0;
		log->unlogged_others = 0;
	}

	if (Stats != NULL)
		LWLockRelease(Stats->log_lock);
	return admit;
}

/*
 * StaleFenceReport - fence(name, token) returned false; log it when token is
 * known to have been granted for name, at the rate StaleLogAdmit allows
 *
 * row is the name's row, read under the name's lock.  The rule:
 *	- token equal to the row's token (whose lease is not live): logged, with
 *	  how and when that lease ended;
 *	- an older token: logged only if the statistics remember it as one of
 *	  the last superseded tokens of this name (they record the token of the
 *	  row each grant replaces, a committed fact).  Tokens are database-wide,
 *	  so an older token the statistics do not remember may never have been
 *	  this name's: it is not logged;
 *	- a token newer than the row's, or a name never granted: never logged.
 *
 * The line says what is known: fence() was asked about a stale token and
 * answered false.  Whether that answer kept a write from happening depends
 * on the query around the call, which fence() cannot see, so the line does
 * not say so.  It is one line: the statement and context are left out, so
 * that a flood of stale checks costs the log one line per name and window.
 */
void
StaleFenceReport(const LeaseName *name, int64 token, const LeaseRow *row,
				 TimestampTz now)
{
	PastLease	past;
	char		current[64];
	char		ended[80];
	char		unlogged_text[128];
	int64		unlogged;
	int64		unlogged_others;

	if (!row->found || token > row->token)
		return;

	if (token == row->token)
	{
		past.token = token;
		if (row->ended)
		{
			past.how = row->end_reason == LEASE_END_RELEASED ?
				PAST_RELEASED : PAST_FORCE_RELEASED;
			past.ended_at = row->ended_at;
		}
		else if (!LostEnd(row, now, &past.how, &past.ended_at))
			return;				/* live after all: not stale */
		strlcpy(current, "no live lease", sizeof(current));
	}
	else
	{
		if (!PastLeaseOf(name, token, &past))
			return;
		snprintf(current, sizeof(current), "current token " INT64_FORMAT, row->token);
	}

	if (!StaleLogAdmit(name, &unlogged, &unlogged_others))
		return;

	if (past.how == PAST_SESSION_ENDED)
		snprintf(ended, sizeof(ended), "ended with its session (noticed %.1f s ago)",
				 (double) (now - past.ended_at) / USECS_PER_SEC);
	else
		snprintf(ended, sizeof(ended), "%s %.1f s ago", PastEndVerb(past.how),
				 (double) (now - past.ended_at) / USECS_PER_SEC);

	if (unlogged > 0 && unlogged_others > 0)
		snprintf(unlogged_text, sizeof(unlogged_text),
				 "; stale checks not logged meanwhile: " INT64_FORMAT " of this lease, " INT64_FORMAT " of other leases",
				 unlogged, unlogged_others);
	else if (unlogged > 0)
		snprintf(unlogged_text, sizeof(unlogged_text),
				 "; stale checks not logged meanwhile: " INT64_FORMAT " of this lease",
				 unlogged);
	else if (unlogged_others > 0)
		snprintf(unlogged_text, sizeof(unlogged_text),
				 "; stale checks not logged meanwhile: " INT64_FORMAT " of other leases",
				 unlogged_others);
	else
		unlogged_text[0] = '\0';

	ereport(LOG,
			(errmsg("dlock.fence() returned false for stale token " INT64_FORMAT " of lease \"%.*s\": %s, lease " INT64_FORMAT " %s%s",
					token, name->len, name->data, current, token, ended,
					unlogged_text),
			 errhidestmt(true),
			 errhidecontext(true)));
}

static void
RequireStats(void)
{
	if (StatsHash == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dlock statistics are not available"),
				 errdetail("The statistics live in shared memory, which dlock reserves only when the server loads it at start."),
				 errhint("Add dlock to shared_preload_libraries and restart the server.")));
}

#define STATS_COLUMNS	16

/*
 * dlock_stats - SQL function dlock.stats(): this database's entries
 */
Datum
dlock_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	tupdesc;
	Tuplestorestate *tupstore;
	MemoryContext oldcontext;
	HASH_SEQ_STATUS seq;
	StatsEntry *entry;

	RequireStats();

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		!(rsinfo->allowedModes & SFRM_Materialize))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (tupdesc->natts != STATS_COLUMNS)
		elog(ERROR, "dlock.stats() has %d columns, expected %d",
			 tupdesc->natts, STATS_COLUMNS);

	oldcontext = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	tupdesc = CreateTupleDescCopy(tupdesc);
	tupstore = tuplestore_begin_heap(true, false, work_mem);
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = tupstore;
	rsinfo->setDesc = tupdesc;
	MemoryContextSwitchTo(oldcontext);

	LWLockAcquire(Stats->lock, LW_SHARED);
	hash_seq_init(&seq, StatsHash);
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		StatsEntry	copy;
		Datum		values[STATS_COLUMNS];
		bool		nulls[STATS_COLUMNS];
		int			i = 0;

		if (entry->key.dbid != MyDatabaseId)
			continue;
		SpinLockAcquire(&entry->mutex);
		memcpy(&copy, entry, offsetof(StatsEntry, name));
		SpinLockRelease(&entry->mutex);

		memset(nulls, 0, sizeof(nulls));
		values[i++] = PointerGetDatum(cstring_to_text_with_len(entry->name,
															   entry->name_len));
		values[i++] = Int64GetDatum(copy.counts[DLOCK_STAT_GRANT]);
		values[i++] = Int64GetDatum(copy.counts[DLOCK_STAT_REFUSAL]);
		values[i++] = Int64GetDatum(copy.counts[DLOCK_STAT_RENEWAL]);
		values[i++] = Int64GetDatum(copy.counts[DLOCK_STAT_WAIT]);
		values[i++] = Float8GetDatum(copy.wait_total_ms);
		values[i++] = Float8GetDatum(copy.wait_max_ms);
		values[i++] = Int64GetDatum(copy.counts[DLOCK_STAT_TIMEOUT]);
		values[i++] = Int64GetDatum(copy.counts[DLOCK_STAT_RELEASE]);
		values[i++] = Int64GetDatum(copy.counts[DLOCK_STAT_EXPIRED]);
		values[i++] = Int64GetDatum(copy.counts[DLOCK_STAT_FORCE_RELEASE]);
		values[i++] = Int64GetDatum(copy.counts[DLOCK_STAT_SESSION_ENDED]);
		values[i++] = Int64GetDatum(copy.counts[DLOCK_STAT_FENCE_OK]);
		values[i++] = Int64GetDatum(copy.counts[DLOCK_STAT_FENCE_REFUSED]);
		if (copy.last_grant_at != 0)
			values[i] = TimestampTzGetDatum(copy.last_grant_at);
		else
			nulls[i] = true;
		i++;
		values[i++] = TimestampTzGetDatum(copy.since);
		Assert(i == STATS_COLUMNS);
		tuplestore_putvalues(tupstore, tupdesc, values, nulls);
	}
	LWLockRelease(Stats->lock);

	return (Datum) 0;
}

/*
 * dlock_stats_reset - SQL function dlock.stats_reset(): forget this
 * database's entries (EXECUTE is revoked from PUBLIC)
 */
Datum
dlock_stats_reset(PG_FUNCTION_ARGS)
{
	HASH_SEQ_STATUS seq;
	StatsEntry *entry;

	RequireStats();

	LWLockAcquire(Stats->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, StatsHash);
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		/* Removing the entry just returned is allowed during a scan */
		if (entry->key.dbid == MyDatabaseId)
			hash_search(StatsHash, &entry->key, HASH_REMOVE, NULL);
	}
	LWLockRelease(Stats->lock);

	PG_RETURN_VOID();
}

/*-------------------------------------------------------------------------
 *
 * places.c
 *	  Places in a name's queue that outlive the call, for clients that wait
 *	  by polling: dlock.try_acquire(..., queue => true).
 *
 * Behind a transaction pooler a client must not hold a server connection
 * while it waits, so it cannot wait in dlock.acquire().  Instead it polls
 * try_acquire with queue => true, and the server keeps its place in the
 * name's queue between polls, for ttl from its latest poll: the place
 * lapses if the client stops polling (it died, or gave up).  A client's
 * later polls may come through any backend, so a place belongs to no
 * backend: places live in shared memory (so queue => true needs dlock in
 * shared_preload_libraries), one slot each, in an array guarded by one
 * LWLock.  A place is identified by database, name (its lock-tag hash, as
 * the lock manager's queue is), owner and role.
 *
 * Places and the waiters of dlock.acquire() form one queue per name, in
 * arrival order.  Every arrival takes a number from one counter: a poller
 * when it first polls, an acquire() when it starts (a polling client that
 * switches to acquire() gives up its place: the lock manager's queue of
 * acquire() waiters cannot be reordered to let it in ahead).  acquire()
 * waiters keep queueing among themselves in the lock manager (waiting.c);
 * the one at its head also takes a head entry here, so that pollers see
 * it.  The rule for both kinds is the same: a name may be granted to the
 * live entry with the smallest number only.  While a place is first, the
 * name is kept for it: other pollers and try_acquire() are refused, and the
 * head of the acquire() queue waits, until the place is taken (its client
 * polls and is granted), given back (dlock.release by its owner), or
 * lapses.
 *
 * A head entry is removed when its acquire() stops waiting, also on error
 * (the (sub)transaction's abort) and at backend exit.  Taking a place off
 * the queue wakes the acquire() head, which may now be first.
 *
 * Two pools, so that no call of one role can be failed by another role's
 * places.  Head entries live apart from the pollers' places, MaxBackends of
 * them: a backend heads at most one queue at a time, so an acquire() always
 * finds one, however many places pollers keep.  The pollers' pool has
 * dlock.max_queue_places places, and each role may keep at most a quarter
 * of them (PLACES_ROLE_SHARE; at least one): a role at its share gets 53400
 * naming the share, and leaves the other three quarters to other roles.
 * Roles are the unit because places are cluster-wide and a role is what
 * the server knows of the client that polls; several roles at their share
 * can still take every place (53400 "all places are taken" for the next
 * poller of any role), which raising the setting answers.
 *
 * dlock.purge() asks PlaceWaitsFor() before deleting a name's rows: a name
 * that a live place waits for is kept, as a name with acquire() waiters is.
 *
 * Without shared_preload_libraries nothing here exists, and acquire() and
 * try_acquire() skip it; with it, an empty array costs them one atomic read.
 *
 * Invariants: I15 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/waiting/places.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "postmaster/autovacuum.h"
#include "replication/walsender.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "waiting/waiting.h"
#include "dlock_compat.h"

#define PLACES_TRANCHE_NAME "dlock places"

/* A role may keep at most 1/PLACES_ROLE_SHARE of the pollers' places */
#define PLACES_ROLE_SHARE	4

/* A poller's place (free when kind is PLACE_FREE) */
typedef enum PlaceKind
{
	PLACE_FREE = 0,
	PLACE_POLLER				/* try_acquire(queue => true) */
} PlaceKind;

typedef struct Place
{
	PlaceKind	kind;
	Oid			dbid;
	uint64		name_hash;
	uint64		arrival;
	TimestampTz lapse_at;		/* when the place lapses */
	Oid			role;			/* the role that polls */
	int			owner_len;
	char		owner[DLOCK_MAX_OWNER_BYTES];
} Place;

/* The entry of a backend that heads an acquire() queue (free when pid is 0) */
typedef struct HeadEntry
{
	int			pid;
	Oid			dbid;
	uint64		name_hash;
	uint64		arrival;
} HeadEntry;

typedef struct PlacesShared
{
	LWLock	   *lock;
	pg_atomic_uint64 next_arrival;
	pg_atomic_uint32 in_use;	/* places and head entries taken */
	int			size;			/* places in slots[] */
	int			nheads;			/* head entries after them */
	Place		slots[FLEXIBLE_ARRAY_MEMBER];
	/* HeadEntry heads[nheads] follows slots[size] */
} PlacesShared;

int			dlock_max_queue_places = 1000;	/* dlock.max_queue_places */

static PlacesShared *Places = NULL;
static HeadEntry *Heads = NULL;

/* This backend has a head entry (its index in Heads), or -1 */
static int	MyHeadSlot = -1;

/*
 * HeadEntries - how many backends can run SQL at once: MaxBackends, which
 * before PostgreSQL 15 is not computed yet when _PG_init requests the
 * memory, so it is computed the same way here
 */
static int
HeadEntries(void)
{
	if (MaxBackends > 0)
		return MaxBackends;
	return MaxConnections + autovacuum_max_workers + 1 +
		max_worker_processes + max_wal_senders;
}

static Size
PlacesSlotsSize(void)
{
	return add_size(offsetof(PlacesShared, slots),
					mul_size(dlock_max_queue_places, sizeof(Place)));
}

static Size
PlacesShmemSize(void)
{
	return add_size(PlacesSlotsSize(), mul_size(HeadEntries(), sizeof(HeadEntry)));
}

/*
 * PlacesShmemRequest - reserve the places' shared memory (dlock.c, while
 * the module is preloaded)
 */
void
PlacesShmemRequest(void)
{
	RequestAddinShmemSpace(PlacesShmemSize());
	RequestNamedLWLockTranche(PLACES_TRANCHE_NAME, 1);
}

/*
 * PlacesShmemInit - create or attach to it (dlock.c, holding
 * AddinShmemInitLock)
 */
void
PlacesShmemInit(void)
{
	bool		found;

	Places = ShmemInitStruct("dlock places", PlacesShmemSize(), &found);
	if (!found)
	{
		memset(Places, 0, PlacesShmemSize());
		Places->lock = &(GetNamedLWLockTranche(PLACES_TRANCHE_NAME))->lock;
		pg_atomic_init_u64(&Places->next_arrival, 1);
		pg_atomic_init_u32(&Places->in_use, 0);
		Places->size = dlock_max_queue_places;
		Places->nheads = HeadEntries();
	}
	Heads = (HeadEntry *) ((char *) Places + PlacesSlotsSize());
}

/* Remove this backend's head entry when it exits, however it exits */
static void
PlacesExit(int code pg_attribute_unused(), Datum arg pg_attribute_unused())
{
	PlaceHeadEnd();
}

/*
 * PlacesAvailable - whether places exist (dlock is preloaded)
 */
bool
PlacesAvailable(void)
{
	return Places != NULL;
}

/*
 * PlacesRequire - raise 55000 unless places exist
 */
void
PlacesRequire(void)
{
	if (Places == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("queue => true needs dlock in shared_preload_libraries"),
				 errdetail("Places in a queue are kept in shared memory between calls."),
				 errhint("Add dlock to shared_preload_libraries and restart the server, or wait with dlock.acquire().")));
}

/*
 * PlaceNewArrival - the next arrival number (0 when places do not exist)
 */
uint64
PlaceNewArrival(void)
{
	if (Places == NULL)
		return 0;
	return pg_atomic_fetch_add_u64(&Places->next_arrival, 1);
}

static inline bool
SlotIsName(const Place *p, const LeaseName *name)
{
	return p->kind != PLACE_FREE && p->dbid == MyDatabaseId && p->name_hash == name->hash;
}

static inline bool
SlotIsLive(const Place *p, TimestampTz now)
{
	return p->kind == PLACE_POLLER && p->lapse_at > now;
}

static inline bool
SlotIsOwners(const Place *p, const char *owner, int owner_len, Oid role)
{
	return p->kind == PLACE_POLLER && p->role == role && p->owner_len == owner_len &&
		memcmp(p->owner, owner, owner_len) == 0;
}

static inline bool
HeadIsName(const HeadEntry *h, const LeaseName *name)
{
	return h->pid != 0 && h->dbid == MyDatabaseId && h->name_hash == name->hash;
}

/* RoleShare - how many places one role may keep */
static int
RoleShare(void)
{
	return Max(Places->size / PLACES_ROLE_SHARE, 1);
}

static void
FreeSlot(Place *p)
{
	p->kind = PLACE_FREE;
	pg_atomic_fetch_sub_u32(&Places->in_use, 1);
}

/*
 * TakeSlot - a free slot for a place of role, reclaiming lapsed places;
 * 53400 when the role keeps its share already, or every place is taken
 * (caller holds the lock exclusively)
 */
static Place *
TakeSlot(TimestampTz now, Oid role)
{
	Place	   *free_slot = NULL;
	int			roles_places = 0;
	int			share = RoleShare();

	for (int i = 0; i < Places->size; i++)
	{
		Place	   *p = &Places->slots[i];

		if (p->kind == PLACE_POLLER && p->lapse_at <= now)
			FreeSlot(p);
		if (p->kind == PLACE_FREE && free_slot == NULL)
			free_slot = p;
		if (p->kind == PLACE_POLLER && p->role == role)
			roles_places++;
	}
	if (roles_places >= share)
	{
		const char *role_name;

		/* the name is looked up in the catalog: not while holding the lock */
		LWLockRelease(Places->lock);
		role_name = GetUserNameFromId(role, true);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many places in dlock's queues for role \"%s\"",
						role_name ? role_name : "?"),
				 errdetail("Role \"%s\" keeps %d places, its share: a quarter of dlock.max_queue_places (%d).",
						   role_name ? role_name : "?", roles_places, Places->size),
				 errhint("Give up places with dlock.release(name, owner) or let them lapse, or raise dlock.max_queue_places.")));
	}
	if (free_slot == NULL)
	{
		LWLockRelease(Places->lock);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many places in dlock's queues"),
				 errdetail("All %d places of dlock.max_queue_places are taken.", Places->size),
				 errhint("Raise dlock.max_queue_places.")));
	}
	pg_atomic_fetch_add_u32(&Places->in_use, 1);
	return free_slot;
}

/*
 * PlacePoll - keep the place of (owner, this role) in the name's queue for
 * ttl_us from now, making it if there is none; true when no live entry
 * arrived before it.  *head_seen: whether the head of the acquire() queue
 * has an entry (an acquire() head registers only once places exist, so
 * when the lock manager shows a head without one, that head came first).
 */
bool
PlacePoll(const LeaseName *name, const char *owner, int64 ttl_us, bool *head_seen)
{
	TimestampTz now = GetCurrentTimestamp();
	int			owner_len = strlen(owner);
	Oid			role = GetUserId();
	Place	   *mine = NULL;
	bool		first = true;

	PlacesRequire();
	LWLockAcquire(Places->lock, LW_EXCLUSIVE);
	for (int i = 0; i < Places->size; i++)
	{
		Place	   *p = &Places->slots[i];

		if (SlotIsName(p, name) && SlotIsOwners(p, owner, owner_len, role) &&
			p->lapse_at > now)
			mine = p;
	}
	if (mine == NULL)
	{
		mine = TakeSlot(now, role);
		mine->kind = PLACE_POLLER;
		mine->dbid = MyDatabaseId;
		mine->name_hash = name->hash;
		mine->arrival = pg_atomic_fetch_add_u64(&Places->next_arrival, 1);
		mine->role = role;
		mine->owner_len = owner_len;
		memcpy(mine->owner, owner, owner_len);
	}
	mine->lapse_at = ExpiryAfter(now, ttl_us);

	*head_seen = false;
	for (int i = 0; i < Places->size; i++)
	{
		Place	   *p = &Places->slots[i];

		if (p != mine && SlotIsName(p, name) && SlotIsLive(p, now) &&
			p->arrival < mine->arrival)
			first = false;
	}
	for (int i = 0; i < Places->nheads; i++)
	{
		HeadEntry  *h = &Heads[i];

		if (!HeadIsName(h, name))
			continue;
		*head_seen = true;
		if (h->arrival < mine->arrival)
			first = false;
	}
	LWLockRelease(Places->lock);
	return first;
}

/*
 * PlaceGiveBack - take the place of (owner, this role) off the name's
 * queue, if it has one (granted, or given up); wakes the head of the
 * acquire() queue, which may now be first
 */
bool
PlaceGiveBack(const LeaseName *name, const char *owner)
{
	int			owner_len = strlen(owner);
	Oid			role = GetUserId();
	bool		found = false;

	if (Places == NULL || pg_atomic_read_u32(&Places->in_use) == 0)
		return false;
	LWLockAcquire(Places->lock, LW_EXCLUSIVE);
	for (int i = 0; i < Places->size; i++)
	{
		Place	   *p = &Places->slots[i];

		if (SlotIsName(p, name) && SlotIsOwners(p, owner, owner_len, role))
		{
			found = found || p->lapse_at > GetCurrentTimestamp();
			FreeSlot(p);
		}
	}
	LWLockRelease(Places->lock);
	if (found)
		WakeQueueHead(name);
	return found;
}

/*
 * PlaceAhead - whether a live place (of a poller) that arrived before
 * arrival is in the name's queue (arrival 0: any live place); *until: when
 * the first of them lapses
 */
bool
PlaceAhead(const LeaseName *name, uint64 arrival, TimestampTz *until)
{
	TimestampTz now;
	bool		ahead = false;

	if (Places == NULL || pg_atomic_read_u32(&Places->in_use) == 0)
		return false;
	now = GetCurrentTimestamp();
	*until = DT_NOEND;
	LWLockAcquire(Places->lock, LW_SHARED);
	for (int i = 0; i < Places->size; i++)
	{
		Place	   *p = &Places->slots[i];

		if (SlotIsName(p, name) && SlotIsLive(p, now) &&
			(arrival == 0 || p->arrival < arrival))
		{
			ahead = true;
			*until = Min(*until, p->lapse_at);
		}
	}
	LWLockRelease(Places->lock);
	return ahead;
}

/*
 * PlaceWaitsFor - whether a live place, or the head of the acquire() queue,
 * waits for the name (dlock.purge() keeps such a name)
 */
bool
PlaceWaitsFor(const LeaseName *name)
{
	TimestampTz now;
	bool		waits = false;

	if (Places == NULL || pg_atomic_read_u32(&Places->in_use) == 0)
		return false;
	now = GetCurrentTimestamp();
	LWLockAcquire(Places->lock, LW_SHARED);
	for (int i = 0; i < Places->size && !waits; i++)
		waits = SlotIsName(&Places->slots[i], name) && SlotIsLive(&Places->slots[i], now);
	for (int i = 0; i < Places->nheads && !waits; i++)
		waits = HeadIsName(&Heads[i], name);
	LWLockRelease(Places->lock);
	return waits;
}

/*
 * PlaceHeadBegin - this backend heads the name's acquire() queue, with the
 * arrival number it took when it started; pollers now see it.  Only needed
 * once places exist: a poller that finds a head without an entry knows
 * that head came first.  Never fails for want of room: there is an entry
 * per backend.
 */
void
PlaceHeadBegin(const LeaseName *name, uint64 arrival)
{
	HeadEntry  *h = NULL;

	if (Places == NULL || MyHeadSlot >= 0 || pg_atomic_read_u32(&Places->in_use) == 0)
		return;
	LWLockAcquire(Places->lock, LW_EXCLUSIVE);
	for (int i = 0; i < Places->nheads && h == NULL; i++)
	{
		if (Heads[i].pid == 0)
			h = &Heads[i];
	}
	/* Cannot happen: an entry per backend, and a backend takes one at most */
	if (h == NULL)
	{
		LWLockRelease(Places->lock);
		return;
	}
	h->pid = MyProcPid;
	h->dbid = MyDatabaseId;
	h->name_hash = name->hash;
	h->arrival = arrival;
	pg_atomic_fetch_add_u32(&Places->in_use, 1);
	MyHeadSlot = h - Heads;
	LWLockRelease(Places->lock);

	/* once per backend: the exit of a waiting backend removes its entry */
	{
		static bool exit_registered = false;

		if (!exit_registered)
		{
			before_shmem_exit(PlacesExit, (Datum) 0);
			exit_registered = true;
		}
	}
}

/*
 * PlaceHeadEnd - this backend no longer heads a queue (granted, timed
 * out, or its (sub)transaction aborted)
 */
void
PlaceHeadEnd(void)
{
	if (Places == NULL || MyHeadSlot < 0)
		return;
	LWLockAcquire(Places->lock, LW_EXCLUSIVE);
	if (Heads[MyHeadSlot].pid == MyProcPid)
	{
		Heads[MyHeadSlot].pid = 0;
		pg_atomic_fetch_sub_u32(&Places->in_use, 1);
	}
	LWLockRelease(Places->lock);
	MyHeadSlot = -1;
}

/*
 * OidCompare - qsort() order of role OIDs
 */
static int
OidCompare(const void *a, const void *b)
{
	Oid			x = *(const Oid *) a;
	Oid			y = *(const Oid *) b;

	return (x > y) - (x < y);
}

/*
 * dlock_queue_places - how full the pollers' places are, server-wide:
 * the live places, the pool's size (dlock.max_queue_places), the most that
 * one role keeps, and a role's share; for monitoring, so that a pool near
 * its limit is seen before pollers get 53400
 */
PG_FUNCTION_INFO_V1(dlock_queue_places);

Datum
dlock_queue_places(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	Oid		   *roles;
	int			live = 0;
	int			fullest = 0;
	TimestampTz now = GetCurrentTimestamp();

	DlockCheckModuleVersion();
	if (Places == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dlock.queue_places() needs dlock in shared_preload_libraries"),
				 errdetail("Places in a queue are kept in shared memory between calls."),
				 errhint("Add dlock to shared_preload_libraries and restart the server.")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	roles = palloc(sizeof(Oid) * Max(Places->size, 1));
	LWLockAcquire(Places->lock, LW_SHARED);
	for (int i = 0; i < Places->size; i++)
	{
		if (SlotIsLive(&Places->slots[i], now))
			roles[live++] = Places->slots[i].role;
	}
	LWLockRelease(Places->lock);

	/* the most places of one role: the longest run of one OID, sorted */
	qsort(roles, live, sizeof(Oid), OidCompare);
	for (int i = 0, run = 0; i < live; i++)
	{
		run = (i > 0 && roles[i] == roles[i - 1]) ? run + 1 : 1;
		fullest = Max(fullest, run);
	}
	pfree(roles);

	values[0] = Int32GetDatum(live);
	values[1] = Int32GetDatum(Places->size);
	values[2] = Int32GetDatum(fullest);
	values[3] = Int32GetDatum(RoleShare());
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

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
 * the one at its head also takes a slot here, of kind PLACE_HEAD, so that
 * pollers see it.  The rule for both kinds is the same: a name may be
 * granted to the live entry with the smallest number only.  While a
 * place is first, the name is kept for it: other pollers and
 * try_acquire() are refused, and the head of the acquire() queue waits,
 * until the place is taken (its client polls and is granted), given back
 * (dlock.release by its owner), or lapses.
 *
 * A head entry is removed when its acquire() stops waiting, also on error
 * (the (sub)transaction's abort) and at backend exit.  Taking a place off
 * the queue wakes the acquire() head, which may now be first.
 *
 * Without shared_preload_libraries nothing here exists, and acquire() and
 * try_acquire() skip it; with it, an empty array costs them one atomic read.
 *
 * Invariants: I15 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/places.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "dlock.h"
#include "dlock_compat.h"

#define PLACES_TRANCHE_NAME "dlock places"

typedef enum PlaceKind
{
	PLACE_FREE = 0,
	PLACE_POLLER,				/* try_acquire(queue => true) */
	PLACE_HEAD					/* the head of the acquire() queue */
} PlaceKind;

typedef struct Place
{
	PlaceKind	kind;
	Oid			dbid;
	uint64		name_hash;
	uint64		arrival;
	TimestampTz lapse_at;		/* poller: when the place lapses */
	int			pid;			/* head: its backend */
	Oid			role;			/* poller: the role that polls */
	int			owner_len;
	char		owner[DLOCK_MAX_OWNER_BYTES];
} Place;

typedef struct PlacesShared
{
	LWLock	   *lock;
	pg_atomic_uint64 next_arrival;
	pg_atomic_uint32 in_use;	/* slots not free */
	int			size;
	Place		slots[FLEXIBLE_ARRAY_MEMBER];
} PlacesShared;

int			dlock_max_queue_places = 1000;	/* dlock.max_queue_places */

static PlacesShared *Places = NULL;

/* This backend has a head entry (its slot), or -1 */
static int	MyHeadSlot = -1;

static Size
PlacesShmemSize(void)
{
	return add_size(offsetof(PlacesShared, slots),
					mul_size(dlock_max_queue_places, sizeof(Place)));
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
	}
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
	return p->kind == PLACE_HEAD || (p->kind == PLACE_POLLER && p->lapse_at > now);
}

static inline bool
SlotIsOwners(const Place *p, const char *owner, int owner_len, Oid role)
{
	return p->kind == PLACE_POLLER && p->role == role && p->owner_len == owner_len &&
		memcmp(p->owner, owner, owner_len) == 0;
}

static void
FreeSlot(Place *p)
{
	p->kind = PLACE_FREE;
	pg_atomic_fetch_sub_u32(&Places->in_use, 1);
}

/*
 * TakeSlot - a free slot, reclaiming lapsed places (caller holds the lock
 * exclusively)
 */
static Place *
TakeSlot(TimestampTz now)
{
	Place	   *free_slot = NULL;

	for (int i = 0; i < Places->size; i++)
	{
		Place	   *p = &Places->slots[i];

		if (p->kind == PLACE_POLLER && p->lapse_at <= now)
			FreeSlot(p);
		if (p->kind == PLACE_FREE && free_slot == NULL)
			free_slot = p;
	}
	if (free_slot == NULL)
	{
		LWLockRelease(Places->lock);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many places in dlock's queues"),
				 errdetail("All %d places are taken.", Places->size),
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
		mine = TakeSlot(now);
		mine->kind = PLACE_POLLER;
		mine->dbid = MyDatabaseId;
		mine->name_hash = name->hash;
		mine->arrival = pg_atomic_fetch_add_u64(&Places->next_arrival, 1);
		mine->pid = 0;
		mine->role = role;
		mine->owner_len = owner_len;
		memcpy(mine->owner, owner, owner_len);
	}
	mine->lapse_at = ExpiryAfter(now, ttl_us);

	*head_seen = false;
	for (int i = 0; i < Places->size; i++)
	{
		Place	   *p = &Places->slots[i];

		if (p == mine || !SlotIsName(p, name) || !SlotIsLive(p, now))
			continue;
		if (p->kind == PLACE_HEAD)
			*head_seen = true;
		if (p->arrival < mine->arrival)
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

		if (SlotIsName(p, name) && p->kind == PLACE_POLLER && SlotIsLive(p, now) &&
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
 * PlaceHeadBegin - this backend heads the name's acquire() queue, with the
 * arrival number it took when it started; pollers now see it.  Only needed
 * once places exist: a poller that finds a head without an entry knows
 * that head came first.
 */
void
PlaceHeadBegin(const LeaseName *name, uint64 arrival)
{
	Place	   *p;

	if (Places == NULL || MyHeadSlot >= 0 || pg_atomic_read_u32(&Places->in_use) == 0)
		return;
	LWLockAcquire(Places->lock, LW_EXCLUSIVE);
	p = TakeSlot(GetCurrentTimestamp());
	p->kind = PLACE_HEAD;
	p->dbid = MyDatabaseId;
	p->name_hash = name->hash;
	p->arrival = arrival;
	p->lapse_at = DT_NOEND;
	p->pid = MyProcPid;
	p->role = InvalidOid;
	p->owner_len = 0;
	MyHeadSlot = p - Places->slots;
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
	if (Places->slots[MyHeadSlot].kind == PLACE_HEAD &&
		Places->slots[MyHeadSlot].pid == MyProcPid)
		FreeSlot(&Places->slots[MyHeadSlot]);
	LWLockRelease(Places->lock);
	MyHeadSlot = -1;
}

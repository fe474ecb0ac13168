/*-------------------------------------------------------------------------
 *
 * fence.c
 *	  dlock.fence(): the token check for the WHERE clause of guarded writes.
 *
 * fence(name, token) is true iff token is a live lease of name, of any
 * kind.  The first true answer in a transaction pins the token: it takes
 * the token's pin lock (PinLockTag: the name's lock for an exclusive lease)
 * in DLOCK_FENCE_LOCKMODE, owned by the top-level transaction, so no grant
 * that conflicts with that lease can commit until this transaction ends:
 * the guarded write and any such grant are strictly ordered, whatever the
 * lease's TTL does meanwhile.  A pinned exclusive token holds off every
 * grant of the name, a pinned shared token the exclusive grants, a pinned
 * permit the grant of its slot (lease_model.c).
 *
 * Answers are cached for the rest of the transaction, keyed by name and
 * token, because an UPDATE calls fence once per row.  A cached answer stays
 * right: a true answer is pinned by the lock, and a false one can never turn
 * true (an ended or expired lease is not revived, a superseded token never
 * comes back).  The exceptions reset the cache:
 *	- this backend itself grants or ends a lease (FenceCacheLeaseChanged);
 *	- a subtransaction that did so rolls back, undoing the change
 *	  (FenceCacheAtSubAbort);
 *	- dlock's relations are replaced (DROP and CREATE EXTENSION in one
 *	  transaction), which LeaseStoreGeneration() tells.
 *
 * True answers are bounded by the lock table (each holds a lock on its
 * name).  False answers are cached only up to FENCE_CACHE_MAX_FALSE, so a
 * transaction that checks a million stale tokens does not hold a million
 * entries; beyond that only the previous call's answer is kept.
 *
 * A false answer releases the lock it took, so a stale holder's refused
 * write does not hold up the next grant.  Each decision (not each cached
 * answer) is counted in the statistics, for names that have rows, and a
 * false answer for a token known to have been granted for the name is
 * logged, rate-limited per name (stats.c).
 *
 * Invariants: I3, I4 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/engine/fence.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "engine/engine.h"
#include "dlock_compat.h"

PG_FUNCTION_INFO_V1(dlock_fence);

/* False answers kept in the cache at most; see the header comment */
#define FENCE_CACHE_MAX_FALSE	1024

typedef struct FenceKey
{
	uint64		name_hash;
	int64		token;
} FenceKey;

typedef struct FenceEntry
{
	FenceKey	key;			/* hash key: must be first */
	bool		result;
	int			name_len;
	char	   *name;			/* in FenceCacheContext */
} FenceEntry;

/* All of it lives in a child of TopTransactionContext */
static MemoryContext FenceCacheContext = NULL;
static HTAB *FenceCache = NULL;
static int	FenceCacheFalseEntries = 0;
static uint64 FenceCacheGeneration = 0; /* LeaseStoreGeneration() it is for */

/*
 * The newest subtransaction in which this backend changed a lease since the
 * cache was last reset, or InvalidSubTransactionId
 */
static SubTransactionId FenceCacheChangeSubid = InvalidSubTransactionId;

/* The previous call's answer, for the per-row fast path */
static struct
{
	bool		valid;
	bool		result;
	int64		token;
	int			name_len;
	char		name[DLOCK_MAX_NAME_BYTES];
}			LastFence;

static inline bool
FenceEntryMatches(const FenceEntry *entry, const LeaseName *name, int64 token)
{
	return entry->key.token == token &&
		entry->name_len == name->len &&
		entry->key.name_hash == name->hash &&
		memcmp(entry->name, name->data, name->len) == 0;
}

/*
 * FenceCacheForget - drop the cache pointers; the memory goes with the
 * transaction's memory context
 */
static void
FenceCacheForget(void)
{
	FenceCacheContext = NULL;
	FenceCache = NULL;
	FenceCacheFalseEntries = 0;
	LastFence.valid = false;
}

/*
 * FenceCacheReset - forget every cached answer of this transaction
 *
 * Locks already taken are kept: they only make the ordering stricter.
 */
static void
FenceCacheReset(void)
{
	if (FenceCacheContext != NULL)
		MemoryContextDelete(FenceCacheContext);
	FenceCacheForget();
}

/*
 * FenceCacheLeaseChanged - this backend changed a lease, which can change
 * the answer for a (name, token) pair it asked about before
 */
void
FenceCacheLeaseChanged(void)
{
	FenceCacheReset();
	FenceCacheChangeSubid = GetCurrentSubTransactionId();
}

/*
 * FenceCacheAtEOXact - the transaction ended (dispatcher, dlock.c)
 */
void
FenceCacheAtEOXact(void)
{
	FenceCacheForget();
	FenceCacheChangeSubid = InvalidSubTransactionId;
}

/*
 * FenceCacheAtSubAbort - a subtransaction rolled back (dispatcher, dlock.c)
 *
 * If it, or one of its children, changed a lease, answers given since then
 * describe a change that is now undone.  The parent may have changed leases
 * too, before: it counts as the newest changer from now on.
 */
void
FenceCacheAtSubAbort(SubTransactionId mySubid, SubTransactionId parentSubid)
{
	if (FenceCacheChangeSubid != InvalidSubTransactionId &&
		FenceCacheChangeSubid >= mySubid)
	{
		FenceCacheReset();
		FenceCacheChangeSubid = parentSubid;
	}
}

static FenceEntry *
FenceCacheLookup(const LeaseName *name, int64 token)
{
	FenceKey	key;
	FenceEntry *entry;

	if (FenceCache == NULL)
		return NULL;
	key.name_hash = name->hash;
	key.token = token;
	entry = hash_search(FenceCache, &key, HASH_FIND, NULL);
	if (entry != NULL && FenceEntryMatches(entry, name, token))
		return entry;
	return NULL;
}

static void
FenceCacheStore(const LeaseName *name, int64 token, bool result)
{
	FenceKey	key;
	FenceEntry *entry;
	bool		found;

	if (!result && FenceCacheFalseEntries >= FENCE_CACHE_MAX_FALSE)
		return;

	if (FenceCache == NULL)
	{
		HASHCTL		ctl;

		FenceCacheContext = AllocSetContextCreate(TopTransactionContext,
												  "dlock fence cache",
												  ALLOCSET_SMALL_SIZES);
		ctl.keysize = sizeof(FenceKey);
		ctl.entrysize = sizeof(FenceEntry);
		ctl.hcxt = FenceCacheContext;
		FenceCache = hash_create("dlock fence cache", 16, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		FenceCacheGeneration = LeaseStoreGeneration();
	}

	key.name_hash = name->hash;
	key.token = token;
	entry = hash_search(FenceCache, &key, HASH_ENTER, &found);
	/* On a 64-bit hash collision the newer name takes the slot */
	if (found)
	{
		if (!entry->result)
			FenceCacheFalseEntries--;
		pfree(entry->name);
	}
	if (!result)
		FenceCacheFalseEntries++;
	entry->result = result;
	entry->name_len = name->len;
	entry->name = MemoryContextAlloc(FenceCacheContext, name->len);
	memcpy(entry->name, name->data, name->len);
}

/*
 * FenceCheck - decide, without the cache, whether token is name's live grant
 */
static void
FenceErrorContext(void *arg)
{
	const LeaseName *name = (const LeaseName *) arg;

	errcontext("checking the fence of lease \"%.*s\"", name->len, name->data);
}

static bool
FenceCheck(const LeaseName *name, int64 token)
{
	LeaseStore	store;
	LeaseRow	row;
	TimestampTz now;
	bool		result;
	ErrorContextCallback fencecontext;
	LOCKTAG		pin;

	/*
	 * Waits for a grant of this name that is being committed right now; an
	 * error in that wait (a deadlock, lock_timeout) names the lease
	 */
	fencecontext.callback = FenceErrorContext;
	fencecontext.arg = (void *) name;
	fencecontext.previous = error_context_stack;
	error_context_stack = &fencecontext;
	NameLockAcquireForTransaction(name, DLOCK_FENCE_LOCKMODE);
	error_context_stack = fencecontext.previous;

	LeaseStoreOpen(&store, AccessShareLock);
	result = LeaseStoreFetchToken(&store, name, token, &row);
	now = GetCurrentTimestamp();
	result = result && LeaseIsLive(&row, now);

	/*
	 * The name's lock pins the token of slot 0.  A live token of another
	 * slot (a shared lease, a permit) is pinned by its own lock instead,
	 * and the name's lock given back, so that it holds up only the grants
	 * that conflict with it.  The row is read again under that pin: a grant
	 * of the slot may have committed before it was taken.
	 */
	if (result && row.slot != 0)
	{
		PinLockTag(&pin, name, &row);
		error_context_stack = &fencecontext;
		LockAcquireForTransaction(&pin, DLOCK_FENCE_LOCKMODE);
		error_context_stack = fencecontext.previous;
		NameLockReleaseForTransaction(name, DLOCK_FENCE_LOCKMODE);
		result = LeaseStoreFetchToken(&store, name, token, &row);
		now = GetCurrentTimestamp();
		result = result && LeaseIsLive(&row, now);
		if (!result)
			LockReleaseForTransaction(&pin, DLOCK_FENCE_LOCKMODE);
	}
	else if (!result)
		NameLockReleaseForTransaction(name, DLOCK_FENCE_LOCKMODE);
	LeaseStoreClose(&store);

	if (!result && dlock_log_stale_fences)
		StaleFenceReport(name, token, &row, now);

	/*
	 * One count per decision: the cache answers the repeat calls.  row is
	 * the token's row or else the name's last one (found false when the
	 * name has none): a name never granted gets no statistics entry.
	 */
	DlockStatsCountKnown(name, result ? DLOCK_STAT_FENCE_OK : DLOCK_STAT_FENCE_REFUSED,
						 row.found);
	return result;
}

/*
 * dlock_fence - SQL function dlock.fence(name text, token bigint)
 */
Datum
dlock_fence(PG_FUNCTION_ARGS)
{
	LeaseName	name;
	int64		token;
	FenceEntry *entry;
	bool		result;

	/* Answers about relations that have since been replaced do not count */
	if (FenceCache != NULL && FenceCacheGeneration != LeaseStoreGeneration())
		FenceCacheReset();

	/*
	 * The per-row fast path: the same arguments as the previous call, checked
	 * before anything else (even hashing the name) is done.  A repeated
	 * answer needs no argument checks: they passed the first time.
	 */
	if (LastFence.valid && !PG_ARGISNULL(0) && !PG_ARGISNULL(1))
	{
		text	   *t = PG_GETARG_TEXT_PP(0);

		if (LastFence.token == PG_GETARG_INT64(1) &&
			LastFence.name_len == (int) VARSIZE_ANY_EXHDR(t) &&
			memcmp(LastFence.name, VARDATA_ANY(t), LastFence.name_len) == 0)
			PG_RETURN_BOOL(LastFence.result);
	}

	ArgGetName(fcinfo, 0, &name);
	token = ArgGetToken(fcinfo, 1);

	entry = FenceCacheLookup(&name, token);
	if (entry != NULL)
		result = entry->result;
	else
	{
		result = FenceCheck(&name, token);
		/* FenceCheck may have taken invalidations: check the store again */
		if (FenceCache != NULL && FenceCacheGeneration != LeaseStoreGeneration())
			FenceCacheReset();
		FenceCacheStore(&name, token, result);
	}

	LastFence.valid = true;
	LastFence.result = result;
	LastFence.token = token;
	LastFence.name_len = name.len;
	memcpy(LastFence.name, name.data, name.len);
	PG_RETURN_BOOL(result);
}

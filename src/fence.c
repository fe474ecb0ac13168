/*-------------------------------------------------------------------------
 *
 * fence.c
 *	  dlock.fence(): the token check for the WHERE clause of guarded writes.
 *
 * fence(name, token) is true iff token is the current, live grant of name.
 * The first true answer in a transaction takes the name's lock in
 * DLOCK_FENCE_LOCKMODE, owned by the top-level transaction, so no new grant
 * of the name can commit until this transaction ends: the guarded write and
 * any regrant are strictly ordered, whatever the lease's TTL does meanwhile.
 *
 * Answers are cached for the rest of the transaction, keyed by name and
 * token, because an UPDATE calls fence once per row.  A cached answer stays
 * right: a true answer is pinned by the lock, and a false one can never turn
 * true (an ended or expired lease is not revived, a superseded token never
 * comes back).  The one exception, this backend itself granting or ending a
 * lease, resets the cache.
 *
 * A false answer releases the lock it took, so a stale holder's refused
 * write does not hold up the next grant.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/fence.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "dlock.h"
#include "dlock_compat.h"

PG_FUNCTION_INFO_V1(dlock_fence);

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
static FenceEntry *LastFence = NULL;	/* answer of the previous call */

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
	LastFence = NULL;
}

/*
 * FenceCacheReset - forget every cached answer of this transaction
 *
 * Called whenever this backend changes a lease, since that can change the
 * answer for a (name, token) pair it asked about before.  Locks already
 * taken are kept: they only make the ordering stricter.
 */
void
FenceCacheReset(void)
{
	if (FenceCacheContext != NULL)
		MemoryContextDelete(FenceCacheContext);
	FenceCacheForget();
}

static void
FenceXactCallback(XactEvent event, void *arg pg_attribute_unused())
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			FenceCacheForget();
			break;
		default:
			break;
	}
}

/*
 * FenceXactCallbackInit - register the end-of-transaction cleanup (once,
 * from _PG_init)
 */
void
FenceXactCallbackInit(void)
{
	RegisterXactCallback(FenceXactCallback, NULL);
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

static FenceEntry *
FenceCacheStore(const LeaseName *name, int64 token, bool result)
{
	FenceKey	key;
	FenceEntry *entry;
	bool		found;

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
	}

	key.name_hash = name->hash;
	key.token = token;
	entry = hash_search(FenceCache, &key, HASH_ENTER, &found);
	/* On a 64-bit hash collision the newer name takes the slot */
	if (found)
		pfree(entry->name);
	entry->result = result;
	entry->name_len = name->len;
	entry->name = MemoryContextAlloc(FenceCacheContext, name->len);
	memcpy(entry->name, name->data, name->len);
	return entry;
}

/*
 * FenceCheck - decide, without the cache, whether token is name's live grant
 */
static bool
FenceCheck(const LeaseName *name, int64 token)
{
	LeaseStore	store;
	LeaseRow	row;
	bool		result;

	/* Waits for a grant of this name that is being committed right now */
	NameLockAcquireForTransaction(name, DLOCK_FENCE_LOCKMODE);

	LeaseStoreOpen(&store, AccessShareLock);
	LeaseStoreFetch(&store, name, &row);
	LeaseStoreClose(&store);

	result = LeaseIsLive(&row, GetCurrentTimestamp()) && row.token == token;
	if (!result)
		NameLockReleaseForTransaction(name, DLOCK_FENCE_LOCKMODE);
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

	/*
	 * The per-row fast path: the same arguments as the previous call, checked
	 * before anything else (even hashing the name) is done.  A repeated
	 * answer needs no argument checks: they passed the first time.
	 */
	if (LastFence != NULL && !PG_ARGISNULL(0) && !PG_ARGISNULL(1))
	{
		text	   *t = PG_GETARG_TEXT_PP(0);

		if (LastFence->key.token == PG_GETARG_INT64(1) &&
			LastFence->name_len == (int) VARSIZE_ANY_EXHDR(t) &&
			memcmp(LastFence->name, VARDATA_ANY(t), LastFence->name_len) == 0)
			PG_RETURN_BOOL(LastFence->result);
	}

	ArgGetName(fcinfo, 0, &name);
	token = ArgGetToken(fcinfo, 1);

	entry = FenceCacheLookup(&name, token);
	if (entry == NULL)
		entry = FenceCacheStore(&name, token, FenceCheck(&name, token));
	LastFence = entry;
	PG_RETURN_BOOL(entry->result);
}

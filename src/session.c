/*-------------------------------------------------------------------------
 *
 * session.c
 *	  Session-bound leases: leases that also end when the backend that took
 *	  them exits, like an ephemeral node.
 *
 * The backend that is granted a session-bound lease takes a session-level
 * ExclusiveLock in DLOCK_SPACE_SESSION keyed by the lease's token.  The lock
 * manager drops it when the backend exits, whether the client disconnected,
 * the backend was terminated, or the server crashed and restarted, so the
 * holder is alive exactly while that lock is held.  Anyone can probe it with
 * a conditional ShareLock, and a waiter can sleep on it in the lock manager
 * to be woken the moment the holder goes.  Because the key is the token, a
 * later grant of the same name never meets a stale holder's lock.
 *
 * The backend remembers its own session-bound leases here:
 *	- a grant rolled back with its transaction releases its session lock;
 *	- leases that have ended meanwhile (released, force-released, expired)
 *	  have their session lock released by SessionLeasePrune(), once their
 *	  lock-delay is over;
 *	- at backend exit the locks are released first and the waiters of those
 *	  names are woken, so none sleeps until the ttl.
 *
 * pg_advisory_unlock_all() and DISCARD ALL release session-level advisory
 * locks, dlock's included: they end this backend's session-bound leases.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/session.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "dlock.h"
#include "dlock_compat.h"

typedef struct SessionLease
{
	int64		token;			/* hash key */
	bool		committed;		/* false while its grant may still roll back */
	int			name_len;
	char		name[DLOCK_MAX_NAME_BYTES];
} SessionLease;

static HTAB *SessionLeases = NULL;
static bool ExitCallbackRegistered = false;

static void
SessionLockTag(LOCKTAG *tag, int64 token)
{
	DlockLockTag(tag, DLOCK_SPACE_SESSION, (uint64) token);
}

static void
SessionLeaseExit(int code, Datum arg);

static HTAB *
SessionLeaseTable(void)
{
	if (SessionLeases == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(int64);
		ctl.entrysize = sizeof(SessionLease);
		ctl.hcxt = TopMemoryContext;
		SessionLeases = hash_create("dlock session-bound leases", 16, &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	if (!ExitCallbackRegistered)
	{
		before_shmem_exit(SessionLeaseExit, (Datum) 0);
		ExitCallbackRegistered = true;
	}
	return SessionLeases;
}

/*
 * SessionLeaseTake - bind a lease being granted to this backend
 */
void
SessionLeaseTake(const LeaseName *name, int64 token)
{
	LOCKTAG		tag;
	SessionLease *entry;
	bool		found;

	entry = hash_search(SessionLeaseTable(), &token, HASH_ENTER, &found);
	if (found)
		return;
	SessionLockTag(&tag, token);
	/* The token is new, so nobody else can hold this lock */
	if (LockAcquire(&tag, ExclusiveLock, true, true) == LOCKACQUIRE_NOT_AVAIL)
	{
		hash_search(SessionLeases, &token, HASH_REMOVE, NULL);
		elog(ERROR, "session lock of token " INT64_FORMAT " is already held",
			 token);
	}
	entry->committed = false;
	entry->name_len = name->len;
	memcpy(entry->name, name->data, name->len);
}

static void
SessionLeaseDrop(SessionLease *entry)
{
	LOCKTAG		tag;
	int64		token = entry->token;

	SessionLockTag(&tag, token);
	LockRelease(&tag, ExclusiveLock, true);
	hash_search(SessionLeases, &token, HASH_REMOVE, NULL);
}

/* Tokens whose session locks this transaction gives back once it commits */
static List *PendingForgets = NIL;	/* in TopTransactionContext */

/*
 * SessionLeaseForgetAtCommit - once this transaction commits, this backend
 * no longer holds the lease of token (it released it)
 */
void
SessionLeaseForgetAtCommit(int64 token)
{
	MemoryContext old;
	int64	   *item;

	if (SessionLeases == NULL ||
		hash_search(SessionLeases, &token, HASH_FIND, NULL) == NULL)
		return;
	old = MemoryContextSwitchTo(TopTransactionContext);
	item = palloc(sizeof(int64));
	*item = token;
	PendingForgets = lappend(PendingForgets, item);
	MemoryContextSwitchTo(old);
}

/*
 * SessionLeaseAlive - whether the backend bound to a lease still runs
 *
 * On a standby the primary's locks are not visible; the answer there is
 * "alive", and the ttl alone bounds the lease.
 */
bool
SessionLeaseAlive(int64 token)
{
	LOCKTAG		tag;
	SessionLease *entry = NULL;

	SessionLockTag(&tag, token);
	if (SessionLeases != NULL)
		entry = hash_search(SessionLeases, &token, HASH_FIND, NULL);
	if (entry != NULL)
	{
		/* Ours, unless DISCARD ALL or pg_advisory_unlock_all() dropped it */
		if (dlock_lock_held_by_me(&tag, ExclusiveLock))
			return true;
		hash_search(SessionLeases, &token, HASH_REMOVE, NULL);
		return false;
	}
	if (RecoveryInProgress())
		return true;

	if (LockAcquire(&tag, ShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, ShareLock, false);
	return false;
}

/*
 * SessionLeasePrune - release the session locks of leases that have ended
 *
 * Runs before each new session-bound grant, so a long-lived connection that
 * lets its session-bound leases expire does not collect locks.
 */
void
SessionLeasePrune(void)
{
	HASH_SEQ_STATUS status;
	SessionLease *entry;
	LeaseStore	store;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz until;
	List	   *ended = NIL;
	ListCell   *lc;

	if (SessionLeases == NULL || hash_get_num_entries(SessionLeases) == 0)
		return;

	LeaseStoreOpen(&store, AccessShareLock);
	hash_seq_init(&status, SessionLeases);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		LeaseName	name;
		LeaseRow	row;

		if (!entry->committed)
			continue;
		LeaseNameInit(&name, entry->name, entry->name_len);
		LeaseStoreFetch(&store, &name, &row);

		/*
		 * Keep the lock through the lease's lock-delay: while it is held,
		 * the lease counts as ended by expiry (or force_release), not as
		 * ended by its backend's exit, and the delay applies.
		 */
		if (!row.found || row.token != entry->token ||
			LeaseStatusAt(&row, now, &until) == LEASE_FREE)
			ended = lappend(ended, entry);
	}
	LeaseStoreClose(&store);

	foreach(lc, ended)
		SessionLeaseDrop((SessionLease *) lfirst(lc));
	list_free(ended);
}

/*
 * SessionLeaseExit - before the backend exits, end its session-bound leases
 * and wake their waiters
 */
static void
SessionLeaseExit(int code pg_attribute_unused(), Datum arg pg_attribute_unused())
{
	HASH_SEQ_STATUS status;
	SessionLease *entry;

	if (SessionLeases == NULL)
		return;
	hash_seq_init(&status, SessionLeases);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		LOCKTAG		tag;
		LeaseName	name;

		SessionLockTag(&tag, entry->token);
		LockRelease(&tag, ExclusiveLock, true);
		LeaseNameInit(&name, entry->name, entry->name_len);
		WakeQueueHead(&name);
	}
	hash_destroy(SessionLeases);
	SessionLeases = NULL;
}

static void
SessionXactCallback(XactEvent event, void *arg pg_attribute_unused())
{
	HASH_SEQ_STATUS status;
	SessionLease *entry;
	List	   *rolled_back = NIL;
	ListCell   *lc;

	if (SessionLeases == NULL)
	{
		PendingForgets = NIL;
		return;
	}

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PREPARE:
			hash_seq_init(&status, SessionLeases);
			while ((entry = hash_seq_search(&status)) != NULL)
				entry->committed = true;
			if (event == XACT_EVENT_COMMIT)
			{
				foreach(lc, PendingForgets)
				{
					int64		token = *(int64 *) lfirst(lc);

					entry = hash_search(SessionLeases, &token, HASH_FIND, NULL);
					if (entry != NULL)
						SessionLeaseDrop(entry);
				}
			}
			PendingForgets = NIL;
			break;
		case XACT_EVENT_ABORT:
			hash_seq_init(&status, SessionLeases);
			while ((entry = hash_seq_search(&status)) != NULL)
				if (!entry->committed)
					rolled_back = lappend(rolled_back, entry);
			foreach(lc, rolled_back)
				SessionLeaseDrop((SessionLease *) lfirst(lc));
			list_free(rolled_back);
			PendingForgets = NIL;
			break;
		default:
			break;
	}
}

/*
 * SessionXactCallbackInit - register the end-of-transaction handling (once,
 * from _PG_init)
 */
void
SessionXactCallbackInit(void)
{
	RegisterXactCallback(SessionXactCallback, NULL);
}

PG_FUNCTION_INFO_V1(dlock_holder_alive);

/*
 * dlock_holder_alive - SQL function dlock.holder_alive(token), for the view
 */
Datum
dlock_holder_alive(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(SessionLeaseAlive(PG_GETARG_INT64(0)));
}

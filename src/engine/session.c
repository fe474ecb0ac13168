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
 *	- a grant rolled back with its transaction, or with the subtransaction
 *	  that made it, releases its session lock;
 *	- a release gives the lock back when its transaction commits, not when
 *	  the subtransaction that made it rolls back;
 *	- a session-bound grant cannot be prepared (two-phase commit): the lease
 *	  would follow this backend while its fate is decided elsewhere;
 *	- leases that have ended meanwhile (released, force-released, expired,
 *	  also by a prepared transaction committed elsewhere) have their session
 *	  lock released by SessionLeasePrune(), once their lock-delay is over;
 *	- at backend exit the locks are released first and the waiters of those
 *	  names are woken, so none sleeps until the ttl.
 *
 * pg_advisory_unlock_all() and DISCARD ALL release session-level advisory
 * locks, dlock's included: they end this backend's session-bound leases.
 * The entries stay until SessionLeasePrune() or exit notices the lock gone.
 *
 * Invariants: I6 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/engine/session.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "engine/engine.h"
#include "dlock_compat.h"

/* A waiter for a session-bound holder looks again at least this often */
#define SESSION_WAIT_SLICE_US	(100 * 1000)

typedef struct SessionLease
{
	int64		token;			/* hash key */
	bool		locked;			/* this backend took the session lock */
	bool		committed;		/* false while its grant may still roll back */
	SubTransactionId subid;		/* subtransaction of the grant, until then */
	int			name_len;
	char		name[DLOCK_MAX_NAME_BYTES];
} SessionLease;

static HTAB *SessionLeases = NULL;
static bool ExitCallbackRegistered = false;

/*
 * Leases whose session locks this transaction gives back once it commits
 * (it released them), each tagged with the subtransaction that did it
 */
typedef struct PendingForget
{
	PendingItem item;			/* the subtransaction that released it */
	int64		token;
} PendingForget;

static List *PendingForgets = NIL;	/* in TopTransactionContext */

static void
SessionLockTag(LOCKTAG *tag, int64 token)
{
	DlockLockTag(tag, DLOCK_SPACE_SESSION, (uint64) token);
}

static void SessionLeaseExit(int code, Datum arg);

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

static SessionLease *
SessionLeaseFind(int64 token)
{
	if (SessionLeases == NULL)
		return NULL;
	return hash_search(SessionLeases, &token, HASH_FIND, NULL);
}

/*
 * SessionLockHeld - whether this backend still holds the entry's session
 * lock: DISCARD ALL and pg_advisory_unlock_all() release it behind dlock's
 * back, which ends the lease
 */
static bool
SessionLockHeld(const SessionLease *entry)
{
	LOCKTAG		tag;

	if (!entry->locked)
		return false;
	SessionLockTag(&tag, entry->token);
	return dlock_lock_held_by_me(&tag, ExclusiveLock);
}

/*
 * SessionLeaseTake - bind a lease being granted to this backend
 *
 * The entry is complete before the lock is taken, and marked locked only
 * once it is, so a failure in between (a full lock table) leaves an entry
 * that the abort of the grant's (sub)transaction removes, without a lock to
 * give back.  Others may hold the lock briefly in ShareLock, to probe the
 * holder of a token (SessionLockAlive): the grant waits for them rather
 * than fail, since a probe never waits while it holds the lock.
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
	entry->locked = false;
	entry->committed = false;
	entry->subid = GetCurrentSubTransactionId();
	entry->name_len = name->len;
	memcpy(entry->name, name->data, name->len);

	SessionLockTag(&tag, token);
	(void) LockAcquire(&tag, ExclusiveLock, true, false);
	entry->locked = true;
}

/*
 * SessionLeaseForget - give back an entry's session lock (if this backend
 * still holds it) and remove the entry
 */
static void
SessionLeaseForget(SessionLease *entry)
{
	LOCKTAG		tag;
	int64		token = entry->token;

	if (SessionLockHeld(entry))
	{
		SessionLockTag(&tag, token);
		LockRelease(&tag, ExclusiveLock, true);
	}
	hash_search(SessionLeases, &token, HASH_REMOVE, NULL);
}

/*
 * SessionLeaseForgetAtCommit - once this transaction commits, this backend
 * no longer holds the lease of token (it released it)
 */
void
SessionLeaseForgetAtCommit(int64 token)
{
	MemoryContext old;
	PendingForget *item;

	if (SessionLeaseFind(token) == NULL)
		return;
	old = MemoryContextSwitchTo(TopTransactionContext);
	item = palloc(sizeof(PendingForget));
	item->token = token;
	item->item.subid = GetCurrentSubTransactionId();
	PendingForgets = lappend(PendingForgets, item);
	MemoryContextSwitchTo(old);
}

/*
 * SessionLeaseWaitForHolder - wait (one slice, within limit and until) for
 * the session-bound holder of token to go
 *
 * Another backend's holder is waited for in the lock manager, on its session
 * lock, so that its exit wakes us at once; the wait is cut into slices, so
 * that a release or force_release, which leaves that lock in place, is
 * noticed too.  A lease held by this very backend has no other backend to
 * wait for (and the lock manager would grant our own lock at once): sleep on
 * the latch until the lease's expiry, as for any other holder.
 */
void
SessionLeaseWaitForHolder(int64 token, TimestampTz until, WaitLimit limit)
{
	LOCKTAG		tag;
	WaitLimit	slice = {true, 0};
	TimestampTz slice_end;

	if (SessionLeaseFind(token) != NULL)
	{
		SleepUntil(until, limit);
		return;
	}

	slice_end = GetCurrentTimestamp() + SESSION_WAIT_SLICE_US;
	slice.deadline = Min(until, slice_end);
	slice.deadline = Min(slice.deadline, limit.deadline);

	SessionLockTag(&tag, token);
	if (LockAcquireWithin(&tag, ShareLock, slice))
		LockRelease(&tag, ShareLock, false);
	CHECK_FOR_INTERRUPTS();
}

/*
 * SessionLeasePrune - release the session locks of leases that have ended
 *
 * Runs before each new session-bound grant, so a long-lived connection that
 * lets its session-bound leases expire does not collect locks.  Entries
 * whose lock DISCARD ALL took away are removed without a release.
 */
void
SessionLeasePrune(void)
{
	HASH_SEQ_STATUS status;
	SessionLease *entry;
	LeaseStore	store;
	TimestampTz now = GetCurrentTimestamp();
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
		TimestampTz until;
		bool		held;

		if (!entry->committed)
			continue;
		held = SessionLockHeld(entry);
		LeaseNameInit(&name, entry->name, entry->name_len);
		(void) LeaseStoreFetchToken(&store, &name, entry->token, &row);

		/*
		 * Keep the lock through the lease's lock-delay: while it is held,
		 * the lease counts as ended by expiry (or force_release), not as
		 * ended by its backend's exit, and the delay applies.
		 */
		if (!held || !row.found || row.token != entry->token ||
			LeaseAvailabilityAt(&row, now, held, &until) == LEASE_FREE)
			ended = lappend(ended, entry);
	}
	LeaseStoreClose(&store);

	/* Removing entries other than the current one is not safe in a scan */
	foreach(lc, ended)
		SessionLeaseForget((SessionLease *) lfirst(lc));
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

		if (!SessionLockHeld(entry))
			continue;
		SessionLockTag(&tag, entry->token);
		LockRelease(&tag, ExclusiveLock, true);
		LeaseNameInit(&name, entry->name, entry->name_len);
		WakeQueueHead(&name);
		WakeWatchers(&name);
	}
	hash_destroy(SessionLeases);
	SessionLeases = NULL;
}

/*
 * SessionLeasesAtPrePrepare - refuse to prepare a session-bound grant
 * (dispatcher, dlock.c)
 *
 * The lease would be bound to this backend while its grant is committed by
 * COMMIT PREPARED, later and perhaps from another backend, or never: its
 * liveness would follow a backend the grant no longer belongs to.
 */
void
SessionLeasesAtPrePrepare(void)
{
	HASH_SEQ_STATUS status;
	SessionLease *entry;

	if (SessionLeases == NULL)
		return;
	hash_seq_init(&status, SessionLeases);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->committed)
			continue;
		hash_seq_term(&status);
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that granted a session-bound lease"),
				 errdetail("Lease \"%.*s\" is bound to this session, but a prepared transaction is committed independently of it.",
						   entry->name_len, entry->name),
				 errhint("Grant session-bound leases outside of two-phase transactions.")));
	}
}

/*
 * SessionLeasesAtEOXact - the transaction ended (dispatcher, dlock.c)
 *
 * COMMIT: its grants are now committed, and the session locks of leases it
 * released are given back.  ABORT: its grants are undone; so are their
 * locks.  PREPARE (which refused session-bound grants): the releases are
 * committed by someone else, if ever; SessionLeasePrune() gives their locks
 * back once it sees them ended.
 */
void
SessionLeasesAtEOXact(XactEvent event)
{
	HASH_SEQ_STATUS status;
	SessionLease *entry;
	List	   *forget = NIL;
	ListCell   *lc;

	if (SessionLeases != NULL)
	{
		hash_seq_init(&status, SessionLeases);
		while ((entry = hash_seq_search(&status)) != NULL)
		{
			if (entry->committed)
				continue;
			if (event == XACT_EVENT_COMMIT)
				entry->committed = true;
			else
				forget = lappend(forget, entry);
		}
		if (event == XACT_EVENT_COMMIT)
		{
			foreach(lc, PendingForgets)
			{
				PendingForget *item = lfirst(lc);

				entry = SessionLeaseFind(item->token);
				if (entry != NULL && !list_member_ptr(forget, entry))
					forget = lappend(forget, entry);
			}
		}
		foreach(lc, forget)
			SessionLeaseForget((SessionLease *) lfirst(lc));
		list_free(forget);
	}
	PendingForgets = NIL;
}

/*
 * SessionLeasesAtSubAbort - a subtransaction rolled back (dispatcher,
 * dlock.c): drop the grants and releases it (or its children) made
 */
void
SessionLeasesAtSubAbort(SubTransactionId mySubid)
{
	HASH_SEQ_STATUS status;
	SessionLease *entry;
	List	   *forget = NIL;
	ListCell   *lc;

	if (SessionLeases == NULL)
		return;

	PendingForgets = PendingItemsAtSubAbort(PendingForgets, mySubid);

	hash_seq_init(&status, SessionLeases);
	while ((entry = hash_seq_search(&status)) != NULL)
		if (!entry->committed && entry->subid >= mySubid)
			forget = lappend(forget, entry);
	foreach(lc, forget)
		SessionLeaseForget((SessionLease *) lfirst(lc));
	list_free(forget);
}

PG_FUNCTION_INFO_V1(dlock_holder_alive);

/*
 * dlock_holder_alive - SQL function dlock.holder_alive(token), for the view
 */
Datum
dlock_holder_alive(PG_FUNCTION_ARGS)
{
	DlockCheckModuleVersion();

	PG_RETURN_BOOL(SessionLockAlive(PG_GETARG_INT64(0)));
}

/*-------------------------------------------------------------------------
 *
 * waiting.c
 *	  The queue of sessions waiting for a name, and how they are woken.
 *
 * Waiters of one name queue in the lock manager, on an ExclusiveLock in
 * DLOCK_SPACE_QUEUE keyed by the name's hash: the lock manager grants it in
 * arrival order, removes a waiter that is cancelled or times out without
 * disturbing the others, detects deadlocks and shows the queue in pg_locks.
 * Only the head of the queue, the holder of that lock, waits for the lease
 * itself; it gives the queue lock back as soon as it is granted, and the
 * next waiter becomes the head.
 *
 * The head sleeps on its process latch until the lease expires (or its
 * lock-delay ends), its own deadline passes, or it is woken.  It is woken
 * by the transaction that releases or force-releases the lease, right after
 * that transaction's commit becomes visible: the waker finds the head as the
 * holder of the queue lock and sets its latch.  Only the head is woken, so a
 * release wakes one process, not all waiters.  All of this lives in the lock
 * manager and the latches, so it needs no shared memory of dlock's own and
 * works without shared_preload_libraries.
 *
 * A head that is waiting for a session-bound holder instead sleeps on that
 * holder's session lock (session.c, SessionLeaseWaitForHolder), so the exit
 * of the holder's backend wakes it at once.
 *
 * A release that is committed through two-phase commit wakes the head at
 * PREPARE: the head then waits in the lock manager for the prepared
 * transaction's lock on the name (QueueWakesAtEOXact).
 *
 * Sessions in dlock.watch() (watch.c) are found the same way: each holds
 * DLOCK_WATCH_LOCKMODE on the name's tag in DLOCK_SPACE_WATCH while it
 * watches, a mode in which watchers do not conflict with one another, and
 * every transaction that grants or ends a lease of the name sets the
 * latches of all of them once its commit is visible.  Who is to be woken is
 * looked up at that moment, after the commit is visible, never at the call
 * that changed the lease: a head or watcher that read the lease before the
 * commit was visible holds its lock by then and is woken, and one that
 * arrives later reads the change.
 *
 * When dlock is preloaded, two counters in shared memory say how many
 * sessions of the cluster are in a queue or watching (WaitersShared); a
 * session is counted from before it asks for the queue or watch lock until
 * after it gives the lock back or its transaction ends.  While a counter is
 * zero no one can hold such a lock, so the looks above answer at once,
 * without the lock manager; that is most grants and releases.  A count that
 * stays too high (a lock given back by a rolled-back subtransaction) only
 * costs the looks until the end of the transaction; a session that is
 * counted after a look is one that arrived after it, so it is ordered
 * after the change that looked (WaitersAbsent).
 *
 * Invariants: I7 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/waiting/waiting.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "waiting/waiting.h"
#include "dlock_compat.h"

/* A head re-reads the lease at least this often, as a safety net */
#define HEAD_MAX_SLEEP_US	(1000 * 1000)

/* Whom a pending wake-up is for */
typedef enum WakeWhom
{
	WAKE_QUEUE_HEAD,			/* the head of the name's queue */
	WAKE_WATCHERS				/* every session in dlock.watch() of the name */
} WakeWhom;

/*
 * Names whose queue heads or watchers this transaction wakes at commit, by
 * the key of their lock tags (name->hash), which is all a wake-up needs
 */
typedef struct PendingWake
{
	PendingItem item;			/* the subtransaction that changed the lease */
	WakeWhom	whom;
	uint64		key;
} PendingWake;

static List *PendingWakes = NIL;	/* in TopTransactionContext */

/* Whom WaitersShared counts */
typedef enum WaiterKind
{
	WAITER_QUEUED,				/* asking for or holding a queue lock */
	WAITER_WATCHING,			/* asking for or holding a watch lock */
	WAITER_KINDS
} WaiterKind;

/* Sessions of the cluster in a queue or watching (when preloaded) */
typedef struct WaitersShared
{
	pg_atomic_uint32 count[WAITER_KINDS];
} WaitersShared;

static WaitersShared *Waiters = NULL;

/* What this backend added to each count, given back by its transaction */
static uint32 MyCount[WAITER_KINDS];

/* QueueLookBegin took the queue lock, which QueueLookEnd gives back */
static bool QueueLookLocked = false;

static void AddPendingWake(const LeaseName *name, WakeWhom whom);

/*
 * WaitersShmemRequest - reserve the counters' shared memory (dlock.c, while
 * the module is preloaded)
 */
void
WaitersShmemRequest(void)
{
	RequestAddinShmemSpace(sizeof(WaitersShared));
}

/*
 * WaitersShmemInit - create or attach to it (dlock.c, holding
 * AddinShmemInitLock)
 */
void
WaitersShmemInit(void)
{
	bool		found;

	Waiters = ShmemInitStruct("dlock waiters", sizeof(WaitersShared), &found);
	if (!found)
	{
		for (int k = 0; k < WAITER_KINDS; k++)
			pg_atomic_init_u32(&Waiters->count[k], 0);
	}
}

/* Count this session in (before it asks for the lock) */
static void
WaitersCountIn(WaiterKind kind)
{
	if (Waiters == NULL)
		return;
	/* A full barrier: the count is visible before the lock request */
	pg_atomic_fetch_add_u32(&Waiters->count[kind], 1);
	MyCount[kind]++;
}

/* Count this session out (after it gave the lock back) */
static void
WaitersCountOut(WaiterKind kind)
{
	if (Waiters == NULL || MyCount[kind] == 0)
		return;
	pg_atomic_fetch_sub_u32(&Waiters->count[kind], 1);
	MyCount[kind]--;
}

/*
 * WaitersAbsent - whether no session of the cluster is counted, so none
 * holds or asks for a lock of this kind; false when nothing is counted
 * (not preloaded)
 *
 * A session counts itself in before it asks for its lock, so one that this
 * look misses counted itself in after it: it arrived after the look.  The
 * callers look once a change is visible (at commit, or holding the name's
 * lock, which a session that reads the lease waits for), so such a session
 * reads the change.  The barrier orders the caller's commit (or lock
 * request) before the read of the count, as the other session's atomic
 * increment orders its count before its request.
 */
static bool
WaitersAbsent(WaiterKind kind)
{
	if (Waiters == NULL)
		return false;
	pg_memory_barrier();
	return pg_atomic_read_u32(&Waiters->count[kind]) == 0;
}

/*
 * WaitersCountAtEOXact - the transaction ended (dispatcher, dlock.c): its
 * queue and watch locks are given back with it
 */
void
WaitersCountAtEOXact(void)
{
	if (Waiters == NULL)
		return;
	for (int k = 0; k < WAITER_KINDS; k++)
	{
		if (MyCount[k] > 0)
			pg_atomic_fetch_sub_u32(&Waiters->count[k], MyCount[k]);
		MyCount[k] = 0;
	}
}

static void
QueueLockTag(LOCKTAG *tag, const LeaseName *name)
{
	DlockLockTag(tag, DLOCK_SPACE_QUEUE, name->hash);
}

static void
WatchLockTag(LOCKTAG *tag, const LeaseName *name)
{
	DlockLockTag(tag, DLOCK_SPACE_WATCH, name->hash);
}

/*
 * QueueJoin - wait (within limit) until this session is the head of the
 * name's queue; false when the limit passed first
 */
bool
QueueJoin(const LeaseName *name, WaitLimit limit)
{
	LOCKTAG		tag;

	QueueLockTag(&tag, name);
	WaitersCountIn(WAITER_QUEUED);
	if (LockAcquireWithin(&tag, DLOCK_QUEUE_LOCKMODE, limit))
		return true;
	WaitersCountOut(WAITER_QUEUED);
	return false;
}

/*
 * QueueLeave - hand the head of the queue to the next waiter
 */
void
QueueLeave(const LeaseName *name)
{
	LOCKTAG		tag;

	QueueLockTag(&tag, name);
	LockRelease(&tag, DLOCK_QUEUE_LOCKMODE, false);
	WaitersCountOut(WAITER_QUEUED);
}

/*
 * QueueLookBegin - whether nobody waits for the name; if so, nobody can
 * start waiting until QueueLookEnd (try_acquire() decides meanwhile).
 * Other callers of try_acquire() may look at the same time: concurrent
 * requests for shared leases are not refused because of one another.
 * While no session of the cluster is in a queue, no lock is needed: one
 * that joins a queue after this look arrived after this try_acquire(), and
 * waits for the name's lock, which the decision holds, to see its outcome.
 */
bool
QueueLookBegin(const LeaseName *name)
{
	LOCKTAG		tag;

	QueueLookLocked = false;
	if (WaitersAbsent(WAITER_QUEUED))
		return true;
	QueueLockTag(&tag, name);
	QueueLookLocked = LockAcquireWithin(&tag, DLOCK_QUEUE_LOOK_LOCKMODE, NoWait);
	return QueueLookLocked;
}

void
QueueLookEnd(const LeaseName *name)
{
	LOCKTAG		tag;

	if (!QueueLookLocked)
		return;
	QueueLockTag(&tag, name);
	LockRelease(&tag, DLOCK_QUEUE_LOOK_LOCKMODE, false);
	QueueLookLocked = false;
}

/*
 * WakeLockHolders - set the latches of the sessions that hold a lock on tag
 *
 * A stale entry can at worst wake an unrelated backend, which only costs it
 * a spurious latch wake-up.
 */
static void
WakeLockHolders(const LOCKTAG *tag)
{
	VirtualTransactionId *holders;

	holders = GetLockConflicts(tag, AccessExclusiveLock, NULL);
	for (; VirtualTransactionIdIsValid(*holders); holders++)
	{
		PGPROC	   *proc = dlock_vxid_get_proc(*holders);

		if (proc != NULL)
			SetLatch(&proc->procLatch);
	}
}

/*
 * WakeQueueHead - set the latch of the session at the head of the name's
 * queue, if there is one
 */
void
WakeQueueHead(const LeaseName *name)
{
	LOCKTAG		tag;

	QueueLockTag(&tag, name);
	WakeLockHolders(&tag);
}

/*
 * WakeWatchers - set the latches of every session in dlock.watch() of the
 * name
 */
void
WakeWatchers(const LeaseName *name)
{
	LOCKTAG		tag;

	WatchLockTag(&tag, name);
	WakeLockHolders(&tag);
}

/*
 * LockIsFree - whether nobody holds a lock on tag right now
 */
static bool
LockIsFree(const LOCKTAG *tag, LOCKMODE mode)
{
	if (LockAcquire(tag, mode, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	LockRelease(tag, mode, false);
	return true;
}

/*
 * QueueIsEmpty - whether nobody waits for the name right now (also used by
 * purge.c, which must not delete the row of a name that has waiters)
 */
bool
QueueIsEmpty(const LeaseName *name)
{
	LOCKTAG		tag;

	if (WaitersAbsent(WAITER_QUEUED))
		return true;
	QueueLockTag(&tag, name);
	return LockIsFree(&tag, DLOCK_QUEUE_LOCKMODE);
}

/*
 * WatchersJoin - this session watches the name until WatchersLeave, or the
 * end of its transaction
 */
void
WatchersJoin(const LeaseName *name)
{
	LOCKTAG		tag;

	WatchLockTag(&tag, name);
	WaitersCountIn(WAITER_WATCHING);
	(void) LockAcquire(&tag, DLOCK_WATCH_LOCKMODE, false, false);
}

void
WatchersLeave(const LeaseName *name)
{
	LOCKTAG		tag;

	WatchLockTag(&tag, name);
	LockRelease(&tag, DLOCK_WATCH_LOCKMODE, false);
	WaitersCountOut(WAITER_WATCHING);
}

/*
 * WakeQueueHeadAtCommit - wake the name's queue head once this transaction
 * has committed (a wake-up before the commit is visible would be wasted)
 *
 * Whether there is a head is looked up at the commit, not now: a head that
 * arrives between this call and the commit may have read the lease before
 * the change was visible (a grant made alongside does not wait for a
 * release in progress), and must be woken too.  One that arrives after the
 * look reads the lease after the commit became visible.
 */
void
WakeQueueHeadAtCommit(const LeaseName *name)
{
	AddPendingWake(name, WAKE_QUEUE_HEAD);
}

/*
 * WakeWatchersAtCommit - wake every session in dlock.watch() of the name
 * once this transaction has committed
 *
 * As for the queue head, the watchers are looked up at the commit: a
 * watcher reads without any lock of the name (watch.c), so one that began
 * before the commit may have read the old rows.
 */
void
WakeWatchersAtCommit(const LeaseName *name)
{
	AddPendingWake(name, WAKE_WATCHERS);
}

static void
AddPendingWake(const LeaseName *name, WakeWhom whom)
{
	MemoryContext old;
	PendingWake *wake;

	/* The same wake-up as the last one queued (a name changed twice) */
	if (PendingWakes != NIL)
	{
		wake = llast(PendingWakes);
		if (wake->whom == whom && wake->key == name->hash &&
			wake->item.subid == GetCurrentSubTransactionId())
			return;
	}

	old = MemoryContextSwitchTo(TopTransactionContext);
	wake = palloc(sizeof(PendingWake));
	wake->item.subid = GetCurrentSubTransactionId();
	wake->whom = whom;
	wake->key = name->hash;
	PendingWakes = lappend(PendingWakes, wake);
	MemoryContextSwitchTo(old);
}

/*
 * QueueWakesAtEOXact - the transaction ended (dispatcher, dlock.c)
 *
 * COMMIT: the change is visible to others by now (the locks are not yet
 * released), so the head finds the name free; who is waiting or watching is
 * looked up only now (WakeQueueHeadAtCommit), and while nobody in the
 * cluster is counted as such, not even in the lock manager.  PREPARE: the
 * change is not visible yet, and COMMIT PREPARED may run in a backend that
 * has not even loaded dlock; but the prepared transaction keeps its lock on
 * the name, so the head, once woken, decides under DLOCK_SERIAL_LOCKMODE
 * (every head does when it is not granted alongside: grant.c) and waits for
 * that lock in the lock manager, which wakes it the moment the prepared
 * transaction ends, wherever it is committed.  A watcher, which takes no
 * lock of the name, sees such a change at its next look, within
 * HEAD_MAX_SLEEP_US.
 */
void
QueueWakesAtEOXact(XactEvent event)
{
	ListCell   *lc;

	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PREPARE)
	{
		foreach(lc, PendingWakes)
		{
			PendingWake *wake = lfirst(lc);
			LOCKTAG		tag;

			if (wake->whom == WAKE_QUEUE_HEAD)
			{
				if (WaitersAbsent(WAITER_QUEUED))
					continue;
				DlockLockTag(&tag, DLOCK_SPACE_QUEUE, wake->key);
			}
			else
			{
				if (WaitersAbsent(WAITER_WATCHING))
					continue;
				DlockLockTag(&tag, DLOCK_SPACE_WATCH, wake->key);
			}
			WakeLockHolders(&tag);
		}
	}
	PendingWakes = NIL;
}

/*
 * QueueWakesAtSubAbort - a subtransaction rolled back (dispatcher, dlock.c):
 * the leases it changed are as they were, so nobody is to be woken for them
 */
void
QueueWakesAtSubAbort(SubTransactionId mySubid)
{
	PendingWakes = PendingItemsAtSubAbort(PendingWakes, mySubid);
}

/*
 * SleepUntil - sleep on the latch until a moment, the limit's deadline, or
 * a wake-up, whichever comes first
 *
 * Interrupts are served on return, so a cancel or statement_timeout ends the
 * wait at once.  The caller resets the latch before it last looked at the
 * lease, so a wake-up sent after that look is not lost.
 */
void
SleepUntil(TimestampTz until, WaitLimit limit)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		sleep_us = HEAD_MAX_SLEEP_US;
	long		ms;

	if (until != DT_NOEND)
		sleep_us = Min(sleep_us, Max(until - now, 0));
	if (limit.deadline != DT_NOEND)
		sleep_us = Min(sleep_us, Max(limit.deadline - now, 0));
	ms = (long) ((sleep_us + 999) / 1000);

	if (ms > 0)
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 ms, PG_WAIT_EXTENSION);
	CHECK_FOR_INTERRUPTS();
}

/*-------------------------------------------------------------------------
 *
 * dlock.c
 *	  Module entry point of dlock: leased, fenced locks for SQL.
 *
 * Loading the module defines dlock's settings, registers the one
 * transaction callback and the one subtransaction callback that run every
 * module's end-of-(sub)transaction work in a fixed order (below), and the
 * invalidation of its cached relation OIDs.
 * Leasing needs no shared memory of dlock's own: waiters queue in the lock
 * manager and are woken through their latches, so it works the same with
 * and without shared_preload_libraries.  Only the statistics (stats.c)
 * and the places kept for polling clients (places.c) need preloading, as
 * do the counts of waiting sessions that let grants and releases skip
 * looking for waiters (waiting.c); preloading reserves their shared memory
 * here, in one request and one start-up hook.
 *
 * Invariants: I5 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/dlock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "sql/sql.h"
#include "dlock_compat.h"
#include "base/test_hooks.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

#ifdef DLOCK_HAVE_SHMEM_REQUEST_HOOK
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * DlockShmemRequest - reserve the shared memory of every module that has
 * some
 */
static void
DlockShmemRequest(void)
{
#ifdef DLOCK_HAVE_SHMEM_REQUEST_HOOK
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
#endif
	DlockStatsShmemRequest();
	PlacesShmemRequest();
	WaitersShmemRequest();
}

/*
 * DlockShmemStartup - create it at server start (and after a crash), or
 * attach to it (EXEC_BACKEND)
 */
static void
DlockShmemStartup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	DlockStatsShmemInit();
	PlacesShmemInit();
	WaitersShmemInit();
	LWLockRelease(AddinShmemInitLock);
}

/*
 * DlockXactCallback - end-of-transaction work of every module, in order
 *
 * Before the commit record (PRE_COMMIT, PRE_PREPARE):
 *	1. session.c refuses to PREPARE a transaction that granted a
 *	   session-bound lease: the lease is bound to this backend, but a
 *	   prepared transaction commits independently of it.
 *	2. durability.c sets synchronous_commit for this commit only: raised for
 *	   a grant with dlock.durable_grants on (also for the PREPARE record of
 *	   one), lowered for a
 *	   release-only transaction (never for a PREPARE).
 * After the commit record (COMMIT, PREPARE) or the abort (ABORT):
 *	3. fence.c forgets the fence cache (its memory goes with the
 *	   transaction), and lease_store.c the rows it kept of the name the
 *	   transaction held (its locks go with the transaction).
 *	4. session.c marks this transaction's session-bound grants committed
 *	   and gives up the session locks of leases it released (COMMIT), or
 *	   drops the grants that rolled back (ABORT).
 *	5. waiting.c wakes the queue heads and watchers of names this
 *	   transaction granted or ended, and counts this session out of the
 *	   queues and watches it was in (their locks go with the transaction).
 *	   It runs after the commit record because who is to be woken is
 *	   looked up only once the change is visible to them (a head or
 *	   watcher that arrives later reads the change itself), and before
 *	   the locks are released, so the head finds the name free.  At
 *	   PREPARE the change is not visible yet, but the head then waits in
 *	   the lock manager for the prepared transaction's lock on the name,
 *	   which COMMIT PREPARED (in any backend) releases, waking it at once.
 *	6. durability.c forgets what it noted about the transaction.
 *	7. places.c removes this backend's entry as the head of an acquire()
 *	   queue, left by an acquire() that an error ended (ABORT).
 *	8. module_version.c forgets that it checked the catalog's version, so
 *	   that the next transaction sees an update committed meanwhile.
 * dlock's functions are PARALLEL UNSAFE, so the parallel events only reset.
 */
static void
DlockXactCallback(XactEvent event, void *arg pg_attribute_unused())
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			DurabilityAtPreCommit(false);
			break;
		case XACT_EVENT_PRE_PREPARE:
			SessionLeasesAtPrePrepare();
			DurabilityAtPreCommit(true);
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			FenceCacheAtEOXact();
			LeaseStoreHeldRowsForget(NULL);
			SessionLeasesAtEOXact(event);
			QueueWakesAtEOXact(event);
			WaitersCountAtEOXact();
			DurabilityAtEOXact();
			PlaceHeadEnd();
			DlockModuleVersionAtEOXact();
			break;
		default:
			break;
	}
}

/*
 * DlockSubXactCallback - a subtransaction ends
 *
 * Pending items (wake-ups, session-lock releases, session-bound grants) made
 * in the subtransaction or its children are dropped (xact_pending.c states
 * the rule); a committing subtransaction hands its items to its parent,
 * which the same rule already does: nothing to do.  The rows that
 * lease_store.c kept of a name held are forgotten at every rollback: the
 * lock may have gone with it, and so may the rows' latest versions.
 */
static void
DlockSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
					 SubTransactionId parentSubid, void *arg pg_attribute_unused())
{
	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	FenceCacheAtSubAbort(mySubid, parentSubid);
	LeaseStoreHeldRowsForget(NULL);
	SessionLeasesAtSubAbort(mySubid);
	QueueWakesAtSubAbort(mySubid);
	PlaceHeadEnd();
}

/*
 * _PG_init - define the settings and hooks of the module
 */
void
_PG_init(void)
{
	/* The settings of the lease rules (settings.c) */
	DlockSettingsDefine();

	DefineCustomBoolVariable("dlock.stats",
							 "Collects per-name statistics in dlock.stats.",
							 "Takes effect only when dlock is in shared_preload_libraries.",
							 &dlock_stats_enabled,
							 true,
							 PGC_SUSET,
							 0,
							 NULL,
							 DlockStatsEnabledAssign,
							 NULL);

	/*
	 * The size of the statistics' shared memory: it exists, like the memory,
	 * only when the module is preloaded (a PGC_POSTMASTER setting cannot be
	 * defined once the server runs)
	 */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomIntVariable("dlock.stats_max",
								"Sets the number of lease names dlock.stats keeps.",
								"When more names are active, the least active ones are forgotten. Each entry takes about 1.2 kB of shared memory.",
								&dlock_stats_max,
								1000,
								10,
								100000,
								PGC_POSTMASTER,
								0,
								NULL,
								NULL,
								NULL);

	DefineCustomBoolVariable("dlock.log_stale_fences",
							 "Logs stale tokens that dlock.fence() checked.",
							 "At most one line per lease name every 10 seconds, for tokens known to have been granted for that name.",
							 &dlock_log_stale_fences,
							 true,
							 PGC_SUSET,
							 0,
							 NULL,
							 NULL,
							 NULL);

	/* Like dlock.stats_max: the places exist only when preloaded */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomIntVariable("dlock.max_queue_places",
								"Sets the number of places in queues that try_acquire(queue => true) can keep.",
								"One place per client that polls for a name it was refused, and one per name whose acquire() queue has a head while places exist. Each takes about 300 bytes of shared memory.",
								&dlock_max_queue_places,
								1000,
								16,
								100000,
								PGC_POSTMASTER,
								0,
								NULL,
								NULL,
								NULL);

	/* The conflict rule as drawn is the lock manager's (assert builds) */
	DlockConflictRuleCheck();

	/* The test build's pause points (nothing in any other build) */
	DlockTestHooksInit();

	MarkGUCPrefixReserved("dlock");

	if (process_shared_preload_libraries_in_progress)
	{
#ifdef DLOCK_HAVE_SHMEM_REQUEST_HOOK
		prev_shmem_request_hook = shmem_request_hook;
		shmem_request_hook = DlockShmemRequest;
#else
		DlockShmemRequest();
#endif
		prev_shmem_startup_hook = shmem_startup_hook;
		shmem_startup_hook = DlockShmemStartup;
	}

	RegisterXactCallback(DlockXactCallback, NULL);
	RegisterSubXactCallback(DlockSubXactCallback, NULL);
	LeaseStoreCacheInit();
}

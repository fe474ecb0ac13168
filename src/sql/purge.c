/*-------------------------------------------------------------------------
 *
 * purge.c
 *	  dlock.purge(): deleting the rows of names whose lease ended long ago.
 *
 * Every name ever granted keeps its row in dlock.lease_state, so names that
 * are used once (job:<uuid>) would grow the table without bound.  purge()
 * deletes the row of a name when all of this holds, at the moment of the
 * delete:
 *
 *	- the lease is free: released, force-released or expired, and past its
 *	  lock-delay, or ended by the exit of its session-bound holder's backend
 *	  (LeaseAvailabilityNow() says LEASE_FREE, the rule every grant follows);
 *	- it ended at least older_than ago.  The end is ended_at for a release
 *	  or a force-release, expires_at otherwise.  For a session-bound lease
 *	  whose backend exited, the moment of the exit is not recorded, so it
 *	  too counts from expires_at: such a row stays until older_than after
 *	  its ttl, never shorter than older_than after the exit;
 *	- no open transaction has fenced the name or is changing it, the
 *	  caller's own included;
 *	- nobody waits for the name: no acquire() is in its queue
 *	  (QueueIsEmpty), and no poller keeps a live place in it
 *	  (PlaceWaitsFor, places.c).
 *
 * Why deleting cannot break the token rules.  dlock.fence() is true only
 * for the token of a live row, and there is no row: a purged name's old
 * tokens stay false.  The next grant of the name finds no row and inserts
 * one with a token from dlock.token_seq, the one counter of the database,
 * which is larger than every token issued before, for this name or any.
 *
 * Why it is safe against concurrent calls.  For each candidate that a scan
 * of the table finds, purge() takes the name's lock in DLOCK_GRANT_LOCKMODE
 * with a conditional request.  That mode conflicts with every mode of the
 * conflict rule (grant.c), so getting it proves that no other transaction has
 * fenced the name (fence pins last to the end of the fencing transaction)
 * or is changing it; the lock manager does not make a backend's locks
 * conflict with its own, so locks this transaction holds on the name are
 * looked for separately.  The queue and the places are then probed, and the
 * rows are read again and classified under the lock: the scan's copy is only
 * a candidate.  A place taken after the probe is a poller that came later:
 * its poll waits for the purge as a grant does, and its place outlives the
 * rows (places are kept by name, not by row).
 *
 * The lock is kept until the end of the transaction, not given back after
 * the delete.  The other functions read the row with SnapshotSelf, to which
 * a row deleted by a transaction still in progress is still visible: a grant
 * that got the lock before the delete committed would find the old row, try
 * to update it, wait for the purge and then fail on a concurrently deleted
 * tuple.  Holding the lock makes it wait for the purge's commit instead, and
 * then find no row.  The locks of names that are skipped are given back at
 * once, as nothing was changed.
 *
 * Each held lock takes an entry of the shared lock table: the name's lock,
 * and a pin for each of its rows outside slot 0 (a semaphore of 16 permits
 * has 16 rows: 16 locks).  So a call is budgeted by locks, not by names: it
 * never holds more than PurgeLockBudget() of them, at most PURGE_MAX_LOCKS
 * and at most a quarter of the lock table, whatever a name needs.  A name
 * whose locks fit in what is left of the budget is deleted whole.  A name
 * that would fit in a budget of its own, but not in what is left, stops the
 * call; the next call starts on its page (see below).  A name whose rows
 * need more locks than a whole budget (up to DLOCK_MAX_HOLDERS rows, against
 * a small lock table) could never be deleted whole without running the lock
 * table out (53200) for the purge and for everyone else, at every call, so
 * it is purged in parts: the call deletes as many of its rows as the locks
 * left allow, those of its highest slots, and then stops.  Slot 0's row goes
 * with the last part.  A part follows the rules above as a whole name does:
 * every row of the name is read again and classified under the name's lock,
 * the name is purged only if all of them are free and long ended, each
 * deleted row's pin is taken and every lock is kept to commit, so a grant
 * or a change of the name waits for that commit and then finds the rows
 * that are left.  Those are the rows of the name's lowest slots, a state
 * that grants already meet (a slot without a row is free to them, as after
 * a grant into a higher slot committed and one into a lower slot rolled
 * back), and their tokens, like the deleted ones, fence false: they are
 * not live.  A later grant into a deleted slot inserts a row with a new
 * token, larger than every token issued before.
 *
 * A call returns how many names it deleted rows of, wholly or in part: a
 * name purged in parts counts once in each call that deletes some of its
 * rows.  A job that calls it again while it returns more than 0, each call
 * in its own transaction, purges any number of names, however many permits
 * each had, without running the lock table out for itself or for others:
 * every call that finds a name that may go deletes rows, as its first such
 * name always fits in, or is purged in part within, a whole budget.  A grant
 * of a name being purged (a name nobody used for older_than) waits at most
 * until the end of that transaction, which deletes one batch; try_acquire()
 * returns NULL then, as for any name that is being changed.  purge() itself
 * never waits for a name's lock, so it cannot take part in a deadlock with
 * dlock's other calls, whatever its transaction holds.
 *
 * The table is scanned with SnapshotSelf, which takes no SSI predicate
 * locks, so a purge in a SERIALIZABLE transaction does not make other
 * transactions fail.  Consecutive calls in one backend continue the scan
 * where the previous one spent its budget, wrapping around once, so that a
 * loop over a large table reads each page about once rather than once per
 * batch.
 *
 * Who may call it.  It deletes the history of every role's names, so it is
 * for superusers and roles with the privileges of the database's owner
 * (a maintenance role is made a member of the owner's role).  The check is
 * here rather than in the function's ACL, so that the extension script
 * creates the function's catalog row once and never updates it.
 *
 * A purge need not be durable: if its commit is lost in a crash, the ended
 * rows come back, which changes no answer.  A later grant of a purged name
 * waited for the purge's commit, so its own (flushed) commit record comes
 * after the purge's in the WAL.
 *
 * Invariants: I17 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/sql/purge.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/relscan.h"
#include "access/tableam.h"
#include "commands/dbcommands.h"
#include "common/int.h"
#include "access/twophase.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "sql/sql.h"
#include "dlock_compat.h"
#include "base/test_hooks.h"

PG_FUNCTION_INFO_V1(dlock_purge);

/*
 * Locks one call holds at most (but see PurgeLockBudget): each lasts until
 * the end of the transaction.  The shared lock table has room for
 * max_locks_per_transaction (64 by default) per backend and prepared
 * transaction, several thousand entries by default; a call takes at most
 * 1/PURGE_LOCK_TABLE_SHARE of them, and leaves the rest to every other
 * transaction.
 */
#define PURGE_MAX_LOCKS			1000
#define PURGE_LOCK_TABLE_SHARE	4

/* What PurgeName did with a candidate */
typedef enum PurgeOutcome
{
	PURGE_DELETED,				/* its rows were deleted; locks held */
	PURGE_PART,					/* some of its rows were deleted; locks held */
	PURGE_SKIPPED,				/* it may not be purged now; no lock held */
	PURGE_OVER_BUDGET			/* it fits in a budget, not in what is left */
} PurgeOutcome;


/* Where the next call in this backend starts its scan (see the header) */
static Oid	resume_relid = InvalidOid;
static BlockNumber resume_block = 0;

/*
 * LeaseEndMoment - when a lease stopped being live, as purge() counts it
 * (see the header comment for session-bound leases)
 */
static inline TimestampTz
LeaseEndMoment(const LeaseRow *row)
{
	return row->ended ? row->ended_at : row->expires_at;
}

/*
 * PurgeLockBudget - the locks one call may hold: PURGE_MAX_LOCKS, and no
 * more than a quarter of the shared lock table (as PostgreSQL sizes it:
 * max_locks_per_transaction per backend and prepared transaction)
 *
 * At least 2, the name's lock and one pin, so that a part of any name fits:
 * the table has far more room than that at the smallest settings.
 */
static int
PurgeLockBudget(void)
{
	int64		table = (int64) max_locks_per_xact * (MaxBackends + max_prepared_xacts);

	return (int) Max(Min(table / PURGE_LOCK_TABLE_SHARE, PURGE_MAX_LOCKS), 2);
}

/*
 * HeldByThisTransaction - whether this transaction holds the name's lock in
 * any mode: it fenced the name, changed it or granted it, and the lock
 * manager would not make our own locks conflict with the purge's
 */
static bool
HeldByThisTransaction(const LeaseName *name)
{
	LOCKTAG		tag;

	DlockLockTag(&tag, DLOCK_SPACE_NAME, name->hash);
	return dlock_lock_held_by_me(&tag, DLOCK_FENCE_LOCKMODE) ||
		dlock_lock_held_by_me(&tag, DLOCK_ALONGSIDE_LOCKMODE) ||
		dlock_lock_held_by_me(&tag, DLOCK_CHANGE_LOCKMODE) ||
		dlock_lock_held_by_me(&tag, DLOCK_SERIAL_LOCKMODE) ||
		dlock_lock_held_by_me(&tag, DLOCK_GRANT_LOCKMODE);
}

/*
 * TakePin - the pin of a row of a slot other than 0 in
 * DLOCK_GRANT_LOCKMODE, without waiting: proof that no other transaction
 * has fenced its token; false also when this transaction has
 */
static bool
TakePin(const LeaseName *name, const LeaseRow *row, LOCKTAG *pin)
{
	PinLockTag(pin, name, row);
	if (dlock_lock_held_by_me(pin, DLOCK_FENCE_LOCKMODE))
		return false;
	return LockAcquireWithin(pin, DLOCK_GRANT_LOCKMODE, NoWait);
}

/*
 * PurgeName - delete the rows of a candidate that the scan found, if it may
 * be purged: every row of the name (one per slot) must be.
 *
 * room: the locks left in the call's budget; budget: the whole budget.  The
 * name's lock and the pins of the rows outside slot 0 are taken for the rows
 * deleted.  When they fit in room, every row is deleted.  When they do not
 * fit in room but do in a budget, or room has no place for a pin, nothing is
 * done: the next call starts with room for the name.  When they would not
 * fit in any budget, the rows of the highest slots are deleted, as many as
 * room allows (slot 0's is never among them: it needs only the name's lock,
 * and goes with the last part).  The locks of the rows deleted stay held
 * until the end of the transaction, and *locks says how many they are.
 */
static PurgeOutcome
PurgeName(LeaseStore *store, const LeaseName *name, TimestampTz cutoff,
		  int room, int budget, int *locks)
{
	LeaseRows	rows;
	LOCKTAG    *pins;
	int			pinned = 0;
	int			need = 1;
	int			first;			/* the lowest row deleted */
	bool		purge;
	TimestampTz now;

	Assert(room >= 1 && room <= budget);

	if (HeldByThisTransaction(name))
		return PURGE_SKIPPED;
	if (!NameLockAcquire(name, DLOCK_GRANT_LOCKMODE, NoWait))
		return PURGE_SKIPPED;
	if (!QueueIsEmpty(name) || PlaceWaitsFor(name))
	{
		NameLockRelease(name, DLOCK_GRANT_LOCKMODE);
		return PURGE_SKIPPED;
	}

	LeaseStoreFetchAll(store, name, &rows);
	DLOCK_PAUSE("purge_read");
	now = GetCurrentTimestamp();
	purge = rows.count > 0;
	for (int i = 0; i < rows.count && purge; i++)
	{
		const LeaseRow *row = &rows.row[i];
		TimestampTz until;

		purge = LeaseEndMoment(row) <= cutoff &&
			LeaseAvailabilityNow(row, now, &until) == LEASE_FREE;
		if (row->slot != 0)
			need++;
	}
	if (!purge)
	{
		NameLockRelease(name, DLOCK_GRANT_LOCKMODE);
		return PURGE_SKIPPED;
	}
	/* A part needs the name's lock and at least one pin */
	if (need > room && (need <= budget || room < 2))
	{
		NameLockRelease(name, DLOCK_GRANT_LOCKMODE);
		return PURGE_OVER_BUDGET;
	}

	/*
	 * The rows come by slot, so the last room - 1 are those of the highest
	 * slots, all above 0 when not every row fits: those left keep the name's
	 * lowest slots.
	 */
	first = need <= room ? 0 : rows.count - (room - 1);
	Assert(first == 0 || rows.row[first].slot > 0);

	pins = palloc(sizeof(LOCKTAG) * rows.count);
	for (int i = first; i < rows.count && purge; i++)
	{
		if (rows.row[i].slot == 0)
			continue;
		purge = TakePin(name, &rows.row[i], &pins[pinned]);
		if (purge)
			pinned++;
	}
	if (!purge)
	{
		while (--pinned >= 0)
			LockRelease(&pins[pinned], DLOCK_GRANT_LOCKMODE, false);
		NameLockRelease(name, DLOCK_GRANT_LOCKMODE);
		return PURGE_SKIPPED;
	}

	DLOCK_PAUSE("purge_pin");
	for (int i = first; i < rows.count; i++)
		LeaseStoreDelete(store, &rows.row[i]);
	*locks = 1 + pinned;
	return first == 0 ? PURGE_DELETED : PURGE_PART;
}

/*
 * dlock_purge - SQL function dlock.purge(older_than)
 *
 * Deletes the rows of names whose lease ended at least older_than ago and
 * that may be purged, as many as its lock budget allows (see the header
 * comment); returns how many names it deleted rows of, wholly or in part.
 */
Datum
dlock_purge(PG_FUNCTION_ARGS)
{
	int64		older_than_us = ArgGetOlderThan(fcinfo, 0);
	TimestampTz cutoff;
	LeaseStore	store;
	TableScanDesc scan;
	HeapScanDesc hscan;
	HeapTuple	tuple;
	BlockNumber nblocks;
	BlockNumber start;
	MemoryContext row_context;
	MemoryContext old_context;
	int64		purged = 0;
	int			budget = PurgeLockBudget();
	int			held = 0;		/* locks held for the names deleted */
	bool		stopped = false;	/* the budget is spent */

	if (!dlock_database_ownercheck(MyDatabaseId, GetUserId()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to purge leases"),
				 errdetail("Only superusers and roles with the privileges of the database's owner may call dlock.purge()."),
				 errhint("Call it as the owner of database \"%s\", or grant that role to the role that calls it.",
						 get_database_name(MyDatabaseId))));

	PreventCommandDuringRecovery("dlock.purge()");
	PreventCommandIfReadOnly("dlock.purge()");

	/* An older_than beyond the timestamp range purges nothing */
	if (pg_sub_s64_overflow(GetCurrentTimestamp(), older_than_us, &cutoff))
		cutoff = DT_NOBEGIN;

	LeaseStoreOpen(&store, RowExclusiveLock);

	/* No synchronized scan: the scan starts where this backend left off */
	scan = table_beginscan_strat(store.heap, SnapshotSelf, 0, NULL, true, false);
	hscan = (HeapScanDesc) scan;
	nblocks = hscan->rs_nblocks;
	start = (resume_relid == RelationGetRelid(store.heap) &&
			 resume_block < nblocks) ? resume_block : 0;
	if (nblocks > 0)
		heap_setscanlimits(scan, start, nblocks);
	resume_relid = RelationGetRelid(store.heap);
	resume_block = 0;

	row_context = AllocSetContextCreate(CurrentMemoryContext, "dlock purge row",
										ALLOCSET_SMALL_SIZES);

	while (!stopped && (tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		LeaseRow	row;
		text	   *name_text;
		LeaseName	name;

		CHECK_FOR_INTERRUPTS();

		old_context = MemoryContextSwitchTo(row_context);
		name_text = LeaseStoreDecode(&store, tuple, &row);

		/*
		 * The scan's copy only decides whether the name is worth locking.  A
		 * lease ended after the scan read its row is left for a later call.
		 */
		if (LeaseEndMoment(&row) <= cutoff)
		{
			int			locks = 0;

			LeaseNameInit(&name, VARDATA_ANY(name_text), VARSIZE_ANY_EXHDR(name_text));
			switch (PurgeName(&store, &name, cutoff, budget - held, budget,
							  &locks))
			{
				case PURGE_DELETED:
					purged++;
					held += locks;
					stopped = held >= budget;
					break;
				case PURGE_PART:
					/* The rest of the name is left for the next call */
					purged++;
					held += locks;
					stopped = true;
					break;
				case PURGE_SKIPPED:
					break;
				case PURGE_OVER_BUDGET:
					stopped = true;
					break;
			}
		}
		MemoryContextSwitchTo(old_context);
		MemoryContextReset(row_context);
	}

	/*
	 * The budget spent: the next call continues on the page this one ended
	 * on, where a name left for want of budget is.  The rows left of a name
	 * purged in part may be on any page; the scan wraps around to them.
	 */
	if (stopped && BlockNumberIsValid(hscan->rs_cblock))
		resume_block = hscan->rs_cblock;

	table_endscan(scan);
	MemoryContextDelete(row_context);
	LeaseStoreClose(&store);

	PG_RETURN_INT64(purged);
}

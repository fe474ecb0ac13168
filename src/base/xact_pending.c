/*-------------------------------------------------------------------------
 *
 * xact_pending.c
 *	  The rule by which per-transaction items outlive, or not, the abort of
 *	  a subtransaction.
 *
 * Pending items (wake-ups of queue heads and watchers, session locks to
 * give back, uncommitted session-bound grants) are tagged with the
 * subtransaction that made them.  Subtransaction ids grow within a
 * transaction, and a subtransaction that is still open is an ancestor of
 * every later one, so when subtransaction S aborts, exactly the items
 * tagged S or higher were made in S or in its children: those are dropped.
 * A committing subtransaction hands its items to its parent, which the
 * same rule already does.  Every module that keeps such items uses this one
 * function (I5 in docs/internals.md).
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/base/xact_pending.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "nodes/pg_list.h"
#include "utils/memutils.h"

#include "base/base.h"

/*
 * PendingItemsAtSubAbort - the pending items (each starting with a
 * PendingItem) that survive the abort of subtransaction mySubid: those made
 * before it started, by the rule in the banner.  The list lives in
 * TopTransactionContext, as the items do.
 */
List *
PendingItemsAtSubAbort(List *items, SubTransactionId mySubid)
{
	List	   *kept = NIL;
	ListCell   *lc;
	MemoryContext old;

	if (items == NIL)
		return NIL;
	old = MemoryContextSwitchTo(TopTransactionContext);
	foreach(lc, items)
	{
		PendingItem *item = lfirst(lc);

		if (item->subid < mySubid)
			kept = lappend(kept, item);
	}
	list_free(items);
	MemoryContextSwitchTo(old);
	return kept;
}

/*-------------------------------------------------------------------------
 *
 * lease_state_trigger.c
 *	  Notices a write to dlock.lease_state that dlock's functions did not
 *	  make: the table owner's own INSERT, UPDATE, DELETE or TRUNCATE, or a
 *	  COPY into it (a restore).
 *
 * Several answers are kept from one read of the table to the next: the
 * rows of the name a transaction holds (lease_store.c) and fence()'s
 * answers (fence.c).  They stay exact because every writer of the table
 * goes through dlock's functions, under the locks of the conflict rule,
 * and tells them.  A statement run by hand on the table does neither.  So
 * the table has a statement trigger (dlock--1.2--1.3.sql) that sends a
 * relcache invalidation of the table: this backend forgets what it kept at
 * the statement's end, every other backend at its next lock of a relation
 * once the statement's transaction commits (LeaseStoreGeneration changes).
 * dlock's own writes use the table access methods directly and fire no
 * trigger, so they cost nothing here.
 *
 * Invariants: I4, I5 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/sql/lease_state_trigger.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/trigger.h"
#include "fmgr.h"
#include "utils/inval.h"

#include "sql/sql.h"
#include "dlock_compat.h"

PG_FUNCTION_INFO_V1(dlock_lease_state_changed);

Datum
dlock_lease_state_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("dlock.lease_state_changed() may only be called as a trigger")));
	CacheInvalidateRelcache(trigdata->tg_relation);
	PG_RETURN_POINTER(NULL);
}

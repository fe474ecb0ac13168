/*-------------------------------------------------------------------------
 *
 * durability.c
 *	  Making the commit of a grant as durable as the server allows.
 *
 * A grant that is acknowledged and then lost would let its token be issued
 * again, to someone else, after a crash or a failover.  So a transaction
 * that issued a token commits at least with synchronous_commit = on: its
 * commit record is flushed locally and, where synchronous standbys are
 * configured, on them too, whatever synchronous_commit the caller chose
 * (a stricter remote_apply is kept).  The setting is raised just before
 * the commit, for that commit only; it cannot be raised earlier from inside
 * the function, because a function with a SET clause restores settings on
 * exit.  Renewals and releases keep the caller's setting: losing one only
 * changes how long a lease lasts, never repeats a token.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/durability.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/guc.h"

#include "dlock.h"

static bool GrantInThisTransaction = false;

/*
 * RequireDurableCommit - the current transaction issued a token
 */
void
RequireDurableCommit(void)
{
	GrantInThisTransaction = true;
	/* The local flush, at least, does not depend on the hook below */
	ForceSyncCommit();
}

static void
DurabilityXactCallback(XactEvent event, void *arg pg_attribute_unused())
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (GrantInThisTransaction &&
				synchronous_commit < SYNCHRONOUS_COMMIT_REMOTE_FLUSH)
				(void) set_config_option("synchronous_commit", "on",
										 PGC_USERSET, PGC_S_SESSION,
										 GUC_ACTION_LOCAL, true, 0, false);
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			GrantInThisTransaction = false;
			break;
		default:
			break;
	}
}

/*
 * DurabilityXactCallbackInit - register the pre-commit hook (once, from
 * _PG_init)
 */
void
DurabilityXactCallbackInit(void)
{
	RegisterXactCallback(DurabilityXactCallback, NULL);
}

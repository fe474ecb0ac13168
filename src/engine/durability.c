/*-------------------------------------------------------------------------
 *
 * durability.c
 *	  How durable the commits of grants and of releases are.
 *
 * A grant's token cannot be issued again even when the grant is lost: the
 * token counter's log-ahead record is flushed before a token is handed out
 * (lease_store.c).  But the grant itself is lost with its commit record, and
 * its holder would then go on believing in a lease the server forgot (its
 * fence is false, renew fails, and the name goes to the next requester).  So
 * with dlock.durable_grants on, the default, a transaction that issued a
 * token commits at least with synchronous_commit = on: its
 * commit record is flushed locally and, where synchronous standbys are
 * configured, on them too, whatever synchronous_commit the caller chose
 * (a stricter remote_apply is kept); so does the PREPARE TRANSACTION of a
 * grant.  The setting is raised just before the commit, for that commit only; it cannot be raised earlier from inside
 * the function, because a function with a SET clause restores settings on
 * exit.  Renewals and force-releases keep the caller's setting: losing one
 * only changes how long a lease lasts, never repeats a token.
 *
 * With dlock.durable_grants off (as set when the token is issued), a grant
 * commits with the caller's synchronous_commit like any other write.  That
 * suits leases whose only guarded effects are fenced writes in the same
 * database: a fenced write that commits durably flushes the grant with it,
 * which is earlier in the WAL, so a lock cycle of grant, fenced write and
 * lazy release costs one flush.
 *
 * A release whose transaction changed nothing else commits without waiting
 * for its flush (dlock.lazy_release): one WAL flush per lock cycle instead
 * of two.  Not when the caller's synchronous_commit waits for synchronous
 * standbys: lazy release never lowers what the caller asked of them.  That is safe because a release lost in a crash or a failover
 * leaves the lease as it was, held by an owner who is done with it, until
 * its ttl runs out; no one can have been granted the name in between, since
 * that grant's flush would have carried the release, which is earlier in the
 * WAL.  "Changed nothing else" is judged by the WAL: the transaction's WAL
 * must end where dlock's last release call left it, and must not have grown
 * between release calls.  Anything else the transaction wrote, before or
 * after, keeps the caller's setting, so the caller's own writes are never
 * made less durable.  The WAL of a release call includes the page prunes of
 * its reads, which need no durability of their own.
 *
 * Invariants: I1, I9 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/engine/durability.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "utils/guc.h"

#include "engine/engine.h"

/* A token was issued with dlock.durable_grants on */
static bool GrantInThisTransaction = false;

/* Lazy commit of releases: see the header comment */
static bool ReleaseInThisTransaction = false;
static bool OtherWalInThisTransaction = false;
static XLogRecPtr WalEndAfterRelease = InvalidXLogRecPtr;

/* The caller's synchronous_commit while a lazy commit runs, or -1 */
static int	CallerSynchronousCommit = -1;

/*
 * RequireDurableCommit - the current transaction issued a token; its commit
 * is made durable unless dlock.durable_grants is off
 */
void
RequireDurableCommit(void)
{
	if (!dlock_durable_grants)
		return;
	GrantInThisTransaction = true;
	/* The local flush, at least, does not depend on the hook below */
	ForceSyncCommit();
}

/*
 * ReleaseCallBegin - a release call starts: note whether the transaction
 * wrote WAL since dlock's last release call ended (or since it began)
 */
void
ReleaseCallBegin(void)
{
	if (XactLastRecEnd != WalEndAfterRelease)
		OtherWalInThisTransaction = true;
}

/*
 * ReleaseCallEnd - a release call ends; released: it ended a lease
 */
void
ReleaseCallEnd(bool released)
{
	WalEndAfterRelease = XactLastRecEnd;
	if (released)
		ReleaseInThisTransaction = true;
}

/*
 * OnlyReleasesInThisTransaction - whether all WAL this transaction wrote
 * came from dlock's release calls, at least one of which ended a lease
 */
static bool
OnlyReleasesInThisTransaction(void)
{
	return ReleaseInThisTransaction && !OtherWalInThisTransaction &&
		XactLastRecEnd == WalEndAfterRelease;
}

/*
 * CallerWaitsForStandbys - whether the caller's synchronous_commit makes
 * its commits wait for synchronous standbys
 *
 * A standby receives only WAL that is flushed locally, so such a commit
 * cannot skip its local flush without also skipping the standbys' wait.
 */
static bool
CallerWaitsForStandbys(void)
{
	return SyncRepRequested() &&
		SyncRepStandbyNames != NULL && SyncRepStandbyNames[0] != '\0';
}

static void
SetSynchronousCommit(const char *value)
{
	(void) set_config_option("synchronous_commit", value,
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * DurabilityAtPreCommit - just before the commit (or PREPARE) record is
 * written (dispatcher, dlock.c): choose synchronous_commit for it
 *
 * A grant's commit is flushed and waits for synchronous standbys (with
 * dlock.durable_grants on).  So does
 * the PREPARE of a grant: once the prepared transaction is on the standby,
 * it keeps its locks through a failover, so no one else can be granted the
 * name, and its token cannot be issued again, whatever becomes of COMMIT
 * PREPARED.  A release-only commit skips its flush, unless the caller asked
 * for synchronous standbys; a PREPARE is always flushed by PostgreSQL.
 */
void
DurabilityAtPreCommit(bool prepare)
{
	if (GrantInThisTransaction)
	{
		if (synchronous_commit < SYNCHRONOUS_COMMIT_REMOTE_FLUSH)
			SetSynchronousCommit("on");
	}
	else if (!prepare && dlock_lazy_release && OnlyReleasesInThisTransaction() &&
			 synchronous_commit > SYNCHRONOUS_COMMIT_OFF &&
			 !CallerWaitsForStandbys())
	{
		/*
		 * Lowered in the variable alone, for this commit record, and put back
		 * when the transaction ends.  Through the GUC machinery it would also
		 * cost a setting lookup and an end-of-transaction pass over every
		 * setting, a few percent of a lock cycle; the assign hook it would
		 * run only chooses what to wait for on synchronous standbys, which
		 * this caller's setting does not wait for (checked above).
		 */
		CallerSynchronousCommit = synchronous_commit;
		synchronous_commit = SYNCHRONOUS_COMMIT_OFF;
	}
}

/*
 * DurabilityAtEOXact - the transaction ended (dispatcher, dlock.c)
 *
 * A grant undone by a rolled-back subtransaction still makes the commit
 * durable: harmless, and simpler than tracking which grants remain.
 */
void
DurabilityAtEOXact(void)
{
	if (CallerSynchronousCommit >= 0)
		synchronous_commit = CallerSynchronousCommit;
	CallerSynchronousCommit = -1;
	GrantInThisTransaction = false;
	ReleaseInThisTransaction = false;
	OtherWalInThisTransaction = false;
	WalEndAfterRelease = InvalidXLogRecPtr;
}

/*-------------------------------------------------------------------------
 *
 * dlock.c
 *	  Module entry point of dlock: leased, fenced locks for SQL.
 *
 * Loading the module defines dlock's settings and registers its
 * end-of-transaction work (fence cache, wake-ups, session-bound leases,
 * durable commits of grants, lazy commits of releases) and the
 * invalidation of its cached relation OIDs.
 * dlock keeps no shared memory of its own: waiters queue in the lock
 * manager and are woken through their latches, so it works the same with
 * and without shared_preload_libraries.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/dlock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/guc.h"

#include "dlock.h"
#include "dlock_compat.h"

PG_MODULE_MAGIC;

/* dlock.max_ttl: the longest ttl a grant or renew may ask for, in seconds */
int			dlock_max_ttl = 86400;

/* dlock.default_lock_delay: lock-delay of grants that do not give one, in ms */
int			dlock_default_lock_delay = 0;

/* dlock.lazy_release: a release-only transaction need not wait for its flush */
bool		dlock_lazy_release = true;

void		_PG_init(void);

/*
 * _PG_init - define the settings and hooks of the module
 */
void
_PG_init(void)
{
	DefineCustomIntVariable("dlock.max_ttl",
							"Sets the longest ttl a lease may be granted or renewed for.",
							"A holder that needs longer renews its lease before it expires.",
							&dlock_max_ttl,
							86400,
							1,
							INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL,
							NULL,
							NULL);

	DefineCustomIntVariable("dlock.default_lock_delay",
							"Sets the lock-delay of grants that do not give one.",
							"After a lease ends by expiry or force_release, its name is not granted again until the lock-delay has passed.",
							&dlock_default_lock_delay,
							0,
							0,
							INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL,
							NULL,
							NULL);

	DefineCustomBoolVariable("dlock.lazy_release",
							 "Lets a transaction whose only change is a release commit without waiting for its WAL flush.",
							 "A release lost in a crash or failover leaves the lease held until its ttl runs out; it never lets the name be granted twice. Transactions that also change anything else keep synchronous_commit.",
							 &dlock_lazy_release,
							 true,
							 PGC_USERSET,
							 0,
							 NULL,
							 NULL,
							 NULL);

	MarkGUCPrefixReserved("dlock");

	FenceXactCallbackInit();
	WaitingXactCallbackInit();
	SessionXactCallbackInit();
	DurabilityXactCallbackInit();
	LeaseStoreCacheInit();
}

/*-------------------------------------------------------------------------
 *
 * settings.c
 *	  The settings of the lease rules: how long a lease may last, the
 *	  default lock-delay, and what a grant's and a release's commit wait
 *	  for, and whether session-bound leases may be asked for.
 *
 * They are read by every layer above (the argument checks, durability,
 * the SQL functions), so they live at the bottom, apart from the module's
 * entry point that defines them at load time.  The settings of the
 * statistics and of the queue places belong to those modules (stats.c,
 * places.c).
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/base/settings.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"

#include "base/base.h"
#include "dlock_compat.h"

/* dlock.max_ttl: the longest ttl a grant or renew may ask for, in seconds */
int			dlock_max_ttl = 86400;

/* dlock.default_lock_delay: lock-delay of grants that do not give one, in ms */
int			dlock_default_lock_delay = 0;

/* dlock.lazy_release: a release-only transaction need not wait for its flush */
bool		dlock_lazy_release = true;

/* dlock.durable_grants: a grant's commit is flushed whatever synchronous_commit says */
bool		dlock_durable_grants = true;

/* dlock.allow_session_bound: session_bound => true may be asked for */
bool		dlock_allow_session_bound = true;

static bool DefaultLockDelayCheck(int *newval, void **extra, GucSource source);

/*
 * DlockSettingsDefine - define the settings (from _PG_init)
 */
void
DlockSettingsDefine(void)
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
							DefaultLockDelayCheck,
							NULL,
							NULL);

	DefineCustomBoolVariable("dlock.durable_grants",
							 "Makes the commit of a grant wait for its WAL flush and for synchronous standbys.",
							 "When off, a grant commits with the caller's synchronous_commit: a grant lost in a crash or failover is forgotten, and its name is granted again with a larger token.",
							 &dlock_durable_grants,
							 true,
							 PGC_USERSET,
							 0,
							 NULL,
							 NULL,
							 NULL);

	DefineCustomBoolVariable("dlock.allow_session_bound",
							 "Allows leases that end with the backend that took them (session_bound => true).",
							 "Turn it off for roles that connect through a transaction pooler: there a backend serves many clients, and the pooler ends or reuses backends on its own schedule.",
							 &dlock_allow_session_bound,
							 true,
							 PGC_SUSET,
							 0,
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
}

/*
 * DefaultLockDelayCheck - a SET of dlock.default_lock_delay may not exceed
 * dlock.max_ttl, the bound every explicit lock_delay has
 *
 * Values from the configuration file are not checked here, since the order
 * in which the two settings are read is not known; every grant checks the
 * delay it uses (args.c).
 */
static bool
DefaultLockDelayCheck(int *newval, void **extra pg_attribute_unused(), GucSource source)
{
	if (source < PGC_S_INTERACTIVE)
		return true;
	if ((int64) *newval > (int64) dlock_max_ttl * 1000)
	{
		GUC_check_errdetail("The lock-delay may not exceed dlock.max_ttl (%d s).",
							dlock_max_ttl);
		return false;
	}
	return true;
}

/*-------------------------------------------------------------------------
 *
 * dlock.c
 *	  Module entry point of dlock: leased, fenced locks for SQL.
 *
 * Loading the module defines dlock's settings and registers the
 * end-of-transaction cleanup of the fence cache.  dlock needs no shared
 * memory, so it works without shared_preload_libraries.
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

	MarkGUCPrefixReserved("dlock");

	FenceXactCallbackInit();
}

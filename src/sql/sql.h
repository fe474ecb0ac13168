/*-------------------------------------------------------------------------
 *
 * sql.h
 *	  The SQL faces: what the SQL entry points share.
 *
 * lease_api.c's helpers, also used by lease_set.c.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/sql/sql.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_SQL_H
#define DLOCK_SQL_H

#include "access/tupdesc.h"
#include "engine/engine.h"

/* lease_api.c: the SQL functions of single leases, also used by lease_set.c */
extern void CheckLeasesWritable(const char *funcname);
extern HeapTuple LeaseResultTuple(TupleDesc tupdesc, const LeaseName *name,
								  const LeaseRow *row);
extern WaitLimit AcquireLimit(int64 timeout_us);
extern void AcquireWaitBegins(const LeaseName *name, TimestampTz *wait_start);
extern void AcquireWaitEnded(const LeaseName *name, TimestampTz wait_start);
extern void AcquireTimedOut(const LeaseName *name, const LeaseKind *kind,
							GrantOutcome outcome,
							TimestampTz wait_start);
extern void AcquireErrorContext(void *arg);

#endif							/* DLOCK_SQL_H */

/*-------------------------------------------------------------------------
 *
 * dlock_compat.h
 *	  Every PG_VERSION_NUM difference dlock meets, in one place.
 *
 * dlock targets PostgreSQL 15 and keeps building on 13 to 17.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/dlock_compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_COMPAT_H
#define DLOCK_COMPAT_H

#include "access/genam.h"
#include "access/heapam.h"
#include "funcapi.h"
#include "storage/lock.h"
#include "utils/guc.h"

#if PG_VERSION_NUM < 130000
#error "dlock requires PostgreSQL 13 or later"
#endif

#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/* GUC prefix reservation was named EmitWarningsOnPlaceholders before 15 */
#if PG_VERSION_NUM < 150000
#define MarkGUCPrefixReserved(prefix) EmitWarningsOnPlaceholders(prefix)
#endif

/* index_insert() gained the indexUnchanged hint in 14 */
#if PG_VERSION_NUM >= 140000
#define dlock_index_insert(irel, values, isnull, tid, hrel, check, unchanged, info) \
	index_insert(irel, values, isnull, tid, hrel, check, unchanged, info)
#else
#define dlock_index_insert(irel, values, isnull, tid, hrel, check, unchanged, info) \
	index_insert(irel, values, isnull, tid, hrel, check, info)
#endif

/*
 * dlock_simple_heap_update - simple_heap_update(), returning whether the
 * new version needs index entries (false for a HOT update)
 */
static inline bool
dlock_simple_heap_update(Relation rel, ItemPointer otid, HeapTuple tuple)
{
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;

	simple_heap_update(rel, otid, tuple, &update_indexes);
	return update_indexes == TU_All;
#else
	simple_heap_update(rel, otid, tuple);
	return !HeapTupleIsHeapOnly(tuple);
#endif
}

/* LockHeldByMe() gained an "or stronger" argument in 17 */
#if PG_VERSION_NUM >= 170000
#define dlock_lock_held_by_me(tag, mode) LockHeldByMe(tag, mode, false)
#else
#define dlock_lock_held_by_me(tag, mode) LockHeldByMe(tag, mode)
#endif

/* The PGPROC of a virtual transaction id's backend (procNumber since 17) */
#if PG_VERSION_NUM >= 170000
#include "storage/procarray.h"
#define dlock_vxid_get_proc(vxid) ProcNumberGetProc((vxid).procNumber)
#else
#include "storage/sinvaladt.h"
#define dlock_vxid_get_proc(vxid) BackendIdGetProc((vxid).backendId)
#endif

/*
 * dlock_init_materialized_srf - set up a set-returning function's result as
 * a tuplestore of its declared row type (InitMaterializedSRF() from 15 on)
 */
#if PG_VERSION_NUM >= 150000
#define dlock_init_materialized_srf(fcinfo) InitMaterializedSRF(fcinfo, 0)
#else
#include "miscadmin.h"
#include "utils/tuplestore.h"

static inline void
dlock_init_materialized_srf(FunctionCallInfo fcinfo)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	tupdesc;
	MemoryContext old;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		(rsinfo->allowedModes & SFRM_Materialize) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("materialize mode required, but it is not allowed in this context")));

	old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult =
		tuplestore_begin_heap((rsinfo->allowedModes & SFRM_Materialize_Random) != 0,
							  false, work_mem);
	rsinfo->setDesc = CreateTupleDescCopy(tupdesc);
	MemoryContextSwitchTo(old);
}
#endif

/*
 * Shared memory is requested from shmem_request_hook since 15; before, from
 * _PG_init while shared_preload_libraries is processed
 */
#if PG_VERSION_NUM >= 150000
#define DLOCK_HAVE_SHMEM_REQUEST_HOOK 1
#endif

/* Whether the current role may act as the database's owner (renamed in 16) */
#if PG_VERSION_NUM >= 160000
#include "catalog/pg_database.h"
#include "utils/acl.h"
#define dlock_database_ownercheck(dbid, roleid) \
	object_ownercheck(DatabaseRelationId, dbid, roleid)
#else
#include "utils/acl.h"
#define dlock_database_ownercheck(dbid, roleid) pg_database_ownercheck(dbid, roleid)
#endif

/* The timeline that WAL is written on now (a primary's) */
#if PG_VERSION_NUM >= 150000
#define dlock_insert_timeline() GetWALInsertionTimeLine()
#else
#define dlock_insert_timeline() ThisTimeLineID
#endif

#endif							/* DLOCK_COMPAT_H */

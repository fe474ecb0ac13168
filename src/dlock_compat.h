/*-------------------------------------------------------------------------
 *
 * dlock_compat.h
 *	  Every PG_VERSION_NUM difference dlock meets, in one place.
 *
 * dlock is built and tested on PostgreSQL 13, 15, 17 and 18 (14 and 16 are
 * in no Debian release that CI can reach: they are covered by the same
 * PG_VERSION_NUM tests, not by a run).
 *
 * Every module that defines a SQL-callable function (PG_FUNCTION_INFO_V1)
 * includes this header after fmgr.h: the module is built with
 * -fvisibility=hidden, and before 16 only this header's PG_FUNCTION_INFO_V1
 * exports the function.
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

/*
 * Exported symbols.  dlock.so is built with -fvisibility=hidden (Makefile),
 * so that its internal functions do not enter the backend's namespace, where
 * another library's functions of the same name could be bound in their
 * place.  The server looks up only the magic block, _PG_init and the SQL
 * entry points with their info functions: those carry PGDLLEXPORT.  From 16
 * on, PostgreSQL itself builds modules that way and its fmgr.h marks them;
 * before, PGDLLEXPORT is empty outside Windows and PG_FUNCTION_INFO_V1 does
 * not mark the function, so both are given 16's definitions here.  The
 * macros expand where they are used, after this header.
 */
#if PG_VERSION_NUM < 160000 && defined(__GNUC__) && !defined(WIN32)
#undef PGDLLEXPORT
#define PGDLLEXPORT __attribute__((visibility("default")))

#undef PG_FUNCTION_INFO_V1
#define PG_FUNCTION_INFO_V1(funcname) \
extern PGDLLEXPORT Datum funcname(PG_FUNCTION_ARGS); \
extern PGDLLEXPORT const Pg_finfo_record * CppConcat(pg_finfo_,funcname)(void); \
const Pg_finfo_record * \
CppConcat(pg_finfo_,funcname) (void) \
{ \
	static const Pg_finfo_record my_finfo = { 1 }; \
	return &my_finfo; \
} \
extern int no_such_variable

extern PGDLLEXPORT void _PG_init(void);
#endif

/* strtoi64() is new in 14 (int64 is long or long long, both within strtoll) */
#if PG_VERSION_NUM < 140000
#define strtoi64(str, endptr, base) ((int64) strtoll(str, endptr, base))
#endif

/* GUC prefix reservation was named EmitWarningsOnPlaceholders before 15 */
#if PG_VERSION_NUM < 150000
#define MarkGUCPrefixReserved(prefix) EmitWarningsOnPlaceholders(prefix)
#endif

/* index_insert() gained the indexUnchanged hint in 14; 13 goes without it */
static inline bool
dlock_index_insert(Relation irel, Datum *values, bool *isnull, ItemPointer tid,
				   Relation hrel, IndexUniqueCheck check, bool unchanged,
				   IndexInfo *info)
{
#if PG_VERSION_NUM >= 140000
	return index_insert(irel, values, isnull, tid, hrel, check, unchanged, info);
#else
	(void) unchanged;
	return index_insert(irel, values, isnull, tid, hrel, check, info);
#endif
}

/* index_beginscan() takes the scan's instrumentation (none here) since 18 */
#if PG_VERSION_NUM >= 180000
#define dlock_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan(heap, index, snapshot, NULL, nkeys, norderbys)
#else
#define dlock_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan(heap, index, snapshot, nkeys, norderbys)
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

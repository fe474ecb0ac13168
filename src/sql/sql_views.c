/*-------------------------------------------------------------------------
 *
 * sql_views.c
 *	  The SQL functions behind dlock's views and lock keys:
 *	  dlock.lease_states(), which dlock.leases selects from, and
 *	  dlock.name_key(), which dlock.locks joins pg_locks with.
 *
 * They read and classify with the model (lease_model.c) and the store
 * (lease_store.c), and change nothing.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/sql/sql_views.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "sql/sql.h"
#include "dlock_compat.h"

/* Columns of dlock.lease_states(), in the order of the view dlock.leases */
#define LEASE_STATES_COLS	15

PG_FUNCTION_INFO_V1(dlock_lease_states);

/*
 * dlock_lease_states - SQL function dlock.lease_states(), the rows of the
 * view dlock.leases
 *
 * The table is read through the active snapshot, as the plain SQL view of
 * 1.0 read it: a REPEATABLE READ transaction sees the same rows on every
 * read, while state, grantable_at and holder liveness are of the moment of
 * the call (one clock reading for all rows).  Unlike the functions that
 * change leases, this takes no name locks, so a row may change right after
 * it is shown.
 *
 * The caller needs no privilege on the table.  owner is shown only for
 * leases whose holder role the caller has the privileges of: the test the
 * functions use to let a role act for a holder, and pg_has_role(holder,
 * 'USAGE') in SQL.
 */
Datum
dlock_lease_states(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			user = GetUserId();
	TimestampTz now = GetCurrentTimestamp();
	LeaseStore	store;
	LeaseStoreScan *scan;
	MemoryContext rowcxt;
	MemoryContext oldcxt;
	LeaseRow	row;
	text	   *name;

	dlock_init_materialized_srf(fcinfo);

	/* What one row needs (its strings, its output) is freed row by row */
	rowcxt = AllocSetContextCreate(CurrentMemoryContext,
								   "dlock lease_states row",
								   ALLOCSET_SMALL_SIZES);

	LeaseStoreOpen(&store, AccessShareLock);
	scan = LeaseStoreBeginScan(&store, GetActiveSnapshot());
	for (;;)
	{
		LeaseClassification lease;
		Datum		values[LEASE_STATES_COLS];
		bool		nulls[LEASE_STATES_COLS];
		Interval	lock_delay;

		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(rowcxt);
		oldcxt = MemoryContextSwitchTo(rowcxt);
		if (!LeaseStoreScanNext(scan, &row, &name))
		{
			MemoryContextSwitchTo(oldcxt);
			break;
		}
		LeaseClassify(&row, now, LeaseHolderAlive(&row), &lease);

		memset(nulls, false, sizeof(nulls));
		values[0] = PointerGetDatum(name);
		values[1] = Int64GetDatum(row.token);
		if (has_privs_of_role(user, row.holder_role))
			values[2] = CStringGetTextDatum(row.owner);
		else
		{
			values[2] = (Datum) 0;
			nulls[2] = true;
		}
		values[3] = ObjectIdGetDatum(row.holder_role);
		values[4] = TimestampTzGetDatum(row.acquired_at);
		values[5] = TimestampTzGetDatum(row.expires_at);
		values[6] = CStringGetTextDatum(LeaseStateName(lease.state));
		values[7] = TimestampTzGetDatum(row.ended_at);
		nulls[7] = !row.ended;
		values[8] = TimestampTzGetDatum(lease.grantable_at);
		nulls[8] = !lease.has_grantable_at;

		/* As the functions read it: the stored interval as microseconds */
		memset(&lock_delay, 0, sizeof(lock_delay));
		lock_delay.time = row.lock_delay_us;
		values[9] = IntervalPGetDatum(&lock_delay);
		values[10] = BoolGetDatum(row.session_bound);
		values[11] = Int32GetDatum(row.holder_pid);
		nulls[11] = row.holder_pid == 0;
		values[12] = row.value ? CStringGetTextDatum(row.value) : (Datum) 0;
		nulls[12] = row.value == NULL;
		values[13] = BoolGetDatum(LeaseKindIsShared(&row.kind));
		values[14] = Int32GetDatum(row.kind.max_holders);

		/* Copies the row into the tuplestore's own memory */
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		MemoryContextSwitchTo(oldcxt);
	}
	LeaseStoreEndScan(scan);
	LeaseStoreClose(&store);
	MemoryContextDelete(rowcxt);

	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(dlock_name_key);

/*
 * dlock_name_key - SQL function dlock.name_key(name text): the 64-bit key
 * of name's locks, as pg_locks shows it in classid (high 32 bits) and objid
 * (low 32 bits)
 */
Datum
dlock_name_key(PG_FUNCTION_ARGS)
{
	text	   *t = PG_GETARG_TEXT_PP(0);
	LeaseName	name;

	LeaseNameInit(&name, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
	PG_RETURN_INT64((int64) name.hash);
}

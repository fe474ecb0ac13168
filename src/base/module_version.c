/*-------------------------------------------------------------------------
 *
 * module_version.c
 *	  The module a backend runs, against the extension's version in the
 *	  database's catalog.
 *
 * PostgreSQL loads a library once per backend and never again.  After
 * ALTER EXTENSION dlock UPDATE, a connection opened before it keeps the
 * module it loaded while the SQL objects it calls are the new version's:
 * 1.1's module under 1.2's objects answered a refused try_acquire with a
 * row of NULLs where new connections answered with no row.  Pools and
 * poolers keep such connections for hours.  So from 1.3 on, every SQL
 * entry point (the type's input and output functions aside, which no
 * version changes) first checks that the catalog's version is one this
 * module serves: its own, or an older one, whose objects it still works
 * with until the update; a newer one is refused with an error that names
 * both versions and says to reconnect.
 *
 * The catalog's version is read once per transaction (one lookup of
 * pg_extension by name) and forgotten at its end (DlockXactCallback), so
 * that an update committed by another backend is seen by this backend's
 * next transaction, and no later.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/base/module_version.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"

#include "base/base.h"
#include "dlock_compat.h"

/* This module's version: dlock.control's default_version when it was built */
#ifndef DLOCK_MODULE_VERSION
#error "DLOCK_MODULE_VERSION must be defined (the Makefile sets it from dlock.control)"
#endif

/* The catalog's version was found served in this transaction */
static bool version_checked = false;

/*
 * ParseVersion - "MAJOR.MINOR" as two numbers; false for anything else
 */
static bool
ParseVersion(const char *version, int *major, int *minor)
{
	char		rest;

	return sscanf(version, "%d.%d%c", major, minor, &rest) == 2 &&
		*major >= 0 && *minor >= 0;
}

/*
 * CatalogVersion - extversion of extension dlock in this database, palloc'd,
 * or NULL when it is not installed
 */
static char *
CatalogVersion(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	char	   *version = NULL;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("dlock"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		bool		isnull;
		Datum		datum = heap_getattr(tuple, Anum_pg_extension_extversion,
										 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = text_to_cstring(DatumGetTextPP(datum));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

/*
 * DlockCheckModuleVersion - refuse to run when the database's extension is
 * of a newer version than this backend's module (see the banner)
 */
void
DlockCheckModuleVersion(void)
{
	char	   *catalog;
	int			cat_major,
				cat_minor,
				mod_major,
				mod_minor;

	if (version_checked)
		return;
	catalog = CatalogVersion();
	if (catalog == NULL)
		return;					/* the functions' own lookups say so */
	if (!ParseVersion(DLOCK_MODULE_VERSION, &mod_major, &mod_minor))
		elog(ERROR, "dlock's module version \"%s\" is not MAJOR.MINOR", DLOCK_MODULE_VERSION);
	if (!ParseVersion(catalog, &cat_major, &cat_minor) ||
		cat_major > mod_major || (cat_major == mod_major && cat_minor > mod_minor))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dlock's module in this connection is older than the extension in this database"),
				 errdetail("The connection runs module version %s; the database's extension is version %s. PostgreSQL loads a module once per connection, so a connection opened before ALTER EXTENSION dlock UPDATE keeps the module it loaded.",
						   DLOCK_MODULE_VERSION, catalog),
				 errhint("Reconnect (recycle the pool's connections) so that the connection loads the installed module.")));
	pfree(catalog);
	version_checked = true;
}

/*
 * DlockModuleVersionAtEOXact - forget the check at the end of the
 * transaction
 */
void
DlockModuleVersionAtEOXact(void)
{
	version_checked = false;
}

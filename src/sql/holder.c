/*-------------------------------------------------------------------------
 *
 * holder.c
 *	  The type dlock.holder: the role that holds a lease, by name in text.
 *
 * A value is a role OID, stored like regrole and oid (4 bytes, by value),
 * so that the C code reads dlock.lease_state.holder_role as an Oid datum
 * whether the column is dlock.holder (1.1) or regrole (1.0).  Only the text
 * form differs from regrole, for the sake of dumps:
 *
 *	- Output is the role's name, quoted as an identifier where needed, or
 *	  "-" when the OID names no role (InvalidOid, or a role since dropped).
 *	- Input maps a known role name to its OID, and an unknown name or "-"
 *	  to InvalidOid: "no role".  regrole rejects an unknown name instead,
 *	  which made a restore into a cluster without the holder's role lose the
 *	  whole COPY of dlock.lease_state.  A lease held by no role can be acted
 *	  on only by superusers, since has_privs_of_role() grants the privileges
 *	  of InvalidOid to no other role.
 *	- A numeric OID is not accepted as input: an OID from another cluster
 *	  may name a different role here, which must not inherit the lease.
 *	  For the same reason the binary form (from 1.2; drivers that ask for
 *	  binary results, binary COPY) is the text form, not the OID.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/sql/holder.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/varlena.h"

#include "dlock_compat.h"

PG_FUNCTION_INFO_V1(dlock_holder_in);
PG_FUNCTION_INFO_V1(dlock_holder_out);
PG_FUNCTION_INFO_V1(dlock_holder_recv);
PG_FUNCTION_INFO_V1(dlock_holder_send);

/* The text form of "no role" */
#define NO_HOLDER	"-"

/*
 * dlock_holder_in - input function of dlock.holder
 */
Datum
dlock_holder_in(PG_FUNCTION_ARGS)
{
	char	   *input = PG_GETARG_CSTRING(0);
	char	   *rawname;
	List	   *names;
	Oid			roleid = InvalidOid;

	if (strcmp(input, NO_HOLDER) == 0)
		PG_RETURN_OID(InvalidOid);

	/*
	 * One identifier, quoted or not, as quote_identifier() spells it; a
	 * qualified name ("a.b") is no role name
	 */
	rawname = pstrdup(input);
	if (!SplitIdentifierString(rawname, '.', &names) ||
		list_length(names) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("invalid input syntax for type %s: \"%s\"",
						"dlock.holder", input),
				 errhint("A holder is a role name, or \"%s\" for no role.",
						 NO_HOLDER)));

	roleid = get_role_oid((char *) linitial(names), true);
	list_free(names);
	pfree(rawname);
	PG_RETURN_OID(roleid);
}

/*
 * dlock_holder_out - output function of dlock.holder
 */
Datum
dlock_holder_out(PG_FUNCTION_ARGS)
{
	Oid			roleid = PG_GETARG_OID(0);
	char	   *name = OidIsValid(roleid) ? GetUserNameFromId(roleid, true) : NULL;

	if (name == NULL)
		PG_RETURN_CSTRING(pstrdup(NO_HOLDER));
	PG_RETURN_CSTRING(pstrdup(quote_identifier(name)));
}

/*
 * dlock_holder_recv - binary input function of dlock.holder: the text form,
 * in the client's encoding, read as holder_in reads it
 */
Datum
dlock_holder_recv(PG_FUNCTION_ARGS)
{
	StringInfo	buf = (StringInfo) PG_GETARG_POINTER(0);
	char	   *input;
	int			nbytes;

	input = pq_getmsgtext(buf, buf->len - buf->cursor, &nbytes);
	return DirectFunctionCall1(dlock_holder_in, CStringGetDatum(input));
}

/*
 * dlock_holder_send - binary output function of dlock.holder: the text form
 */
Datum
dlock_holder_send(PG_FUNCTION_ARGS)
{
	char	   *output = DatumGetCString(DirectFunctionCall1(dlock_holder_out,
															 PG_GETARG_DATUM(0)));
	StringInfoData buf;

	pq_begintypsend(&buf);
	pq_sendtext(&buf, output, strlen(output));
	PG_RETURN_BYTEA_P(pq_endtypsend(&buf));
}

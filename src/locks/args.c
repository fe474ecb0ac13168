/*-------------------------------------------------------------------------
 *
 * args.c
 *	  Checking the arguments of dlock's SQL functions.
 *
 * Every function is declared CALLED ON NULL INPUT so that a NULL where a
 * value is required is an error (22004) rather than a silent NULL result.
 * All other bad input is 22023.  Checks run before anything is locked or
 * written, so a rejected call changes nothing.
 *
 * Durations are turned into microseconds with overflow checks: an interval
 * too large to add to a timestamp is reported as too long, never as an
 * arithmetic overflow.  A day counts as 24 hours, because lease expiry is
 * measured on the server's clock, not in a time zone's calendar.
 *
 * Invariants: I12 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/locks/args.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "locks/locks.h"
#include "dlock_compat.h"

static void
RequireNotNull(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", argname)));
}

/*
 * CheckName - a lease name's length, checked; what identifies it is named
 * in the messages ("lease name", or "lease name 3" for an array element)
 */
static void
CheckName(int len, const char *what)
{
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	if (len > DLOCK_MAX_NAME_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", what),
				 errdetail("The name is %d bytes long; the limit is %d bytes.",
						   len, DLOCK_MAX_NAME_BYTES)));
}

/*
 * ArgGetName - the lease name argument, checked
 *
 * The returned name points into the (detoasted) argument, which lives as
 * long as the call.
 */
void
ArgGetName(FunctionCallInfo fcinfo, int argno, LeaseName *name)
{
	text	   *t;

	RequireNotNull(fcinfo, argno, "lease name");
	t = PG_GETARG_TEXT_PP(argno);
	CheckName(VARSIZE_ANY_EXHDR(t), "lease name");
	LeaseNameInit(name, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

/*
 * LeaseNameCompare - the canonical order of names: by lock tag (the hash),
 * then by bytes.  Names that share a hash share their lock tags, and are
 * next to each other in this order.
 */
int
LeaseNameCompare(const void *a, const void *b)
{
	const LeaseName *x = (const LeaseName *) a;
	const LeaseName *y = (const LeaseName *) b;
	int			cmp;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	cmp = memcmp(x->data, y->data, Min(x->len, y->len));
	if (cmp != 0)
		return cmp;
	return (x->len > y->len) - (x->len < y->len);
}

/*
 * ArgGetNames - the names array of the *_all functions, checked, without
 * duplicates, in the canonical order (LeaseNameCompare); returns how many
 *
 * The names point into the argument, which lives as long as the call.
 */
int
ArgGetNames(FunctionCallInfo fcinfo, int argno, LeaseName **names)
{
	ArrayType  *array;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	int			count = 0;

	RequireNotNull(fcinfo, argno, "names");
	array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("names must be a one-dimensional array")));
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &nelems);
	if (nelems == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("names must not be empty")));

	*names = palloc(sizeof(LeaseName) * nelems);
	for (int i = 0; i < nelems; i++)
	{
		text	   *t;
		char		what[32];

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("names must not contain nulls"),
					 errdetail("Element %d is null.", i + 1)));
		t = DatumGetTextPP(elems[i]);
		snprintf(what, sizeof(what), "lease name %d", i + 1);
		CheckName(VARSIZE_ANY_EXHDR(t), what);
		LeaseNameInit(&(*names)[i], VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
	}

	qsort(*names, nelems, sizeof(LeaseName), LeaseNameCompare);
	for (int i = 0; i < nelems; i++)
	{
		if (count > 0 && LeaseNameCompare(&(*names)[count - 1], &(*names)[i]) == 0)
			continue;
		(*names)[count++] = (*names)[i];
	}

	/* A name given twice counts once */
	if (count > DLOCK_MAX_SET_NAMES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("too many names"),
				 errdetail("%d distinct names were given; the limit is %d.",
						   count, DLOCK_MAX_SET_NAMES)));
	return count;
}

/*
 * ArgGetValue - the value a holder publishes, checked; NULL when it is
 * NULL, or when the function has no such argument (a version 1.0
 * declaration of the function)
 */
char *
ArgGetValue(FunctionCallInfo fcinfo, int argno)
{
	text	   *t;
	int			len;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	t = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(t);
	if (len > DLOCK_MAX_VALUE_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("value is too long"),
				 errdetail("The value is %d bytes long; the limit is %d bytes.",
						   len, DLOCK_MAX_VALUE_BYTES)));
	return text_to_cstring(t);
}

/*
 * The first half of every owner this backend generates: 64 random bits,
 * drawn once.  It lets acquire() tell that the lease it would wait for was
 * granted to an owner generated here (OwnerGeneratedHere), which is a
 * session waiting on itself when no pooler shares the backend.
 */
static char generated_owner_prefix[DLOCK_GENERATED_OWNER_PREFIX_LEN + 1];

/*
 * RandomHex - n random bytes as 2n hex digits into out (NUL-terminated)
 */
static void
RandomHex(char *out, int nbytes)
{
	uint8		bytes[16];

	Assert(nbytes <= (int) sizeof(bytes));
	if (!pg_strong_random(bytes, nbytes))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random owner")));
	hex_encode((const char *) bytes, nbytes, out);
	out[nbytes * 2] = '\0';
}

/*
 * GenerateOwner - a random 128-bit owner, as 32 hex digits: this backend's
 * prefix, then 64 bits drawn for this owner
 */
static char *
GenerateOwner(void)
{
	char	   *owner = palloc(DLOCK_GENERATED_OWNER_PREFIX_LEN * 2 + 1);

	if (generated_owner_prefix[0] == '\0')
		RandomHex(generated_owner_prefix, DLOCK_GENERATED_OWNER_PREFIX_LEN / 2);
	memcpy(owner, generated_owner_prefix, DLOCK_GENERATED_OWNER_PREFIX_LEN);
	RandomHex(owner + DLOCK_GENERATED_OWNER_PREFIX_LEN,
			  DLOCK_GENERATED_OWNER_PREFIX_LEN / 2);
	return owner;
}

/*
 * OwnerGeneratedHere - whether owner is one that this backend generated
 */
bool
OwnerGeneratedHere(const char *owner)
{
	return generated_owner_prefix[0] != '\0' &&
		strlen(owner) == DLOCK_GENERATED_OWNER_PREFIX_LEN * 2 &&
		memcmp(owner, generated_owner_prefix, DLOCK_GENERATED_OWNER_PREFIX_LEN) == 0;
}

/*
 * ArgGetOwner - the owner argument, checked; a fresh random owner for NULL
 * when the function allows one (acquire), 22004 otherwise; *generated
 * (when not NULL) says which
 */
char *
ArgGetOwner(FunctionCallInfo fcinfo, int argno, bool generate_if_null,
			bool *generated)
{
	text	   *t;
	int			len;

	if (generated)
		*generated = false;
	if (PG_ARGISNULL(argno) && generate_if_null)
	{
		if (generated)
			*generated = true;
		return GenerateOwner();
	}
	RequireNotNull(fcinfo, argno, "owner");
	t = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("owner must not be empty"),
				 generate_if_null ?
				 errhint("Pass NULL to have the server generate an owner.") :
				 errhint("Pass the owner that the lease was acquired with.")));
	if (len > DLOCK_MAX_OWNER_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("owner is too long"),
				 errdetail("The owner is %d bytes long; the limit is %d bytes.",
						   len, DLOCK_MAX_OWNER_BYTES)));
	return text_to_cstring(t);
}

/*
 * IntervalToMicros - total length of an interval without a month part
 *
 * Returns false when the total does not fit in 64 bits.
 */
static bool
IntervalToMicros(const Interval *span, int64 *result)
{
	int64		day_part;

	if (pg_mul_s64_overflow((int64) span->day, USECS_PER_DAY, &day_part))
		return false;
	return !pg_add_s64_overflow(day_part, span->time, result);
}

static void
RejectMonths(const Interval *span, const char *argname)
{
#ifdef INTERVAL_NOT_FINITE
	if (INTERVAL_NOT_FINITE(span))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be finite", argname)));
#endif
	if (span->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not have a month or year part", argname),
				 errdetail("Months have no fixed length; give the %s in days, hours, minutes or seconds.",
						   argname)));
}

/*
 * IntervalArgMicros - a non-null interval argument in microseconds, without
 * a month part; a total too large to represent saturates, so that it is
 * reported as too long (or negative), never as an overflow
 */
static int64
IntervalArgMicros(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	Interval   *span = PG_GETARG_INTERVAL_P(argno);
	int64		micros;

	RejectMonths(span, argname);
	if (!IntervalToMicros(span, &micros))
		micros = span->day < 0 ? PG_INT64_MIN : PG_INT64_MAX;
	return micros;
}

/*
 * ArgGetTTL - the ttl argument in microseconds: positive, and at most
 * dlock.max_ttl
 */
int64
ArgGetTTL(FunctionCallInfo fcinfo, int argno)
{
	int64		micros;

	RequireNotNull(fcinfo, argno, "ttl");
	micros = IntervalArgMicros(fcinfo, argno, "ttl");
	if (micros <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be positive")));
	if (micros > (int64) dlock_max_ttl * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl exceeds dlock.max_ttl"),
				 errdetail("The longest allowed ttl is %d seconds.", dlock_max_ttl),
				 errhint("Take a shorter ttl and renew the lease while it is needed.")));
	return micros;
}

/*
 * ArgGetTimeout - the timeout argument in microseconds; -1 for NULL (wait
 * without limit), and also for a timeout too long to represent
 */
int64
ArgGetTimeout(FunctionCallInfo fcinfo, int argno)
{
	Interval   *span;
	int64		micros;

	if (PG_ARGISNULL(argno))
		return -1;
	span = PG_GETARG_INTERVAL_P(argno);
	RejectMonths(span, "timeout");
	if (!IntervalToMicros(span, &micros))
	{
		if (span->day < 0)
			micros = -1;		/* reported as negative just below */
		else
			return -1;
	}
	if (micros < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must not be negative"),
				 errhint("Pass NULL to wait without a limit, or 0 not to wait.")));
	return micros;
}

/*
 * ArgGetLockDelay - the lock_delay argument in microseconds; NULL (or argno
 * -1, for a function without the argument) means the
 * dlock.default_lock_delay setting
 */
int64
ArgGetLockDelay(FunctionCallInfo fcinfo, int argno)
{
	int64		micros;

	if (argno < 0 || PG_ARGISNULL(argno))
	{
		/* SET checks it too, but dlock.max_ttl may have been lowered since */
		micros = (int64) dlock_default_lock_delay * 1000;
		if (micros > (int64) dlock_max_ttl * USECS_PER_SEC)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("dlock.default_lock_delay exceeds dlock.max_ttl"),
					 errdetail("The longest allowed lock_delay is %d seconds.", dlock_max_ttl),
					 errhint("Lower dlock.default_lock_delay, or pass lock_delay.")));
		return micros;
	}
	micros = IntervalArgMicros(fcinfo, argno, "lock_delay");
	if (micros < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock_delay must not be negative")));
	if (micros > (int64) dlock_max_ttl * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock_delay exceeds dlock.max_ttl"),
				 errdetail("The longest allowed lock_delay is %d seconds.", dlock_max_ttl)));
	return micros;
}

/*
 * ArgGetOlderThan - the older_than argument of dlock.purge() in
 * microseconds: not negative; one too long to represent saturates, which
 * purges nothing
 */
int64
ArgGetOlderThan(FunctionCallInfo fcinfo, int argno)
{
	int64		micros;

	RequireNotNull(fcinfo, argno, "older_than");
	micros = IntervalArgMicros(fcinfo, argno, "older_than");
	if (micros < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("older_than must not be negative")));
	return micros;
}

/*
 * ArgGetBool - a boolean argument that must not be NULL
 */
bool
ArgGetBool(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	RequireNotNull(fcinfo, argno, argname);
	return PG_GETARG_BOOL(argno);
}

/*
 * ArgGetToken - the token argument of dlock.fence()
 */
int64
ArgGetToken(FunctionCallInfo fcinfo, int argno)
{
	RequireNotNull(fcinfo, argno, "token");
	return PG_GETARG_INT64(argno);
}

/*
 * ArgGetKind - the kind of lease asked for, from the shared and
 * max_holders arguments (exclusive when the function has neither: a
 * version 1.0 declaration)
 */
void
ArgGetKind(FunctionCallInfo fcinfo, int shared_argno, int max_holders_argno,
		   LeaseKind *kind)
{
	bool		shared = false;
	int32		max_holders = 1;

	if (PG_NARGS() > shared_argno)
		shared = ArgGetBool(fcinfo, shared_argno, "shared");
	if (PG_NARGS() > max_holders_argno)
	{
		RequireNotNull(fcinfo, max_holders_argno, "max_holders");
		max_holders = PG_GETARG_INT32(max_holders_argno);
	}
	if (max_holders < 1 || max_holders > DLOCK_MAX_HOLDERS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_holders must be between 1 and %d", DLOCK_MAX_HOLDERS)));
	if (shared && max_holders > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a shared lease cannot have max_holders"),
				 errdetail("Shared leases of a name are not counted; max_holders > 1 asks for a permit of a counting semaphore."),
				 errhint("Pass either shared => true or max_holders.")));
	*kind = LeaseKindFrom(shared, max_holders);
}

--
-- The type dlock.holder of dlock.lease_state.holder_role: a role OID read
-- and written by name, where an unknown name or "-" is no role (InvalidOid),
-- and leases held by no role can be acted on only by superusers.
--
LOAD 'dlock';
CREATE ROLE regress_dlock_holder;
CREATE ROLE "regress dlock Holder";

-- Text form
SELECT 'regress_dlock_holder'::dlock.holder AS known,
       'regress_dlock_holder'::dlock.holder::oid = 'regress_dlock_holder'::regrole::oid AS same_oid,
       'REGRESS_DLOCK_HOLDER'::dlock.holder AS folded,
       '"REGRESS_DLOCK_HOLDER"'::dlock.holder AS quoted_unknown,
       '"regress dlock Holder"'::dlock.holder AS quoted;
SELECT '-'::dlock.holder::oid AS no_role,
       'regress_dlock_no_such_role'::dlock.holder::oid AS unknown_role,
       '10'::dlock.holder::oid AS no_numeric_input,
       0::oid::dlock.holder AS invalid_oid,
       4294967000::oid::dlock.holder AS dangling_oid;
SELECT 'a.b'::dlock.holder;
SELECT ''::dlock.holder;
SELECT '"unterminated'::dlock.holder;
-- casts, and the view shows regrole as in 1.0
SELECT 'regress_dlock_holder'::regrole::dlock.holder::regrole AS round_trip;
SELECT t.typname, format_type(a.atttypid, a.atttypmod) AS view_holder_role
  FROM pg_attribute a JOIN pg_type t ON t.oid = (SELECT atttypid FROM pg_attribute
                                                   WHERE attrelid = 'dlock.lease_state'::regclass
                                                     AND attname = 'holder_role')
 WHERE a.attrelid = 'dlock.leases'::regclass AND a.attname = 'holder_role';
-- The binary form is the text form, never the OID: a role OID from
-- elsewhere must not name a role here (binary COPY out and in: test/t/009)
SELECT convert_from(dlock.holder_send('regress_dlock_holder'::dlock.holder), 'UTF8') AS binary_form,
       convert_from(dlock.holder_send('-'::dlock.holder), 'UTF8') AS binary_no_role,
       convert_from(dlock.holder_send('"Mixed Case"'::dlock.holder), 'UTF8') AS binary_unknown;

--
-- A lease held by no role (as restored from a dump into a cluster without
-- the holder's role)
--
INSERT INTO dlock.lease_state (name, token, owner, holder_role, acquired_at,
                               expires_at, lock_delay, session_bound)
VALUES ('h:none', nextval('dlock.token_seq'), 'w', '-', clock_timestamp(),
        clock_timestamp() + interval '1h', '0', false);
SET ROLE regress_dlock_holder;
SELECT owner, holder_role, state FROM dlock.leases WHERE name = 'h:none';
SELECT NOT EXISTS (SELECT FROM dlock.try_acquire('h:none', '1h', 'w')) AS try_refused,
       dlock.renew('h:none', 'w', '1h') IS NULL AS renew_refused,
       dlock.release('h:none', 'w') AS released;
SELECT dlock.force_release('h:none');
RESET ROLE;
-- superusers may act on it
SELECT owner, holder_role, state FROM dlock.leases WHERE name = 'h:none';
SELECT name, owner FROM dlock.renew('h:none', 'w', '1h');
SELECT dlock.force_release('h:none') AS forced;

-- The column compares, groups and sorts (errors.sql compares whole rows);
-- its operators are dlock's, so outside schema dlock they are qualified
SELECT count(*) AS differing FROM (TABLE dlock.lease_state EXCEPT TABLE dlock.lease_state) d;
SELECT holder_role, count(*) FROM dlock.lease_state WHERE name = 'h:none'
 GROUP BY holder_role ORDER BY holder_role;
SELECT count(*) AS same FROM dlock.lease_state a JOIN dlock.lease_state b
    ON a.holder_role OPERATOR(dlock.=) b.holder_role AND a.name = b.name WHERE a.name = 'h:none';

DELETE FROM dlock.lease_state WHERE name = 'h:none';
DROP ROLE regress_dlock_holder, "regress dlock Holder";

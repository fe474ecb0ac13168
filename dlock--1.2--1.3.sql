/* dlock--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '1.3'" to load this file. \quit

--
-- Tokens follow the server's clock (src/token.c): the first grant of each
-- incarnation of the database (a promotion, a restart, a restore, a base
-- backup started as it is) moves the token counter up to the clock, and
-- this sequence remembers which incarnation last did.  A sequence, so that
-- it is written outside the granting transaction: a rolled-back or
-- prepared first grant neither undoes the move nor holds up other grants.
-- Not dumped: a restore is a new incarnation.
--
CREATE SEQUENCE dlock.token_incarnation AS bigint MINVALUE 0 START 0 NO CYCLE;
COMMENT ON SEQUENCE dlock.token_incarnation IS
  'A hash of the incarnation of this database (system identifier, timeline, server start, database and counter) that last moved dlock.token_seq up to the clock. Written by dlock''s functions only.';
REVOKE ALL ON SEQUENCE dlock.token_incarnation FROM PUBLIC;

--
-- 1.2's epoch base, which the clock replaces: a token issued under it is
-- below the clock's ticks (unless its epoch was pushed past them), and
-- still fences while its lease lives
--
ALTER EXTENSION dlock DROP TABLE dlock.token_epoch;
DROP TABLE dlock.token_epoch;

--
-- How full the pollers' places are, for monitoring (needs dlock in
-- shared_preload_libraries, as the places do)
--
CREATE FUNCTION dlock.queue_places(OUT places_live integer, OUT places_max integer,
                                   OUT fullest_role_places integer, OUT role_share integer)
RETURNS record
AS 'MODULE_PATHNAME', 'dlock_queue_places'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION dlock.queue_places() IS
  'Server-wide: the live places kept by try_acquire(queue => true), the size of their pool (dlock.max_queue_places), the most that one role keeps, and how many one role may keep.';

--
-- A write to dlock.lease_state that dlock's functions did not make (the
-- owner's own DML, a COPY into it) makes every backend forget the rows and
-- fence() answers it kept from the table (src/lease_state_trigger.c);
-- dlock's own writes fire no trigger
--
CREATE FUNCTION dlock.lease_state_changed() RETURNS trigger
AS 'MODULE_PATHNAME', 'dlock_lease_state_changed'
LANGUAGE C;
REVOKE ALL ON FUNCTION dlock.lease_state_changed() FROM PUBLIC;
CREATE TRIGGER lease_state_changed
  AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON dlock.lease_state
  FOR EACH STATEMENT EXECUTE FUNCTION dlock.lease_state_changed();

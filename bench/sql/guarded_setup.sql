-- The accounts of the guarded-write cycle (bench/compare.sh, section
-- guarded): one row per name 'k1' .. 'k1000', each a lease's guarded row.
CREATE TABLE accounts (id integer PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
INSERT INTO accounts (id) SELECT g FROM generate_series(1, 1000) g;

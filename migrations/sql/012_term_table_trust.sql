-- A term table is trusted for what it is, not only for whom it belongs to;
-- and fencegate.schema_version belongs to fencegate_owner.
--
-- Version 8 trusted a term table once fencegate_owner (or a superuser)
-- owned it, and told the admin to hand a worker's table over with ALTER
-- TABLE ... OWNER TO fencegate_owner. An ownership change keeps what the
-- previous owner attached to the table: a type of its own for the name
-- column, an enum with an IMPLICIT cast to text through a function of its
-- own (CREATE CAST needs only ownership of the enum), made advance_term's
-- t.name = $1 and hashtext(o.name) run that function as fencegate_owner,
-- and pgterm's read run it as fencegate's login (found by a review on
-- 2026-11-29, TestRedTeam20TermTableCastRunsInCheck).
--
-- fencegate.term_table_problem(tbl) says why tbl cannot be trusted as a
-- term table, or NULL: not a plain table of fencegate_owner's or a
-- superuser's; row security enabled (or forced); rules; triggers other
-- than PostgreSQL's internal ones (foreign keys'); inheritance children;
-- a name column not exactly pg_catalog.text or a term column not exactly
-- pg_catalog.int8 (no domain, enum or other type whose casts and
-- operators someone else chose). These read the pg_class row and two
-- pg_attribute rows by index. advance_term checks the same, inlined (a
-- call of this function costs about 5 us more a write), and calls it
-- for the message of its refusal.
--
-- With deep, it also refuses the table when its columns, its indexes'
-- expressions and predicates, or its extended statistics depend on a
-- function, operator, type or collation no superuser owns: ANALYZE and
-- REINDEX evaluate those as the table's owner (TestRedTeam20TermTable-
-- IndexRunsAsOwner). pgterm runs it once, at start; advance_term does
-- not (nothing of these runs in its read). Built-in objects (hashtext,
-- which README's suggested index uses) are pinned and so never listed.
-- This cannot stop an ANALYZE that runs before anyone checks: the table
-- must be created by fencegate_owner or a superuser, never adopted.
CREATE FUNCTION fencegate.term_table_problem(tbl regclass, deep boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    why text;
BEGIN
    SELECT CASE
             WHEN c.relkind OPERATOR(pg_catalog.<>) 'r' THEN 'is not a plain table'
             WHEN NOT (c.relowner OPERATOR(pg_catalog.=) 'fencegate_owner'::pg_catalog.regrole
                       OR (SELECT o.rolsuper FROM pg_catalog.pg_roles AS o WHERE o.oid OPERATOR(pg_catalog.=) c.relowner))
               THEN pg_catalog.format('is owned by %I, not by fencegate_owner or a superuser', pg_catalog.pg_get_userbyid(c.relowner))
             WHEN c.relrowsecurity OR c.relforcerowsecurity THEN 'has row-level security enabled'
             WHEN c.relhasrules THEN 'has rules'
             WHEN c.relhassubclass THEN 'has inheritance children'
             WHEN (SELECT a.atttypid FROM pg_catalog.pg_attribute AS a
                    WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attname OPERATOR(pg_catalog.=) 'name'::pg_catalog.name
                      AND NOT a.attisdropped) IS DISTINCT FROM 25::oid
               THEN pg_catalog.format('has column name of type %s, not pg_catalog.text',
                                      COALESCE((SELECT pg_catalog.format_type(a.atttypid, NULL) FROM pg_catalog.pg_attribute AS a
                                                 WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attname OPERATOR(pg_catalog.=) 'name'::pg_catalog.name
                                                   AND NOT a.attisdropped), 'none'))
             WHEN (SELECT a.atttypid FROM pg_catalog.pg_attribute AS a
                    WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attname OPERATOR(pg_catalog.=) 'term'::pg_catalog.name
                      AND NOT a.attisdropped) IS DISTINCT FROM 20::oid
               THEN pg_catalog.format('has column term of type %s, not pg_catalog.int8',
                                      COALESCE((SELECT pg_catalog.format_type(a.atttypid, NULL) FROM pg_catalog.pg_attribute AS a
                                                 WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attname OPERATOR(pg_catalog.=) 'term'::pg_catalog.name
                                                   AND NOT a.attisdropped), 'none'))
             WHEN c.relhastriggers AND EXISTS (SELECT FROM pg_catalog.pg_trigger AS g
                                                WHERE g.tgrelid OPERATOR(pg_catalog.=) c.oid AND NOT g.tgisinternal)
               THEN 'has triggers'
           END
      INTO why
      FROM pg_catalog.pg_class AS c
     WHERE c.oid OPERATOR(pg_catalog.=) tbl;
    IF NOT FOUND THEN
        RETURN 'does not exist';
    END IF;
    IF why IS NOT NULL OR NOT deep THEN
        RETURN why;
    END IF;
    SELECT pg_catalog.format('has %s depending on %s, owned by %I, not a superuser',
                             pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid),
                             pg_catalog.pg_describe_object(d.refclassid, d.refobjid, 0), r.rolname)
      INTO why
      FROM pg_catalog.pg_depend AS d
     CROSS JOIN LATERAL (SELECT CASE d.refclassid
                                  WHEN 'pg_catalog.pg_proc'::pg_catalog.regclass
                                    THEN (SELECT p.proowner FROM pg_catalog.pg_proc AS p WHERE p.oid OPERATOR(pg_catalog.=) d.refobjid)
                                  WHEN 'pg_catalog.pg_operator'::pg_catalog.regclass
                                    THEN (SELECT p.oprowner FROM pg_catalog.pg_operator AS p WHERE p.oid OPERATOR(pg_catalog.=) d.refobjid)
                                  WHEN 'pg_catalog.pg_type'::pg_catalog.regclass
                                    THEN (SELECT p.typowner FROM pg_catalog.pg_type AS p WHERE p.oid OPERATOR(pg_catalog.=) d.refobjid)
                                  WHEN 'pg_catalog.pg_collation'::pg_catalog.regclass
                                    THEN (SELECT p.collowner FROM pg_catalog.pg_collation AS p WHERE p.oid OPERATOR(pg_catalog.=) d.refobjid)
                                END AS owner) AS w
      JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) w.owner
     WHERE ((d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
             AND (d.objid OPERATOR(pg_catalog.=) tbl
                  OR d.objid IN (SELECT i.indexrelid FROM pg_catalog.pg_index AS i WHERE i.indrelid OPERATOR(pg_catalog.=) tbl)))
            OR (d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass
                AND d.objid IN (SELECT s.oid FROM pg_catalog.pg_statistic_ext AS s WHERE s.stxrelid OPERATOR(pg_catalog.=) tbl)))
       AND NOT r.rolsuper
     ORDER BY d.classid, d.objid, d.objsubid
     LIMIT 1;
    RETURN why;
END
$$;
ALTER FUNCTION fencegate.term_table_problem(regclass, boolean) OWNER TO fencegate_owner;
-- It reads only the catalogs, which anyone may read.
GRANT EXECUTE ON FUNCTION fencegate.term_table_problem(regclass, boolean) TO PUBLIC;
COMMENT ON FUNCTION fencegate.term_table_problem(regclass, boolean) IS
    'fencegate: why a table cannot be trusted as a postgres-term term table, or NULL';

-- advance_term as in version 11, but refusing (FG006, as version 8's
-- owner check, which term_table_problem now makes) a table
-- term_table_problem finds a problem with, before reading it.
CREATE OR REPLACE FUNCTION fencegate.advance_term(fence_name text, fence_token bigint, term_table text, lock_key text)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tbl  regclass;
    term bigint;
    k    bigint;
    held boolean;
    keyfn text;  -- the lock key of a name %s, as SQL for format()
    other text;  -- another election whose name derives the same key
    why  text;   -- why the term table cannot be trusted
BEGIN
    IF pg_catalog.txid_current_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG006',
            MESSAGE = 'fencegate.advance_term runs only as the first statement of a transaction',
            HINT = 'the fence check is fencegate''s; statements must not call it';
    END IF;
    IF fence_name IS NULL OR fence_name OPERATOR(pg_catalog.=) ''
       OR fence_token IS NULL OR fence_token OPERATOR(pg_catalog.<=) 0 THEN
        RAISE EXCEPTION 'invalid fence % or fencing token %', fence_name, fence_token
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Resolved with the pinned search_path: fencegate passes the table
    -- schema-qualified, and no temp table of the session's can stand in.
    tbl := term_table::regclass;
    -- Read here with fencegate_owner's rights: what reading it runs
    -- (a row security policy, a view in its place, the casts and
    -- operators of its columns' types) must be no one else's.
    -- term_table_problem(tbl) IS NOT NULL, inlined: calling it costs
    -- about 5 us more a write (measured). It gives the message, and
    -- TestTermTableProblem keeps the two in step.
    IF NOT EXISTS (
        SELECT FROM pg_catalog.pg_class AS c
         WHERE c.oid OPERATOR(pg_catalog.=) tbl AND c.relkind OPERATOR(pg_catalog.=) 'r'
           AND (c.relowner OPERATOR(pg_catalog.=) 'fencegate_owner'::pg_catalog.regrole
                OR (SELECT o.rolsuper FROM pg_catalog.pg_roles AS o WHERE o.oid OPERATOR(pg_catalog.=) c.relowner))
           AND NOT (c.relrowsecurity OR c.relforcerowsecurity OR c.relhasrules OR c.relhassubclass)
           AND (SELECT a.atttypid FROM pg_catalog.pg_attribute AS a
                 WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attname OPERATOR(pg_catalog.=) 'name'::pg_catalog.name
                   AND NOT a.attisdropped) OPERATOR(pg_catalog.=) 25::pg_catalog.oid
           AND (SELECT a.atttypid FROM pg_catalog.pg_attribute AS a
                 WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attname OPERATOR(pg_catalog.=) 'term'::pg_catalog.name
                   AND NOT a.attisdropped) OPERATOR(pg_catalog.=) 20::pg_catalog.oid
           AND NOT (c.relhastriggers AND EXISTS (SELECT FROM pg_catalog.pg_trigger AS g
                                                  WHERE g.tgrelid OPERATOR(pg_catalog.=) c.oid AND NOT g.tgisinternal))) THEN
        why := COALESCE(fencegate.term_table_problem(tbl), 'cannot be trusted');
        RAISE EXCEPTION USING
            ERRCODE = 'FG006',
            MESSAGE = pg_catalog.format('term table %s %s: fencegate does not read it', tbl, why),
            HINT = 'the fence check would run code its owner chose as fencegate_owner: create it as fencegate_owner or a superuser, (name pg_catalog.text PRIMARY KEY, term pg_catalog.int8 NOT NULL), with nothing attached';
    END IF;
    IF lock_key OPERATOR(pg_catalog.=) 'hashtext' THEN
        k := pg_catalog.hashtext(fence_name)::bigint;
        keyfn := 'pg_catalog.hashtext(%s)';
    ELSIF lock_key OPERATOR(pg_catalog.=) 'hashtextextended' THEN
        k := pg_catalog.hashtextextended(fence_name, 0);
        keyfn := 'pg_catalog.hashtextextended(%s, 0)';
    ELSE
        RAISE EXCEPTION 'invalid lock key derivation %', lock_key
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The row's term, locked (but in a read-only transaction, which locks
    -- nothing: see advance_mark), and in the same statement any other row
    -- whose name derives the same lock key. The key expressions are those
    -- an expression index on the table would have, so one is used where
    -- it exists; otherwise the table is read through (it holds one row per
    -- election). FOR SHARE OF t: only the fence's own row is locked.
    EXECUTE pg_catalog.format(
        'SELECT t.term, (SELECT o.name FROM %1$s AS o'
        '                 WHERE (%3$s) OPERATOR(pg_catalog.=) (%4$s)'
        '                   AND (o.name OPERATOR(pg_catalog.<>) $1) LIMIT 1)'
        '  FROM %1$s AS t WHERE t.name OPERATOR(pg_catalog.=) $1%2$s', tbl,
        CASE WHEN pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on'
             THEN '' ELSE ' FOR SHARE OF t' END,
        pg_catalog.format(keyfn, 'o.name'), pg_catalog.format(keyfn, '$1'))
        INTO term, other USING fence_name;
    IF term IS NULL OR fence_token OPERATOR(pg_catalog.>) term THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG003',
            MESSAGE = pg_catalog.format('no leader of election %s ever held term %s',
                                        pg_catalog.to_json(fence_name), fence_token),
            DETAIL = pg_catalog.format('term=%s', COALESCE(term, 0));
    END IF;
    IF fence_token OPERATOR(pg_catalog.<) term THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG001',
            MESSAGE = pg_catalog.format('token %s is below the current term %s', fence_token, term),
            DETAIL = pg_catalog.format('term=%s', term),
            HINT = 'a later leader has been elected; this writer must step down';
    END IF;

    -- Whoever holds the key may be the other election's leader: this
    -- term cannot be told current (nor over) from the lock.
    IF other IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG008',
            MESSAGE = pg_catalog.format(
                'term %s of election %s cannot be told current: election %s, another row of %s, has the same advisory lock key (%s), '
                'and a session holding it may lead either; rename one of the two elections%s',
                fence_token, pg_catalog.to_json(fence_name), pg_catalog.to_json(other), tbl,
                CASE WHEN lock_key OPERATOR(pg_catalog.=) 'hashtext' THEN 'hashtext(name)' ELSE 'hashtextextended(name, 0)' END,
                CASE WHEN lock_key OPERATOR(pg_catalog.=) 'hashtext'
                     THEN ', or key both elections'' locks with hashtextextended(name, 0): the workers'' pg_try_advisory_lock and fencegate''s --postgres-term-lock-key=hashtextextended'
                     ELSE '' END),
            DETAIL = pg_catalog.format('term=%s', term),
            HINT = 'two elections share one advisory lock';
    END IF;

    -- A bigint advisory lock is classid = high 32 bits, objid = low 32
    -- bits, objsubid = 1 (pg_locks), whatever its sign. Only the exclusive
    -- lock (pg_advisory_lock) is a leader's; a shared one
    -- (pg_advisory_lock_shared, mode ShareLock) is not.
    SELECT EXISTS (
        SELECT FROM pg_catalog.pg_locks AS l
         WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted
           AND l.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'
           AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database AS d
                                                   WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
           AND l.classid OPERATOR(pg_catalog.=) ((k OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.&) 4294967295)::oid
           AND l.objid OPERATOR(pg_catalog.=) (k OPERATOR(pg_catalog.&) 4294967295)::oid
           AND l.objsubid OPERATOR(pg_catalog.=) 1
           -- nor one fencegate's own connections hold: a write of another
           -- fence may take the key's lock for its transaction
           -- (pg_advisory_xact_lock); it leads nothing.
           AND NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity AS a
                             JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.usesysid
                            WHERE a.pid OPERATOR(pg_catalog.=) l.pid AND NOT r.rolsuper
                              AND pg_catalog.pg_has_role(r.oid, 'fencegate_runtime', 'MEMBER'))) INTO held;
    IF NOT held THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG002',
            MESSAGE = pg_catalog.format('term %s of election %s is over and no leader holds it',
                                        fence_token, pg_catalog.to_json(fence_name)),
            DETAIL = pg_catalog.format('term=%s', term),
            HINT = 'no session holds the election''s advisory lock exclusively';
    END IF;

    RETURN fencegate.advance_mark(fence_name, fence_token);
END
$$;

-- Owner and privileges as 005 set them, restated.
ALTER FUNCTION fencegate.advance_term(text, bigint, text, text) OWNER TO fencegate_owner;
REVOKE ALL ON FUNCTION fencegate.advance_term(text, bigint, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fencegate.advance_term(text, bigint, text, text) TO fencegate_runtime;

-- tern's version table, which Apply's CREATE SCHEMA IF NOT EXISTS and
-- tern create as the migrating role, is fencegate_owner's as the rest of
-- the schema (TestRedTeam20PrecreatedSchemaVersionTrigger).
ALTER TABLE fencegate.schema_version OWNER TO fencegate_owner;

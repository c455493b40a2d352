-- advance_term refuses an election whose lock key another row shares.
--
-- A term is current while some session holds its election's advisory
-- lock exclusively, and the lock is known only by its key: hashtext(name)
-- by default, a 32-bit hash. Two election names with the same hashtext
-- (about 2^16 names are enough to find a pair, in a second) share one
-- lock, and pg_locks cannot tell whose leader holds it. Once B's leader
-- had gone, A's leader holding the shared key kept B's ended term
-- current, and B's zombie's writes were accepted (found by a review on
-- 2026-11-29, TestRedTeam17HashtextLockCollisionKeepsEndedTermAlive).
--
-- From here, a token that is its row's term is refused with SQLSTATE
-- FG008 (DETAIL 'term=<n>', as FG002) when another row of the term table
-- derives the same lock key: neither election's term can be told current
-- while the two share a lock, whoever holds it. The message names the
-- other election and the ways out: rename one, or key the locks with
-- hashtextextended(name, 0) (64 bits) on both sides, the workers' and
-- fencegate's (--postgres-term-lock-key). A lock holder that is no row of
-- the table (an election whose leader has not yet raised its first
-- term, or another use of advisory locks in the database) stays unseen.
--
-- The look for another row is part of the term row's read, the one
-- statement advance_term already ran there: no extra statement or round
-- trip. Without an index on the key expression it reads the whole term
-- table and hashes each name: about 60 ns of server CPU a row, nothing
-- measurable with tens of rows, 0.6 ms a write with 10,000 (measured,
-- docs/SAFETY.md); an index on the key expression, which docs/SAFETY.md
-- suggests and this migration does not create (the table is the
-- user's), makes it one probe. advance_term is otherwise as in version 10.

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
    -- Read here with fencegate_owner's rights: the table's owner decides
    -- what reading it runs (a row security policy, or a view in its
    -- place, calls functions of the owner's choosing as fencegate_owner),
    -- so it must be a table that fencegate_owner or a superuser owns.
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_roles AS o ON o.oid OPERATOR(pg_catalog.=) c.relowner
                    WHERE c.oid OPERATOR(pg_catalog.=) tbl AND c.relkind OPERATOR(pg_catalog.=) 'r'
                      AND (o.rolsuper OR o.rolname OPERATOR(pg_catalog.=) 'fencegate_owner')) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG006',
            MESSAGE = pg_catalog.format('term table %s is not a table owned by fencegate_owner or a superuser', tbl),
            HINT = pg_catalog.format('its owner could make the fence check run code of its own: ALTER TABLE %s OWNER TO fencegate_owner', tbl);
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

-- Owner and privileges as 005 set them: CREATE OR REPLACE keeps them,
-- restated so that this definition reads whole.
ALTER FUNCTION fencegate.advance_term(text, bigint, text, text) OWNER TO fencegate_owner;
REVOKE ALL ON FUNCTION fencegate.advance_term(text, bigint, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fencegate.advance_term(text, bigint, text, text) TO fencegate_runtime;

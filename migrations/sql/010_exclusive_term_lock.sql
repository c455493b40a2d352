-- advance_term counts only the exclusive advisory lock.
--
-- A term is current while some session holds its election's advisory
-- lock, and advance_term (005, 007, 008) took any granted advisory lock
-- on the key for that: a shared one too. A shared lock confers no
-- leadership: any number of sessions hold it at once, and it is what the
-- readers of a reader/writer lock on the key take while no leader holds
-- the exclusive one. Once a leader's session was gone, any session taking
-- pg_advisory_lock_shared on the key made its ended term current again,
-- and the zombie's writes were accepted (found by a red-team test,
-- TestRedTeam13SharedLockRevivesEndedTerm).
--
-- From here only a granted advisory lock in mode ExclusiveLock
-- (pg_advisory_lock, pg_try_advisory_lock and their xact forms) keeps a
-- term current; ShareLock does not. Nor does a lock held by a session of
-- a (non-superuser) member of fencegate_runtime, fencegate's own: a
-- fenced write of another fence may take the key's lock for its
-- transaction (pg_advisory_xact_lock is allowed in caller SQL), and it
-- made an ended term current while it ran
-- (TestRedTeam16XactAdvisoryLockRevivesEndedTerm). advance_term is otherwise as in
-- version 8.

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
    ELSIF lock_key OPERATOR(pg_catalog.=) 'hashtextextended' THEN
        k := pg_catalog.hashtextextended(fence_name, 0);
    ELSE
        RAISE EXCEPTION 'invalid lock key derivation %', lock_key
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Locked, but in a read-only transaction, which locks nothing (see
    -- advance_mark).
    EXECUTE pg_catalog.format('SELECT t.term FROM %s AS t WHERE t.name OPERATOR(pg_catalog.=) $1%s', tbl,
                              CASE WHEN pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on'
                                   THEN '' ELSE ' FOR SHARE' END)
        INTO term USING fence_name;
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

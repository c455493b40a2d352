-- advance_term: the fence check of a fence whose term is a PostgreSQL
-- advisory lock and a term row (term source postgres-term), in the same
-- statement and transaction as the write.
--
-- The election is the seed worker's: a session that wins
-- pg_try_advisory_lock(key) raises its row of the term table
-- (name text primary key, term bigint not null) and writes with the new
-- term as its token, holding the lock (and its session) while it leads.
-- A write of fence F with token T is accepted only when:
--
--   - F's term row exists and its term is T (below: FG001, a later term
--     was raised; above, or no row: FG003, nobody was ever given T);
--   - some session of this database holds the advisory lock of F (none:
--     FG002, the term is over);
--   - then as advance: T is not below F's high-water mark, which it raises.
--
-- The term row is read FOR SHARE and stays locked until the write commits:
-- a worker raising the term (its UPDATE needs the row exclusively) waits for
-- every write of the old term in flight, and a write that arrives while a
-- raise is in flight waits for it and then reads the new term. So no write
-- of an older term commits after a newer term was raised. FOR SHARE needs
-- UPDATE on a column of the table besides SELECT (PostgreSQL's rule for
-- locking reads): GRANT SELECT, UPDATE (term) ON <table> TO fencegate_owner.
--
-- The term row is locked before the fence row, by every writer, so the two
-- locks cannot deadlock.
CREATE FUNCTION fencegate.advance_term(fence_name text, fence_token bigint, term_table text, lock_key text)
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
    IF fence_name IS NULL OR fence_name OPERATOR(pg_catalog.=) ''
       OR fence_token IS NULL OR fence_token OPERATOR(pg_catalog.<=) 0 THEN
        RAISE EXCEPTION 'invalid fence % or fencing token %', fence_name, fence_token
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Resolved with the pinned search_path: fencegate passes the table
    -- schema-qualified, and no temp table of the session's can stand in.
    tbl := term_table::regclass;
    IF lock_key OPERATOR(pg_catalog.=) 'hashtext' THEN
        k := pg_catalog.hashtext(fence_name)::bigint;
    ELSIF lock_key OPERATOR(pg_catalog.=) 'hashtextextended' THEN
        k := pg_catalog.hashtextextended(fence_name, 0);
    ELSE
        RAISE EXCEPTION 'invalid lock key derivation %', lock_key
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    EXECUTE pg_catalog.format('SELECT t.term FROM %s AS t WHERE t.name OPERATOR(pg_catalog.=) $1 FOR SHARE', tbl)
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
    -- bits, objsubid = 1 (pg_locks), whatever its sign.
    SELECT EXISTS (
        SELECT FROM pg_catalog.pg_locks AS l
         WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted
           AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database AS d
                                                   WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
           AND l.classid OPERATOR(pg_catalog.=) ((k OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.&) 4294967295)::oid
           AND l.objid OPERATOR(pg_catalog.=) (k OPERATOR(pg_catalog.&) 4294967295)::oid
           AND l.objsubid OPERATOR(pg_catalog.=) 1) INTO held;
    IF NOT held THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG002',
            MESSAGE = pg_catalog.format('term %s of election %s is over and no leader holds it',
                                        fence_token, pg_catalog.to_json(fence_name)),
            DETAIL = pg_catalog.format('term=%s', term),
            HINT = 'no session holds the election''s advisory lock';
    END IF;

    RETURN fencegate.advance(fence_name, fence_token);
END
$$;

ALTER FUNCTION fencegate.advance_term(text, bigint, text, text) OWNER TO fencegate_owner;
REVOKE ALL ON FUNCTION fencegate.advance_term(text, bigint, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fencegate.advance_term(text, bigint, text, text) TO fencegate_runtime;
COMMENT ON FUNCTION fencegate.advance_term(text, bigint, text, text) IS
    'fencegate: accept a fencing token that is the current term of a postgres-term election, or raise SQLSTATE FG001, FG002 or FG003; then advance';

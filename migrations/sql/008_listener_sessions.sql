-- The PostgreSQL listener's sessions, each bound to its fence.
--
-- A client of fencegate's PostgreSQL listener writes in its own session,
-- logged in as its own role, and fencegate inserts the fence check into
-- each of its transactions. Until now that check was fencegate.advance,
-- so the client's login had to be a member of fencegate_runtime: the role
-- that may also run advance for any fence with any token, and reset. A
-- client that replaced the check fencegate prepared on its connection
-- (dynamic SQL in a DO block can deallocate it and prepare one of the
-- same name) started its next transaction with no transaction id, and so
-- passed advance's and reset's first-statement guard: it could lower any
-- fence's mark, or fence any fence's leader out.
--
-- From here the listener's check is fencegate.advance_session, which
-- anyone may run and which advances only the fence the session is bound
-- to. fencegate binds each listener session, once the database has
-- accepted its login and before its client may send anything, from its
-- own pool (fencegate_runtime may run bind_session; nothing else may
-- write fencegate.sessions). A listener client's login needs no
-- fencegate role at all, and fencegate refuses to serve one that may run
-- advance, advance_term, reset or bind_session.
--
-- A binding is keyed by the session's process id and its login, and
-- ends with the session: fencegate unbinds a session when it closes, and
-- each bind first drops the bindings of processes that have exited (so
-- a binding left by a fencegate that died goes at the next bind). Reading
-- the session's start time on every check, which would tell a reused
-- process id apart for certain, costs PostgreSQL 15 about 70 us a call.
CREATE TABLE fencegate.sessions (
    pid        integer     PRIMARY KEY,
    login      name        NOT NULL,
    fence      text        NOT NULL,
    -- postgres-term fences: the term table and lock key derivation of
    -- advance_term; NULL for advance.
    term_table text,
    lock_key   text,
    bound_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CHECK ((term_table IS NULL) = (lock_key IS NULL))
);

ALTER TABLE fencegate.sessions OWNER TO fencegate_owner;
REVOKE ALL ON fencegate.sessions FROM PUBLIC;

-- bind_session binds the session of process session_pid, logged in as
-- login, to fence_name: that session's advance_session checks fence_name
-- and no other fence. term_table and lock_key (both or neither) make its
-- check advance_term's.
CREATE FUNCTION fencegate.bind_session(session_pid integer, login name, fence_name text, term_table text, lock_key text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF session_pid IS NULL OR login IS NULL OR fence_name IS NULL OR fence_name OPERATOR(pg_catalog.=) ''
       OR (term_table IS NULL) OPERATOR(pg_catalog.<>) (lock_key IS NULL) THEN
        RAISE EXCEPTION 'invalid session binding: process %, login %, fence %, term table %, lock key %',
                        session_pid, login, fence_name, term_table, lock_key
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Rows another bind or unbind is deleting are skipped, not waited
    -- for: binds at once neither queue nor deadlock on them.
    DELETE FROM fencegate.sessions AS s
     WHERE s.pid IN (SELECT d.pid FROM fencegate.sessions AS d
                      WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_stat_get_activity(NULL) AS a
                                         WHERE a.pid OPERATOR(pg_catalog.=) d.pid)
                      FOR UPDATE SKIP LOCKED);
    INSERT INTO fencegate.sessions AS s (pid, login, fence, term_table, lock_key, bound_at)
    VALUES (session_pid, login, fence_name, term_table, lock_key, pg_catalog.now())
    ON CONFLICT (pid) DO UPDATE
        SET login = excluded.login, fence = excluded.fence, term_table = excluded.term_table,
            lock_key = excluded.lock_key, bound_at = excluded.bound_at;
END
$$;

-- unbind_session ends the binding of process session_pid.
CREATE FUNCTION fencegate.unbind_session(session_pid integer)
RETURNS void
LANGUAGE sql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    DELETE FROM fencegate.sessions AS s WHERE s.pid OPERATOR(pg_catalog.=) session_pid;
$$;

-- advance_session is the listener's fence check: advance (or
-- advance_term) of the fence this session is bound to, refused with
-- SQLSTATE FG006 in a session fencegate did not bind, for another fence,
-- and, as advance, anywhere but as its transaction's first statement.
CREATE FUNCTION fencegate.advance_session(fence_name text, fence_token bigint)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b fencegate.sessions;
BEGIN
    IF pg_catalog.txid_current_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG006',
            MESSAGE = 'fencegate.advance_session runs only as the first statement of a transaction',
            HINT = 'the fence check is fencegate''s; statements must not call it';
    END IF;
    SELECT * INTO b FROM fencegate.sessions AS s
     WHERE s.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
       AND s.login OPERATOR(pg_catalog.=) session_user;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG006',
            MESSAGE = 'this session is not bound to a fence',
            HINT = 'fencegate binds the sessions of its PostgreSQL listener; connect through it';
    END IF;
    IF fence_name IS DISTINCT FROM b.fence THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG006',
            MESSAGE = pg_catalog.format('this session is bound to fence %L, not %L', b.fence, fence_name),
            HINT = 'the fence check is fencegate''s; statements must not call it';
    END IF;
    IF b.term_table IS NOT NULL THEN
        RETURN fencegate.advance_term(fence_name, fence_token, b.term_table, b.lock_key);
    END IF;
    RETURN fencegate.advance_mark(fence_name, fence_token);
END
$$;

ALTER FUNCTION fencegate.bind_session(integer, name, text, text, text) OWNER TO fencegate_owner;
ALTER FUNCTION fencegate.unbind_session(integer) OWNER TO fencegate_owner;
ALTER FUNCTION fencegate.advance_session(text, bigint) OWNER TO fencegate_owner;
REVOKE ALL ON FUNCTION fencegate.bind_session(integer, name, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION fencegate.unbind_session(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fencegate.bind_session(integer, name, text, text, text) TO fencegate_runtime;
GRANT EXECUTE ON FUNCTION fencegate.unbind_session(integer) TO fencegate_runtime;
GRANT EXECUTE ON FUNCTION fencegate.advance_session(text, bigint) TO PUBLIC;

COMMENT ON TABLE fencegate.sessions IS 'fencegate: the fence each PostgreSQL listener session is bound to';
COMMENT ON FUNCTION fencegate.bind_session(integer, name, text, text, text) IS
    'fencegate: bind a PostgreSQL listener session to its fence; fencegate_runtime only';
COMMENT ON FUNCTION fencegate.unbind_session(integer) IS 'fencegate: end a PostgreSQL listener session''s binding';
COMMENT ON FUNCTION fencegate.advance_session(text, bigint) IS
    'fencegate: the PostgreSQL listener''s fence check, for the fence its session is bound to; SQLSTATE FG006 otherwise';

-- advance_term, as in version 7, and only on a term table that
-- fencegate_owner or a superuser owns. The table's owner may enable row
-- security on it with a policy calling a function of its own, or put a
-- view in its place: reading it in advance_term (SECURITY DEFINER) then
-- runs that function as fencegate_owner, which may rewrite any fence's
-- mark. A worker that owns the term table it raises (the seed pattern's
-- worker may) could so move any fence's mark through its own fence's
-- check (found by a review on 2026-11-28).
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

    RETURN fencegate.advance_mark(fence_name, fence_token);
END
$$;

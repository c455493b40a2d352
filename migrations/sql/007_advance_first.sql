-- advance only as the first statement of its transaction, and in read-only
-- transactions.
--
-- fencegate runs the fence check before a transaction's first statement,
-- so any later call of advance is a statement of the caller's. Version 3
-- refused a second call by the mark the first leaves in the setting
-- fencegate.fenced, but a caller can clear a setting: RESET ALL, or
-- set_config in dynamic SQL (EXECUTE in a DO block), which no check of the
-- statement's text can see. A caller of the PostgreSQL listener, whose
-- login is a member of fencegate_runtime, could then call advance for
-- another fence with any token, and fence that fence's leader out.
--
-- What a caller cannot undo is its transaction id. A transaction's first
-- statement has none yet, and a check that passed has one: it locked or
-- wrote the fence row (advance_term also the term row). So from here
-- advance and advance_term refuse to run in a transaction that has an id,
-- with SQLSTATE FG006. The check itself moves to fencegate.advance_mark
-- (006's, with the read-only path below), which only fencegate_owner may
-- run: advance and advance_term call it once they know they are first.
--
-- A read-only transaction (BEGIN READ ONLY, SET TRANSACTION READ ONLY,
-- default_transaction_read_only) could not be checked at all: PostgreSQL
-- refuses a locking read in one. It writes nothing, so it is now judged
-- by the mark it reads, without a lock, and raises no mark.
--
-- advance_mark runs with the rights and the pinned search_path of its
-- callers (both SECURITY DEFINER, owned by fencegate_owner); a SET clause
-- of its own would cost every write a settings save and restore.
CREATE FUNCTION fencegate.advance_mark(fence_name text, fence_token bigint)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    high_water bigint;
    marked     text;
BEGIN
    -- Not STRICT: a NULL argument must fail the transaction, not skip the
    -- check and let the write through.
    IF fence_name IS NULL OR fence_name OPERATOR(pg_catalog.=) ''
       OR fence_token IS NULL OR fence_token OPERATOR(pg_catalog.<=) 0 THEN
        RAISE EXCEPTION 'invalid fence % or fencing token %', fence_name, fence_token
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Once per transaction: fencegate checks a write's fence before its
    -- first statement, so any later call is a statement of the caller's.
    IF COALESCE(pg_catalog.current_setting('fencegate.fenced', true), '') OPERATOR(pg_catalog.<>) '' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG006',
            MESSAGE = pg_catalog.format('fencegate.advance already ran in this transaction (for fence %L)',
                                        pg_catalog.current_setting('fencegate.fenced', true)),
            HINT = 'the fence check is fencegate''s; statements must not call it';
    END IF;
    -- An assignment, not PERFORM: PL/pgSQL evaluates it as a simple
    -- expression, without a query of its own.
    marked := pg_catalog.set_config('fencegate.fenced', fence_name, true);

    -- A read-only transaction writes nothing for a newer term's writes to
    -- be ordered after, and PostgreSQL locks no row in one: it is judged
    -- by the mark it reads, which it cannot raise. It can become
    -- read-write no more (PostgreSQL refuses that after its first query).
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        SELECT f.token INTO high_water FROM fencegate.fences AS f
            WHERE f.name OPERATOR(pg_catalog.=) fence_name;
        IF NOT FOUND OR high_water OPERATOR(pg_catalog.<=) fence_token THEN
            RETURN COALESCE(high_water, 0);
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = 'FG001',
            MESSAGE = pg_catalog.format('stale fencing token %s for fence %L: high-water mark is %s',
                                        fence_token, fence_name, high_water),
            DETAIL = pg_catalog.format('high_water=%s', high_water),
            HINT = 'a later leader has written to this fence; this writer must step down';
    END IF;

    -- The common case in one read: the leader writing again with the token
    -- that is the mark. The row is locked FOR SHARE only when the token
    -- equals the mark in this statement's snapshot; read committed then
    -- waits for a writer holding the row and checks the token again on the
    -- newest committed version (a raise or a reset in flight). Found: the
    -- token is the mark, and no writer can move the mark before we commit.
    SELECT f.token INTO high_water FROM fencegate.fences AS f
        WHERE f.name OPERATOR(pg_catalog.=) fence_name
          AND f.token OPERATOR(pg_catalog.=) fence_token
        FOR SHARE;
    IF FOUND THEN
        RETURN high_water;
    END IF;

    -- Not found: a new fence, a new term, a stale token, or a mark moved
    -- while we waited. As in version 3, from a plain read. If the wait
    -- above ended on a raised mark we still hold the row FOR SHARE, and the
    -- plain read finds the mark above the token: stale, no lock taken.
    -- (Ended on a mark lowered by fencegate.reset, the raise below upgrades
    -- that lock; should two writers do so at once, PostgreSQL refuses one
    -- with a deadlock error and writes nothing.)
    SELECT f.token INTO high_water FROM fencegate.fences AS f WHERE f.name OPERATOR(pg_catalog.=) fence_name;
    IF FOUND AND high_water OPERATOR(pg_catalog.=) fence_token THEN
        -- Read committed: FOR SHARE waits for a writer holding the row and
        -- then reads its newest committed version.
        SELECT f.token INTO STRICT high_water FROM fencegate.fences AS f
            WHERE f.name OPERATOR(pg_catalog.=) fence_name FOR SHARE;
        IF high_water OPERATOR(pg_catalog.=) fence_token THEN
            RETURN high_water;
        END IF;
    ELSIF NOT FOUND OR high_water OPERATOR(pg_catalog.<) fence_token THEN
        -- A new fence or a new term: raise the mark (or create the fence),
        -- holding the row exclusively until commit. ON CONFLICT locks the
        -- conflicting row even when its WHERE clause is false.
        INSERT INTO fencegate.fences AS f (name, token, updated_at)
        VALUES (fence_name, fence_token, pg_catalog.now())
        ON CONFLICT (name) DO UPDATE
            SET token = excluded.token, updated_at = excluded.updated_at
            WHERE f.token OPERATOR(pg_catalog.<=) excluded.token
        RETURNING f.token INTO high_water;
        IF FOUND THEN
            RETURN high_water;
        END IF;
        -- Refused: the row is locked, so this reads the mark that refused
        -- us and no writer can move it before we roll back.
        SELECT f.token INTO STRICT high_water FROM fencegate.fences AS f
            WHERE f.name OPERATOR(pg_catalog.=) fence_name;
    END IF;

    RAISE EXCEPTION USING
        ERRCODE = 'FG001',
        MESSAGE = pg_catalog.format('stale fencing token %s for fence %L: high-water mark is %s',
                                    fence_token, fence_name, high_water),
        DETAIL = pg_catalog.format('high_water=%s', high_water),
        HINT = 'a later leader has written to this fence; this writer must step down';
END
$$;

ALTER FUNCTION fencegate.advance_mark(text, bigint) OWNER TO fencegate_owner;
REVOKE ALL ON FUNCTION fencegate.advance_mark(text, bigint) FROM PUBLIC;
COMMENT ON FUNCTION fencegate.advance_mark(text, bigint) IS
    'fencegate: the fence check of advance and advance_term; fencegate_owner only';

CREATE OR REPLACE FUNCTION fencegate.advance(fence_name text, fence_token bigint)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.txid_current_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG006',
            MESSAGE = 'fencegate.advance runs only as the first statement of a transaction',
            HINT = 'the fence check is fencegate''s; statements must not call it';
    END IF;
    RETURN fencegate.advance_mark(fence_name, fence_token);
END
$$;

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

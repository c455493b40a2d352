-- advance, with one query in the common case.
--
-- Version 3's advance ran three queries for a write of the fence's current
-- term: the PERFORM of set_config, a plain read of the mark, then the same
-- read FOR SHARE, each an executor start, run and end in the database.
-- Now that case is one locked read of the row where the token equals the
-- mark, and set_config is an expression. Everything else (a new fence, a
-- new term, a stale token) takes version 3's path after that read. What
-- is locked, and when, is unchanged (migrations.TestAdvanceLocking).
CREATE OR REPLACE FUNCTION fencegate.advance(fence_name text, fence_token bigint)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
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

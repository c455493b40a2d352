-- fencegate's objects out of the caller's reach.
--
-- Callers' statements run in the same session and transaction as the fence
-- check, with the rights of the role fencegate logs in as. Until now that
-- role owned fencegate.fences and ran advance with its own search_path, so
-- a caller could move any fence's mark, or make advance compare with an
-- operator of its own. From here:
--
--   - everything in schema fencegate is owned by fencegate_owner (NOLOGIN);
--   - advance is SECURITY DEFINER with a pinned search_path and
--     schema-qualified operators: no caller search path, operator, function
--     or temp object changes what it computes;
--   - the role fencegate serves as is a member of fencegate_runtime, which
--     may only call advance and read the fences (and the schema version);
--     `fencegate migrate --runtime-role=NAME` grants it;
--   - advance runs once per transaction: a second call in the same
--     transaction (a caller's statement calling it for another fence, or to
--     raise its own mark again) is refused.
--
-- Roles are cluster-wide, so they are created only when missing, and a
-- migration of another database of the cluster may create them between
-- the test and the CREATE (the advisory lock of Apply is per database):
-- the loser's duplicate is then ignored.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'fencegate_owner') THEN
        BEGIN
            CREATE ROLE fencegate_owner NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'fencegate_runtime') THEN
        BEGIN
            CREATE ROLE fencegate_runtime NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    -- A migrating role that is not a superuser must be a member to hand
    -- objects over to fencegate_owner (PostgreSQL's rule for OWNER TO).
    IF NOT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
        EXECUTE pg_catalog.format('GRANT fencegate_owner TO %I', current_user);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION fencegate.advance(fence_name text, fence_token bigint)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    high_water bigint;
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
    PERFORM pg_catalog.set_config('fencegate.fenced', fence_name, true);

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

-- check_result is the guard fencegate wraps around a statement that returns
-- rows, so a result over the limits fails the statement, and the whole
-- write rolls back, inside the database: nothing is committed that
-- fencegate would then refuse to return. The limits are the write's: each
-- call adds its statement's rows and bytes to the transaction's totals
-- (n_rows may stop counting past max_rows). Anyone may call it; it only
-- raises, and a negative count is refused, so a call cannot lower the
-- totals.
CREATE FUNCTION fencegate.check_result(n_rows bigint, n_bytes bigint, max_rows bigint, max_bytes bigint)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rows_total  bigint;
    bytes_total bigint;
BEGIN
    IF n_rows OPERATOR(pg_catalog.<) 0 OR n_bytes OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION 'invalid result size % rows, % bytes', n_rows, n_bytes
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    rows_total := COALESCE(NULLIF(pg_catalog.current_setting('fencegate.result_rows', true), ''), '0')::bigint
                  OPERATOR(pg_catalog.+) n_rows;
    bytes_total := COALESCE(NULLIF(pg_catalog.current_setting('fencegate.result_bytes', true), ''), '0')::bigint
                   OPERATOR(pg_catalog.+) COALESCE(n_bytes, 0);
    IF rows_total OPERATOR(pg_catalog.>) max_rows THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG007',
            MESSAGE = pg_catalog.format('result is over the limit of %s rows', max_rows);
    END IF;
    IF bytes_total OPERATOR(pg_catalog.>) max_bytes THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG007',
            MESSAGE = pg_catalog.format('result of %s bytes is over the limit of %s bytes', bytes_total, max_bytes);
    END IF;
    PERFORM pg_catalog.set_config('fencegate.result_rows', rows_total::text, true);
    PERFORM pg_catalog.set_config('fencegate.result_bytes', bytes_total::text, true);
    RETURN true;
END
$$;

ALTER SCHEMA fencegate OWNER TO fencegate_owner;
ALTER TABLE fencegate.fences OWNER TO fencegate_owner;
ALTER FUNCTION fencegate.advance(text, bigint) OWNER TO fencegate_owner;
ALTER FUNCTION fencegate.check_result(bigint, bigint, bigint, bigint) OWNER TO fencegate_owner;

-- Functions are executable by PUBLIC unless revoked.
REVOKE ALL ON SCHEMA fencegate FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA fencegate FROM PUBLIC;
REVOKE ALL ON FUNCTION fencegate.advance(text, bigint) FROM PUBLIC;

GRANT USAGE ON SCHEMA fencegate TO PUBLIC;
GRANT EXECUTE ON FUNCTION fencegate.check_result(bigint, bigint, bigint, bigint) TO PUBLIC;
GRANT EXECUTE ON FUNCTION fencegate.advance(text, bigint) TO fencegate_runtime;
GRANT SELECT ON fencegate.fences TO fencegate_runtime;
GRANT SELECT ON fencegate.schema_version TO fencegate_runtime;

COMMENT ON FUNCTION fencegate.advance(text, bigint) IS 'fencegate: accept a fencing token or raise SQLSTATE FG001; once per transaction';
COMMENT ON FUNCTION fencegate.check_result(bigint, bigint, bigint, bigint) IS 'fencegate: raise SQLSTATE FG007 when a result is over its limits';

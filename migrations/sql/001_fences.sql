-- fencegate's fence table and the function that advances a fence.
--
-- Apply creates the schema before tern runs (tern's version table lives in
-- it); the statement here keeps this file self-contained.
CREATE SCHEMA IF NOT EXISTS fencegate;

-- One row per fence: the highest token accepted for it (its high-water mark).
CREATE TABLE fencegate.fences (
    name       text        PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- advance accepts fence_token for fence_name if it is not below the fence's
-- high-water mark, raising the mark to it, and returns the new mark. A lower
-- token raises SQLSTATE FG001 with DETAIL 'high_water=<n>'. Called first in
-- a fenced write's transaction: the fence row stays locked until commit
-- (ON CONFLICT locks the conflicting row even when the WHERE clause is
-- false), which serialises the writers of one fence and nothing else.
CREATE FUNCTION fencegate.advance(fence_name text, fence_token bigint)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    high_water bigint;
BEGIN
    -- Not STRICT: a NULL argument must fail the transaction, not skip the
    -- check and let the write through.
    IF fence_name IS NULL OR fence_name = '' OR fence_token IS NULL OR fence_token <= 0 THEN
        RAISE EXCEPTION 'invalid fence % or fencing token %', fence_name, fence_token
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    INSERT INTO fencegate.fences AS f (name, token, updated_at)
    VALUES (fence_name, fence_token, now())
    ON CONFLICT (name) DO UPDATE
        SET token = excluded.token, updated_at = excluded.updated_at
        WHERE f.token <= excluded.token
    RETURNING f.token INTO high_water;
    IF FOUND THEN
        RETURN high_water;
    END IF;

    -- The row is locked by the INSERT above, so this reads the mark that
    -- refused us and no writer can move it before we roll back.
    SELECT f.token INTO STRICT high_water FROM fencegate.fences AS f WHERE f.name = fence_name;
    RAISE EXCEPTION USING
        ERRCODE = 'FG001',
        MESSAGE = format('stale fencing token %s for fence %L: high-water mark is %s',
                         fence_token, fence_name, high_water),
        DETAIL = format('high_water=%s', high_water),
        HINT = 'a later leader has written to this fence; this writer must step down';
END
$$;

COMMENT ON TABLE fencegate.fences IS 'fencegate: highest fencing token accepted per fence (high-water mark)';
COMMENT ON FUNCTION fencegate.advance(text, bigint) IS 'fencegate: accept a fencing token or raise SQLSTATE FG001';

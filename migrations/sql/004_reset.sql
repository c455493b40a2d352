-- Resetting a fence: lowering its high-water mark on purpose.
--
-- A fence whose terms fencegate cannot verify (a monotonic term source)
-- can be poisoned: a forged or mistaken high token is accepted and then
-- fences out the real leader. reset lowers the mark (to 0: forgets the
-- fence) so the real leader's token is accepted again. It is an
-- operator's action (fencegate's fence.admin, with an audit record), never
-- part of a write: inside a fenced transaction (after advance) it is
-- refused, and callers' statements cannot name the fencegate schema
-- (fencegate's SQL check).
CREATE FUNCTION fencegate.reset(fence_name text, new_mark bigint)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    old_mark bigint;
BEGIN
    IF fence_name IS NULL OR fence_name OPERATOR(pg_catalog.=) ''
       OR new_mark IS NULL OR new_mark OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION 'invalid fence % or high-water mark %', fence_name, new_mark
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Inside a fenced write: advance marks the transaction, and its
    -- insert or FOR SHARE lock has given it a transaction id. The mark is
    -- a setting a statement could clear with set_config; the id is not:
    -- fencegate's own reset runs alone and has none yet.
    IF COALESCE(pg_catalog.current_setting('fencegate.fenced', true), '') OPERATOR(pg_catalog.<>) ''
       OR pg_catalog.txid_current_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FG006',
            MESSAGE = 'fencegate.reset cannot run inside a fenced write',
            HINT = 'a fence is reset by an operator (fencectl fence reset), not by a statement';
    END IF;

    -- Locked like a writer's raise: a write in flight commits first, and
    -- its mark is the one lowered.
    SELECT f.token INTO old_mark FROM fencegate.fences AS f
        WHERE f.name OPERATOR(pg_catalog.=) fence_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF new_mark OPERATOR(pg_catalog.=) 0 THEN
        DELETE FROM fencegate.fences AS f WHERE f.name OPERATOR(pg_catalog.=) fence_name;
    ELSIF new_mark OPERATOR(pg_catalog.<) old_mark THEN
        UPDATE fencegate.fences AS f SET token = new_mark, updated_at = pg_catalog.now()
            WHERE f.name OPERATOR(pg_catalog.=) fence_name;
    END IF;
    RETURN old_mark;
END
$$;

ALTER FUNCTION fencegate.reset(text, bigint) OWNER TO fencegate_owner;
REVOKE ALL ON FUNCTION fencegate.reset(text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fencegate.reset(text, bigint) TO fencegate_runtime;

COMMENT ON FUNCTION fencegate.reset(text, bigint) IS 'fencegate: lower a fence''s high-water mark (0 forgets the fence); returns the old mark; refused inside a fenced write';

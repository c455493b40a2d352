-- advance, cheaper in the common case: the fence's leader writing again
-- with the token that is already the high-water mark.
--
-- 001's advance rewrote the fence row on every write (a new row version, and
-- an exclusive row lock that queued every writer of the fence behind the
-- one before). Now an equal token only takes a SHARE lock on the row until
-- commit: writes of the current term run side by side, and a writer of a
-- newer term, whose UPDATE needs the row exclusively, waits until every one
-- of them has committed. So, as before, no write of an older term can commit
-- after a newer term's write has raised the mark.
--
-- The share lock is taken only after a plain read has seen the token equal
-- to the mark. A writer that locked first and then found it had to raise
-- the mark would upgrade its lock, and two writers of a new term doing that
-- at once would deadlock. Tokens never decrease, so the locked read can only
-- confirm the plain one or find a higher mark (the caller is then stale).
--
-- updated_at is now when the mark last changed, not when the fence was last
-- written.
CREATE OR REPLACE FUNCTION fencegate.advance(fence_name text, fence_token bigint)
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

    SELECT f.token INTO high_water FROM fencegate.fences AS f WHERE f.name = fence_name;
    IF FOUND AND high_water = fence_token THEN
        -- Read committed: FOR SHARE waits for a writer holding the row and
        -- then reads its newest committed version.
        SELECT f.token INTO STRICT high_water FROM fencegate.fences AS f
            WHERE f.name = fence_name FOR SHARE;
        IF high_water = fence_token THEN
            RETURN high_water;
        END IF;
    ELSIF NOT FOUND OR high_water < fence_token THEN
        -- A new fence or a new term: raise the mark (or create the fence),
        -- holding the row exclusively until commit. ON CONFLICT locks the
        -- conflicting row even when its WHERE clause is false.
        INSERT INTO fencegate.fences AS f (name, token, updated_at)
        VALUES (fence_name, fence_token, now())
        ON CONFLICT (name) DO UPDATE
            SET token = excluded.token, updated_at = excluded.updated_at
            WHERE f.token <= excluded.token
        RETURNING f.token INTO high_water;
        IF FOUND THEN
            RETURN high_water;
        END IF;
        -- Refused: the row is locked, so this reads the mark that refused
        -- us and no writer can move it before we roll back.
        SELECT f.token INTO STRICT high_water FROM fencegate.fences AS f WHERE f.name = fence_name;
    END IF;

    RAISE EXCEPTION USING
        ERRCODE = 'FG001',
        MESSAGE = format('stale fencing token %s for fence %L: high-water mark is %s',
                         fence_token, fence_name, high_water),
        DETAIL = format('high_water=%s', high_water),
        HINT = 'a later leader has written to this fence; this writer must step down';
END
$$;

-- automaton's PostgreSQL store, schema version 10: approvals and rule
-- changes attributed by the server. Applied by the tool
-- (src/store/pg/schema.rs) in one transaction under an advisory lock;
-- never edited once released.

-- Who may approve, as the server sees it. Empty (the default): every role
-- that may write the tables may approve and change rules, as one role
-- doing everything does. One row: only members of role `approvers` may
-- give an approval (a new entry in a loop's `pending_approvals`, an
-- `approved` event) or change a loop's rules (create a loop, or change its
-- config); an approval is by the session's own role unless that role is a
-- member of `attesters` (the console, a delegate host: roles trusted to
-- name the person they act for). The checks are triggers on `loops` and
-- `events`, which a role that does not own the tables cannot drop or skip,
-- and they read the server's `session_user`, which no client sets. Written
-- by the tables' owner; every role reads it.
CREATE TABLE attribution (
    one       boolean PRIMARY KEY DEFAULT true CHECK (one),
    approvers name NOT NULL,
    attesters name
);
GRANT SELECT ON attribution TO PUBLIC;

-- The functions below run with `search_path = pg_catalog, pg_temp` and
-- name the store's own tables and functions by the schema of the table
-- that fired them, so no object a session creates (a temporary
-- `attribution`, a function in a schema of its own) can stand in for
-- theirs.

-- Refuses an approval `by` someone, given by this session, when the rules
-- in `attribution` do not allow it: `what` says which, for the message.
CREATE FUNCTION automaton_attest(approvers name, attesters name, what text, approver text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT pg_has_role(session_user, approvers, 'MEMBER') THEN
        RAISE EXCEPTION 'role % may not approve (%): only members of role % may',
            session_user, what, approvers
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF approver IS DISTINCT FROM session_user::text
       AND NOT (attesters IS NOT NULL AND pg_has_role(session_user, attesters, 'MEMBER')) THEN
        RAISE EXCEPTION 'an approval by % refused (%): the server''s session user is %, and an approval is by the role that gives it unless that role is a member of %',
            coalesce(approver, '(no one)'), what, session_user, coalesce(attesters::text, 'the attesters role (none is set)')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$$;

CREATE FUNCTION automaton_attributed_loop() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    approvers name;
    attesters name;
    given record;
    new_state json;
    old_state json;
BEGIN
    EXECUTE format('SELECT approvers, attesters FROM %I.attribution', TG_TABLE_SCHEMA)
        INTO approvers, attesters;
    IF approvers IS NULL THEN
        RETURN NEW;
    END IF;
    IF (TG_OP = 'INSERT' OR NEW.config IS DISTINCT FROM OLD.config)
       AND NOT pg_has_role(session_user, approvers, 'MEMBER') THEN
        RAISE EXCEPTION 'role % may not change the rules of loop % (its config): only members of role % may',
            session_user, NEW.name, approvers
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- Every approval the new state holds that the old did not, as it was.
    -- A state's text may hold \u0000 (a gate's reason), which json's
    -- operators cannot turn into text: it is read with each one made
    -- U+FFFD, which changes no approval's id or name.
    new_state := replace(NEW.state::text, '\u0000', '\ufffd')::json;
    IF TG_OP = 'UPDATE' THEN
        old_state := replace(OLD.state::text, '\u0000', '\ufffd')::json;
    END IF;
    FOR given IN
        SELECT a->>'id' AS id, a->>'by' AS approver
        FROM json_array_elements(
            CASE WHEN json_typeof(new_state->'pending_approvals') = 'array'
                 THEN new_state->'pending_approvals' ELSE '[]'::json END) a
        EXCEPT
        SELECT a->>'id', a->>'by'
        FROM json_array_elements(
            CASE WHEN TG_OP = 'UPDATE' AND json_typeof(old_state->'pending_approvals') = 'array'
                 THEN old_state->'pending_approvals' ELSE '[]'::json END) a
    LOOP
        EXECUTE format('SELECT %I.automaton_attest($1, $2, $3, $4)', TG_TABLE_SCHEMA)
            USING approvers, attesters,
                format('approval %s of loop %s', given.id, NEW.name), given.approver;
    END LOOP;
    RETURN NEW;
END
$$;

CREATE TRIGGER attributed BEFORE INSERT OR UPDATE ON loops
    FOR EACH ROW EXECUTE FUNCTION automaton_attributed_loop();

CREATE FUNCTION automaton_attributed_event() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    approvers name;
    attesters name;
BEGIN
    EXECUTE format('SELECT approvers, attesters FROM %I.attribution', TG_TABLE_SCHEMA)
        INTO approvers, attesters;
    IF approvers IS NOT NULL THEN
        EXECUTE format('SELECT %I.automaton_attest($1, $2, $3, $4)', TG_TABLE_SCHEMA)
            USING approvers, attesters,
                format('an approved event of loop %s', NEW."loop"), replace(NEW.event::text, '\u0000', '\ufffd')::json->>'by';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER attributed BEFORE INSERT ON events
    -- An event's text may hold \u0000 (a gate's reason), which json's
    -- operators cannot turn into text: its kind is read with each made
    -- U+FFFD.
    FOR EACH ROW WHEN (replace(NEW.event::text, '\u0000', '\ufffd')::json->>'kind' = 'approved')
    EXECUTE FUNCTION automaton_attributed_event();

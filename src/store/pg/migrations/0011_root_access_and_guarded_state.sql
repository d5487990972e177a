-- automaton's PostgreSQL store, schema version 11: the root-wide access
-- kept in the store, and a loop's stops and awaits guarded by the server.
-- Applied by the tool (src/store/pg/schema.rs) in one transaction under an
-- advisory lock; never edited once released.

-- The root-wide `[access]` lists are an entry of the admin record
-- (`kind = 'access-set'`, written by `automaton access import`); the last
-- one is what every host reads. With `attribution` set, only members of
-- its `approvers` may add, change or remove such an entry: a runner host
-- cannot grant itself a role.
CREATE FUNCTION automaton_guarded_access() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    approvers name;
BEGIN
    EXECUTE format('SELECT approvers FROM %I.attribution', TG_TABLE_SCHEMA) INTO approvers;
    IF approvers IS NOT NULL
       AND ((TG_OP <> 'DELETE' AND NEW.kind = 'access-set') OR (TG_OP <> 'INSERT' AND OLD.kind = 'access-set'))
       AND NOT pg_has_role(session_user, approvers, 'MEMBER') THEN
        RAISE EXCEPTION 'role % may not change the root-wide access: only members of role % may',
            session_user, approvers
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER guarded_access BEFORE INSERT OR UPDATE OR DELETE ON admin_log
    FOR EACH ROW EXECUTE FUNCTION automaton_guarded_access();

-- With `attribution` set, a role that is not a member of `approvers` (a
-- runner host) writes a loop's state as a tick does, and no further: it
-- cannot make a stopped loop (paused, halted, completed) run again, and
-- it cannot end an open await (leave the loop with none) unless the
-- approvals given for that await are used in the same write, by as many
-- people as the loop's `required` (the approvals themselves are attested
-- when they are given: migration 10), or the loop halts or completes. An await replaced by another (a change of the
-- rules that awaits its own approval) still waits, and is its to make.
CREATE FUNCTION automaton_guarded_state() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    approvers name;
    new_state json;
    old_state json;
    old_status text;
    new_status text;
    old_await text;
    required integer;
    used integer;
BEGIN
    EXECUTE format('SELECT approvers FROM %I.attribution', TG_TABLE_SCHEMA) INTO approvers;
    IF approvers IS NULL OR pg_has_role(session_user, approvers, 'MEMBER') THEN
        RETURN NEW;
    END IF;
    -- As in migration 10: \u0000 read as U+FFFD.
    new_state := replace(NEW.state::text, '\u0000', '\ufffd')::json;
    old_state := replace(OLD.state::text, '\u0000', '\ufffd')::json;
    old_status := old_state->>'status';
    new_status := new_state->>'status';
    IF old_status IN ('paused', 'halted', 'completed')
       AND new_status IS DISTINCT FROM old_status
       AND coalesce(new_status, '') NOT IN ('paused', 'halted', 'completed') THEN
        RAISE EXCEPTION 'role % may not make loop % % (it is %): only members of role % may resume a loop',
            session_user, NEW.name, coalesce(new_status, 'without a status'), old_status, approvers
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    old_await := CASE WHEN json_typeof(old_state->'awaiting') = 'object'
                      THEN old_state->'awaiting'->>'id' END;
    IF old_await IS NOT NULL
       AND json_typeof(new_state->'awaiting') IS DISTINCT FROM 'object'
       AND coalesce(new_status, '') NOT IN ('halted', 'completed') THEN
        -- The approvals of that await the write used (they are gone from
        -- the new state), by distinct people; as many as the loop's
        -- `[approval] required` says where its loop.toml says it plainly
        -- (a `required = N` line in its `[approval]` table), else one.
        required := coalesce(substring(NEW.config from
            '(?:^|\n)\[approval\][ \t]*(?:#[^\n]*)?\n(?:[^\[\n][^\n]*\n|\n)*?[ \t]*required[ \t]*=[ \t]*([0-9]{1,4})[ \t]*(?:#[^\n]*)?(?:\n|$)')::integer, 1);
        SELECT count(DISTINCT a->>'by') INTO used
        FROM json_array_elements(
            CASE WHEN json_typeof(old_state->'pending_approvals') = 'array'
                 THEN old_state->'pending_approvals' ELSE '[]'::json END) a
        WHERE a->>'await' = old_await
          AND NOT EXISTS (
              SELECT 1
              FROM json_array_elements(
                  CASE WHEN json_typeof(new_state->'pending_approvals') = 'array'
                       THEN new_state->'pending_approvals' ELSE '[]'::json END) b
              WHERE b->>'id' = a->>'id');
        IF used < greatest(required, 1) THEN
            RAISE EXCEPTION 'role % may not end await % of loop % without its approvals (% of % used): only approvals given by members of role % release it',
                session_user, old_await, NEW.name, used, greatest(required, 1), approvers
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER guarded_state BEFORE UPDATE OF state ON loops
    FOR EACH ROW EXECUTE FUNCTION automaton_guarded_state();

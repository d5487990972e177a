-- automaton's PostgreSQL store, schema version 1. Applied by the tool
-- (src/store/pg/schema.rs) in one transaction under an advisory lock;
-- never edited once released: a change is a new numbered file.

-- One row a loop. `state` is the loop's state as JSON text (type json,
-- not jsonb: kept exactly as written, so numbers read back bit for bit and
-- any string the state holds is accepted); `version` is the commit check.
CREATE TABLE loops (
    name       text PRIMARY KEY,
    config     text NOT NULL,
    state      json NOT NULL,
    version    bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A loop's history: the events of each commit, in order (`n` within one
-- commit), stamped with the version they were committed with.
CREATE TABLE events (
    loop  text NOT NULL REFERENCES loops (name) ON DELETE CASCADE,
    v     bigint NOT NULL,
    n     integer NOT NULL,
    at    timestamptz NOT NULL,
    event json NOT NULL,
    PRIMARY KEY (loop, v, n)
);

-- Who holds a loop's lock (an advisory lock of a session). A row whose
-- session no longer holds the lock is stale and read as no holder.
CREATE TABLE holders (
    loop        text PRIMARY KEY,
    pid         bigint NOT NULL,
    host        text NOT NULL,
    command     text NOT NULL,
    tick        bigint,
    since       timestamptz NOT NULL,
    backend_pid integer NOT NULL,
    lock_key    bigint NOT NULL
);

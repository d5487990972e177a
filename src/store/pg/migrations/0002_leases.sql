-- automaton's PostgreSQL store, schema version 2: the lease of each loop's
-- lock. Applied by the tool (src/store/pg/schema.rs) in one transaction
-- under an advisory lock; never edited once released.

-- A loop's lock is its advisory lock and this row: a runner takes the lock
-- only when the row's lease has run out by the server's clock (or was let
-- go), and takes it with the next fence. The holder renews `expires_at`
-- while it works; a commit is accepted only under the holder's fence and
-- an unexpired lease, so a runner that lost its lock can neither commit
-- nor overlap the next holder (docs/postgres.md).
CREATE TABLE leases (
    loop       text PRIMARY KEY,
    fence      bigint NOT NULL,
    pid        bigint NOT NULL,
    host       text NOT NULL,
    expires_at timestamptz NOT NULL
);

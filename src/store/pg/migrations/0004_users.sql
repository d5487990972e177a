-- automaton's PostgreSQL store, schema version 4: the console's users.
-- Applied by the tool (src/store/pg/schema.rs) in one transaction under an
-- advisory lock; never edited once released.

-- One row a user of `automaton serve`: its name and its record as JSON
-- text (the SHA-256 of its token, never the token; when it was made and
-- last rotated), as src/users.rs writes it.
CREATE TABLE users (
    name   text PRIMARY KEY,
    record json NOT NULL
);

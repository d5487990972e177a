-- automaton's PostgreSQL store, schema version 7: a lease's holder named by
-- its machine and process, not its host name. Applied by the tool
-- (src/store/pg/schema.rs) in one transaction under an advisory lock;
-- never edited once released.

-- The process that holds the lease, as `<machine-id> <boot-id> <pid
-- namespace> <pid> <start>` (src/store/pg/lease.rs): a taker may treat the
-- lease as let go before it runs out only when that process is one it can
-- see, on its own machine, boot and PID namespace, and it is gone. NULL
-- (a lease of an earlier automaton, or a host without /proc): never.
ALTER TABLE leases ADD COLUMN process text;

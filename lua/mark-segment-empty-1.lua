-- Remembers that a segment of one layout version is empty, so later orders skip it.
-- KEYS[1] empty-segment set of the product's layout version
-- ARGV[1] segment index
-- ARGV[2] time to live of the set in milliseconds (hints expire; PostgreSQL stays the truth)
-- Returns the number of segments now marked empty.
-- 1. add the index (idempotent)
redis.call('SADD', KEYS[1], ARGV[1])
-- 2. keep the set alive for the TTL from the latest mark
redis.call('PEXPIRE', KEYS[1], ARGV[2])
-- 3. report the set's size, for the caller's log and metrics
return redis.call('SCARD', KEYS[1])

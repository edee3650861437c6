-- Raises a segment's fencing counter to a fence PostgreSQL has already stored, when the counter is
-- behind it (a Redis master restarted empty, flushed, failed over before the counter reached its
-- replica, or cut off while the others counted on): the next take of the lock then gets a token
-- above every token written, instead of being refused take after take until INCR catches up.
-- KEYS[1] the segment's fencing counter   fence:{lock:stock:<productId>:<idx>}
-- ARGV[1] the fence stored in PostgreSQL
-- Returns the counter afterwards.
-- 1. read the counter (absent: 0)
local fence = tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
-- 2. never lower it: another holder may have counted past the fence meanwhile
if current >= fence then
  return current
end
redis.call('SET', KEYS[1], ARGV[1])
return fence

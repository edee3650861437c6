-- The bare-lua benchmark peer's whole sale decision in one atomic step: refuse a buyer seen
-- before, refuse when fewer than q units are left, else take q units and record the buyer.
-- Bench only: the service keeps its stock in PostgreSQL and never calls this script.
-- KEYS[1] units left for sale   peer:stock:{<productId>}
-- KEYS[2] users who bought      peer:buyers:{<productId>}
-- ARGV[1] userId
-- ARGV[2] quantity q
-- Returns 1 taken, 0 sold out (fewer than q left), -1 already bought, -2 stock not loaded
-- 1. no stock key yet (first use, or Redis lost it): the caller loads it from PostgreSQL
local stock = redis.call('GET', KEYS[1])
if not stock then
  return -2
end
-- 2. one order per user (SISMEMBER answers 0 or 1; 0 is true in Lua, so compare)
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return -1
end
-- 3. enough left for q
if tonumber(stock) < tonumber(ARGV[2]) then
  return 0
end
-- 4. take the units and record the buyer together
redis.call('DECRBY', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
return 1

-- Undoes peer-take-stock.lua when the order's INSERT into PostgreSQL failed (bench only).
-- KEYS[1] units left for sale   peer:stock:{<productId>}
-- KEYS[2] users who bought      peer:buyers:{<productId>}
-- ARGV[1] userId
-- ARGV[2] quantity q to give back
-- ARGV[3] '1' to forget the buyer (no order was written), '0' to keep it (the user has an order already)
-- Returns 1 given back, 0 when the stock key is gone (the next load counts from PostgreSQL anyway)
-- 1. never create a stock key: a key of q units would sell units PostgreSQL does not have
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
-- 2. the units go back on sale
redis.call('INCRBY', KEYS[1], ARGV[2])
-- 3. the buyer may try again, unless PostgreSQL already holds their order
if ARGV[3] == '1' then
  redis.call('SREM', KEYS[2], ARGV[1])
end
return 1

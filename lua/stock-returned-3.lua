-- Units of a product came back on sale (a cancel, an expiry, a restock): bump the stock generation
-- and clear the hints that would hide the units.
-- KEYS[1] sold-out flag of the product            hint:soldout:{<productId>}
-- KEYS[2] the product's stock generation           hint:stockgen:{<productId>}
-- KEYS[3] empty-segment set of the layout version  hint:empty:{<productId>}:<layoutVersion>
-- ARGV[1] time to live of the generation in milliseconds
-- ARGV[2...] the segments that received units
-- Returns the new generation.
-- 1. bump first: an order that read the older generation can no longer set the sold-out flag. A
--    missing generation starts afresh first, as in begin-order.lua: counted up from 0 it could
--    come back to a value an order read before the loss
if redis.call('EXISTS', KEYS[2]) == 0 then
  local now = redis.call('TIME')
  redis.call('SET', KEYS[2], now[1] .. string.format('%06d', now[2]))
end
local generation = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
-- 2. drop the sold-out flag
redis.call('DEL', KEYS[1])
-- 3. the segments that received units are no longer empty
for i = 2, #ARGV do
  redis.call('SREM', KEYS[3], ARGV[i])
end
return generation

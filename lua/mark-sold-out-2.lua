-- Marks a product sold out, unless units came back since the order read its stock generation:
-- a return that commits after the order's authoritative read bumps the generation, so the flag
-- it would set now could hide those units.
-- KEYS[1] sold-out flag of the product      hint:soldout:{<productId>}
-- KEYS[2] the product's stock generation     hint:stockgen:{<productId>}
-- ARGV[1] the generation the order saw when it opened
-- ARGV[2] time to live of the flag in milliseconds
-- Returns 1 when the flag was set, 0 when units came back in between.
-- 1. compare generations; a missing one matches nothing: it was lost (flush, restart) since the
--    order read it, and units may have come back in between
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
-- 2. set the flag for its time to live
redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
return 1

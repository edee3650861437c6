-- Reads a product's order-path hints in one round trip.
-- KEYS[1] sold-out flag of the product        (string "1" when PostgreSQL said 0 units remain)
-- KEYS[2] empty-segment set of the product's current layout version (segment indexes)
-- Returns { soldOut (0|1), emptyIndex... }
local reply = {}
-- 1. the sold-out flag: EXISTS answers 0 or 1, compared explicitly (0 is true in Lua)
if redis.call('EXISTS', KEYS[1]) == 1 then
  reply[1] = 1
  return reply
end
reply[1] = 0
-- 2. the indexes of segments seen empty; the set is small (at most one entry per segment)
local empty = redis.call('SMEMBERS', KEYS[2])
for i = 1, #empty do
  reply[i + 1] = tonumber(empty[i])
end
return reply

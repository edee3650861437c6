-- Opens an order in one round trip: answers a sold-out product at once, takes the user's order
-- lock when it is given, and returns the product's stock generation and empty-segment hints.
-- KEYS[1] sold-out flag of the product           hint:soldout:{<productId>}
-- KEYS[2] empty-segment set of the layout version hint:empty:{<productId>}:<layoutVersion>
-- KEYS[3] the product's stock generation          hint:stockgen:{<productId>} (bumped when units come back)
-- KEYS[4] the user's order lock, optional         lock:order:<userId>
--         On a Redis Cluster it is left out: it hashes to its own slot, while KEYS[1..3] share the
--         product's ({<productId>}), and one script may touch one slot only; the caller then takes
--         the lock with its own SET NX PX after this script said the product is not sold out.
-- ARGV[1] lock token, unique to this request (only its holder may release the lock)
-- ARGV[2] lock time to live in milliseconds
-- ARGV[3] time to live of a generation this script starts, in milliseconds
-- Returns { -1 } sold out, { 0 } lock held by another request of the user,
-- { 1, generation, emptyIndex... } lock taken (or not asked for)
-- 1. sold out: nothing else to do (EXISTS answers 0 or 1; 0 is true in Lua, so compare)
if redis.call('EXISTS', KEYS[1]) == 1 then
  return { -1 }
end
-- 2. the user lock: SET NX answers false when the key exists
if #KEYS == 4 and not redis.call('SET', KEYS[4], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return { 0 }
end
-- 3. the generation this order saw, so that it can only mark the product sold out if no units came
--    back since. A missing generation (never set, or lost to a flush, a restart or its time to
--    live) starts afresh at Redis's clock in microseconds: never a value that a reading taken
--    before it went missing can hold (those count up by one per return from an older start), so
--    such a reading cannot mark the product sold out over units returned around the loss
local generation = redis.call('GET', KEYS[3])
if not generation then
  local now = redis.call('TIME')
  generation = now[1] .. string.format('%06d', now[2])
  redis.call('SET', KEYS[3], generation, 'PX', ARGV[3])
end
local reply = { 1, tonumber(generation) }
-- 4. the segments seen empty in this layout, so the order skips them
local empty = redis.call('SMEMBERS', KEYS[2])
for i = 1, #empty do
  reply[i + 2] = tonumber(empty[i])
end
return reply

-- Arrival numbers for n tickets joining a product's queue after the start, in the queue's control
-- slot; n = 0 reads the queue's state. One call serves every join a process has waiting, so the
-- slot's load follows the number of processes, not the size of the crowd.
-- KEYS[1] the control hash (epoch, base, pre, drawn, shards), KEYS[2] the arrival counter
-- ARGV[1] n
-- Answers { epoch, base, pre, drawn, shards, last arrival number } or { -1 } when the control hash
-- is missing (never made, or lost with Redis): the caller makes it again from PostgreSQL.
local c = redis.call('HMGET', KEYS[1], 'epoch', 'base', 'pre', 'drawn', 'shards')
if not c[1] then return { -1 } end
local last = redis.call('INCRBY', KEYS[2], tonumber(ARGV[1]))
return { tonumber(c[1]), tonumber(c[2]), tonumber(c[3]), tonumber(c[4]), tonumber(c[5]), last }

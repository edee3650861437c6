-- A user joins a product's queue, in the ticket's shard (one hash slot per shard).
-- KEYS[1] the shard's tickets hash (field <ticketId>: the record, field <ticketId>:pos: its position)
-- KEYS[2] the shard's pre-queue (sorted set, every score 0, members '<lottery key>:<ticketId>')
-- KEYS[3] the shard's flag set when the pre-queue was closed for the draw
-- ARGV[1] ticket id, ARGV[2] its record (JSON), ARGV[3] kind: 'p' pre-queue or 'a' arrival,
-- ARGV[4] lottery member ('p'), ARGV[5] the queue's epoch, ARGV[6] the epoch's base position,
-- ARGV[7] the position ('a' tickets whose position is known; '' otherwise)
-- Answers { 1, record, position } new, { 0, record, position } the ticket the user already has,
-- { 2 } the pre-queue is closed (join again as an arrival).
local record = redis.call('HGET', KEYS[1], ARGV[1])
if record then
  local pos = redis.call('HGET', KEYS[1], ARGV[1] .. ':pos')
  local t = cjson.decode(record)
  -- A pre-queue ticket is positioned by the draw and an arrival of the current epoch by the epoch's
  -- counter; an arrival of an older epoch keeps only a position below the base the new epoch
  -- counts from (else that position may be given again): it is replaced.
  if t.k == 'p' or t.e == tonumber(ARGV[5]) or (pos and tonumber(pos) <= tonumber(ARGV[6])) then
    return { 0, record, pos or '' }
  end
  redis.call('HDEL', KEYS[1], ARGV[1] .. ':pos')
end
if ARGV[3] == 'p' then
  if redis.call('EXISTS', KEYS[3]) == 1 then return { 2 } end
  redis.call('ZADD', KEYS[2], 0, ARGV[4])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], ARGV[1] .. ':pos', ARGV[7]) end
return { 1, ARGV[2], ARGV[7] }

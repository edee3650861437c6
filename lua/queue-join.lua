-- A user joins a product's queue, in the ticket's shard (one hash slot per shard).
-- KEYS[1] the shard's tickets hash (field <ticketId>: the record, field <ticketId>:pos: its position)
-- KEYS[2] the shard's pre-queue (sorted set, every score 0, members '<lottery key>:<ticketId>')
-- KEYS[3] the shard's flag set when the pre-queue was closed for the draw
-- KEYS[4] the shard's mark: a value set by its first join, so that processes that remember tickets
--         of the shard learn when it was lost (the mark is gone or another)
-- ARGV[1] ticket id, ARGV[2] its record (JSON), ARGV[3] kind: 'p' pre-queue or 'a' arrival,
-- ARGV[4] lottery member ('p'), ARGV[5] the queue's epoch, ARGV[6] the last position an older
-- epoch's ticket may hold and keep (the epoch's base, plus its pre-queue when it drew one),
-- ARGV[7] the position ('a' tickets whose position is known; '' otherwise)
-- ARGV[8] a new mark, set if the shard has none; ARGV[9] 1 when the pre-queue has been drawn
-- Answers { 1, record, position, mark } new, { 0, record, position, mark } the ticket the user
-- already has, { 2 } the pre-queue is closed (join again as an arrival).
local mark = redis.call('GET', KEYS[4])
if not mark then
  mark = ARGV[8]
  redis.call('SET', KEYS[4], mark)
end
local record = redis.call('HGET', KEYS[1], ARGV[1])
if record then
  local pos = redis.call('HGET', KEYS[1], ARGV[1] .. ':pos')
  local t = cjson.decode(record)
  -- A ticket of this epoch stands; one of an older epoch keeps only a position below where this
  -- epoch's positions begin (else that position may be given again), or, in the pre-queue, its
  -- place in a draw still to come. Anything else is replaced (queue.store.ts stillValid decides the same).
  local valid = t.e == tonumber(ARGV[5])
  if not valid and pos then valid = tonumber(pos) <= tonumber(ARGV[6]) end
  if not valid and not pos then valid = t.k == 'p' and ARGV[9] == '0' end
  if valid then
    return { 0, record, pos or '', mark }
  end
  redis.call('HDEL', KEYS[1], ARGV[1] .. ':pos')
end
if ARGV[3] == 'p' then
  if redis.call('EXISTS', KEYS[3]) == 1 then return { 2 } end
  redis.call('ZADD', KEYS[2], 0, ARGV[4])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], ARGV[1] .. ':pos', ARGV[7]) end
return { 1, ARGV[2], ARGV[7], mark }

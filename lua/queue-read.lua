-- Reads a ticket and its shard's mark (see queue-join.lua) in one call.
-- KEYS[1] the shard's tickets hash, KEYS[2] the shard's mark; ARGV[1] the ticket id
-- Answers { record or false, position or false, mark or false }.
return {
  redis.call('HGET', KEYS[1], ARGV[1]),
  redis.call('HGET', KEYS[1], ARGV[1] .. ':pos'),
  redis.call('GET', KEYS[2]),
}

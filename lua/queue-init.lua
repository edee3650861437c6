-- Makes a product's queue control hash, unless another process made it first. A new epoch starts
-- its arrival numbers from 0 (they count from the epoch's base position).
-- KEYS[1] the control hash, KEYS[2] the arrival counter
-- ARGV: epoch, base, pre, drawn, shards
-- Answers 1 when this call made it, 0 when it was there.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'base', ARGV[2], 'pre', ARGV[3], 'drawn', ARGV[4], 'shards', ARGV[5])
return 1

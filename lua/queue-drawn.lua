-- Records that the pre-queue of the current epoch was drawn: its size, after which arrivals take
-- positions base + pre + their number.
-- KEYS[1] the control hash; ARGV[1] the epoch the draw ran in, ARGV[2] the pre-queue's size
-- Answers 1, or 0 when the epoch changed under the draw (the queue was lost meanwhile).
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'pre', ARGV[2], 'drawn', 1)
return 1

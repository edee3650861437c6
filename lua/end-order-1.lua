-- Releases a user's order lock, only if this request still holds it (its token is the value).
-- KEYS[1] the user's order lock   lock:order:<userId>
-- ARGV[1] the token the lock was taken with
-- Returns 1 when released, 0 when the lock had expired or belongs to another request.
-- 1. compare: a lock that expired and was taken again by another request is left alone
if redis.call('GET', KEYS[1]) == ARGV[1] then
  -- 2. delete our own lock
  return redis.call('DEL', KEYS[1])
end
return 0

-- Claim a new name: fails (0, holder) if it is held; else raises the generation and
-- records this server as the holder. Returns {1, generation}.
-- KEYS: owner, gen, [set]   ARGV: name, holder, instance, fingerprint, keep
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('HGET', KEYS[1], 'holder')}
end
local gen = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'holder', ARGV[2], 'instance', ARGV[3], 'generation', gen,
           'fingerprint', ARGV[4], 'keep', ARGV[5], 'latest', 0)
if KEYS[3] then redis.call('SADD', KEYS[3], ARGV[1]) end
return {1, gen}

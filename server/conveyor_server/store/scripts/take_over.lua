-- Claim a name whoever holds it (a restore): raises the generation, so the previous
-- holder is fenced, starts this server's lease, and keeps the latest checkpoint (its
-- sequence and full id). Returns {generation, previous holder}.
-- KEYS: owner, gen, lease, [set]   ARGV: name, holder, instance, fingerprint, keep, lease_ms
local previous = redis.call('HGET', KEYS[1], 'holder') or ''
local latest = redis.call('HGET', KEYS[1], 'latest') or 0
local latest_id = redis.call('HGET', KEYS[1], 'latest_id') or ''
local gen = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'holder', ARGV[2], 'instance', ARGV[3], 'generation', gen,
           'fingerprint', ARGV[4], 'keep', ARGV[5], 'latest', latest, 'latest_id', latest_id)
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[6])
if KEYS[4] then redis.call('SADD', KEYS[4], ARGV[1]) end
return {gen, previous}

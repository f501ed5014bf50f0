-- Claim a new name: fails (0, holder) if it is held under a live lease, or by another
-- creator whose server's lease ran out (their pipeline is theirs to restore); else (a free
-- name, or the same creator's with an expired lease) raises the generation, records this
-- server as the holder and the caller as the creator, and starts its lease.
-- Returns {1, generation}. Owners written before creators were recorded count as
-- 'anonymous'.
-- The run id (ARGV[8], '' for none) is recorded with the owner, and the claim token
-- (ARGV[9], drawn once per create): a create tried again after a failover that finds its
-- own claim answers {1, generation} again rather than refusing the name it holds.
-- KEYS: owner, gen, lease, [set]
-- ARGV: name, holder, instance, fingerprint, keep, lease_ms, creator, run_id, claim
if redis.call('HGET', KEYS[1], 'claim') == ARGV[9] and
    redis.call('HGET', KEYS[1], 'instance') == ARGV[3] then
  return {1, tonumber(redis.call('HGET', KEYS[1], 'generation'))}
end
if redis.call('EXISTS', KEYS[1]) == 1 and (redis.call('EXISTS', KEYS[3]) == 1 or
    (redis.call('HGET', KEYS[1], 'creator') or 'anonymous') ~= ARGV[7]) then
  return {0, redis.call('HGET', KEYS[1], 'holder')}
end
local gen = redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'holder', ARGV[2], 'instance', ARGV[3], 'generation', gen,
           'fingerprint', ARGV[4], 'keep', ARGV[5], 'latest', 0, 'creator', ARGV[7],
           'run_id', ARGV[8], 'claim', ARGV[9])
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[6])
if KEYS[4] then redis.call('SADD', KEYS[4], ARGV[1]) end
return {1, gen}

-- Claim a name whoever holds it (a restore): raises the generation, so the previous
-- holder is fenced, starts this server's lease, records the creator, and keeps the latest
-- checkpoint (its sequence and full id). Returns {generation, previous holder}.
-- When ARGV[8] is not '-', the name's creator must still be the one the caller was
-- authorised against ('' for a free name; 'anonymous' for owners written before creators
-- were recorded): else nothing changes and it returns {-1, ''}.
-- The run id (ARGV[9], '' for none) is recorded with the owner, and the claim token
-- (ARGV[10], drawn once per take-over) with the holder it took the name from: a take-over
-- tried again after a failover that finds its own claim answers the same {generation,
-- previous holder} (rewriting the token, so a WAIT after it covers the claim) rather than
-- raising the generation twice.
-- KEYS: owner, gen, lease, [set]
-- ARGV: name, holder, instance, fingerprint, keep, lease_ms, creator, expected creator,
--       run_id, claim
if redis.call('HGET', KEYS[1], 'claim') == ARGV[10] and
    redis.call('HGET', KEYS[1], 'instance') == ARGV[3] then
  redis.call('HSET', KEYS[1], 'claim', ARGV[10])
  return {tonumber(redis.call('HGET', KEYS[1], 'generation')),
          redis.call('HGET', KEYS[1], 'claimed_from') or ''}
end
local previous = redis.call('HGET', KEYS[1], 'holder') or ''
if ARGV[8] ~= '-' then
  local current = redis.call('HGET', KEYS[1], 'creator') or
    (previous ~= '' and 'anonymous' or '')
  if current ~= ARGV[8] then
    return {-1, ''}
  end
end
local latest = redis.call('HGET', KEYS[1], 'latest') or 0
local latest_id = redis.call('HGET', KEYS[1], 'latest_id') or ''
local gen = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'holder', ARGV[2], 'instance', ARGV[3], 'generation', gen,
           'fingerprint', ARGV[4], 'keep', ARGV[5], 'latest', latest, 'latest_id', latest_id,
           'creator', ARGV[7], 'run_id', ARGV[9], 'claim', ARGV[10],
           'claimed_from', previous)
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[6])
if KEYS[4] then redis.call('SADD', KEYS[4], ARGV[1]) end
return {gen, previous}

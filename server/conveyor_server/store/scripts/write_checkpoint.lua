-- Store a checkpoint if this server still holds the name at this generation (else
-- {0, holder}): blob and index together, then retire the oldest beyond 'keep'. The nonce
-- is the caller's 12 random hex digits for this write followed by 4 check digits, the
-- first 4 of SHA-1('<name>:<seq>-<random>') (store.py's sealed_nonce computes the same),
-- so an id no server wrote is told from a real one. It is kept in the checkpoint's hash, and the owner's
-- 'latest_id' is this checkpoint's full id '<name>:<seq>-<nonce>'. The checkpoint keeps the
-- owner's creator, so a restore anywhere, even after the name was deleted, knows whose it is,
-- and its run id, so a resumed run goes on as the same run.
-- The write leaves a mark (KEYS[4], named by its random digits) holding its sequence for
-- ARGV[11] ms: a write tried again after a failover that finds its mark answers the same
-- {1, sequence} (renewing the mark, so a WAIT after it covers the checkpoint) rather than
-- storing the checkpoint twice.
-- Returns {1, sequence}.
-- KEYS: owner, seq, ckpts, mark
-- ARGV: instance, generation, blob, sha, batches, created, server, prefix, name, random,
--       mark_ms
local done = redis.call('GET', KEYS[4])
if done then
  redis.call('PEXPIRE', KEYS[4], ARGV[11])
  return {1, tonumber(done)}
end
local inst = redis.call('HGET', KEYS[1], 'instance')
local gen = redis.call('HGET', KEYS[1], 'generation')
if inst ~= ARGV[1] or gen ~= ARGV[2] then
  return {0, redis.call('HGET', KEYS[1], 'holder') or ''}
end
local seq = redis.call('INCR', KEYS[2])
local nonce = ARGV[10] .. string.sub(redis.sha1hex(ARGV[9] .. ':' .. seq .. '-' .. ARGV[10]), 1, 4)
redis.call('HSET', ARGV[8] .. seq, 'blob', ARGV[3], 'sha256', ARGV[4], 'batches', ARGV[5],
           'created_ms', ARGV[6], 'server', ARGV[7], 'generation', ARGV[2], 'nonce', nonce,
           'creator', redis.call('HGET', KEYS[1], 'creator') or 'anonymous',
           'run_id', redis.call('HGET', KEYS[1], 'run_id') or '')
redis.call('ZADD', KEYS[3], seq, seq)
redis.call('SET', KEYS[4], seq, 'PX', ARGV[11])
redis.call('HSET', KEYS[1], 'latest', seq, 'latest_id', ARGV[9] .. ':' .. seq .. '-' .. nonce)
local keep = tonumber(redis.call('HGET', KEYS[1], 'keep'))
local count = redis.call('ZCARD', KEYS[3])
if keep and keep > 0 and count > keep then
  local old = redis.call('ZRANGE', KEYS[3], 0, count - keep - 1)
  for _, s in ipairs(old) do
    redis.call('DEL', ARGV[8] .. s)
    redis.call('ZREM', KEYS[3], s)
  end
end
return {1, seq}

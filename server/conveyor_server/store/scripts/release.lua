-- Release a name this server holds (else {0, holder}), or any holder's with force (an
-- operator's delete of a pipeline whose server is gone: the generation is raised, so a
-- holder still alive is fenced). Deletes its checkpoints unless they are kept. The
-- sequence counter stays (like the generation counter), so a re-created name never
-- numbers a checkpoint as an earlier incarnation did. Returns {1, previous holder}.
-- Without force, the claim must also be the one the caller holds (ARGV[6], its
-- generation; '' for any): a delete racing a restore on the same server never drops the
-- restore's fresh claim.
-- The delete's token (ARGV[7], drawn once per delete) is kept with the holder it had under
-- KEYS[5] for ARGV[8] ms: a delete tried again after a failover that finds its own token
-- answers {1, holder} again rather than NotFound.
-- KEYS: owner, ckpts, gen, lease, released, [set]
-- ARGV: name, instance, keep_checkpoints, prefix, force, generation, token, mark_ms
local done = redis.call('GET', KEYS[5])
if done and string.sub(done, 1, #ARGV[7] + 1) == ARGV[7] .. ':' then
  return {1, string.sub(done, #ARGV[7] + 2)}
end
local holder = redis.call('HGET', KEYS[1], 'holder')
if not holder then
  return {0, ''}
end
if ARGV[5] ~= '1' and (redis.call('HGET', KEYS[1], 'instance') ~= ARGV[2] or
    (ARGV[6] ~= '' and redis.call('HGET', KEYS[1], 'generation') ~= ARGV[6])) then
  return {0, holder}
end
if ARGV[5] == '1' then redis.call('INCR', KEYS[3]) end
redis.call('DEL', KEYS[1], KEYS[4])
if KEYS[6] then redis.call('SREM', KEYS[6], ARGV[1]) end
redis.call('SET', KEYS[5], ARGV[7] .. ':' .. holder, 'PX', ARGV[8])
if ARGV[3] == '0' then
  for _, s in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    redis.call('DEL', ARGV[4] .. s)
  end
  redis.call('DEL', KEYS[2])
end
return {1, holder}

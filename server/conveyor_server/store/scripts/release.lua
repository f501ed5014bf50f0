-- Release a name this server holds (else {0, holder}), deleting its checkpoints
-- unless they are kept. The sequence counter stays (like the generation counter), so a
-- re-created name never numbers a checkpoint as an earlier incarnation did. Returns {1, ''}.
-- KEYS: owner, ckpts, [set]   ARGV: name, instance, keep_checkpoints, prefix
if redis.call('HGET', KEYS[1], 'instance') ~= ARGV[2] then
  return {0, redis.call('HGET', KEYS[1], 'holder') or ''}
end
redis.call('DEL', KEYS[1])
if KEYS[3] then redis.call('SREM', KEYS[3], ARGV[1]) end
if ARGV[3] == '0' then
  for _, s in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    redis.call('DEL', ARGV[4] .. s)
  end
  redis.call('DEL', KEYS[2])
end
return {1, ''}

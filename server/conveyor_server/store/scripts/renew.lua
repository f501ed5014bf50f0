-- Renew this server's lease on a name it holds: {1, ''}. Also when the lease ran out while
-- nobody took the name (a Redis outage longer than the lease): this server still owns it.
-- Fails {0, holder} once another server holds it (or '' once it was deleted).
-- KEYS: owner, lease   ARGV: instance, lease_ms
if redis.call('HGET', KEYS[1], 'instance') ~= ARGV[1] then
  return {0, redis.call('HGET', KEYS[1], 'holder') or ''}
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return {1, ''}

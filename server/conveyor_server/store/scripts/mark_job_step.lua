-- Record that one rank of a job checkpointed a step; when every rank of the world has, that
-- step is the job's cut (if it is later than the cut) and its checkpoint joins the cuts
-- (newest ARGV[7] kept), and the marks of that step and earlier ones are dropped.
-- A rank of an older generation is refused: {0, generation, world}.
-- Returns {1, cut step} (-1: the step is not complete yet).
-- KEYS: job, pending, cuts
-- ARGV: generation, rank, step, global, checkpoint id, marks prefix, cuts kept
local job = KEYS[1]
local gen = redis.call('HGET', job, 'generation')
if gen ~= ARGV[1] then
  return {0, gen or '0', redis.call('HGET', job, 'world') or '0'}
end
local world = tonumber(redis.call('HGET', job, 'world'))
local step = tonumber(ARGV[3])
local key = ARGV[6] .. gen .. ':' .. ARGV[3]
redis.call('HSET', key, ARGV[2], ARGV[5])
redis.call('ZADD', KEYS[2], step, key)
if redis.call('HLEN', key) < world then return {1, -1} end
if step > tonumber(redis.call('HGET', job, 'cut_step')) then
  redis.call('HSET', job, 'cut_step', step, 'cut_global', ARGV[4])
end
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[4] .. ':' .. ARGV[3] .. ':' .. ARGV[5])
local kept = tonumber(ARGV[7])
redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -kept - 1)
for _, done in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', step)) do
  redis.call('DEL', done)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', step)
return {1, step}

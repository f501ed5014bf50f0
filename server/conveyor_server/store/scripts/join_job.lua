-- Join a data-parallel job as one of its ranks; answers where every rank starts.
-- The job record (KEYS[1]) holds its world size, run, spec fingerprint, creator, its
-- generation and the generation's start (step, global batches), and its cut: the latest
-- step all ranks of a world checkpointed. Within a generation, step s is global batch
-- start_global + (s - start_step) * world.
-- - No record: a new job, generation 1, at step 0.
-- - No record and ARGV[8] = 1 (join only a job that exists): {-4, ''}.
-- - Another spec: {-1, fingerprint}. Another creator: {-3, ''}.
-- - Another run (ARGV[2] = 1 and ARGV[3] differs): generation + 1 from step 0, the cut at 0.
-- - The same world from the cut or a later step: joins the generation as it is.
-- - Another world, or a step before the cut: generation + 1 from that position (the cut by
--   default), which becomes the cut; marks of the older generation are dropped.
-- - A step before the generation's start: {-2, start step} (the position is unknown).
-- Returns {generation, run, world, step, global, checkpoint id at or before it (''),
--          cut step, cut global, previous world (0 if unchanged)}.
-- KEYS: job, pending, cuts
-- ARGV: world, run given (0/1), run, fingerprint, step given (0/1), step, creator ('': an
--       operator, who may join any job), existing only (0/1)
local job = KEYS[1]
local world = tonumber(ARGV[1])
local function blob_at(global)
  local found = redis.call('ZREVRANGEBYSCORE', KEYS[3], global, '-inf', 'LIMIT', 0, 1)
  if #found == 0 then return '' end
  return string.match(found[1], '^[0-9]+:[0-9]+:(.*)$')
end
local function drop_marks()
  for _, key in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do redis.call('DEL', key) end
  redis.call('DEL', KEYS[2])
end
local function restart(gen, run, step, global, previous)
  redis.call('HSET', job, 'generation', gen, 'world', world, 'run_id', run,
             'start_step', step, 'start_global', global, 'cut_step', step,
             'cut_global', global)
  drop_marks()
  return {gen, run, world, step, global, blob_at(global), step, global, previous}
end
if redis.call('EXISTS', job) == 0 then
  if ARGV[8] == '1' then return {-4, ''} end
  redis.call('HSET', job, 'fingerprint', ARGV[4], 'creator',
             ARGV[7] ~= '' and ARGV[7] or 'anonymous')
  redis.call('DEL', KEYS[3])
  return restart(1, ARGV[3], 0, 0, 0)
end
if redis.call('HGET', job, 'fingerprint') ~= ARGV[4] then
  return {-1, redis.call('HGET', job, 'fingerprint')}
end
if ARGV[7] ~= '' and redis.call('HGET', job, 'creator') ~= ARGV[7] then return {-3, ''} end
local gen = tonumber(redis.call('HGET', job, 'generation'))
local run = redis.call('HGET', job, 'run_id')
local old_world = tonumber(redis.call('HGET', job, 'world'))
if ARGV[2] == '1' and ARGV[3] ~= run then
  redis.call('DEL', KEYS[3])  -- a new run starts afresh: nothing of the old one is its cut
  return restart(gen + 1, ARGV[3], 0, 0, old_world)
end
local s0 = tonumber(redis.call('HGET', job, 'start_step'))
local g0 = tonumber(redis.call('HGET', job, 'start_global'))
local cut_step = tonumber(redis.call('HGET', job, 'cut_step'))
local cut_global = tonumber(redis.call('HGET', job, 'cut_global'))
local step, global = cut_step, cut_global
if ARGV[5] == '1' then
  step = tonumber(ARGV[6])
  if step < s0 then return {-2, s0} end
  global = g0 + (step - s0) * old_world
end
if world == old_world and step >= cut_step then
  return {gen, run, world, step, global, blob_at(global), cut_step, cut_global, 0}
end
return restart(gen + 1, run, step, global, old_world)

package retrytask

import "github.com/redis/go-redis/v9"

// Every state change of a parked record is one of these Lua scripts, so a record is
// always in exactly one place in Redis and never only in a resender's memory. All keys
// of a namespace share the hash tag {ns}, so in Redis Cluster they are on one slot.
// Scripts run with EVALSHA, falling back to EVAL (go-redis Script.Run).

// intakeScript moves records from the head of the pending list (where
// redismw.Park RPUSHes them) into the records hash and the schedule.
//
//	KEYS[1] pending   LIST of raw JSON records (head = oldest)
//	KEYS[2] records   HASH id -> raw JSON record
//	KEYS[3] schedule  ZSET id -> due time (unix ms)
//	KEYS[4] dead      LIST of raw JSON records
//	ARGV[1] n, the number of head elements the caller read
//	ARGV[3i-1], ARGV[3i], ARGV[3i+1] for i = 1..n: sha1hex of the i-th element, its
//	        record id ("" = undecodable: goes to dead), its due time (unix ms)
//
// Returns {moved, dead, duplicates}; or -1 when the first n elements are no longer the
// ones the caller read (another resender took them first): nothing was changed. An
// element whose id is already in the records hash with the same JSON is a duplicate push
// and is dropped (counted); with different JSON it goes to dead.
var intakeScript = redis.NewScript(`
local n = tonumber(ARGV[1])
local head = redis.call('LRANGE', KEYS[1], 0, n - 1)
if #head ~= n then return -1 end
for i = 1, n do
  if redis.sha1hex(head[i]) ~= ARGV[3*i - 1] then return -1 end
end
redis.call('LTRIM', KEYS[1], n, -1)
local moved, dead, dup = 0, 0, 0
for i = 1, n do
  local id = ARGV[3*i]
  if id ~= '' and redis.call('HSETNX', KEYS[2], id, head[i]) == 1 then
    redis.call('ZADD', KEYS[3], ARGV[3*i + 1], id)
    moved = moved + 1
  elseif id ~= '' and redis.call('HGET', KEYS[2], id) == head[i] then
    dup = dup + 1
  else
    redis.call('RPUSH', KEYS[4], head[i])
    dead = dead + 1
  end
end
return {moved, dead, dup}
`)

// promoteScript moves records that are due from the schedule to the tail of their
// bucket's ready list. The bucket is the first 32 bits of sha1(id) modulo the number of
// ready lists (Go: bucketOf).
//
//	KEYS[1]      schedule  ZSET id -> due time (unix ms)
//	KEYS[2..B+1] ready     LIST of ids, one per bucket 0..B-1
//	ARGV[1] now (unix ms), ARGV[2] the most records to move
//
// Returns the number of records moved.
var promoteScript = redis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local buckets = #KEYS - 1
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local b = tonumber(string.sub(redis.sha1hex(id), 1, 8), 16) % buckets
  redis.call('RPUSH', KEYS[2 + b], id)
end
return #ids
`)

// claimScript claims the first record found in the given ready lists: LMOVE from the
// list's head into the processing list, and a lease (expiry + owner token).
//
//	KEYS[1]  processing LIST of claimed ids
//	KEYS[2]  lease      ZSET id -> lease expiry (unix ms)
//	KEYS[3]  owner      HASH id -> claim token
//	KEYS[4]  records    HASH id -> raw JSON record
//	KEYS[5..] the ready lists of the caller's shard, tried in order
//	ARGV[1] claim token (unique per claim), ARGV[2] lease expiry (unix ms)
//
// Returns {id, raw JSON}, or nil when all the lists are empty. An id whose record is
// gone (removed by hand) is dropped from processing again (at most 100 per call).
var claimScript = redis.NewScript(`
local orphans = 0
for i = 5, #KEYS do
  local id = redis.call('LMOVE', KEYS[i], KEYS[1], 'LEFT', 'LEFT')
  while id do
    local raw = redis.call('HGET', KEYS[4], id)
    if raw then
      redis.call('ZADD', KEYS[2], ARGV[2], id)
      redis.call('HSET', KEYS[3], id, ARGV[1])
      return {id, raw}
    end
    redis.call('LREM', KEYS[1], 1, id)
    orphans = orphans + 1
    if orphans >= 100 then return nil end
    id = redis.call('LMOVE', KEYS[i], KEYS[1], 'LEFT', 'LEFT')
  end
end
return nil
`)

// reclaimScript returns records whose lease expired (their resender died or stalled)
// to the schedule, due at once.
//
//	KEYS[1] lease      ZSET id -> lease expiry (unix ms)
//	KEYS[2] owner      HASH id -> claim token
//	KEYS[3] processing LIST of claimed ids
//	KEYS[4] schedule   ZSET id -> due time (unix ms)
//	ARGV[1] now (unix ms), ARGV[2] the most records to reclaim
//
// Returns the number of records reclaimed. Their old owner's finish then fails (token
// gone), so it changes nothing.
var reclaimScript = redis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  redis.call('LREM', KEYS[3], 0, id)
  redis.call('ZADD', KEYS[4], ARGV[1], id)
end
return #ids
`)

// finishScript ends a claim: ack (sent), requeue (back to the schedule, optionally with
// an updated record) or dead (to the dead list). It only acts while the caller's claim
// token still owns the record.
//
//	KEYS[1] processing LIST, KEYS[2] lease ZSET, KEYS[3] owner HASH,
//	KEYS[4] records HASH, KEYS[5] schedule ZSET, KEYS[6] dead LIST
//	ARGV[1] id, ARGV[2] claim token, ARGV[3] "ack" | "requeue" | "dead",
//	ARGV[4] new raw JSON record ("" keeps the stored one), ARGV[5] due time (unix ms, requeue)
//
// Returns 1 when done, 0 when the token no longer owns the record (the lease expired
// and it was reclaimed): nothing was changed.
var finishScript = redis.NewScript(`
local id = ARGV[1]
if redis.call('HGET', KEYS[3], id) ~= ARGV[2] then return 0 end
redis.call('LREM', KEYS[1], 1, id)
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
local action = ARGV[3]
if action == 'ack' then
  redis.call('HDEL', KEYS[4], id)
elseif action == 'dead' then
  local raw = ARGV[4]
  if raw == '' then raw = redis.call('HGET', KEYS[4], id) end
  if raw then redis.call('RPUSH', KEYS[6], raw) end
  redis.call('HDEL', KEYS[4], id)
else
  if ARGV[4] ~= '' then redis.call('HSET', KEYS[4], id, ARGV[4]) end
  redis.call('ZADD', KEYS[5], ARGV[5], id)
end
return 1
`)

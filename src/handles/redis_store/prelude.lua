-- Shared by every handle script. ARGV: [1] key prefix, [2] tombstone TTL (ms),
-- [3] tombstones one tenant keeps at most (its share), [4] tenant, [5] handle id;
-- script arguments follow.
-- Every key is derived from the prefix, the tenant and the handle id only.
local P = ARGV[1]
local TOMB_TTL = tonumber(ARGV[2])
local MAX_TOMBS = tonumber(ARGV[3])
local TENANT = ARGV[4]
local ID = ARGV[5]
local TOTAL = P .. ':total'
local EXPIRY = P .. ':expiry'
local TOMBS = P .. ':tombstones'
local CLOCK = P .. ':clock'
-- Expired handles buried per call at most: keeps one script's run short; the rest
-- wait for the next call (an expired handle that is asked for is buried at once).
local SWEEP_LIMIT = 1000

local function record_key(tenant, id) return P .. ':h:' .. tenant .. ':' .. id end
local function material_key(tenant, id) return P .. ':m:' .. tenant .. ':' .. id end
local function lru_key(tenant) return P .. ':lru:' .. tenant end
local function tenant_bytes_key(tenant) return P .. ':bytes:' .. tenant end
local function tenant_tombs_key(tenant) return P .. ':tombs:' .. tenant end

-- Redis' own clock: every replica reads the same one.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function number(value)
  return tonumber(value) or 0
end

-- A tenant's tombstones beyond MAX_TOMBS are forgotten, its oldest first: their ids
-- become unknown. Only the tenant's own: another tenant's burials never reach them.
local function forget_oldest_tombstones(tenant)
  local tombs = tenant_tombs_key(tenant)
  local over = redis.call('ZCARD', tombs) - MAX_TOMBS
  if over > 0 then
    local oldest = redis.call('ZPOPMIN', tombs, over)
    for k = 1, #oldest, 2 do
      local id = oldest[k]
      redis.call('DEL', record_key(tenant, id))
      redis.call('ZREM', TOMBS, tenant .. ':' .. id)
    end
  end
end

-- A live handle becomes a tombstone: material released, counters and indexes updated
-- in the same script, the record kept TOMB_TTL with its version, reason and sequence.
local function bury(tenant, id, reason, now)
  local record = record_key(tenant, id)
  if redis.call('HGET', record, 'state') ~= 'live' then
    return
  end
  local bytes = number(redis.call('HGET', record, 'bytes'))
  redis.call('HSET', record, 'state', reason)
  redis.call('DEL', material_key(tenant, id))
  redis.call('ZREM', lru_key(tenant), id)
  redis.call('ZREM', EXPIRY, tenant .. ':' .. id)
  redis.call('DECRBY', TOTAL, bytes)
  redis.call('DECRBY', tenant_bytes_key(tenant), bytes)
  redis.call('PEXPIRE', record, TOMB_TTL)
  redis.call('ZADD', TOMBS, now, tenant .. ':' .. id)
  redis.call('ZADD', tenant_tombs_key(tenant), now, id)
  forget_oldest_tombstones(tenant)
end

-- Buries what has expired (any tenant's) and forgets tombstones older than TOMB_TTL.
local function sweep(now)
  local due = redis.call('ZRANGEBYSCORE', EXPIRY, '-inf', now, 'LIMIT', 0, SWEEP_LIMIT)
  for _, member in ipairs(due) do
    local sep = string.find(member, ':', 1, true)
    local tenant, id = string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
    if redis.call('HGET', record_key(tenant, id), 'state') == 'live' then
      bury(tenant, id, 'expired', now)
    else
      redis.call('ZREM', EXPIRY, member)
    end
  end
  local old = redis.call('ZRANGEBYSCORE', TOMBS, '-inf', now - TOMB_TTL, 'LIMIT', 0, SWEEP_LIMIT)
  for _, member in ipairs(old) do
    local sep = string.find(member, ':', 1, true)
    local tenant, id = string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
    redis.call('DEL', record_key(tenant, id))
    redis.call('ZREM', TOMBS, member)
    redis.call('ZREM', tenant_tombs_key(tenant), id)
  end
end

-- The caller's handle record after the sweep, buried first if it has expired:
-- nil (nothing of the tenant's), or {version, state}.
local function held(now)
  local record = record_key(TENANT, ID)
  local fields = redis.call('HMGET', record, 'version', 'expires', 'state')
  if not fields[1] then
    return nil
  end
  if fields[3] == 'live' and number(fields[2]) <= now then
    bury(TENANT, ID, 'expired', now)
    fields = redis.call('HMGET', record, 'version', 'expires', 'state')
    if not fields[1] then
      return nil
    end
  end
  return { tonumber(fields[1]), fields[3] }
end

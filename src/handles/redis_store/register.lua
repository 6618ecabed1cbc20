-- Registers material under a new id for the tenant. ARGV after the prelude's:
-- [6] material, [7] its bytes, [8] TTL (ms), [9] the tenant's share, [10] the store's
-- total. Evicts the tenant's own least recently used handles until the material fits
-- its share; never another tenant's. Answers {'ok'}, {'taken'} or {'too_large', room}.
local material, bytes, ttl = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
local share, max_total = tonumber(ARGV[9]), tonumber(ARGV[10])
local record = record_key(TENANT, ID)
if redis.call('EXISTS', record) == 1 then
  return { 'taken' }
end
local now = now_ms()
sweep(now)
local held_bytes = number(redis.call('GET', tenant_bytes_key(TENANT)))
local others = number(redis.call('GET', TOTAL)) - held_bytes
local room = math.max(max_total - others, 0)
if bytes > room then
  return { 'too_large', room }
end
local limit = math.min(share, room)
while held_bytes + bytes > limit do
  local oldest = redis.call('ZRANGE', lru_key(TENANT), 0, 0)
  if #oldest == 0 then
    break
  end
  bury(TENANT, oldest[1], 'evicted', now)
  held_bytes = number(redis.call('GET', tenant_bytes_key(TENANT)))
end
local tick = redis.call('INCR', CLOCK)
local expires = now + ttl
redis.call('HSET', record, 'version', 1, 'bytes', bytes, 'expires', expires, 'seq', 0, 'state', 'live')
redis.call('SET', material_key(TENANT, ID), material, 'PXAT', expires)
redis.call('ZADD', lru_key(TENANT), tick, ID)
redis.call('ZADD', EXPIRY, expires, TENANT .. ':' .. ID)
redis.call('INCRBY', TOTAL, bytes)
redis.call('INCRBY', tenant_bytes_key(TENANT), bytes)
return { 'ok' }

-- Starts an operation: the handle's next sequence number (HINCRBY, in the script) and
-- a use for the LRU. ARGV after the prelude's: [6] the requested version, or '' when
-- the request's version did not parse (no version check).
-- Answers {'unknown'}, {'gone', seq, version, reason}, {'wrong_version', seq, version}
-- or {'live', seq, version, material}.
local requested = ARGV[6]
local now = now_ms()
sweep(now)
local handle = held(now)
if not handle then
  return { 'unknown' }
end
local record = record_key(TENANT, ID)
local seq = redis.call('HINCRBY', record, 'seq', 1)
local version, state = handle[1], handle[2]
if state ~= 'live' then
  return { 'gone', seq, version, state }
end
redis.call('ZADD', lru_key(TENANT), 'XX', redis.call('INCR', CLOCK), ID)
if requested ~= '' and tonumber(requested) ~= version then
  return { 'wrong_version', seq, version }
end
local material = redis.call('GET', material_key(TENANT, ID))
if not material then
  bury(TENANT, ID, 'expired', now)
  return { 'gone', seq, version, 'expired' }
end
return { 'live', seq, version, material }

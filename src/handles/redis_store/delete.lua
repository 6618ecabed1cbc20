-- Deletes a handle, leaving a tombstone; the delete takes the next sequence number.
-- Answers {'unknown'}, {'deleted', seq, version} or {'gone', seq, version, reason}.
local now = now_ms()
sweep(now)
local handle = held(now)
if not handle then
  return { 'unknown' }
end
local seq = redis.call('HINCRBY', record_key(TENANT, ID), 'seq', 1)
local version, state = handle[1], handle[2]
if state ~= 'live' then
  return { 'gone', seq, version, state }
end
bury(TENANT, ID, 'deleted', now)
return { 'deleted', seq, version }

-- backoff.fleet.script: the one Redis script of the fleet's sync
-- (internal), its arguments, and the check of its reply.
--
-- One EVALSHA per host and interval does everything atomically (a
-- script runs alone in Redis): the host says it is alive and, for each
-- breaker, whether its own breaker is open (open or half-open: a vote)
-- or closed; the script counts the votes, decides the fleet's state by
-- quorum, elects the prober (SET NX PX) and answers.  Time is Redis'
-- own (TIME), so hosts whose clocks differ share one bucket.
--
-- Keys (P: the fleet's `prefix`; B: a breaker's key; b: the bucket,
-- floor(Redis' time in ms / interval in ms)):
--   P h:<b>          set: the hosts that synced in bucket b
--   P b:B:v:<b>      set: the hosts whose own breaker B is not closed
--   P b:B:p          string: the host that probes for the fleet
--   P b:B:c          string: the ms at which the prober's probe closed
--                    the fleet (no quorum counts while it lives)
-- Every key expires: sets and c after 3 intervals, p after `tenure`.
-- A key of another type, without an expiry or with a longer one than
-- ours is foreign: deleted, named in the reply, and the host logs it.

local floor, ipairs, type = math.floor, ipairs, type

local M = {}

M.TEXT = [[
local P, host = ARGV[1], ARGV[2]
local iv, tenure = tonumber(ARGV[3]), tonumber(ARGV[4])
local share, minq = tonumber(ARGV[5]), tonumber(ARGV[6])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = math.floor(now / iv)
local ttl = 3 * iv
local foreign = {}
local function fit(k, kind, most)
  local ty = redis.call('TYPE', k)
  ty = type(ty) == 'table' and ty.ok or ty
  if ty == 'none' then return end
  local left = redis.call('PTTL', k)
  if ty ~= kind or left < 0 or left > most then
    redis.call('DEL', k)
    foreign[#foreign + 1] = k
  end
end
local hk, hp = P .. 'h:' .. b, P .. 'h:' .. (b - 1)
fit(hk, 'set', ttl) fit(hp, 'set', ttl)
redis.call('SADD', hk, host)
redis.call('PEXPIRE', hk, ttl)
local hosts = math.max(redis.call('SCARD', hk), redis.call('SCARD', hp))
local out = { hosts }
local i = 7
while ARGV[i] do
  local name, st, was = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  i = i + 3
  local pre = P .. 'b:' .. name .. ':'
  local vk, vp = pre .. 'v:' .. b, pre .. 'v:' .. (b - 1)
  local pk, ck = pre .. 'p', pre .. 'c'
  fit(vk, 'set', ttl) fit(vp, 'set', ttl)
  fit(pk, 'string', tenure) fit(ck, 'string', ttl)
  if st == 'c' then
    redis.call('SREM', vk, host)
    redis.call('SREM', vp, host)
    local p = redis.call('GET', pk)
    if was == '1' and (not p or p == host) then
      redis.call('SET', ck, now, 'PX', ttl)
      redis.call('DEL', vk, vp, pk)
    end
  else
    redis.call('SADD', vk, host)
    redis.call('PEXPIRE', vk, ttl)
  end
  local votes = math.min(hosts, math.max(redis.call('SCARD', vk),
                                         redis.call('SCARD', vp)))
  local need = math.max(minq, math.ceil(share * hosts))
  local open = votes >= need and redis.call('EXISTS', ck) == 0
  local probe = 0
  if open and st ~= 'c' then
    if redis.call('SET', pk, host, 'NX', 'PX', tenure)
       or redis.call('GET', pk) == host then probe = 1 end
  end
  out[#out + 1] = open and 1 or 0
  out[#out + 1] = probe
  out[#out + 1] = votes
  out[#out + 1] = need
end
for _, k in ipairs(foreign) do out[#out + 1] = k end
return out
]]

local HEX = "%02x"

--- script.sha1(ngx) -> the script's SHA1 in hex (for EVALSHA)
function M.sha1(ngx)
  local bin = ngx.sha1_bin(M.TEXT)
  return (bin:gsub(".", function(c) return HEX:format(c:byte()) end))
end

--- script.args(o, list) -> EVALSHA's arguments after the script: 0
-- keys, then ARGV.  o: prefix, host, interval, tenure, share, min;
-- list: { name, state ("c", "o", "h"), was_prober (boolean) } per
-- breaker
function M.args(o, list)
  local a = { 0, o.prefix, o.host, floor(o.interval * 1000),
              floor(o.tenure * 1000), o.share, o.min }
  for _, b in ipairs(list) do
    a[#a + 1] = b.name
    a[#a + 1] = b.state
    a[#a + 1] = b.was and "1" or "0"
  end
  return a
end

local function int(v, lo, hi)
  return type(v) == "number" and v == floor(v) and v >= lo and v <= hi
end

--- script.reply(r, n) -> { hosts, [i] = { open, probe, votes, need } },
-- foreign (the keys the script deleted), or nil and why: a reply of
-- the shape the script gives, for n breakers
function M.reply(r, n)
  if type(r) ~= "table" or not int(r[1], 1, 2 ^ 31) then
    return nil, "not the script's reply"
  end
  local out, hosts = { hosts = r[1] }, r[1]
  for i = 1, n do
    local j = 2 + (i - 1) * 4
    local open, probe, votes, need = r[j], r[j + 1], r[j + 2], r[j + 3]
    if not (int(open, 0, 1) and int(probe, 0, 1) and int(votes, 0, hosts)
            and int(need, 1, 2 ^ 31)) then
      return nil, "not the script's reply"
    end
    out[i] = { open = open == 1, probe = probe == 1, votes = votes,
               need = need }
  end
  local foreign = {}
  for j = 2 + n * 4, #r do
    foreign[#foreign + 1] = type(r[j]) == "string" and r[j] or "?"
  end
  return out, foreign
end


return M

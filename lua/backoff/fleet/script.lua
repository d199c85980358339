-- backoff.fleet.script: the one Redis script of the fleet's sync
-- (internal), its arguments, and the check of its reply.
--
-- One EVALSHA per host and interval does everything atomically (a
-- script runs alone in Redis): the host says it is alive, pushes its
-- budgets' counts (fl:budget) and reads the fleet's; and, for each
-- breaker, its own evidence: its own breaker open or half-open (a
-- vote), closed but `suspect` failures in a row on the host (a suspect
-- vote), or neither; and what the fleet's probe gave, when this host
-- probes.  The script counts the votes, decides the fleet's state,
-- elects the prober (SET NX PX) and answers.  Time is Redis' own
-- (TIME), so hosts whose clocks differ share one bucket.
--
-- The fleet opens when votes >= need (the quorum), or when votes +
-- suspect votes >= need_s (a larger quorum of a fleet's quiet hosts),
-- and then stays open (key o) until the prober's success closes it, or
-- max_open after the prober's last failure (then the votes decide
-- again).  A host with demand (a request refused in its last interval)
-- may be the prober (the first to sync once the role is free); the
-- tenure ends at one of the prober's own syncs, and a prober that made
-- no probe in it is not elected for the next (key x).  The prober's
-- success marks the fleet closed (key c) for cttl: no vote counts
-- meanwhile.  A host's vote is its own breaker open or half-open with a
-- failure in its last suspect_window (the host decides; stale evidence
-- is no vote).
--
-- Keys (P: the fleet's `prefix`; B: a breaker's key; b: the bucket,
-- floor(Redis' time in ms / interval in ms)):
--   P h:<b>          set: the hosts that synced in bucket b
--   P b:B:v:<b>      set: the hosts whose own breaker B is not closed
--   P b:B:s:<b>      set: the hosts with `suspect` failures in a row
--   P b:B:o          string: the fleet is open (since, ms)
--   P b:B:p          string: the host that probes for the fleet,
--                    "<end of its tenure, ms>|<1: it probed>|<host>"
--   P b:B:x          string: the prober that made no probe in its last
--                    tenure (not elected for the next)
--   P b:B:c          string: the ms at which the prober's probe closed
--                    the fleet (no vote counts while it lives)
--   P g:G:x:<b>      string: the retries made, summed over the hosts'
--                    pushes in bucket b, for budget G (fl:budget)
--   P g:G:y:<b>      string: the same for the retries that succeeded
-- Every key expires: sets and counts after 3 intervals, o after
-- max_open, p after `tenure` + 3 intervals (a prober that stops
-- syncing), x after `tenure`, c after cttl.  A key of another type,
-- without an expiry or with a longer one than ours, or a count that is
-- not a whole number from 0 to 10^12, is foreign: deleted, named in the
-- reply, and the host logs it.

local floor, ipairs, type = math.floor, ipairs, type

local M = {}

M.TEXT = [[
local P, host = ARGV[1], ARGV[2]
local iv, tenure = tonumber(ARGV[3]), tonumber(ARGV[4])
local share, minq = tonumber(ARGV[5]), tonumber(ARGV[6])
local sshare, mins = tonumber(ARGV[7]), tonumber(ARGV[8])
local max_open, cttl = tonumber(ARGV[9]), tonumber(ARGV[10])
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
local function put(k, yes)
  if yes then
    redis.call('SADD', k, host)
    redis.call('PEXPIRE', k, ttl)
  else
    redis.call('SREM', k, host)
  end
end
local function count(k1, k2, hosts)
  return math.min(hosts, math.max(redis.call('SCARD', k1),
                                  redis.call('SCARD', k2)))
end
local hk, hp = P .. 'h:' .. b, P .. 'h:' .. (b - 1)
fit(hk, 'set', ttl) fit(hp, 'set', ttl)
put(hk, true)
local hosts = math.max(redis.call('SCARD', hk), redis.call('SCARD', hp))
local out = { hosts }
-- the prober's key: "<end of tenure, ms>|<1: it probed>|<host>"
local function prober(pk)
  local v = redis.call('GET', pk)
  if not v then return nil end
  local e, d, who = string.match(v, '^(%d+)|([01])|(.+)$')
  if not e or tonumber(e) > now + tenure then
    redis.call('DEL', pk)
    foreign[#foreign + 1] = pk
    return nil
  end
  return who, tonumber(e), d
end
-- while the fleet is open: the prober's tenure ends at one of its own
-- syncs (its view says so at once, so no two hosts probe at a time);
-- a prober that made no probe is not elected for the next tenure; a
-- host campaigns only with demand (a request refused since its last
-- sync): the role goes to a host with requests to probe with
local function elect(pk, xk, who, e, d, demand)
  if who == host then
    if now < e then return 1 end
    redis.call('DEL', pk)
    if d ~= '1' then redis.call('SET', xk, host, 'PX', tenure) end
    who = nil
  end
  if who or demand ~= '1' or redis.call('GET', xk) == host then
    return 0
  end
  if redis.call('SET', pk, (now + tenure) .. '|0|' .. host, 'NX', 'PX',
                tenure + ttl) then
    return 1
  end
  return 0
end
local nb = tonumber(ARGV[11])
local i = 12
while i < 12 + 4 * nb do
  local name, st, res = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local demand = ARGV[i + 3]
  i = i + 4
  local pre = P .. 'b:' .. name .. ':'
  local vk, vp = pre .. 'v:' .. b, pre .. 'v:' .. (b - 1)
  local sk, sp = pre .. 's:' .. b, pre .. 's:' .. (b - 1)
  local ok, pk, ck = pre .. 'o', pre .. 'p', pre .. 'c'
  local xk = pre .. 'x'
  fit(vk, 'set', ttl) fit(vp, 'set', ttl)
  fit(sk, 'set', ttl) fit(sp, 'set', ttl)
  fit(ok, 'string', max_open) fit(pk, 'string', tenure + ttl)
  fit(ck, 'string', cttl) fit(xk, 'string', tenure)
  local vote, sus = st == 'o' or st == 'h', st == 's'
  put(vk, vote) put(sk, sus)
  if not vote then redis.call('SREM', vp, host) end
  if not sus then redis.call('SREM', sp, host) end
  local who, e, d = prober(pk)
  if res == '1' and (not who or who == host) then
    redis.call('SET', ck, now, 'PX', cttl)
    redis.call('DEL', ok, pk, vk, vp, sk, sp, xk)
    who = nil
  elseif res == '2' and who == host then
    redis.call('PEXPIRE', ok, max_open)
  end
  if who == host and res ~= '0' and d ~= '1' then
    d = '1'
    redis.call('SET', pk, e .. '|1|' .. host, 'PX',
               math.max(1, redis.call('PTTL', pk)))
  end
  local votes, sv = count(vk, vp, hosts), count(sk, sp, hosts)
  local need = math.max(minq, math.ceil(share * hosts))
  local open = false
  if redis.call('EXISTS', ck) == 0 then
    open = redis.call('EXISTS', ok) == 1 or votes >= need
      or sshare > 0 and votes + sv >= math.max(mins,
                                               math.ceil(sshare * hosts))
    if open then redis.call('SET', ok, now, 'NX', 'PX', max_open) end
  end
  local probe = 0
  if open then probe = elect(pk, xk, who, e, d, demand) end
  out[#out + 1] = open and 1 or 0
  out[#out + 1] = probe
  out[#out + 1] = votes
  out[#out + 1] = sv
  out[#out + 1] = need
end
-- budgets: this host's counts since its last push (retries made,
-- retries that succeeded) into bucket b; the fleet's counts of bucket
-- b - 1 (complete: every host pushed once in it) or of bucket b so far,
-- whichever has more retries (a rise is seen within the interval it
-- began in), and the hosts
local function plausible(k)
  local v = redis.call('GET', k)
  local x = v and tonumber(v)
  if v and not (x and x >= 0 and x <= 1e12 and x == math.floor(x)) then
    redis.call('DEL', k)
    foreign[#foreign + 1] = k
    return 0
  end
  return x or 0
end
local function push(k, n)
  if n > 0 then
    redis.call('INCRBY', k, n)
    redis.call('PEXPIRE', k, ttl)
  end
end
while ARGV[i] do
  local name = ARGV[i]
  local x, y = tonumber(ARGV[i + 1]) or 0, tonumber(ARGV[i + 2]) or 0
  i = i + 3
  local pre = P .. 'g:' .. name .. ':'
  local xk, xp = pre .. 'x:' .. b, pre .. 'x:' .. (b - 1)
  local yk, yp = pre .. 'y:' .. b, pre .. 'y:' .. (b - 1)
  fit(xk, 'string', ttl) fit(xp, 'string', ttl)
  fit(yk, 'string', ttl) fit(yp, 'string', ttl)
  local x0, y0 = plausible(xp), plausible(yp)
  local x1, y1 = plausible(xk) + x, plausible(yk) + y
  push(xk, x) push(yk, y)
  if x1 > x0 then x0, y0 = x1, y1 end
  if y0 > x0 then y0 = x0 end
  out[#out + 1] = x0
  out[#out + 1] = y0
  out[#out + 1] = hosts
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
-- keys, then ARGV.  o: prefix, host, interval, tenure, share, min,
-- sshare, mins, max_open, cttl (seconds); list: { name, state ("c",
-- "o", "h", "s"), res ("0", "1": the fleet's probe succeeded, "2": it
-- failed), demand (true: a request refused in the last interval) } per
-- breaker; buds: { name, retries, saved (counts >= 0:
-- the retries this host made since its last push, and those that
-- succeeded) } per budget
function M.args(o, list, buds)
  buds = buds or {}
  local a = { 0, o.prefix, o.host, floor(o.interval * 1000),
              floor(o.tenure * 1000), o.share, o.min, o.sshare, o.mins,
              floor(o.max_open * 1000), floor(o.cttl * 1000), #list }
  for _, b in ipairs(list) do
    a[#a + 1] = b.name
    a[#a + 1] = b.state
    a[#a + 1] = b.res or "0"
    a[#a + 1] = b.demand and "1" or "0"
  end
  for _, g in ipairs(buds) do
    a[#a + 1] = g.name
    a[#a + 1] = floor(g.retries or 0)
    a[#a + 1] = floor(g.saved or 0)
  end
  return a
end

local function int(v, lo, hi)
  return type(v) == "number" and v == floor(v) and v >= lo and v <= hi
end

-- the budgets' part of a reply, from r[j] on: { retries, saved,
-- hosts } per budget (the fleet's counts, saved <= retries), or nil
local function budgets(r, j, m)
  local out = {}
  for k = 1, m do
    local x, y, h = r[j], r[j + 1], r[j + 2]
    if not (int(x, 0, 1e12) and int(y, 0, x) and int(h, 1, 2 ^ 31)) then
      return nil
    end
    out[k] = { retries = x, saved = y, hosts = h }
    j = j + 3
  end
  return out
end

--- script.reply(r, n [, m]) -> { hosts, [i] = { open, probe, votes,
-- suspects, need }, budgets = { [k] = { retries, saved, hosts } } },
-- foreign
-- (the keys the script deleted), or nil and why: a reply of the shape
-- the script gives, for n breakers and m budgets
local EACH = 5
function M.reply(r, n, m)
  m = m or 0
  if type(r) ~= "table" or not int(r[1], 1, 2 ^ 31) then
    return nil, "not the script's reply"
  end
  local out, hosts = { hosts = r[1] }, r[1]
  for i = 1, n do
    local j = 2 + (i - 1) * EACH
    local open, probe, votes, sv, need = r[j], r[j + 1], r[j + 2],
                                         r[j + 3], r[j + 4]
    if not (int(open, 0, 1) and int(probe, 0, 1) and int(votes, 0, hosts)
            and int(sv, 0, hosts) and int(need, 1, 2 ^ 31)) then
      return nil, "not the script's reply"
    end
    out[i] = { open = open == 1, probe = probe == 1, votes = votes,
               suspects = sv, need = need }
  end
  local j0 = 2 + n * EACH
  out.budgets = budgets(r, j0, m)
  if not out.budgets then return nil, "not the script's reply" end
  local foreign = {}
  for j = j0 + 3 * m, #r do
    foreign[#foreign + 1] = type(r[j]) == "string" and r[j] or "?"
  end
  return out, foreign
end

return M

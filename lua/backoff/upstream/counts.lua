-- backoff.upstream.counts: a declared upstream's metrics, added up in
-- this worker and written to the dict at most once a second (internal:
-- backoff.upstream's).  A recorder in the engine's eyes (run, add): the
-- happy path costs a few table updates instead of two dict:incr, which
-- is what keeps a declared upstream within 6% of a bare pcall in nginx
-- (bench/nginx.lua).  The counts reach the dict on the first call a
-- second after the last write, from a timer of the worker every second
-- in nginx, and before /metrics is written by this worker: /metrics
-- lags the requests by at most about a second.

local metrics = require "backoff.metrics"

local next, pairs, pcall, rawget, setmetatable =
      next, pairs, pcall, rawget, setmetatable

local add_key = metrics._ext.add_n

local C = {}
C.__index = C

local function now_of(self)
  local ngx = rawget(_G, "ngx")
  if ngx and ngx.now then return ngx.now() end
  return self.clock()
end

local function bump(t, k, n)
  t[k] = (t[k] or 0) + n
end

--- c:flush(): what this worker counted, to the dict
function C:flush()
  local p, m = self.pending, self.m
  self.pending, self.last = {}, now_of(self)
  for k, n in pairs(p) do
    if k == "giveups" then
      for reason, g in pairs(n) do m:add("giveups", g, reason) end
    elseif self.plain[k] then
      m:add(k, n)
    else
      add_key(m, k, n)
    end
  end
end

local function timer(premature, self)
  if premature then return end
  if next(self.pending) then self:flush() end
end

local function soon(self)
  if not self.timed then
    local ngx = rawget(_G, "ngx")
    if ngx and ngx.timer and ngx.get_phase and ngx.get_phase() ~= "init"
    then
      self.timed = pcall(ngx.timer.every, 1, timer, self) or true
    end
  end
  if now_of(self) - self.last >= 1 then self:flush() end
end

--- c:run(ok, attempts [, reason [, hints]]): as a recorder's run
function C:run(ok, attempts, reason, hints)
  local p = self.pending
  if attempts > 0 then bump(p, "attempts", attempts) end
  if attempts > 1 then bump(p, "retries", attempts - 1) end
  if ok then
    bump(p, "successes", 1)
    if attempts > 1 then bump(p, "successes_after_retry", 1) end
  else
    local g = p.giveups or {}
    p.giveups = g
    bump(g, reason, 1)
    if reason == "budget" then bump(p, "budget_refusals", 1) end
  end
  if hints and hints > 0 then bump(p, "hints_honoured", hints) end
  soon(self)
end

--- c:add(counter, n [, reason]): straight to the recorder (the rare
-- counters: hedges, aborted requests)
function C:add(counter, n, reason)
  self.m:add(counter, n, reason)
end

--- c:count(key): one more under a key of the upstream's own
function C:count(key)
  bump(self.pending, key, 1)
  soon(self)
end

--- counts.new(recorder, clock) -> the recorder's counts, batched
local PLAIN = { attempts = true, retries = true, successes = true,
  successes_after_retry = true, budget_refusals = true,
  hints_honoured = true }

function C.new(m, clock)
  return setmetatable({ m = m, dict = m.dict, pending = {}, last = 0,
    clock = clock or require("backoff").now, plain = PLAIN }, C)
end

return C

-- backoff.hedge.peers: which peer each copy of a hedged request goes to
-- (internal: backoff.hedge's; doc/hedge.md, option peers).
--
--   local pick = peers.chooser(list_or_function)   per request
--   local peer, i = pick:choose(attempt, now)  copy `attempt`'s peer
--   pick:done(i, seconds, now)            that copy ended (or was
--                                         cancelled) after seconds
--
-- A list: each worker keeps, per list and peer, the copies in flight
-- and a peak-sensitive moving latency (a slower copy sets it at once, a
-- faster one moves it a fifth of the way; it halves every HALF_LIFE
-- seconds without news, so that a peer left alone is tried again).  A
-- peer's cost is (latency + 1 ms) x (copies in flight + 1), Finagle's
-- "peak EWMA".  The first copy of a request goes to the next peer in
-- turn, or the one after it when that one is cheaper by more than a
-- tenth (two choices: a peer that queues answers late and holds its
-- copies, so it gets few); a hedge to the cheapest peer
-- the request has not tried, so no peer gets two copies of a request
-- while another is untried.  A function: peers(attempt,
-- tried), tried the peers given to the request's earlier copies.

local setmetatable = setmetatable
local HALF_LIFE = 5            -- seconds: a latency without news halves
local FLOOR = 0.001            -- seconds added to a latency in the cost
local callable = require("backoff.util").callable

local M = {}

-- per list (weakly): { turn, busy = { [i] = copies in flight } }
local lists = setmetatable({}, { __mode = "k" })

local function state_of(list)
  local s = lists[list]
  if not s then
    s = { turn = 0, busy = {}, lat = {}, at = {} }
    for i = 1, #list do s.busy[i], s.lat[i], s.at[i] = 0, 0, 0 end
    lists[list] = s
  end
  return s
end

local Listed = {}
Listed.__index = Listed

-- peer i's latency now (decayed since its last news)
local function latency(s, i, now)
  local dt = now - s.at[i]
  if dt <= 0 then return s.lat[i] end
  return s.lat[i] * 0.5 ^ (dt / HALF_LIFE)
end

local function cost(s, i, now)
  return (latency(s, i, now) + FLOOR) * (s.busy[i] + 1)
end

-- the first copy: the next in turn, unless the one after it is
-- cheaper by more than a tenth (peers alike share the load evenly)
local function first(self, now)
  local s, n = self.s, self.n
  s.turn = s.turn % n + 1
  local a = s.turn
  local b = a % n + 1
  if cost(s, b, now) < 0.9 * cost(s, a, now) then return b end
  return a
end

-- a later copy: the cheapest untried peer, after the last in turn
local function later(self, now)
  local s, n, tried = self.s, self.n, self.tried
  local best, best_cost, start = nil, nil, self.last
  for k = 1, n do
    local i = (start + k - 1) % n + 1
    if not tried[i] then
      local c = cost(s, i, now)
      if not best or c < best_cost then best, best_cost = i, c end
    end
  end
  return best or start % n + 1       -- every peer tried: the next
end

function Listed:choose(attempt, now)
  now = now or 0
  local i = attempt == 1 and first(self, now) or later(self, now)
  self.tried[i], self.last = true, i
  local busy = self.s.busy
  busy[i] = (busy[i] or 0) + 1
  return self.list[i], i
end

function Listed:done(i, seconds, now)
  local s = self.s
  local busy = s.busy
  if not (i and busy[i]) then return end
  if busy[i] > 0 then busy[i] = busy[i] - 1 end
  if seconds and seconds >= 0 then
    now = now or 0
    local cur = latency(s, i, now)
    if seconds > cur then
      cur = seconds
    else
      cur = cur + (seconds - cur) / 5
    end
    s.lat[i], s.at[i] = cur, now
  end
end

local Called = {}
Called.__index = Called

function Called:choose(attempt)
  local peer = self.fn(attempt, self.tried)
  self.tried[#self.tried + 1] = peer
  return peer
end

function Called.done() end

--- peers.chooser(v) -> a request's chooser, or nil when v is nil
function M.chooser(v)
  if v == nil then return nil end
  if callable(v) then
    return setmetatable({ fn = v, tried = {} }, Called)
  end
  return setmetatable({ list = v, n = #v, s = state_of(v), tried = {},
                        last = 0 }, Listed)
end

return M

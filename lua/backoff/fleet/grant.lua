-- backoff.fleet.grant: a host's budget with the fleet's grant on top
-- (internal; made by fl:budget(bud)).  The same protocol as a budget
-- (withdraw, allows, record, deposit, tokens, and whatever else the
-- budget has, passed through), so it goes wherever one goes
-- (ropts.budget).
--
-- The host's own budget decides first, as it would alone.  A retry it
-- refuses may still be paid from the grant: retries the fleet lends
-- this host, one dict key that the fleet's timer sets each interval
-- from what every host saw (backoff.fleet.script): over the fleet's
-- last interval, Y requests that a retry saved (a success at attempt
-- 2 or later) and X retries made,
--
--   grant = min(capacity, lend x Y / hosts) x w,
--   w = 0 while Y / X <= 0.2, 1 from Y / X >= 0.4, a straight line
--   between
--
-- so the fleet lends while its retries succeed (a dead upstream: Y = 0,
-- nothing; a healthy one: no retries, nothing; 80% failing: Y / X =
-- 0.2, nothing: the host's own budget alone keeps the load down) and as
-- much as its recoveries show (a host that has not seen a retry
-- succeed yet borrows from those that have: the quiet host at the start
-- of a partial outage).  What the host does not spend in an interval is
-- not kept: the grant is set, not added to.  Redis down or the timer
-- stopped: the grant is deleted or expires (3 intervals) and the host
-- is on its own budget.
--
-- What the host tells the fleet: record(ok, attempt) with attempt >= 2
-- adds 1 to the retries counter in the host's dict, and 1 to the saved
-- one when ok (one or two incr on a retry; nothing on a request that
-- succeeds at its first attempt), which the timer pushes and resets.
-- No Redis here: dict calls only.

local store = require "backoff.store"

local floor, getmetatable, pairs, setmetatable, type = math.floor,
      getmetatable, pairs, setmetatable, type

local G = {}

local MILLI = 1000
local MOST = 2 ^ 40               -- a plausible count, a grant in milli

local Grant = { __name = "backoff.fleet budget" }
Grant.__index = Grant

-- the grant now, in thousandths (missing or foreign: 0)
local function grant(self)
  local fl = self.fleet
  local v = fl.dict:get(self.gk)
  if v == nil then return 0 end
  if not store.count(v, 0, self.cap) then
    store.foreign(fl.dict, self.gk, v, "backoff.fleet", "a grant")
    return 0
  end
  return v
end

-- the cost a withdrawal asks, in thousandths (nil: the budget's own)
local function milli(self, cost)
  if cost == nil then
    local f = self.bud.cost
    cost = type(f) == "function" and f(self.bud) or 1
  end
  if type(cost) ~= "number" then return nil end
  return floor(cost * MILLI + 0.5)
end

-- take c thousandths from the grant: true, or false (not enough: takes
-- nothing)
local function take(self, c)
  if c <= 0 or c > self.cap or grant(self) < c then return false end
  local dict = self.fleet.dict
  local r = dict:incr(self.gk, -c)
  if type(r) ~= "number" then return false end
  if r >= 0 then return true end
  dict:incr(self.gk, c)                  -- another worker took it first
  return false
end

--- g:withdraw([cost [, attempt]]) -> as bud:withdraw; a retry the
-- budget refuses is paid from the fleet's grant when it holds enough
function Grant:withdraw(cost, attempt)
  local ok, err = self.bud:withdraw(cost, attempt)
  if ok or err or self:throttled(cost) then return ok, err end
  local c = milli(self, cost)
  if c and take(self, c) then
    self.lent = self.lent + 1
    return true
  end
  return false
end

--- g:throttled(cost) -> cost is the budget's price of a retry after
-- an overload answer (its throttle_cost): never paid from the grant
function Grant:throttled(cost)
  local f = self.bud.throttle_cost
  return cost ~= nil and type(f) == "function" and cost >= f(self.bud)
end

--- g:allows([cost [, attempt]]) -> as bud:allows, or the grant holds
-- enough
function Grant:allows(cost, attempt)
  if self.bud:allows(cost, attempt) then return true end
  if self:throttled(cost) then return false end
  local c = milli(self, cost)
  return c ~= nil and c > 0 and c <= grant(self)
end

--- g:record(ok [, attempt [, cost]]) -> as bud:record; a retry's
-- outcome counted for the fleet
function Grant:record(ok, attempt, cost)
  local r = self.bud:record(ok, attempt, cost)
  if type(attempt) == "number" and attempt >= 2 then
    local dict, hold = self.fleet.dict, self.fleet.hold
    store.incr(dict, self.xk, 1, 0, hold)
    if ok then store.incr(dict, self.yk, 1, 0, hold) end
  end
  return r
end

--- g:grant() -> the retries the fleet lends this host now
function Grant:grant() return grant(self) / MILLI end

--- g:budget() -> the host's own budget
function Grant:budget() return self.bud end

function Grant:__tostring()
  return "backoff.fleet: " .. tostring(self.bud)
end

------------------------------------------------------------------------
-- the timer's side (backoff.fleet's sync)

-- a counter's value, taken (the next push starts from 0; what other
-- workers add meanwhile is kept)
local function taken(dict, key)
  local n = dict:get(key)
  if n == nil then return 0 end
  if not store.count(n, 0, MOST) then
    store.foreign(dict, key, n, "backoff.fleet", "a count")
    return 0
  end
  if n > 0 then dict:incr(key, -n) end
  return n
end

--- g:counts() -> the retries this host made and those that succeeded
-- since the last push, taken from the host's counters
function Grant:counts()
  local dict = self.fleet.dict
  return taken(dict, self.xk), taken(dict, self.yk)
end

-- the lower and upper success shares of the fleet's retries
local LO, HI = 0.2, 0.4

--- grant.level(lend, capacity, retries, saved, hosts) -> the grant
-- (retries, a number >= 0) for the fleet's counts
function G.level(lend, capacity, x, y, hosts)
  if x <= 0 or y <= 0 or hosts <= 0 then return 0 end
  local s = y / x
  if s <= LO then return 0 end
  local w = s >= HI and 1 or (s - LO) / (HI - LO)
  local v = lend * y / hosts
  if v > capacity then v = capacity end
  return v * w
end

--- g:lend(rep): the fleet's word ({ retries, saved, hosts }) into the
-- grant (0: the grant deleted)
function Grant:lend(rep)
  local dict = self.fleet.dict
  local v = floor(G.level(self.per, self.cap / MILLI, rep.retries,
                          rep.saved, rep.hosts) * MILLI)
  if v <= 0 then
    dict:delete(self.gk)
    return
  end
  dict:set(self.gk, v, self.fleet.hold)
end

--- g:forget(): each host on its own budget (Redis did not answer)
function Grant:forget() self.fleet.dict:delete(self.gk) end

-- the budget's own methods, passed through (cost, capacity,
-- throttle_cost, timeout_cost, tokens, deposit, ...)
local function passing(bud)
  local mt = getmetatable(bud)
  local idx = mt and type(mt.__index) == "table" and mt.__index or {}
  local out = {}
  for name, f in pairs(idx) do
    if type(f) == "function" and Grant[name] == nil
       and name:sub(1, 2) ~= "__" then
      out[name] = function(_, ...) return f(bud, ...) end
    end
  end
  return out
end

--- grant.new(fleet, bud, name, lend, capacity) -> bud with the
-- fleet's grant on top
function G.new(fleet, bud, name, lend, capacity)
  local k = fleet.key
  local self = passing(bud)
  self.fleet, self.bud, self.name = fleet, bud, name
  self.per, self.cap = lend, floor(capacity * MILLI)
  self.gk, self.xk, self.yk = k .. "|G" .. name, k .. "|X" .. name,
                              k .. "|Y" .. name
  self.lent = 0
  return setmetatable(self, Grant)
end

return G

-- backoff.budget.earned: retries earned by successes, in proportion to
-- the share of recent attempts that succeeded -- the rule of
-- backoff.budget.recommended.  In-process or shared by the workers of
-- an nginx host.  See doc/budget.md.
--
-- The rule: a reserve of at most `capacity` tokens (8), full at the
-- start; a retry withdraws `cost` (1) and is refused, taking nothing,
-- when fewer remain; a success earns `earn` x s tokens (6 x s), where
-- s is the success share of the recent attempts: a moving average over
-- about `window` (200) attempts, before this one, starting at 1.
--   * while the upstream works (s near 1) each success buys up to 6
--     retries: a budget that is full stays full;
--   * at 50% failures s = 0.5: a success earns 3 tokens, and the 1 retry
--     per success that 50% needs is always there;
--   * at 80% failures s = 0.2: a success earns 1.2: about 1.2 retries
--     per success, so about 1 / (1 - 0.2 x 1.2) = 1.3 attempts per
--     request instead of 4.3;
--   * a dead upstream earns nothing: after `capacity` retries (8) no
--     more, until something succeeds.
-- A retry after an answer where the server said it is overloaded (429,
-- 503 with Retry-After) should be withdrawn at throttle_cost(): by
-- default capacity + 1, so it is never made.
--
-- Tokens are kept in thousandths, one integer under a key (in this Lua
-- state, or in an ngx.shared dict: the same incr-only algorithm and
-- guarantees as the token bucket, lua/backoff/budget/token.lua; a
-- missing key is full).  s is per Lua state: shared, each worker
-- measures it on its own attempts.  The good day costs one dict read per
-- success, and a worker whose s is above 0.999 (about 300 successes in
-- a row) that found the budget full reads it only every 16th success:
-- a retry another worker took meanwhile is earned back at that read (or
-- by that worker's own successes), and this worker's failure or
-- withdrawal ends the shortcut at once.

local C = require "backoff.budget.common"

local floor, getmetatable, setmetatable = math.floor, getmetatable,
                                          setmetatable
local add, take, read, from_milli = C.add, C.take, C.read, C.from_milli

local CTOR = "backoff.budget.earned"

local Earned = { __name = CTOR }
Earned.__index = Earned

local function check(self, method)
  if getmetatable(self) ~= Earned then
    C.self_check(self, Earned, method)
  end
end

-- bud:withdraw([cost]) -> true (cost tokens taken) or false (short:
-- takes nothing); false, err when the dict fails or is corrupt
function Earned:withdraw(cost)
  check(self, "withdraw")
  cost = C.count_arg(cost, "withdraw", "cost", self.cost_)
  self.skip = 0
  if cost == 0 then return true end
  local cap = self.cap
  if cost > self.capacity_ then return false end
  return take(self.dict, self.dkey, cost * 1000, cap, cap, 0)
end

-- bud:allows([cost]) -> would withdraw(cost) succeed now
function Earned:allows(cost)
  check(self, "allows")
  cost = C.count_arg(cost, "allows", "cost", self.cost_)
  if cost == 0 then return true end
  local v = read(self.dict, self.dkey, self.cap, self.cap)
  return v ~= nil and v >= cost * 1000
end

-- A worker whose success share is at least this (about 300 successes
-- in a row) takes a full shared budget's word for SKIP successes: it
-- reads the counter once per SKIP + 1 of them, not at each
local QUIET, SKIP = 0.999, 15

-- bud:record(ok [, attempt [, cost]]): a success earns earn x s; every
-- attempt moves s
function Earned:record(ok, attempt, cost)
  check(self, "record")
  C.record_args(ok, attempt, cost)
  local s = self.s
  if ok then
    self.s = s + (1 - s) * self.alpha
    local skip = self.skip
    if skip > 0 then                     -- the good day, shared
      self.skip = skip - 1
      return
    end
    local n = floor(self.earn_ * s + 0.5)
    local cap = self.cap
    if n > cap then n = cap end
    if n == 0 then return end
    local v = self.dict:get(self.dkey)     -- full stays full: no write
    if v == nil or v == cap then
      if self.shared and s >= QUIET then self.skip = SKIP end
      return
    end
    add(self.dict, self.dkey, n, cap, cap)
  else
    self.s, self.skip = s - s * self.alpha, 0
  end
end

-- bud:deposit([n]) -> the tokens after: gives back what withdraw(n)
-- took (n tokens, default cost), never beyond capacity; nil, err when
-- the dict fails
function Earned:deposit(n)
  check(self, "deposit")
  n = C.count_arg(n, "deposit", "n", self.cost_)
  local cap = self.cap
  local m = n > self.capacity_ and cap or n * 1000
  local r, err = add(self.dict, self.dkey, m, cap, cap)
  if not r then return nil, err end
  if r < 0 then r = 0 elseif r > cap then r = cap end
  return from_milli(r)
end

-- bud:tokens() -> 0 to capacity (thousandths; corrupt: 0)
function Earned:tokens()
  check(self, "tokens")
  local cap = self.cap
  local v = read(self.dict, self.dkey, cap, cap)
  if v == nil or v < 0 then return 0 end
  if v > cap then v = cap end
  return from_milli(v)
end

-- bud:success_share() -> s, this Lua state's moving average (0 to 1)
function Earned:success_share()
  check(self, "success_share")
  return self.s
end

C.getter(Earned, "capacity", "capacity_")
C.getter(Earned, "cost", "cost_")
C.getter(Earned, "throttle_cost", "throttle_")
C.getter(Earned, "window", "window_")
C.getter(Earned, "dict_key", "dkey")

function Earned:earn()
  check(self, "earn")
  return from_milli(self.earn_)
end

function Earned:__tostring()
  check(self, "__tostring")
  local v = read(self.dict, self.dkey, self.cap, self.cap) or 0
  if v < 0 then v = 0 elseif v > self.cap then v = self.cap end
  return ("%s: %s%s/%s tokens (earn %s x success share %.3f)"):format(
    CTOR, self.shared and ("shared " .. C.repr(self.dkey) .. ", ") or "",
    C.milli_text(v), C.num(self.capacity_), C.milli_text(self.earn_),
    self.s)
end

local RULES = {
  capacity = C.count_rule(8, 2 ^ 30, "2^30"),
  cost = C.count_rule(1),
  earn = C.number_rule(6, 0, 1000, false, "a number >= 0 and <= 1000"),
  window = C.number_rule(200, 1, 2 ^ 20, false,
    "a number >= 1 and <= 2^20"),
  throttle_cost = C.count_rule(nil),
}
local EXTRA = { shared = true, key = true }

-- earned(opts) -> the budget; opts: capacity (8), cost (1), earn (6),
-- window (200), throttle_cost (capacity + 1), shared, key
local function new(opts, level, ctor)
  level = level or 2          -- the caller's frame, from here
  local o = C.options(ctor or CTOR, opts, RULES, EXTRA, level + 1)
  local self = {
    capacity_ = o.capacity, cap = o.capacity * 1000, cost_ = o.cost,
    earn_ = floor(o.earn * 1000 + 0.5), window_ = o.window,
    alpha = 1 / o.window, s = 1, skip = 0,
    throttle_ = o.throttle_cost or o.capacity + 1,
  }
  if o.shared ~= nil or o.key ~= nil then
    self.key, self.dkey = C.shared_key(ctor or CTOR, o, "e",
      { o.capacity, self.earn_ }, level + 1)
    self.dict, self.shared = o.shared, true
  else
    self.dict, self.dkey = C.mini_dict(), "tokens"
  end
  return setmetatable(self, Earned)
end

return { new = new, metatable = Earned }

-- backoff.budget.adaptive: client-side adaptive throttling (Google SRE
-- book, "Handling Overload"), applied to retries, in-process or shared
-- by the workers of an nginx host.  See doc/budget.md.
--
-- The rule: over a sliding window (`window` seconds, 10 slices) count
-- the requests (every attempt, and every retry withdraw refuses) and the
-- accepts (attempts that succeeded); a retry is refused with
-- probability max(0, (requests - k x accepts) / (requests + 1)), k = 2:
-- never while the upstream accepts half the attempts, almost always
-- once it accepts none.  The draw is `random()` (default math.random),
-- one per decision.
--
-- allows() makes the draw and, when it allows, keeps the grant for the
-- next withdraw() of this object, which then takes it without a new
-- draw (the balancer decides at one try and pays at the next); at most
-- 16 grants are kept, a withdraw() with none draws.
--
-- Shared: requests and accepts are counted in the dict (incr per slice,
-- see backoff.budget.window), the draw is local.  Counts that are
-- missing (evicted, expired) are forgotten: fewer requests and accepts,
-- so a lower refusal probability.

local C = require "backoff.budget.common"
local rule = require "backoff.check"  -- the option rules
local W = require "backoff.budget.window"
local core = require "backoff.core"

local getmetatable, setmetatable, type = getmetatable, setmetatable, type

local CTOR = "backoff.budget.adaptive"
local MAX_GRANTS = 16

local Adaptive = { __name = CTOR }
Adaptive.__index = Adaptive

local function check(self, method)
  if getmetatable(self) ~= Adaptive then
    C.self_check(self, Adaptive, method)
  end
end

-- the refusal probability now (0 to 1), or nil, err
local function reject_p(self)
  local win = self.win
  local req, err = win:sum("r")
  if not req then return nil, err end
  local acc
  acc, err = win:sum("a")
  if not acc then return nil, err end
  if req < 0 then req = 0 end
  local p = (req - self.k_ * acc) / (req + 1)
  if p < 0 then return 0 end
  if p > 1 then return 1 end
  return p
end

-- one decision: true (allowed) or false (refused; withdraw counts the
-- refused retry as a request, allows does not) [, err]
local function decide(self, count)
  local p, err = reject_p(self)
  if not p then return false, err end
  if p > 0 then
    local d = self.random()
    if type(d) ~= "number" or not (d >= 0 and d <= 1) then
      error(CTOR .. ": option 'random' returned " .. C.repr(d)
            .. " (a number in [0, 1] expected)", 3)
    end
    if d < p then
      if count then self.win:add("r", 1) end
      return false
    end
  end
  return true
end

-- bud:withdraw([cost]) -> true, or false (refused at random); cost is
-- checked, not used
function Adaptive:withdraw(cost)
  check(self, "withdraw")
  C.count_arg(cost, "withdraw", "cost")
  local g = self.grants
  if g > 0 then
    self.grants = g - 1
    return true
  end
  return decide(self, true)
end

-- bud:allows([cost]) -> the draw; a grant is kept for the next withdraw
function Adaptive:allows(cost)
  check(self, "allows")
  C.count_arg(cost, "allows", "cost")
  local ok = decide(self, false)
  if ok and self.grants < MAX_GRANTS then self.grants = self.grants + 1 end
  return ok
end

-- bud:record(ok [, attempt [, cost]]): every attempt is a request; a
-- success is also an accept
function Adaptive:record(ok, attempt, cost)
  check(self, "record")
  C.record_args(ok, attempt, cost)
  local win = self.win
  win:add("r", 1)
  if ok then win:add("a", 1) end
end

-- bud:deposit([n]) -> tokens(): gives back what withdraw(n) took,
-- which is nothing (a draw takes nothing): n is checked, nothing changes
function Adaptive:deposit(n)
  check(self, "deposit")
  C.count_arg(n, "deposit", "n")
  return self:tokens()
end

-- bud:tokens() -> the probability that a retry is allowed now (0 to 1)
function Adaptive:tokens()
  check(self, "tokens")
  local p = reject_p(self)
  if not p then return 0 end
  return 1 - p
end

-- bud:counts() -> requests, accepts over the window (a foreign number
-- under a slice's key can make a sum negative: 0)
local function count_of(n)
  if n == nil or n <= 0 then return 0 end
  return n
end

function Adaptive:counts()
  check(self, "counts")
  return count_of(self.win:sum("r")), count_of(self.win:sum("a"))
end

C.getter(Adaptive, "k", "k_")
C.getter(Adaptive, "window", "window_")
C.getter(Adaptive, "dict_key", "dkey")

function Adaptive:__tostring()
  check(self, "__tostring")
  return ("%s: %sk %s over %s s"):format(CTOR,
    self.shared and ("shared " .. C.repr(self.dkey) .. ", ") or "",
    C.num(self.k_), C.num(self.window_))
end

local options = rule.options(CTOR, {
  k = rule.number{ default = 2, min = 0, open_min = true, max = 1000 },
  window = rule.number{ default = 120, min = 1, max = 86400 },
  clock = rule.fn(),
  random = rule.fn(),
  shared = rule.shared("budget"),
}, { key = true })

-- adaptive(opts) -> the throttle; opts: k (2), window (120 s), clock
-- (backoff.now), random (math.random), shared, key
local function new(opts)
  local o = options(opts)
  local self = { k_ = o.k, window_ = o.window, grants = 0,
    random = o.random or math.random }
  local clock = o.clock or core.now
  if o.shared or o.key ~= nil then
    self.key, self.dkey = C.shared_key(CTOR, o, "s", { o.window })
    self.win = W.dict(CTOR, o.window, 10, clock, o.shared, self.dkey)
    self.shared = true
  else
    self.win = W.ring(CTOR, o.window, 10, clock, { "r", "a" })
  end
  return setmetatable(self, Adaptive)
end

return { new = new, metatable = Adaptive }

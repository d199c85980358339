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
-- allows() says what the next withdraw() does: it makes that decision's
-- draw and keeps it (allowed or not) for the next decision of this
-- object taken at the same moment -- the same slice of the window and
-- the same counts, so the same refusal probability -- which uses it
-- instead of drawing (a withdraw() takes it).  A draw kept from another
-- moment is dropped: a decision is always made against the throttle as
-- it is when made, and a withdraw() that did not follow its allows()
-- (another request's try) gets an honest draw of its own, never a grant
-- banked by someone else.  (Grants used to be banked, up to 16, for any
-- later withdraw: an hour-old grant passed a throttle refusing 999 in
-- 1000.)
--
-- Shared: requests and accepts are counted in the dict (incr per slice,
-- see backoff.store.window), the draw is local.  Counts that are
-- missing (evicted, expired) are forgotten: fewer requests and accepts,
-- so a lower refusal probability.

local C = require "backoff.budget.common"
local rule = require "backoff.check"  -- the option rules
local window = require "backoff.store.window"
local core = require "backoff.core"

local getmetatable, setmetatable, type = getmetatable, setmetatable, type

local CTOR = "backoff.budget.adaptive"

local Adaptive = { __name = CTOR }
Adaptive.__index = Adaptive

local function check(self, method)
  if getmetatable(self) ~= Adaptive then
    C.self_check(self, Adaptive, method)
  end
end

-- the refusal probability now (0 to 1), or nil, err; and the counts it
-- comes from
local function reject_p(self)
  local win = self.win
  local req, err = win:sum("r")
  if not req then return nil, err end
  local acc
  acc, err = win:sum("a")
  if not acc then return nil, err end
  if req < 0 then req = 0 end
  local p = (req - self.k_ * acc) / (req + 1)
  if p < 0 then p = 0 elseif p > 1 then p = 1 end
  return p, req, acc
end

-- the draw of a decision at the moment (slice, req, acc): the one
-- allows() kept at this moment, or a new one; keep: allows() keeps it,
-- withdraw() uses it up
local function draw_at(self, slice, req, acc, keep)
  local d = self.kept
  if d == nil or self.kslice ~= slice or self.kreq ~= req
     or self.kacc ~= acc then
    d = self.random()
    if type(d) ~= "number" or not (d >= 0 and d <= 1) then
      error(CTOR .. ": option 'random' returned " .. C.repr(d)
            .. " (a number in [0, 1] expected)", 4)
    end
  end
  if keep then
    self.kept, self.kslice, self.kreq, self.kacc = d, slice, req, acc
  else
    self.kept = nil
  end
  return d
end

-- one decision: true (allowed) or false (refused; withdraw counts the
-- refused retry as a request, allows does not) [, err]
local function decide(self, peek)
  local p, req, acc = reject_p(self)
  if not p then return false, req end
  if p > 0 then
    if draw_at(self, self.win.last, req, acc, peek) < p then
      if not peek then self.win:add("r", 1) end
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
  return decide(self, false)
end

-- bud:allows([cost]) -> what withdraw() would say now: its draw, kept
-- for a withdraw() at this same moment
function Adaptive:allows(cost)
  check(self, "allows")
  C.count_arg(cost, "allows", "cost")
  return decide(self, true)
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
  local self = { k_ = o.k, window_ = o.window,
    random = o.random or math.random }
  local clock = o.clock or core.now
  if o.shared or o.key ~= nil then
    self.key, self.dkey = C.shared_key(CTOR, o, "s", { o.window })
    self.win = window.new { who = CTOR, span = o.window, slices = 10,
      clock = clock, dict = o.shared, prefix = self.dkey .. ":", lo = 0 }
    self.shared = true
  else
    self.win = window.new { who = CTOR, span = o.window, slices = 10,
      clock = clock }
  end
  return setmetatable(self, Adaptive)
end

return { new = new, metatable = Adaptive }

-- backoff.budget.ratio: a retry budget as a share of the requests over
-- a sliding window (Finagle's RetryBudget), in-process or shared by the
-- workers of an nginx host.  See doc/budget.md.
--
-- The rule, as Finagle's TokenRetryBudget over a WindowedAdder: every
-- request (a first attempt) deposits 1000 units and every retry
-- withdraws 1000 / (percent / 100) units; both expire after `window`
-- seconds (10 slices of window / 10); a retry is allowed when the
-- balance, the window's sum plus a reserve of min_per_second x window
-- retries, covers it.  So over any window at most percent% of the
-- requests plus min_per_second x window are retried.  percent = 0: no
-- credit for requests, only the reserve.
--
-- Shared: deposits and withdrawals go to the current slice's key with
-- incr; a withdrawal is made first and undone (in the same slice) when
-- the balance it left is below 0, as the token bucket does: never
-- overdrawn, whatever the interleaving; a withdrawal in flight can make
-- another worker see the balance briefly low.  A granted withdrawal
-- also adds to counter "w", what deposit may give back (read, then
-- written: two deposits in flight may both see the same sum).  Missing
-- slices count 0:
-- an evicted key forgets requests (fewer retries) and withdrawals
-- (more, within the reserve and the window's requests).

local C = require "backoff.budget.common"
local rule = require "backoff.check"  -- the option rules
local window = require "backoff.store.window"
local core = require "backoff.core"

local floor, getmetatable, setmetatable, type = math.floor, getmetatable,
                                                setmetatable, type

local CTOR = "backoff.budget.ratio"
local SCALE = 1000                      -- units one request deposits

local Ratio = { __name = CTOR }
Ratio.__index = Ratio

local function check(self, method)
  if getmetatable(self) ~= Ratio then C.self_check(self, Ratio, method) end
end

-- the balance (units), or nil, err
local function balance(self)
  local s, err = self.win:sum("b")
  if not s then return nil, err end
  return s + self.reserve
end

-- bud:withdraw([cost]) -> true when the balance covered cost retries
-- (taken), else false (nothing taken) [, err]
function Ratio:withdraw(cost)
  check(self, "withdraw")
  cost = C.count_arg(cost, "withdraw", "cost", 1)
  if cost == 0 then return true end
  local n = cost * self.unit
  if n > self.most then return false end    -- more than can ever be
  local win = self.win
  local i, err = win:add("b", -n)
  if not i then return false, err end
  local b
  b, err = balance(self)
  if b and b >= 0 then
    win:add("w", n, i)                   -- what deposit may give back
    return true
  end
  win:add("b", n, i)                     -- undo, in the same slice
  if err then return false, err end
  return false
end

-- bud:allows([cost]) -> would withdraw(cost) succeed now
function Ratio:allows(cost)
  check(self, "allows")
  cost = C.count_arg(cost, "allows", "cost", 1)
  if cost == 0 then return true end
  local b = balance(self)
  return b ~= nil and b >= cost * self.unit
end

-- bud:record(ok [, attempt [, cost]]): a first attempt is a request:
-- it deposits (whatever its outcome)
function Ratio:record(ok, attempt, cost)
  check(self, "record")
  attempt = C.record_args(ok, attempt, cost)
  if attempt == 1 and self.dep > 0 then self.win:add("b", self.dep) end
end

-- bud:deposit([n]) -> the retries the balance allows after: gives back
-- what withdraw(n) took (n retries, default 1) to the current slice;
-- nil, err when the dict fails
function Ratio:deposit(n)
  check(self, "deposit")
  n = C.count_arg(n, "deposit", "n", 1)
  if n > 0 then
    -- at most what the window's withdrawals took and deposits have not
    -- given back yet: a deposit gives back, it never mints retries
    local win = self.win
    local w, err = win:sum("w")
    if not w then return nil, err end
    local m = n * self.unit
    if m > w then m = w end
    if m > 0 then
      local i
      i, err = win:add("b", m)
      if not i then return nil, err end
      win:add("w", -m, i)
    end
  end
  return self:tokens()
end

-- bud:tokens() -> the whole retries the balance allows now (>= 0)
function Ratio:tokens()
  check(self, "tokens")
  local b = balance(self)
  if not b or b <= 0 then return 0 end
  return floor(b / self.unit)
end

C.getter(Ratio, "window", "window_")
C.getter(Ratio, "percent", "percent_")
C.getter(Ratio, "min_per_second", "min_")
C.getter(Ratio, "dict_key", "dkey")

function Ratio:__tostring()
  check(self, "__tostring")
  return ("%s: %s%s%% of requests over %s s + %s/s"):format(CTOR,
    self.shared and ("shared " .. C.repr(self.dkey) .. ", ") or "",
    C.num(self.percent_), C.num(self.window_), C.num(self.min_))
end

rule.RENAMED[CTOR] = { ttl = "window" }
local options = rule.options(CTOR, {
  window = rule.number{ default = 10, min = 1, max = 60 },
  percent = rule.custom("0 or a number >= 0.01 and <= 100000",
    function(v)
      return type(v) == "number" and (v == 0 or v >= 0.01 and v <= 100000)
    end, 20),
  min_per_second = rule.number{ default = 10, min = 0, max = 2 ^ 20,
                                 max_text = "2^20" },
  clock = rule.fn(),
  shared = rule.shared("budget"),
}, { key = true })

-- ratio(opts) -> the budget; opts: window (10), percent (20),
-- min_per_second (10), clock (backoff.now), shared, key
local function new(opts)
  local o = options(opts)
  local p = o.percent
  -- Finagle: deposit 1000, withdrawal 1000 / (percent / 100) units
  local dep = p == 0 and 0 or SCALE
  local unit = p == 0 and 1 or floor(SCALE * 100 / p)
  if unit < 1 then unit = 1 end
  local reserve = floor(o.min_per_second * o.window * unit)
  local self = { window_ = o.window, percent_ = p, min_ = o.min_per_second,
    dep = dep, unit = unit, reserve = reserve,
    most = 2 ^ 45 }                     -- units: far below the slices' 2^50
  local clock = o.clock or core.now
  if o.shared or o.key ~= nil then
    self.key, self.dkey = C.shared_key(CTOR, o, "r",
      { o.window, p, o.min_per_second })
    self.win = window.new { who = CTOR, span = o.window, slices = 10,
      clock = clock, dict = o.shared, prefix = self.dkey .. ":" }
    self.shared = true
  else
    self.win = window.new { who = CTOR, span = o.window, slices = 10,
      clock = clock }
  end
  return setmetatable(self, Ratio)
end

return { new = new, metatable = Ratio }

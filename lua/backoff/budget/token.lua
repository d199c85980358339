-- backoff.budget.token: the token bucket (the AWS SDKs' retry quota),
-- in-process (a dict of this Lua state, backoff.budget.common's mini
-- dict) or shared by the workers of an nginx host through an ngx.shared
-- dict: one object, one algorithm, one set of limits.  See
-- doc/budget.md.
--
-- The rule: up to `capacity` tokens, full at the start; a retry
-- withdraws `cost` (refused, taking nothing, when fewer remain); a
-- success deposits `refund` after a first attempt, or the cost of the
-- retry that succeeded, never beyond capacity.
--
-- The algorithm uses dict:incr only (atomic; no lock, no
-- get-then-set), with init = capacity, so a missing key (never
-- written, or evicted) is a full budget:
--   withdraw(c): r = incr(-c); if r < 0 then add(+c) (undo), false.
--   add(n) (deposits and the undo): r = incr(+n); if r > capacity, take
--     back e = min(n, r - capacity) with incr(-e).
-- A cost above capacity is refused without touching the dict, and a
-- deposit is clamped to capacity, so every amount in flight is at most
-- capacity and the counter stays an exact integer (capacity <= 2^40:
-- 65 capacities, the most a shared counter can legitimately reach, stay
-- below 2^53).
-- Guarantees, whatever the interleaving of workers:
--   * never overdrawn: every success left the counter >= 0 and every
--     undo follows its own withdrawal, so the successful withdrawals
--     never exceed the initial tokens plus the deposits;
--   * never above capacity once no call is in flight: each addition is
--     followed by its own take-back;
--   * exact accounting: the counter always equals initial + deposits -
--     take-backs - successful withdrawals.
-- The price of having no compare-and-swap: while a call is in flight
-- another worker can see the counter briefly low (a withdrawal not yet
-- undone: a retry refused that a lock would have allowed) or briefly
-- above capacity (a deposit not yet taken back: tokens another worker
-- may spend first; the take-back then leaves a debt below 0 that later
-- deposits repay).  Both err by at most the amounts in flight, and the
-- debt errs on the safe side.  In one Lua state nothing interleaves:
-- the counter stays in [0, capacity].

local C = require "backoff.budget.common"
local store = require "backoff.store"
local rule = require "backoff.check"  -- the option rules

local getmetatable, setmetatable = getmetatable, setmetatable
local add, take, read, count_arg = C.add, C.take, C.read, C.count_arg

local CTOR = "backoff.budget"

local Bucket = { __name = CTOR }
Bucket.__index = Bucket

local function self_of(self, method)
  if getmetatable(self) ~= Bucket then C.self_check(self, Bucket, method) end
end

-- (withdraw, deposit and record check self and a count in line: they
-- are the calls of every request, and a call is most of their cost on
-- PUC Lua)

-- bud:withdraw([cost]) -> true, or false (short: takes nothing); false,
-- err when the dict fails or holds a corrupt value
function Bucket:withdraw(cost)
  if getmetatable(self) ~= Bucket then
    C.self_check(self, Bucket, "withdraw")
  end
  if cost == nil then
    cost = self.cost_
  else
    count_arg(cost, "withdraw", "cost")
  end
  if cost == 0 then return true end
  local cap = self.cap
  if cost > cap then return false end
  return take(self.dict, self.dkey, cost, cap, cap, 0)
end

-- bud:allows([cost]) -> would withdraw(cost) succeed now (takes nothing)
function Bucket:allows(cost)
  self_of(self, "allows")
  cost = C.count_arg(cost, "allows", "cost", self.cost_)
  if cost == 0 then return true end
  local v = read(self.dict, self.dkey, self.cap, self.cap)
  return v >= cost
end

-- bud:deposit([n]) -> the tokens after (0 to capacity), or nil, err
function Bucket:deposit(n)
  if getmetatable(self) ~= Bucket then
    C.self_check(self, Bucket, "deposit")
  end
  if n == nil then
    n = self.refund_
  else
    count_arg(n, "deposit", "n")
  end
  local cap = self.cap
  if n > cap then n = cap end
  local r, err = add(self.dict, self.dkey, n, cap, cap)
  if not r then return nil, err end
  if r <= 0 then return 0 end
  if r > cap then return cap end
  return r
end

-- bud:record(ok [, attempt [, cost]]): a success deposits refund after
-- a first attempt, or the cost its retry paid (nil: the budget's cost)
function Bucket:record(ok, attempt, cost)
  if getmetatable(self) ~= Bucket then
    C.self_check(self, Bucket, "record")
  end
  if (attempt == nil or attempt == 1) and cost == nil
     and (ok == true or ok == false) then
    attempt = 1                 -- a first attempt: nothing more to check
  else
    attempt, cost = C.record_args(ok, attempt, cost)
  end
  if not ok then return end
  local n = self.refund_
  if attempt > 1 then n = cost or self.cost_ end
  local cap = self.cap
  if n == 0 then return end
  if n > cap then n = cap end
  -- the good day: a full budget stays full; one read, no write
  local v = self.dict:get(self.dkey)
  if v == nil or v == cap then return end
  add(self.dict, self.dkey, n, cap, cap)
end

-- bud:tokens() -> 0 to capacity (missing key or a foreign value: full)
local function tokens(self)
  local cap = self.cap
  local v = read(self.dict, self.dkey, cap, cap)
  if v <= 0 then return 0 end                 -- a foreign -0 too
  if v > cap then return cap end
  return v
end

function Bucket:tokens()
  self_of(self, "tokens")
  return tokens(self)
end

C.getter(Bucket, "capacity", "cap")
C.getter(Bucket, "cost", "cost_")
C.getter(Bucket, "refund", "refund_")

-- bud:dict_key() -> the key of the shared state (nil in-process)
function Bucket:dict_key()
  self_of(self, "dict_key")
  if self.shared then return self.dkey end
  return nil
end

function Bucket:__tostring()
  self_of(self, "__tostring")
  return ("%s: %s%s/%s tokens (cost %s, refund %s)"):format(CTOR,
    self.shared and ("shared " .. C.repr(self.dkey) .. ", ") or "",
    C.num(tokens(self)), C.num(self.cap), C.num(self.cost_),
    C.num(self.refund_))
end

local options = rule.options(CTOR, {
  capacity = rule.count{ default = 500, max = C.CAPACITY_MAX,
                          max_text = "2^40" },
  cost = rule.count{ default = 5 },
  refund = rule.count{ default = 1 },
  shared = rule.shared("budget"),
}, { key = true })

-- budget(opts) -> the token bucket; opts: capacity (500), cost (5),
-- refund (1), shared, key
local function new(opts)
  local o = options(opts)
  local self = { cap = o.capacity, cost_ = o.cost, refund_ = o.refund }
  if o.shared or o.key ~= nil then
    self.key, self.dkey = C.shared_key(CTOR, o, "t",
                                       { o.capacity, o.cost, o.refund })
    self.dict, self.shared = o.shared, true
  else
    self.dict, self.dkey = store.dict(), "tokens"
  end
  return setmetatable(self, Bucket)
end

return { new = new, metatable = Bucket }

-- backoff.budget.token: the token bucket (the AWS SDKs' retry quota),
-- in-process (the C userdata of backoff.core) or shared by the workers
-- of an nginx host through an ngx.shared dict.  See doc/budget.md.
--
-- The rule: up to `capacity` tokens, full at the start; a retry
-- withdraws `cost` (refused, taking nothing, when fewer remain); a
-- success deposits `refund` after a first attempt, or the cost of the
-- retry that succeeded, never beyond capacity.
--
-- The shared algorithm uses dict:incr only (atomic; no lock, no
-- get-then-set), with init = capacity, so a missing key (never
-- written, or evicted) is a full budget:
--   withdraw(c): r = incr(-c); if r < 0 then add(+c) (undo), false.
--   add(n) (deposits and the undo): r = incr(+n); if r > capacity, take
--     back e = min(n, r - capacity) with incr(-e).
-- A cost above capacity is refused without touching the dict, and a
-- deposit is clamped to capacity, so every amount in flight is at most
-- capacity and the counter stays an exact integer (capacity <= 2^40).
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
-- debt errs on the safe side.

local core = require "backoff.core"
local C = require "backoff.budget.common"

local getmetatable, setmetatable, type = getmetatable, setmetatable, type
local add, take, read = C.add, C.take, C.read

local CTOR = "backoff.budget"

local Shared = { __name = "backoff.budget" }
Shared.__index = Shared

local function self_of(self, method)
  if getmetatable(self) ~= Shared then C.self_check(self, Shared, method) end
end

-- bud:withdraw([cost]) -> true, or false (short: takes nothing); false,
-- err when the dict fails or holds a corrupt value
function Shared:withdraw(cost)
  self_of(self, "withdraw")
  cost = C.count_arg(cost, "withdraw", "cost", self.cost_)
  if cost == 0 then return true end
  local cap = self.cap
  if cost > cap then return false end
  return take(self.dict, self.dkey, cost, cap, cap, 0)
end

-- bud:allows([cost]) -> would withdraw(cost) succeed now (takes nothing)
function Shared:allows(cost)
  self_of(self, "allows")
  cost = C.count_arg(cost, "allows", "cost", self.cost_)
  if cost == 0 then return true end
  local v = read(self.dict, self.dkey, self.cap, self.cap)
  return v ~= nil and v >= cost
end

-- bud:deposit([n]) -> the tokens after (0 to capacity), or nil, err
function Shared:deposit(n)
  self_of(self, "deposit")
  n = C.count_arg(n, "deposit", "n", self.refund_)
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
function Shared:record(ok, attempt, cost)
  self_of(self, "record")
  attempt, cost = C.record_args(ok, attempt, cost)
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

-- bud:tokens() -> 0 to capacity (missing key: full; corrupt: 0)
function Shared:tokens()
  self_of(self, "tokens")
  local cap = self.cap
  local v = read(self.dict, self.dkey, cap, cap)
  if v == nil or v <= 0 then return 0 end     -- a foreign -0 too
  if v > cap then return cap end
  return v
end

C.getter(Shared, "capacity", "cap")
C.getter(Shared, "cost", "cost_")
C.getter(Shared, "refund", "refund_")
C.getter(Shared, "dict_key", "dkey")

function Shared:__tostring()
  self_of(self, "__tostring")
  return ("backoff.budget: shared %s (capacity %s, cost %s, refund %s)")
    :format(C.repr(self.dkey), C.num(self.cap), C.num(self.cost_),
            C.num(self.refund_))
end

local SHARED_RULES = {
  capacity = C.count_rule(500, C.SHARED_MAX, "2^40"), cost = C.count_rule(5),
  refund = C.count_rule(1),
}
local EXTRA = { shared = true, key = true }

-- budget(opts) -> the token bucket; see the top of this file
local function new(opts, level)
  level = level or 2          -- the caller's frame, from here
  if type(opts) ~= "table" or (opts.shared == nil and opts.key == nil) then
    local ok, b = pcall(core.budget, opts)   -- the C one checks all
    if not ok then error(b, level) end
    return b
  end
  local o = C.options(CTOR, opts, SHARED_RULES, EXTRA, level + 1)
  local key, dkey = C.shared_key(CTOR, o, "t",
                                 { o.capacity, o.cost, o.refund }, level + 1)
  return setmetatable({ dict = o.shared, key = key, dkey = dkey,
    cap = o.capacity, cost_ = o.cost, refund_ = o.refund }, Shared)
end

-- the C budget's methods are its metatable's __index
local cmt = getmetatable(core.budget())

return { new = new, Shared = Shared, metatable = cmt }

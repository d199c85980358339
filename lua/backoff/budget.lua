-- backoff.budget: retry budgets (token buckets), in-process or shared by
-- every nginx worker.
--
--   local budget = require "backoff.budget"
--   local bud = budget { capacity = 500, cost = 5, refund = 1 }
--   local shared = budget { shared = ngx.shared.retry, key = "api" }
--
-- The rule (the AWS SDKs' standard retry quota): a budget holds up to
-- `capacity` tokens and starts full; a retry first withdraws `cost`
-- tokens (`withdraw` returns false and takes nothing when fewer remain);
-- a success deposits `refund` tokens, never beyond capacity.
--
-- Without `shared`, the budget is the C userdata of backoff.core (one
-- per Lua state, so one per nginx worker).  With `shared` (an
-- ngx.shared dict, declared by lua_shared_dict), the tokens live under
-- `key` in the dict and every worker draws from the same budget.
--
-- The shared algorithm uses dict:incr only (atomic in the dict; no
-- lock, no get-then-set), with init = capacity, so a missing key (never
-- written, or evicted) is a full budget:
--
--   withdraw(c): r = incr(-c); if r < 0 then incr(+c) (undo), false.
--     A withdrawal succeeds only if it left the counter >= 0.
--   deposit(n), and the undo above: r = incr(+n); if r > capacity, take
--     back e = min(n, r - capacity) with incr(-e).
--   tokens(): the counter clamped to [0, capacity].
--
-- Guarantees, whatever the interleaving of workers:
--   * never overdrawn: since every success left the counter >= 0 and
--     every undo follows its own withdrawal, the successful withdrawals
--     never exceed the initial tokens plus the deposits;
--   * never above capacity once no call is in flight: each addition is
--     followed by its own take-back, so the counter minus the
--     take-backs still pending never exceeds capacity;
--   * exact accounting: the counter always equals initial + deposits -
--     take-backs - successful withdrawals (nothing lost or invented).
-- The price of having no compare-and-swap: while a call is in flight a
-- worker can see the counter briefly low (a refused withdrawal not yet
-- undone: a retry refused that a lock would have allowed) or briefly
-- above capacity (a deposit not yet taken back: tokens another worker
-- may spend first; the take-back then leaves a debt below 0 that later
-- deposits repay).  Both err by at most the amounts in flight, and the
-- debt errs on the safe side: fewer retries, never more than deposited.

local core = require "backoff.core"
local repr = core._repr     -- short, escaped: never the whole string

local error, getmetatable, pairs, setmetatable, tostring, type =
      error, getmetatable, pairs, setmetatable, tostring, type
local min, max = math.min, math.max

-- validates method arguments with the C rules and messages; capacity 0
-- means neither withdraw nor deposit can change it
local checker = core.budget { capacity = 0 }

local Shared = { __name = "backoff.SharedBudget" }
Shared.__index = Shared

local function self_of(self, method)
  if getmetatable(self) ~= Shared then
    error(("calling '%s' on bad self (backoff.budget expected, got %s)")
          :format(method, type(self)), 3)
  end
  return self
end

-- add n tokens (n >= 0), then take back what went above capacity;
-- returns the counter after, or nil, err from the dict
local function add(self, n)
  local dict, key, cap = self.dict, self.key, self.cap
  local r, err = dict:incr(key, n, cap)
  if not r then return nil, err end
  if r > cap then
    local e = min(n, r - cap)
    r, err = dict:incr(key, -e, cap)
    if not r then return nil, err end
  end
  return r
end

-- bud:withdraw([cost]) -> true, or false (fewer than cost tokens: takes
-- nothing); false, err when the dict fails (no retry then)
function Shared:withdraw(cost)
  self = self_of(self, "withdraw")
  if cost == nil then cost = self.cost_ else checker:withdraw(cost) end
  if cost == 0 then return true end
  local r, err = self.dict:incr(self.key, -cost, self.cap)
  if not r then return false, err end
  if r >= 0 then return true end
  r, err = add(self, cost)            -- undo
  if not r then return false, err end
  return false
end

-- bud:deposit([n]) -> the tokens after (capped at capacity), or nil, err
function Shared:deposit(n)
  self = self_of(self, "deposit")
  if n == nil then n = self.refund_ else checker:deposit(n) end
  local r, err = add(self, n)
  if not r then return nil, err end
  return max(0, min(self.cap, r))
end

-- bud:tokens() -> the tokens now, from 0 to capacity (a missing key is
-- a full budget)
function Shared:tokens()
  self = self_of(self, "tokens")
  local v = self.dict:get(self.key)
  if type(v) ~= "number" then return self.cap end
  return max(0, min(self.cap, v))
end

function Shared:capacity() return self_of(self, "capacity").cap end
function Shared:cost() return self_of(self, "cost").cost_ end
function Shared:refund() return self_of(self, "refund").refund_ end

function Shared:__tostring()
  return ("backoff.budget: shared '%s' (capacity %s, cost %s, refund %s)")
         :format(self.key, tostring(self.cap), tostring(self.cost_),
                 tostring(self.refund_))
end

local function is_dict(v)
  local ok = type(v) == "table" or type(v) == "userdata"
  return ok and type(v.incr) == "function" and type(v.get) == "function"
end

-- budget(opts) -> a budget; see the top of this file
local function budget(opts)
  if type(opts) ~= "table" or (opts.shared == nil and opts.key == nil) then
    return core.budget(opts)          -- the C one checks everything
  end
  local numeric = {}
  for k, v in pairs(opts) do
    if k ~= "shared" and k ~= "key" then numeric[k] = v end
  end
  -- the numeric options by the C rules (same checks, same messages)
  local proto = core.budget(numeric)
  if not is_dict(opts.shared) then
    error("backoff.budget: option 'shared' must be an ngx.shared dict (got "
          .. repr(opts.shared) .. ")", 2)
  end
  local key = opts.key == nil and "backoff:budget" or opts.key
  if type(key) ~= "string" or key == "" then
    error("backoff.budget: option 'key' must be a non-empty string (got "
          .. repr(key) .. ")", 2)
  end
  return setmetatable({
    dict = opts.shared, key = key, cap = proto:capacity(),
    cost_ = proto:cost(), refund_ = proto:refund(),
  }, Shared)
end

return budget

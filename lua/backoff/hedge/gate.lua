-- backoff.hedge.gate: may a copy of a hedged request start now, and what
-- became of it.  The one place where backoff.hedge meets the retry
-- rules: the policy's limits, the deadline, the breaker, the budget and
-- the run's metrics.  Internal: backoff.hedge is its only user.
--
-- THE INTERFACE (what the retry engine will back; one gate per request)
--
--   g = gate.new(policy, limits, o)
--       policy: a backoff object (the template; never changed);
--       limits: limits_of(policy) (below); o: { budget = b | nil,
--       breaker = k | nil, metrics = m | nil } (checked by the caller)
--   g:now() -> seconds, on the policy's clock
--   g:start(attempt, kind [, hint]) -> true, timeout | false, reason
--       may copy `attempt` (1, 2, ...) start now?  Copies start in
--       order.  kind: "first", "hedge" (started while another copy is
--       in flight) or "retry" (started after a copy failed); hint: the
--       seconds the failed copy's server asked to wait, already waited
--       (the caller bounds it by max_hint and the deadline).  In order:
--         * attempt >= 2: the policy's own rules on a clone of it,
--           made for attempt 2 (clone:failure(now)): max_attempts,
--           max_actual_duration, the systems' stop rules -> false,
--           that reason;
--         * the deadline: no time left -> false, "max_actual_duration";
--         * the breaker: breaker:allow() -> false: false,
--           "circuit_open"; else its ticket is kept for this copy;
--         * attempt >= 2: the budget pays it as a retry,
--           budget:withdraw(cost) (cost: the budget's own; its
--           throttle_cost() after a hint) -> false: the ticket is
--           released and false, "budget" (a hedge refused is counted:
--           hedge_budget_refusals);
--       timeout: the copy's per-try timeout in seconds (the policy's,
--       cut to the time left before the deadline), or nil when the
--       policy has neither.  A "hedge" started is counted: hedges.
--   g:won(attempt, seconds, kind)   the copy whose answer is returned:
--       budget:record(true, attempt, paid) (a budget without record:
--       deposit(paid), as the runner's legacy rule), breaker:record(
--       true, ticket, seconds); a "hedge" that won is counted: hedges_won
--   g:failed(attempt, seconds)      a copy that failed (a retryable
--       status or a transport error): budget:record(false, attempt,
--       paid), breaker:record(false, ticket, seconds)
--   g:cancelled(attempt)            a copy cancelled (another answered,
--       or the request ended): breaker:release(ticket); nothing to the
--       budget (it neither succeeded nor failed; what it paid stays
--       paid: it was sent); counted: hedges_cancelled
--   g:finish(ok, reason, hints)     the request ended: metrics:run(ok,
--       copies started, reason, hints)
-- A refusal ends hedging for the request: the caller starts no copy
-- after one (whatever its kind).  A fatal answer (a status that is not
-- retried) is a won copy: the request ends with it, as a retry would.

local core = require "backoff.core"
local util = require "backoff.util"

local setmetatable = setmetatable
local core_now, first_timeout = core._now, core._first_timeout
local budget_cost = util.budget_cost

local M = {}

-- What a gate needs to know of a policy object, read once per object
-- (config() builds a table): max_attempts, max_hint, the deadline's
-- duration and start, whether it has per-try timeouts.  Weak: it keeps
-- no policy alive.
local cache = setmetatable({}, { __mode = "k" })

function M.limits_of(policy)
  local l = cache[policy]
  if l then return l end
  local c = policy:config()
  l = { attempts = c.max_attempts or 0, max_hint = c.max_hint,
        timeouts = policy:timeout() ~= nil }
  local d = c.max_actual_duration
  if d and d > 0 then l.duration, l.start = d, c.start end
  cache[policy] = l
  return l
end

local Gate = {}
Gate.__index = Gate

function M.new(policy, limits, o)
  local g = setmetatable({ policy = policy, limits = limits,
    budget = o.budget, breaker = o.breaker, metrics = o.metrics,
    started = 0, tickets = {}, paid = {} }, Gate)
  local now = core_now(policy)
  g.t0 = now
  if limits.duration then
    g.deadline = (limits.start or now) + limits.duration
  end
  return g
end

function Gate:now()
  return core_now(self.policy)
end

-- the copy's timeout: the policy's (t), cut to the time left; false
-- when no time is left
local function cut(self, t, now)
  local deadline = self.deadline
  if not deadline then return t end
  local left = deadline - now
  if left <= 0 then return false end
  if t == nil or t > left then return left end
  return t
end

local function count(self, counter)
  local m = self.metrics
  if m and m.add then m:add(counter, 1) end
end

-- the policy's answer for copy `attempt` now: its timeout (or nil), or
-- false and the reason it may not start
local function allowed(self, attempt, now)
  local t
  if attempt == 1 then
    if self.limits.timeouts then t = first_timeout(self.policy) end
  else
    -- copies start in order: the clone is made for attempt 2, and
    -- each copy after the first is one failure() of it
    local b = self.clone
    if not b then
      b = self.policy:clone(self.t0)
      self.clone = b
    end
    local d, why = b:failure(now)
    if d == nil then return false, why end
    t = why
  end
  t = cut(self, t, now)
  if t == false then return false, "max_actual_duration" end
  return t
end

-- the breaker's ticket and the budget's payment for copy `attempt`:
-- true, or false and the reason
local function admit(self, attempt, kind, hint)
  local ticket
  local k = self.breaker
  if k then
    local yes, tk = k:allow()
    if not yes then return false, "circuit_open" end
    ticket = tk
  end
  local bud = self.budget
  if bud and attempt > 1 then
    local cost = budget_cost(bud)
    if hint ~= nil and bud.throttle_cost then cost = bud:throttle_cost() end
    if not bud:withdraw(cost) then
      if k then k:release(ticket) end
      if kind == "hedge" then count(self, "hedge_budget_refusals") end
      return false, "budget"
    end
    self.paid[attempt] = cost or false
  end
  self.tickets[attempt] = ticket
  return true
end

function Gate:start(attempt, kind, hint)
  local now = core_now(self.policy)
  local t, why = allowed(self, attempt, now)
  if t == false then return false, why end
  local ok, reason = admit(self, attempt, kind, hint)
  if not ok then return false, reason end
  if attempt > self.started then self.started = attempt end
  if kind == "hedge" then count(self, "hedges") end
  return true, t
end

-- paid[attempt]: the cost withdrawn (false: the budget's own), nil for
-- the first copy
local function paid_of(self, attempt)
  local p = self.paid[attempt]
  if p == false then return nil end
  return p
end

function Gate:won(attempt, seconds, kind)
  local bud = self.budget
  if bud then
    if bud.record then
      bud:record(true, attempt, paid_of(self, attempt))
    elseif attempt == 1 then
      bud:deposit()
    else
      bud:deposit(paid_of(self, attempt) or budget_cost(bud))
    end
  end
  local k = self.breaker
  if k then k:record(true, self.tickets[attempt], seconds) end
  if kind == "hedge" then count(self, "hedges_won") end
end

function Gate:failed(attempt, seconds)
  local bud = self.budget
  if bud and bud.record then
    bud:record(false, attempt, paid_of(self, attempt))
  end
  local k = self.breaker
  if k then k:record(false, self.tickets[attempt], seconds) end
end

function Gate:cancelled(attempt)
  local k = self.breaker
  if k then k:release(self.tickets[attempt]) end
  count(self, "hedges_cancelled")
end

function Gate:finish(ok, reason, hints)
  local m = self.metrics
  if m then
    if ok then reason = nil end
    m:run(ok, self.started, reason, hints or 0)
  end
end

-- the attempts started so far
function Gate:attempts()
  return self.started
end

return M

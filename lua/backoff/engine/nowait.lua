-- backoff.engine.nowait: the engine's decisions for the doors that do
-- not wait between attempts (internal).  The balancer cannot wait at
-- all: it grants nginx's next try while this one runs (X.reserve) and
-- decides it when it starts (X.retry_now).  The hedge makes attempts
-- side by side: each copy is decided when it starts (X.copy) and has a
-- record of its own (n, paid, ticket, ts) for its outcome (X.tell) or
-- its cancel (X.forget).  The rules are lua/backoff/engine.lua's: this
-- module applies them in another order, it writes none of its own.

local engine = require "backoff.engine"
local util = require "backoff.util"

local core_now, core_failure = util.now, util.failure

local X = {}

-- the breaker's word and the budget's payment for attempt n, about to
-- start now: true, the breaker's ticket | nil, the reason it may not
local function admit(st, n, cost)
  local br, ticket = st.br, nil
  if br then
    local ok
    ok, ticket = br:allow()
    if not ok then return nil, "circuit_open" end
  end
  local bud = st.bud
  if bud and not bud:withdraw(cost, n) then
    if br and ticket ~= nil then br:release(ticket) end
    return nil, "budget"
  end
  return true, ticket
end

------------------------------------------------------------------------
-- the balancer: the next attempt is granted while the current one runs,
-- and decided when it starts

-- would bud:withdraw(cost) succeed now?  allows() when the budget has
-- it; else tokens() >= cost; else (a user object) let withdraw decide
local function budget_allows(bud, cost, attempt)
  if bud.allows then return bud:allows(cost, attempt) and true or false end
  if cost and util.has_method(bud, "tokens") then
    return bud:tokens() >= cost
  end
  return true
end

--- X.reserve(st, timeout) -> true | nil, reason: may attempt
-- st.attempt + 1 be made if the current one (with this timeout) fails?
-- A peek: nothing is taken.  The retry is paid when it starts
-- (X.retry_now), so a grant costs nothing to the requests in flight
-- that never need it, and the budget still pays for every retry made.
function X.reserve(st, timeout)
  if st.max_attempts > 0 and st.attempt >= st.max_attempts then
    return nil, "max_attempts"
  end
  local left = engine.left(st)
  if left and left - (timeout or 0) < st.min_attempt then
    return nil, "max_actual_duration"
  end
  local br = st.br
  if br and not br:allows() then return nil, "circuit_open" end
  local bud = st.bud
  if bud and not budget_allows(bud, st.cost, st.attempt + 1) then
    return nil, "budget"
  end
  return true
end

--- X.retry_now(st, granted) -> timeout | nil, reason: the current
-- attempt failed and the next starts now, without a wait (the balancer:
-- nginx started it).  Granted (X.reserve said yes), the policy's
-- limits and the deadline were checked then (a late start runs with
-- what is left); not granted, they are checked now.  Either way it is
-- made only when the breaker allows it and the budget pays for it.
function X.retry_now(st, granted)
  engine.record(st, false)
  local now = core_now(st.b)
  local delay, t = core_failure(st.b, now)
  local left = engine.left(st, now)
  if not granted then
    if delay == nil then return nil, t end
    if engine.too_late(st, left) then return nil, "max_actual_duration" end
  elseif delay == nil then
    t = nil
  end
  local ok, ticket = admit(st, st.attempt + 1, st.cost)
  if not ok then return nil, ticket end
  st.ticket, st.paid, st.owed = ticket, st.cost, st.bud ~= nil
  st.attempt = st.attempt + 1
  st.timeout = engine.try_timeout(st, t, left)
  st.ts = now
  return st.timeout
end

------------------------------------------------------------------------
-- the hedge: copies side by side, each with a record { n, paid,
-- ticket, ts } of its own

--- X.copy(st, hint, err, res) -> timeout, rec | nil, reason: another
-- attempt starts now, whether or not others are in flight: the policy
-- counts it (its limits, the systems' stop rules), the deadline must
-- leave it min_attempt_time, the breaker admits it, the budget pays it
-- as a retry (hint: the server's, for its cost).  rec is this copy's
-- record for X.tell and X.forget.
function X.copy(st, hint, err, res)
  local now = core_now(st.b)
  local delay, t = core_failure(st.b, now)
  if delay == nil then return nil, t end
  local left = engine.left(st, now)
  if engine.too_late(st, left) then return nil, "max_actual_duration" end
  local n, cost = st.attempt + 1, engine.cost_of(st, err, res, hint)
  local ok, ticket = admit(st, n, cost)
  if not ok then return nil, ticket end
  local rec = { n = n, ts = now, ticket = ticket,
                paid = st.bud and cost or nil }
  st.attempt = rec.n
  return engine.try_timeout(st, t, left), rec
end

--- X.first_copy(st) -> rec: the record of the run's first attempt
function X.first_copy(st)
  return { n = 1, ticket = st.ticket, ts = st.ts }
end

--- X.tell(st, rec, ok, seconds): a copy's outcome, told to the budget
-- and the breaker
function X.tell(st, rec, ok, seconds)
  engine.tell(st, ok, rec.n, rec.paid, rec.ticket, seconds)
  rec.ticket = nil
end

--- X.forget(st, rec): a copy cancelled: its breaker ticket given back;
-- the budget is told nothing (what it paid stays paid: it was sent)
function X.forget(st, rec)
  local br, ticket = st.br, rec.ticket
  rec.ticket = nil
  if br and ticket ~= nil then br:release(ticket) end
end

return X

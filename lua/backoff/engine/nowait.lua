-- backoff.engine.nowait: the run's methods for the doors that do not
-- wait between attempts (internal; lua/backoff/engine.lua installs them
-- on its runs).  The balancer cannot wait at all: it grants nginx's
-- next try while this one runs (run:reserve, run:capped), decides it
-- when it starts (run:retry_now) and tells the last outcome at the
-- request's end (run:settle).  The hedge makes attempts side by side:
-- each copy is decided when it starts (run:copy) and has a record of
-- its own for its outcome (run:tell_copy) or its cancel (run:forget).
-- The rules are the engine's, applied in another order.

local util = require "backoff.util"
local rules = require "backoff.engine.rules"

local core_now, core_failure = util.now, util.failure

local X = {}

-- the breaker's word and the budget's payment for attempt n, about to
-- start now: true, the breaker's ticket | nil, the reason it may not
local function admit(run, n, cost)
  local br, ticket = run.br, nil
  if br then
    local ok
    ok, ticket = br:allow()
    if not ok then return nil, "circuit_open" end
  end
  local bud = run.bud
  if bud and not bud:withdraw(cost, n) then
    rules.give_back(br, ticket)
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

-- may attempt run.attempt + 1 be made if the current one fails?
local function may_follow(run)
  if run.max_attempts > 0 and run.attempt >= run.max_attempts then
    return nil, "max_attempts"
  end
  local left = run:left()
  if left and left - (run.timeout or 0) < run.min_attempt then
    return nil, "max_actual_duration"
  end
  local br = run.br
  if br and not br:allows() then return nil, "circuit_open" end
  local bud = run.bud
  if bud and not budget_allows(bud, run.cost, run.attempt + 1) then
    return nil, "budget"
  end
  return true
end

--- run:reserve() -> true | nil, reason: may attempt run.attempt + 1
-- be made if the current one (with run.timeout) fails?  Yes: it is
-- granted.  A peek: nothing is taken.  The retry is paid when it
-- starts (run:retry_now), so a grant costs nothing to the requests in
-- flight that never need it, and the budget still pays for every
-- retry made.  No: run.stop says why (the reason the run gives up with
-- if the current attempt fails).
function X:reserve()
  if self.at_cap then return nil, self.stop end
  local ok, why = may_follow(self)
  self.granted, self.stop = ok or false, why
  return ok, why
end

--- run:capped(): the door could not grant the next attempt after all
-- (nginx's proxy_next_upstream_tries): none is granted again
function X:capped()
  self.at_cap, self.granted, self.stop = true, false, "next_upstream_tries"
end

-- the next attempt, after the current one's failure was recorded
local function start_now(run, granted)
  local now = core_now(run.b)
  local delay, t = core_failure(run.b, now)
  local left = run:left(now)
  if not granted then
    if delay == nil then return nil, t end
    if run:too_late(left) then return nil, "max_actual_duration" end
  elseif delay == nil then
    t = nil
  end
  local ok, ticket = admit(run, run.attempt + 1, run.cost)
  if not ok then return nil, ticket end
  run.ticket, run.paid, run.owed = ticket, run.cost, run.bud ~= nil
  run.attempt = run.attempt + 1
  run.timeout = run:try_timeout(t, left)
  run.ts = now
  return run.timeout
end

--- run:retry_now() -> timeout | nil, reason: the current attempt
-- failed and the next starts now, without a wait (the balancer: nginx
-- started it).  Granted (run:reserve said yes), the policy's limits
-- and the deadline were checked then (a late start runs with what is
-- left); not granted, they are checked now.  Either way it is made
-- only when the breaker allows it and the budget pays for it.  Once
-- refused (run.refused: why), every later attempt is, at once.
function X:retry_now()
  if self.refused then return nil, self.refused end
  local granted = self.granted
  self.granted = false
  self:record(false)
  local timeout, reason = start_now(self, granted)
  if reason then self.refused, self.stop = reason, reason end
  return timeout, reason
end

--- run:settle(ok, reason): the run ends (once: run.settled) with the
-- current attempt's outcome ok, told unless a refused attempt told the
-- last failure already; failed, it gives up with why no attempt
-- followed (run.stop), else with reason (the door's).  ok nil: no
-- verdict on the upstream (the client went): nothing told, the
-- breaker's ticket given back, nothing counted
function X:settle(ok, reason)
  if self.settled then return end
  self.settled = true
  if ok == nil then return self:release() end
  if not self.refused then self:record(ok) end
  self:finish(ok, nil, not ok and (self.stop or reason) or nil, nil, 0)
end

------------------------------------------------------------------------
-- the hedge: copies side by side, each with a record { n, paid,
-- ticket, ts } of its own (run.recs[n])

--- run:copy(hint, err, res) -> timeout, n | nil, reason: another
-- attempt starts now, whether or not others are in flight: the policy
-- counts it (its limits, the systems' stop rules), the deadline must
-- leave it min_attempt_time, the breaker admits it, the budget pays it
-- as a retry (hint: the server's, for its cost).  n: its number.
function X:copy(hint, err, res)
  local now = core_now(self.b)
  local delay, t = core_failure(self.b, now)
  if delay == nil then return nil, t end
  local left = self:left(now)
  if self:too_late(left) then return nil, "max_actual_duration" end
  local n, cost = self.attempt + 1, rules.cost_of(self, err, res, hint)
  local ok, ticket = admit(self, n, cost)
  if not ok then return nil, ticket end
  self.recs[n] = { n = n, ts = now, ticket = ticket,
                   paid = self.bud and cost or nil }
  self.attempt = n
  return self:try_timeout(t, left), n
end

--- run:tell_copy(n, ok, seconds): copy n's outcome, told to the budget
-- and the breaker
function X:tell_copy(n, ok, seconds)
  local rec = self.recs[n]
  self:tell(ok, n, rec.paid, rec.ticket, seconds)
  rec.ticket = nil
end

--- run:forget(n): copy n cancelled: its breaker ticket given back; the
-- budget is told nothing (what it paid stays paid: it was sent)
function X:forget(n)
  local rec = self.recs[n]
  rules.give_back(self.br, rec.ticket)
  rec.ticket = nil
end

return X

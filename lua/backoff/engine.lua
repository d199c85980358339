-- backoff.engine: one request's retries, for every door (internal).
--
-- backoff.retry (lua/backoff/runner.lua), backoff.http.request,
-- backoff.balancer and backoff.hedge are doors: each knows how its
-- attempts are made and how it waits.  Everything else is decided here,
-- once: whether another attempt may be made, after which delay and
-- with which per-try timeout; the budget's payment, record and refund;
-- the server's hint and its bound; the deadline; the breaker; the
-- metrics; the hooks.  CONTRIBUTING.md ("Adding a door") says how a
-- door uses it.
--
-- A run's state is a table `st`, built by E.state when the first
-- attempt failed, or by E.begin when the first attempt needs one (a
-- deadline, a breaker); the happy path of backoff.retry builds nothing:
-- E.first_success takes what it needs as arguments.  The policy is never
-- changed: it is a template, cloned for the run.
--
-- Hooks have one shape: hook(err, <its own values>, attempt), and a door
-- with a response to show (backoff.http) passes it as one more argument.
--   retry_on(err, attempt, res)      -> false [, reason]: stop
--   server_hint(err, attempt, res)   -> seconds the server asked, or nil
--   retry_cost(err, attempt, res)    -> what this retry withdraws
--   on_retry(err, delay, attempt, res)
--   on_giveup(err, reason, attempts, res)
--   on_success(res1, elapsed, attempts)

local util = require "backoff.util"
local phase = require "backoff.phase"
local hold = require "backoff.engine.hold"

local error, type = error, type
local huge = math.huge
local core_now, core_failure, first_timeout, repr =
      util.now, util.failure, util.first_timeout, util.repr

local E = {}

------------------------------------------------------------------------
-- the end of a run: metrics first (a hook that raises must not lose
-- the count), then the hook

local function elapsed_since(t0, b)
  if not t0 then return 0 end
  local e = core_now(b) - t0
  if e < 0 then e = 0 end       -- a clock that went back: no time passed
  return e
end

--- E.ended_well(ropts, attempts, hints, t0, b, res1): a run succeeded
function E.ended_well(ropts, attempts, hints, t0, b, res1)
  local m = ropts.metrics
  if m then m:run(true, attempts, nil, hints) end
  local f = ropts.on_success
  if f then f(res1, elapsed_since(t0, b), attempts) end
end

--- E.ended_badly(ropts, err, reason, attempts, hints, res): gave up
function E.ended_badly(ropts, err, reason, attempts, hints, res)
  local m = ropts.metrics
  if m then m:run(false, attempts, reason, hints) end
  local f = ropts.on_giveup
  if f then f(err, reason, attempts, res) end
end

------------------------------------------------------------------------
-- the breaker and the budget, told of each attempt

-- the budget learns an attempt's outcome: record (every attempt), or
-- the legacy deposit on success (what the retry paid, or the budget's
-- own refund after a first attempt)
local function tell_budget(bud, ok, attempt, paid, cost)
  if bud.record then
    bud:record(ok, attempt, paid)
  elseif ok then
    if attempt > 1 then bud:deposit(paid or cost) else bud:deposit() end
  end
end
E.tell_budget = tell_budget

------------------------------------------------------------------------
-- a run's state
--
--   door: the door's constants (who: its name for messages; waits:
--     false when it cannot wait, the balancer; left_timeout: a deadline
--     without per-try timeouts gives the time left as the timeout)
--   policy, f: the template and its facts; b: the run's own object (a
--     clone, or the object a policy table was built into)
--   ropts; attempt: the attempt being made; timeout: the one it has
--   t0: the run's start; ts: the current attempt's start (for the
--     breaker's slow calls); ticket: the breaker's, for this attempt
-- and after the first failure (E.state):
--   deadline (or nil), min_attempt: no attempt starts with less left
--   bud, cost: the budget (or nil) and its cost (nil: withdraw's own);
--   paid, owed: what the current attempt's retry withdrew, and whether
--     it is there to give back; throttle: bud:throttle_cost()
--   br: the breaker; max_hint: the door's bound on a hint
--   hints: retries that waited for a server's hint
--   sleep, no_sleep: the wait, or the phase where none is possible

--- E.start(f, policy, b, left_timeout) -> t0, timeout, b, now | false:
-- the
-- first attempt's start, without building anything: the run's start
-- t0, the attempt's timeout (never past the deadline; the time left
-- when the policy has none and left_timeout asks), and the run's object
-- when it had to be cloned now (a policy whose initial timeout is a
-- draw of its random function); false when the deadline has passed
function E.start(f, policy, b, left_timeout)
  local now = core_now(b or policy)
  if not f.duration then return now, nil, b, now end
  local t0, timeout = now, nil
  if not b and f.eager and f.timeouts then b = policy:clone(now) end
  if b then
    t0 = now - b:elapsed(now)
    timeout = b:timeout()
  elseif f.timeouts then
    timeout = first_timeout(policy)
  end
  local left = (f.start or t0) + f.duration - now
  if left <= 0 then return false end
  if timeout == nil then
    if left_timeout then timeout = left end
  elseif timeout > left then
    timeout = left
  end
  return t0, timeout, b, now
end

local function start(st)
  local t0, timeout, b, now = E.start(st.f, st.policy, st.b,
                                      st.door.left_timeout)
  if not t0 then return false end
  st.t0, st.ts, st.timeout, st.b = t0, now, timeout, b
  return true
end

-- does the first attempt need the clock (or the breaker)?
local function needs_start(f, ropts)
  return f.duration or ropts ~= nil and (ropts.on_success or ropts.breaker)
end

--- E.run(door, policy, f, b, ropts, t0, timeout, ts) -> st: the state
-- of a run whose first attempt started at ts with this timeout
-- (E.start's), built only when a door needs it (its first attempt
-- failed)
function E.run(door, policy, f, b, ropts, t0, timeout, ts)
  return { door = door, policy = policy, f = f, b = b, ropts = ropts,
           attempt = 1, t0 = t0, ts = ts, timeout = timeout }
end

--- E.begin(door, policy, f, b, ropts) -> st | nil, reason: a run
-- starts; nil when it ends before its first attempt (a breaker that is
-- open, a deadline that has passed: counted and told to on_giveup).
-- Reads no clock unless the run needs one.
function E.begin(door, policy, f, b, ropts)
  local st = { door = door, policy = policy, f = f, b = b, ropts = ropts,
               attempt = 1 }
  local br = ropts and ropts.breaker
  if br then
    local ok, ticket = br:allow()
    if not ok then
      ok, ticket, st.b = E.held(door, ropts, br, policy, b)
      if not ok then
        E.no_attempt(ropts, "circuit_open")
        return nil, "circuit_open"
      end
    end
    st.ticket = ticket
  end
  if needs_start(f, ropts) and not start(st) then
    if st.ticket ~= nil then br:release(st.ticket) end
    E.no_attempt(ropts, "max_actual_duration")
    return nil, "max_actual_duration"
  end
  return st
end

--- E.held(door, ropts, br, policy, b) -> true, ticket, b | false: the
-- first attempt was refused: held while the breaker holds (the run's
-- object cloned now for its delays; lua/backoff/engine/hold.lua)
function E.held(door, ropts, br, policy, b)
  if not (door.waits and hold.limit(br)) then return false end
  if not b then b = policy:clone(core_now(policy)) end
  local ok, ticket = hold.wait(door, ropts, br, b, core_now(b) - b:elapsed())
  return ok, ticket, b
end

--- E.no_attempt(ropts, reason): a run that ends before its first attempt
function E.no_attempt(ropts, reason)
  if ropts ~= nil and (ropts.metrics or ropts.on_giveup) then
    E.ended_badly(ropts, nil, reason, 0, 0)
  end
end

--- E.first_success(ropts, ticket, ts, t0, obj, res1): the first
-- attempt succeeded, and nothing more was built for the run (a door on
-- its happy path passes what it has: the breaker's ticket, the
-- attempt's and the run's start, the object whose clock counts)
function E.first_success(ropts, ticket, ts, t0, obj, res1)
  if ropts == nil then return end
  local bud, br = ropts.budget, ropts.breaker
  if bud then tell_budget(bud, true, 1, nil) end
  if br then br:record(true, ticket, elapsed_since(ts, obj)) end
  if ropts.metrics or ropts.on_success then
    E.ended_well(ropts, 1, 0, t0, obj, res1)
  end
end

--- E.state(st) -> st: the first attempt failed; what the retries need.
-- The template is cloned here (started at t0, the first attempt's start)
-- unless the door built the run's object.
function E.state(st)
  local ropts, f = st.ropts, st.f
  if st.b == nil then st.b = st.policy:clone(st.t0) end
  st.min_attempt, st.hints, st.max_attempts = 0, 0, f.max_attempts
  local mat
  if ropts ~= nil then
    mat = ropts.min_attempt_time
    local bud = ropts.budget
    if bud then                     -- (false: none, on purpose)
      st.bud, st.cost = bud, util.budget_cost(bud)
      if bud.throttle_cost then st.throttle = bud:throttle_cost() end
      if bud.timeout_cost then st.tcost = bud:timeout_cost() end
    end
    st.br, st.sleep, st.max_hint = ropts.breaker, ropts.sleep, ropts.max_hint
  end
  if st.door.waits and not st.sleep then
    st.sleep, st.no_sleep = phase.default_sleep()
  end
  st.ready = true
  if f.duration then
    st.deadline = (f.start or st.t0 or core_now(st.b)) + f.duration
    if mat == nil and f.timeouts then mat = f.min_adjust_timeout end
  end
  st.min_attempt = mat or 0
  return st
end

------------------------------------------------------------------------
-- the rules, each in one place

-- retry_on's second result, when it said no: the reason to give up with
local function stop_reason(who, why)
  if why == nil or why == false then return "retry_on" end
  if type(why) ~= "string" or #why > 64 or not why:match("^[%a_][%w_]*$")
  then
    error(who .. ": ropts.retry_on's second result must be nil or a reason "
          .. "(a name of letters, digits and _, at most 64 bytes; got "
          .. repr(why) .. ")", 0)
  end
  return why
end

-- the user's verdict on a failure: true, or false, reason
local function user_verdict(st, err, res)
  local ropts = st.ropts
  local retry_on = ropts and ropts.retry_on
  if not retry_on then return true end
  local yes, why = retry_on(err, st.attempt, res)
  if yes then return true end
  return false, stop_reason(st.door.who, why)
end

-- the server's hint for this failure: the door's (read from the
-- response), else the hook's; checked
local function hint_of(st, err, res, hint)
  local name = "server_hint"
  if hint == nil then
    local ropts = st.ropts
    local f = ropts and ropts.server_hint
    if not f and ropts and ropts.retry_after then
      f, name = ropts.retry_after, "retry_after"
    end
    if f then hint = f(err, st.attempt, res) end
    if hint == false then hint = nil end
  end
  if hint ~= nil and not (type(hint) == "number" and hint >= 0
                          and hint < huge) then
    error(st.door.who .. ": ropts." .. name .. " must return nil or a "
          .. "finite number >= 0 (got " .. repr(hint) .. ")", 0)
  end
  return hint
end

-- attempt n's outcome, told to the budget and the breaker: paid, what
-- its retry withdrew; ticket, the breaker's; seconds, how long it took
local function tell(st, ok, n, paid, ticket, seconds)
  local bud, br = st.bud, st.br
  if bud then tell_budget(bud, ok, n, paid, st.cost) end
  if br then br:record(ok, ticket, seconds) end
end

E.tell = tell

--- E.record(st, ok, seconds): the current attempt's outcome, told to
-- the budget and the breaker (seconds: how long it took, for the
-- breaker's slow calls; nil: measured from st.ts)
function E.record(st, ok, seconds)
  if seconds == nil and st.br and st.ts then
    seconds = elapsed_since(st.ts, st.b)
  end
  tell(st, ok, st.attempt, st.paid, st.ticket, seconds)
  st.owed, st.ticket = nil, nil
end

-- what the next retry withdraws: retry_cost's answer, else the
-- budget's throttle_cost after a hint (the server said it is
-- overloaded), its timeout_cost after a timeout (a late failure whose
-- retry the first successes after a hung spell would otherwise pay
-- for), else its own cost
local function cost_of(st, err, res, hint)
  local ropts = st.ropts
  local f = ropts and ropts.retry_cost
  if f then
    local cost = f(err, st.attempt, res)
    if cost ~= nil and not (type(cost) == "number" and cost >= 0
                            and cost <= 2 ^ 53 and cost % 1 == 0) then
      error(st.door.who .. ": ropts.retry_cost must return nil or an "
            .. "integer >= 0 and <= 2^53 (got " .. repr(cost) .. ")", 0)
    end
    return cost
  end
  if hint ~= nil and st.throttle then return st.throttle end
  if st.tcost and util.is_timeout(err) then return st.tcost end
  return st.cost
end

E.cost_of = cost_of

--- E.pay(st, cost) -> true | false: withdraw a retry from the budget
-- (none: true); st.paid is the cost asked (nil: the budget's own), and
-- st.owed says a withdrawal is there to give back
function E.pay(st, cost)
  local bud = st.bud
  if not bud then return true end
  if not bud:withdraw(cost, st.attempt + 1) then return false end
  st.paid, st.owed = cost, true
  return true
end

--- E.refund(st): a retry paid for is not made: give back what it took
function E.refund(st)
  local bud = st.bud
  if st.owed and bud and bud.deposit then bud:deposit(st.paid or st.cost) end
  st.owed = nil
end

--- E.left(st, now) -> seconds before the deadline (nil: no deadline)
function E.left(st, now)
  local deadline = st.deadline
  if not deadline then return nil end
  return deadline - (now or core_now(st.b))
end

--- E.too_late(st, left) -> the attempt must not start
function E.too_late(st, left)
  return left ~= nil and (left <= 0 or left < st.min_attempt)
end

--- E.hint_stop(st, hint, now) -> reason | nil: may the run wait the
-- server's hint?  Not over max_hint ("retry_after"), not when the
-- attempt after it could not start before the deadline
-- ("max_actual_duration")
function E.hint_stop(st, hint, now)
  if st.max_hint and hint > st.max_hint then return "retry_after" end
  if E.too_late(st, E.left(st, now + hint)) then
    return "max_actual_duration"
  end
  return nil
end

--- E.try_timeout(st, t, left) -> the next attempt's timeout: the
-- policy's (t, or the last one), never past the deadline; with a
-- deadline and no per-try timeout, the time left where the door asks
function E.try_timeout(st, t, left)
  local timeout = t
  if timeout == nil then timeout = st.timeout end
  if left ~= nil then
    if timeout == nil then
      if st.door.left_timeout then timeout = left end
    elseif timeout > left then
      timeout = left
    end
  end
  return timeout
end

------------------------------------------------------------------------
-- the decision after a failure, and the next attempt's start

--- E.failed(st, err, res, hint, stop) -> delay, t | nil, reason.  The
-- current attempt failed with err (res: the door's response; hint: the
-- door's hint; stop: the door's own reason not to retry).  Records the
-- failure, decides, pays; delay is the wait before the next attempt, t
-- the policy's timeout for it.
function E.failed(st, err, res, hint, stop)
  if stop then                          -- the door's rule: an upstream
    E.record(st, false)                 -- failure, not retried
    return nil, stop
  end
  local yes, why = user_verdict(st, err, res)
  if not yes then                       -- the caller's error, not the
    E.release(st)                       -- upstream's: nothing recorded
    return nil, why
  end
  E.record(st, false)
  hint = hint_of(st, err, res, hint)
  local now = core_now(st.b)
  if hint then
    local stop_hint = E.hint_stop(st, hint, now)
    if stop_hint then return nil, stop_hint end
  end
  local delay, t, own = core_failure(st.b, now, hint)
  if delay == nil then return nil, t end
  if own > delay and not (st.ropts and st.ropts.reference_delays) then
    delay = own
  end
  return E.decide(st, err, res, hint, now, delay, t)
end

--- E.release(st): the current attempt's breaker ticket, unused
function E.release(st)
  local br, ticket = st.br, st.ticket
  st.ticket = nil
  if br and ticket ~= nil then br:release(ticket) end
end

-- the rest of E.failed: the wait is known
function E.decide(st, err, res, hint, now, delay, t)
  if st.no_sleep and delay > 0 then     -- before anything is paid for
    phase.wait_error(st.door.who, st.no_sleep, delay, phase.NO_YIELD
      .. "pass ropts.sleep, or retry from a timer (ngx.timer.at)")
  end
  if E.too_late(st, E.left(st, now + delay)) then
    return nil, "max_actual_duration"
  end
  local br = st.br                      -- (one that holds is asked after)
  if br and not br:allows() and not (st.door.waits and hold.limit(br)) then
    return nil, "circuit_open"
  end
  if not E.pay(st, cost_of(st, err, res, hint)) then return nil, "budget" end
  local on_retry = st.ropts and st.ropts.on_retry
  if on_retry then on_retry(err, delay, st.attempt, res) end
  if hint then st.hints = st.hints + 1 end
  return delay, t
end

--- E.next(st, t) -> attempt, timeout | nil, reason: after the wait,
-- the next attempt starts (the deadline looked at again: sleeps
-- overshoot; the breaker asked for it).  t: the policy's timeout.
function E.next(st, t)
  local now = core_now(st.b)
  local left = E.left(st, now)
  if E.too_late(st, left) then
    E.refund(st)
    return nil, "max_actual_duration"
  end
  local br = st.br
  if br then
    local ok, ticket = br:allow()
    if not ok then                      -- held, paid, while it holds
      ok, ticket = hold.wait(st.door, st.ropts, br, st.b, st.t0)
      if not ok then
        E.refund(st)
        return nil, "circuit_open"
      end
      now = core_now(st.b)
      left = E.left(st, now)
    end
    st.ticket = ticket
  end
  local attempt = st.attempt + 1
  local timeout = E.try_timeout(st, t, left)
  st.attempt, st.timeout, st.ts = attempt, timeout, br and now or st.ts
  return attempt, timeout
end

--- E.succeeded(st, res1): the current attempt succeeded
function E.succeeded(st, res1)
  if not st.ready then
    return E.first_success(st.ropts, st.ticket, st.ts, st.t0,
                           st.b or st.policy, res1)
  end
  E.record(st, true)
  local ropts = st.ropts
  if ropts and (ropts.metrics or ropts.on_success) then
    E.ended_well(ropts, st.attempt, st.hints, st.t0, st.b, res1)
  end
end

--- E.gave_up(st, err, reason, res): the run ends without success
function E.gave_up(st, err, reason, res)
  local ropts = st.ropts
  if ropts and (ropts.metrics or ropts.on_giveup) then
    E.ended_badly(ropts, err, reason, st.attempt, st.hints, res)
  end
end

return E

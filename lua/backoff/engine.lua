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
-- A run is an object (E.run, E.resume) whose fields only the engine
-- writes: a door reads them and calls its methods, and describes itself
-- in a constant table (DOOR: CONTRIBUTING.md lists its fields).  The
-- happy path of backoff.retry builds nothing: E.start and
-- E.first_success take what they need as arguments, E.resume builds
-- the run once its first attempt failed.  The policy is never changed:
-- it is a template, cloned for the run.
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
local rules = require "backoff.engine.rules"

local pairs, setmetatable = pairs, setmetatable
local core_now, core_failure, first_timeout =
      util.now, util.failure, util.first_timeout
local elapsed_since, ended_well, ended_badly, tell_budget, give_back =
      rules.elapsed_since, rules.ended_well, rules.ended_badly,
      rules.tell_budget, rules.give_back

local E = {}

-- a run's fields: door, policy, f (its facts), b (the run's object: a
-- clone, or the one a policy table was built into), ropts, unsafe (not
-- idempotent); attempt, timeout, ticket (the breaker's), ts: the
-- current attempt's; t0: the run's start.  Once an attempt failed
-- (prepare, ready): deadline, min_attempt (no attempt starts with less
-- left), max_attempts, bud and cost, paid and owed (the current
-- retry's withdrawal, to give back), throttle and tcost (the costs
-- after a hint, a timeout), br, max_hint, hints (retries that waited
-- for a hint), sleep or no_sleep; recs: each copy's { n, paid, ticket,
-- ts }
local Run = {}
Run.__index = Run

------------------------------------------------------------------------
-- the first attempt

-- a run that ends before its first attempt: counted, told to on_giveup
-- a run that ends before its first attempt has no error of its own:
-- its err says so (a newcomer's `print(err)` read "nil")
local NOTHING_TRIED = {
  circuit_open = "circuit open: no attempt was made",
  max_actual_duration = "the deadline had passed: no attempt was made",
}

local function no_attempt(ropts, reason)
  local err = NOTHING_TRIED[reason]
  if ropts ~= nil and (ropts.metrics or ropts.on_giveup) then
    ended_badly(ropts, err, reason, 0, 0)
  end
  return nil, reason, err
end

-- the breaker's word on the first attempt: true, ticket, b | nil.  One
-- that refuses holds the run while it holds (the run's object cloned
-- now for its delays; lua/backoff/engine/hold.lua)
local function admit_first(door, ropts, br, policy, b)
  local ok, ticket = br:allow()
  if ok then return true, ticket, b end
  if not (door.waits and hold.limit(br)) then return nil end
  local sleep, no_sleep = ropts.sleep, nil
  if not sleep then sleep, no_sleep = phase.default_sleep() end
  if no_sleep then return nil end
  if not b then b = policy:clone(core_now(policy)) end
  ok, ticket = hold.wait(br, b, core_now(b) - b:elapsed(), sleep)
  if not ok then return nil end
  return true, ticket, b
end

-- the deadline has passed before the first attempt
local function too_late_to_start(ropts, br, ticket)
  give_back(br, ticket)
  return no_attempt(ropts, "max_actual_duration")
end

-- the start and first timeout of a run with an object (b) or per-try
-- timeouts: t0, timeout, b (cloned now for a policy whose first
-- timeout is a draw of its random function)
local function timed_start(f, policy, b, now)
  if not b and f.eager then b = policy:clone(now) end
  if b then return now - b:elapsed(now), b:timeout(), b end
  -- a template's first timeout is the same for every run (drawn from a
  -- copy of its state; eager ones, drawn by a random function, have an
  -- object by now): read once, kept with its facts, so that the happy
  -- path makes no C call (one would end LuaJIT's trace)
  local ft = f.first_timeout
  if ft == nil then
    ft = first_timeout(policy) or false
    f.first_timeout = ft
  end
  return now, ft or nil, b
end

--- E.start(door, policy, f, b, ropts) -> t0, timeout, b, now, ticket |
-- nil, reason, err: the first attempt of a run that needs its start (a
-- deadline, on_success, a breaker), with nothing built: the breaker's
-- word (held while it holds), the run's start t0, the attempt's
-- timeout (never past the deadline; the time left when the policy has
-- none and the door's left_timeout asks), the run's object (when it
-- had to be cloned now), now, the breaker's ticket; nil when the run
-- ends before it (counted, told to on_giveup)
function E.start(door, policy, f, b, ropts)
  local br, ticket = ropts and ropts.breaker, nil
  if br then
    local ok
    ok, ticket, b = admit_first(door, ropts, br, policy, b)
    if not ok then return no_attempt(ropts, "circuit_open") end
  end
  local now = core_now(b or policy)
  if not f.duration then return now, nil, b, now, ticket end
  local t0, timeout = now, nil
  if b or f.timeouts then t0, timeout, b = timed_start(f, policy, b, now) end
  local left = (f.start or t0) + f.duration - now
  if left <= 0 then return too_late_to_start(ropts, br, ticket) end
  if timeout == nil then
    if door.left_timeout then timeout = left end
  elseif timeout > left then
    timeout = left
  end
  return t0, timeout, b, now, ticket
end

--- E.first_success(ropts, ticket, ts, t0, obj, res1): the first
-- attempt succeeded, and nothing more was built for the run (a door on
-- its happy path passes what it has: the breaker's ticket, the
-- attempt's and the run's start, the object whose clock counts)
local function first_success(ropts, ticket, ts, t0, obj, res1)
  if ropts == nil then return end
  local bud, br = ropts.budget, ropts.breaker
  if bud then tell_budget(bud, true, 1, nil) end
  if br then br:record(true, ticket, elapsed_since(ts, obj)) end
  if ropts.metrics or ropts.on_success then
    ended_well(ropts, 1, 0, t0, obj, res1)
  end
end
E.first_success = first_success

------------------------------------------------------------------------
-- the run

-- the run's settings from ropts: the budget and its costs, the
-- breaker, the sleep, the hint's bound; min_attempt_time
local function from_ropts(run, ropts)
  local bud = ropts.budget
  if bud then                       -- (false: none, on purpose)
    run.bud, run.cost = bud, util.budget_cost(bud)
    if bud.throttle_cost then run.throttle = bud:throttle_cost() end
    if bud.timeout_cost then run.tcost = bud:timeout_cost() end
  end
  run.br, run.sleep, run.max_hint = ropts.breaker, ropts.sleep,
                                    ropts.max_hint
  return ropts.min_attempt_time
end

-- what the retries need, once: the template cloned (started at t0, the
-- first attempt's start) unless the door built the run's object
local function prepare(run)
  local ropts, f, door = run.ropts, run.f, run.door
  if run.b == nil then run.b = run.policy:clone(run.t0) end
  run.hints, run.max_attempts, run.ready = 0, f.max_attempts, true
  local mat
  if ropts ~= nil then mat = from_ropts(run, ropts) end
  if run.max_hint == nil then run.max_hint = door.max_hint end
  if door.waits and not run.sleep then
    run.sleep, run.no_sleep = phase.default_sleep()
  end
  if f.duration then
    run.deadline = (f.start or run.t0 or core_now(run.b)) + f.duration
    if mat == nil and f.timeouts then mat = f.min_adjust_timeout end
  end
  local floor = door.min_attempt or 0
  run.min_attempt = mat and mat > floor and mat or floor
  return run
end

--- E.resume(door, policy, f, b, ropts, t0, timeout, ts, ticket) -> run:
-- the run of a first attempt made without one (E.start's values, or
-- none), which failed
function E.resume(door, policy, f, b, ropts, t0, timeout, ts, ticket)
  return prepare(setmetatable({ door = door, policy = policy, f = f,
    b = b, ropts = ropts, attempt = 1, t0 = t0, ts = ts,
    timeout = timeout, ticket = ticket }, Run))
end

--- E.run(door, policy, f, b, ropts, idem) -> run | nil, reason: a run
-- starts; nil when it ends before its first attempt (a breaker that is
-- open, a deadline that has passed: counted and told to on_giveup).
-- idem: false for a request that is not idempotent (RFC 9110: retried
-- only after a failure that certainly did not reach the server).
-- Reads no clock unless the run needs one.  A door that cannot wait
-- gets it ready for its retries at once.
function E.run(door, policy, f, b, ropts, idem)
  local run = setmetatable({ door = door, policy = policy, f = f, b = b,
    ropts = ropts, attempt = 1, unsafe = idem == false }, Run)
  -- (does the first attempt need the clock, or the breaker?)
  if f.duration or ropts ~= nil and (ropts.on_success or ropts.breaker) then
    local t0, timeout, obj, now, ticket = E.start(door, policy, f, b, ropts)
    if not t0 then return nil, timeout, obj end
    run.t0, run.b, run.ts, run.ticket = t0, obj, now, ticket
    run.timeout = run:try_timeout(timeout)    -- (the door's floor)
  end
  if not door.waits then prepare(run) end
  if door.copies then         -- the first copy's record
    run.recs = { { n = 1, ticket = run.ticket, ts = run.ts } }
    run.ticket = nil
  end
  return run
end

------------------------------------------------------------------------
-- the decision after a failure, and the next attempt's start

--- run:left(now) -> seconds before the deadline (nil: no deadline)
function Run:left(now)
  local deadline = self.deadline
  if not deadline then return nil end
  return deadline - (now or core_now(self.b))
end

--- run:spent() -> the policy's max_attempts are all made
function Run:spent()
  return self.attempt >= self.max_attempts
end

--- run:overdue() -> the deadline has passed
function Run:overdue()
  local left = self:left()
  return left ~= nil and left <= 0
end

--- run:too_late(left) -> an attempt must not start with this time left
function Run:too_late(left)
  return left ~= nil and (left <= 0 or left < self.min_attempt)
end

--- run:hint_stop(hint, now) -> reason | nil: may the run wait the
-- server's hint?  Not over max_hint ("retry_after"), not when the
-- attempt after it could not start before the deadline
-- ("max_actual_duration")
function Run:hint_stop(hint, now)
  if hint == nil then return nil end
  now = now or core_now(self.b)
  if self.max_hint and hint > self.max_hint then return "retry_after" end
  if self:too_late(self:left(now + hint)) then
    return "max_actual_duration"
  end
  return nil
end

-- the next attempt's timeout: the policy's (t, or the last one), never
-- past the deadline; with a deadline and no per-try timeout, the time
-- left where the door asks; never under the door's floor
function Run:try_timeout(t, left)
  local timeout, door = t, self.door
  if timeout == nil then timeout = self.timeout end
  if left ~= nil then
    if timeout == nil then
      if door.left_timeout then timeout = left end
    elseif timeout > left then
      timeout = left
    end
  end
  local floor = door.min_timeout
  if timeout and floor and timeout < floor then timeout = floor end
  return timeout
end

-- attempt n's outcome, told to the budget and the breaker: paid, what
-- its retry withdrew; ticket, the breaker's; seconds, how long it took
function Run:tell(ok, n, paid, ticket, seconds)
  local bud, br = self.bud, self.br
  if bud then tell_budget(bud, ok, n, paid, self.cost) end
  if br then br:record(ok, ticket, seconds) end
end

-- withdraw a retry from the budget (none: true); paid is the cost asked
-- (nil: the budget's own), owed says a withdrawal is there to give back
local function pay(run, cost)
  local bud = run.bud
  if not bud then return true end
  if not bud:withdraw(cost, run.attempt + 1) then return false end
  run.paid, run.owed = cost, true
  return true
end

-- a retry paid for is not made: give back what it took
local function refund(run)
  local bud = run.bud
  if run.owed and bud and bud.deposit then
    bud:deposit(run.paid or run.cost)
  end
  run.owed = nil
end

-- the rest of run:failed: the wait is known
local function decide(run, err, res, hint, now, delay, t)
  if run.no_sleep and delay > 0 then    -- before anything is paid for
    phase.wait_error(run.door.who, run.no_sleep, delay, phase.NO_YIELD
      .. "pass ropts.sleep, or retry from a timer (ngx.timer.at)")
  end
  if run:too_late(run:left(now + delay)) then
    return nil, "max_actual_duration"
  end
  local br = run.br                     -- (one that holds is asked after)
  if br and not br:allows() and not (run.door.waits and hold.limit(br)) then
    return nil, "circuit_open"
  end
  if not pay(run, rules.cost_of(run, err, res, hint)) then
    return nil, "budget"
  end
  local on_retry = run.ropts and run.ropts.on_retry
  if on_retry then on_retry(err, delay, run.attempt, res) end
  if hint then run.hints = run.hints + 1 end
  return delay, t
end

--- run:resend(sent) -> nil | "not_idempotent": may a request be sent
-- again after a failure that may have reached the server (sent)?
function Run:resend(sent)
  if sent and self.unsafe then return "not_idempotent" end
  return nil
end

--- run:failed(err, res, hint, sent) -> delay, t | nil, reason.  The
-- current attempt failed with err (res: the door's response; hint: the
-- door's hint; sent: it may have reached the server).  Records the
-- failure, decides, pays; delay is the wait before the next attempt, t
-- the policy's timeout for it.
function Run:failed(err, res, hint, sent)
  if not self.ready then prepare(self) end
  local stop = self:resend(sent)
  if stop then                          -- an upstream failure, not
    self:record(false)                  -- retried
    return nil, stop
  end
  local yes, why = rules.verdict(self, err, res)
  if not yes then                       -- the caller's error, not the
    self:release()                      -- upstream's: nothing recorded
    return nil, why
  end
  self:record(false)
  hint = rules.hint_of(self, err, res, hint)
  local now = core_now(self.b)
  if hint then
    local stop_hint = self:hint_stop(hint, now)
    if stop_hint then return nil, stop_hint end
  end
  local delay, t, own = core_failure(self.b, now, hint)
  if delay == nil then return nil, t end
  if own > delay and not (self.ropts and self.ropts.reference_delays) then
    delay = own
  end
  return decide(self, err, res, hint, now, delay, t)
end

--- run:next(t) -> attempt, timeout | nil, reason: after the wait, the
-- next attempt starts (the deadline looked at again: sleeps overshoot;
-- the breaker asked for it, and held while it holds).  t: the policy's
-- timeout.
function Run:next(t)
  local now = core_now(self.b)
  local left = self:left(now)
  if self:too_late(left) then
    refund(self)
    return nil, "max_actual_duration"
  end
  local br = self.br
  if br then
    local ok, ticket = br:allow()
    if not ok then                      -- held, paid, while it holds
      ok, ticket = hold.wait(br, self.b, self.t0,
                             not self.no_sleep and self.sleep)
      if not ok then
        refund(self)
        return nil, "circuit_open"
      end
      now = core_now(self.b)
      left = self:left(now)
    end
    self.ticket = ticket
  end
  local attempt = self.attempt + 1
  local timeout = self:try_timeout(t, left)
  self.attempt, self.timeout, self.ts = attempt, timeout, br and now or self.ts
  return attempt, timeout
end

for k, v in pairs(require "backoff.engine.nowait") do Run[k] = v end

------------------------------------------------------------------------
-- the end of a run

--- run:record(ok, seconds): the current attempt's outcome, told to the
-- budget and the breaker (seconds: how long it took, for the breaker's
-- slow calls; nil: measured from the attempt's start)
function Run:record(ok, seconds)
  if not self.ready then prepare(self) end
  if seconds == nil and self.br and self.ts then
    seconds = elapsed_since(self.ts, self.b)
  end
  self:tell(ok, self.attempt, self.paid, self.ticket, seconds)
  self.owed, self.ticket = nil, nil
end

--- run:finish(ok, err, reason, res, hints): the run ends (metrics, then
-- on_success or on_giveup), after run.attempt attempts; hints: the
-- door's count (nil: the run's)
function Run:finish(ok, err, reason, res, hints)
  local ropts = self.ropts
  if ropts == nil then return end
  hints = hints or self.hints or 0
  if not ok then
    return ended_badly(ropts, err, reason, self.attempt, hints, res)
  end
  ended_well(ropts, self.attempt, hints, self.t0, self.b or self.policy, res)
end

--- run:succeeded(res1): the current attempt succeeded: told, counted
function Run:succeeded(res1)
  if not self.ready then
    return first_success(self.ropts, self.ticket, self.ts, self.t0,
                         self.b or self.policy, res1)
  end
  self:record(true)
  self:finish(true, nil, nil, res1)
end

--- run:release(): the current attempt's breaker ticket, unused
function Run:release()
  give_back(self.br, self.ticket)
  self.ticket = nil
end

--- run:retry(err, res, hint, sent) -> attempt, timeout | nil, reason:
-- the current attempt failed (res: the door's response; hint: the
-- door's hint; sent: it may have reached the server): decided, waited
-- (run.sleep), and the next attempt started; or the run ends, told
-- (on_giveup with err and res)
function Run:retry(err, res, hint, sent)
  local delay, t = self:failed(err, res, hint, sent)
  if delay ~= nil then
    self.sleep(delay)
    delay, t = self:next(t)
    if delay ~= nil then return delay, t end
  end
  self:finish(false, err, t, res)
  return nil, t
end

return E

-- backoff.engine.rules: the engine's rules that read a run and write
-- nothing (internal; lua/backoff/engine.lua's): the end of a run told
-- to the metrics and the hooks, an outcome told to the budget, and the
-- hooks' answers checked (retry_on, server_hint, retry_cost).

local util = require "backoff.util"

local error, type = error, type
local huge = math.huge
local core_now, repr = util.now, util.repr

local R = {}

-- the seconds since t0 on b's clock (none: 0; a clock that went back:
-- no time passed)
function R.elapsed_since(t0, b)
  if not t0 then return 0 end
  local e = core_now(b) - t0
  if e < 0 then e = 0 end
  return e
end

-- the end of a run: metrics first (a hook that raises must not lose the
-- count), then the hook
function R.ended_well(ropts, attempts, hints, t0, b, res1)
  local m = ropts.metrics
  if m then m:run(true, attempts, nil, hints) end
  local f = ropts.on_success
  if f then f(res1, R.elapsed_since(t0, b), attempts) end
end

function R.ended_badly(ropts, err, reason, attempts, hints, res)
  local m = ropts.metrics
  if m then m:run(false, attempts, reason, hints) end
  local f = ropts.on_giveup
  if f then f(err, reason, attempts, res) end
end

-- a breaker's ticket, unused, given back (none: nothing to do)
function R.give_back(br, ticket)
  if br and ticket ~= nil then br:release(ticket) end
end

-- the budget learns an attempt's outcome: record (every attempt), or
-- the legacy deposit on success (what the retry paid, or the budget's
-- own refund after a first attempt)
function R.tell_budget(bud, ok, attempt, paid, cost)
  if bud.record then
    bud:record(ok, attempt, paid)
  elseif ok then
    if attempt > 1 then bud:deposit(paid or cost) else bud:deposit() end
  end
end

-- the user's verdict on a failure: true, or false and the reason to
-- give up with (retry_on's second result, checked)
function R.verdict(run, err, res)
  local ropts = run.ropts
  local retry_on = ropts and ropts.retry_on
  if not retry_on then return true end
  local yes, why = retry_on(err, run.attempt, res)
  if yes then return true end
  if why == nil or why == false then return false, "retry_on" end
  if type(why) ~= "string" or #why > 64 or not why:match("^[%a_][%w_]*$")
  then
    error(run.door.who .. ": ropts.retry_on's second result must be nil "
          .. "or a reason (a name of letters, digits and _, at most 64 "
          .. "bytes; got " .. repr(why) .. ")", 0)
  end
  return false, why
end

-- the server's hint for this failure: the door's (read from the
-- response), else the hook's; checked
function R.hint_of(run, err, res, hint)
  local name = "server_hint"
  if hint == nil then
    local ropts = run.ropts
    local f = ropts and ropts.server_hint
    if not f and ropts and ropts.retry_after then
      f, name = ropts.retry_after, "retry_after"
    end
    if f then hint = f(err, run.attempt, res) end
    if hint == false then hint = nil end
  end
  if hint ~= nil and not (type(hint) == "number" and hint >= 0
                          and hint < huge) then
    error(run.door.who .. ": ropts." .. name .. " must return nil or a "
          .. "finite number >= 0 (got " .. repr(hint) .. ")", 0)
  end
  return hint
end

-- what the next retry withdraws: retry_cost's answer, else the
-- budget's throttle_cost after a hint (the server said it is
-- overloaded), its timeout_cost after a timeout (a late failure whose
-- retry the first successes after a hung spell would otherwise pay
-- for), else its own cost
function R.cost_of(run, err, res, hint)
  local ropts = run.ropts
  local f = ropts and ropts.retry_cost
  if f then
    local cost = f(err, run.attempt, res)
    if cost ~= nil and not (type(cost) == "number" and cost >= 0
                            and cost <= 2 ^ 53 and cost % 1 == 0) then
      error(run.door.who .. ": ropts.retry_cost must return nil or an "
            .. "integer >= 0 and <= 2^53 (got " .. repr(cost) .. ")", 0)
    end
    return cost
  end
  if hint ~= nil and run.throttle then return run.throttle end
  if run.tcost and util.is_timeout(err) then return run.tcost end
  return run.cost
end

return R

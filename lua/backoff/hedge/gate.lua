-- backoff.hedge.gate: may a copy of a hedged request start now, and what
-- became of it; one gate per request (internal: backoff.hedge's).  A
-- thin adapter: every rule is the run's (lua/backoff/engine.lua and
-- engine/nowait.lua: the policy's limits, the deadline, the breaker,
-- the budget, the hint's bound, each copy's record, the metrics and
-- the hooks); the gate counts the hedge's own counters.
--
--   g = gate.new(policy, f, o)   o: options.compile's
--   g:start(attempt, kind [, f]) -> true, timeout | false, reason
--       copy `attempt` (1, 2, ... in order) may start now?  kind:
--       "first", "hedge" (while another copy is in flight) or "retry"
--       (after a copy failed: f, its failure, for the budget's cost
--       after a hint).  Copy 1: the breaker's word and the first
--       timeout (engine.run); later copies: run:copy (the policy
--       counts it, the deadline, the breaker, the budget pays it as a
--       retry).  A refusal ends hedging for the request.
--   g:won(attempt, seconds, kind)   the copy whose answer is returned
--   g:failed(attempt, seconds, sent) -> reason | nil  a copy that
--                                   failed (retryable); sent: it may
--                                   have reached the server
--   g:cancelled(attempt)            a copy cancelled: its breaker
--                                   ticket given back, nothing paid back
--   g:hint_stop(hint) -> reason | nil   may the request wait this hint?
--   g:finish(ok, reason, hints, err, res1) the request ended: metrics and
--                                   the hooks (on_success, on_giveup)
--   g:now(), g:attempts(), g.run (its spent(), left(), overdue())

local engine = require "backoff.engine"
local util = require "backoff.util"

local setmetatable, type = setmetatable, type
local core_now = util.now

local M = {}

local DOOR = { who = "backoff.hedge.request", waits = false,
               left_timeout = true, max_hint = 60, copies = true }

local Gate = {}
Gate.__index = Gate

function M.new(policy, f, b, o)
  return setmetatable({ policy = policy, f = f, b = b, o = o,
    ropts = o.ropts }, Gate)
end

function Gate:now()
  local run = self.run
  return core_now(run and run.b or self.b or self.policy)
end

local function count(self, counter)
  local m = self.ropts.metrics
  if m and m.add then m:add(counter, 1) end
end

-- copy 1: the run starts (the breaker, the first timeout; a refusal is
-- counted and told to on_giveup there)
local function first(self)
  local run, reason = engine.run(DOOR, self.policy, self.f, self.b,
                                 self.ropts, self.o.idem)
  if not run then
    self.finished = true
    return false, reason
  end
  self.run = run
  return true, run.timeout
end

function Gate:start(attempt, kind, f)
  local ok, t
  if attempt == 1 then
    ok, t = first(self)
    if not ok then return false, t end
  else
    local n
    t, n = self.run:copy(f and f.hint, f and f.err, f and f.res)
    if type(n) ~= "number" then             -- refused: n is why
      if n == "budget" and kind == "hedge" then
        count(self, "hedge_budget_refusals")
      end
      return false, n
    end
  end
  if kind == "hedge" then count(self, "hedges") end
  return true, t
end

function Gate:won(attempt, seconds, kind)
  self.run:tell_copy(attempt, true, seconds)
  if kind == "hedge" then count(self, "hedges_won") end
end

-- -> nil | "not_idempotent": sent, it may not be sent again
function Gate:failed(attempt, seconds, sent)
  self.run:tell_copy(attempt, false, seconds)
  return self.run:resend(sent)
end

-- a copy whose do_request raised: its ticket back, nothing counted
function Gate:forget(attempt)
  self.run:forget(attempt)
end

function Gate:cancelled(attempt)
  self:forget(attempt)
  count(self, "hedges_cancelled")
end

function Gate:hint_stop(hint)
  return self.run:hint_stop(hint)
end

function Gate:finish(ok, reason, hints, err, res1)
  if self.finished then return end
  self.finished = true
  self.run:finish(ok, err, reason, res1, hints or 0)
end

-- the copies started so far (the run's attempts)
function Gate:attempts()
  return self.run and self.run.attempt or 0
end

return M

-- backoff.hedge.gate: may a copy of a hedged request start now, and what
-- became of it; one gate per request (internal: backoff.hedge's).  A
-- thin adapter: every rule is the engine's (lua/backoff/engine.lua and
-- engine/nowait.lua: the policy's limits, the deadline, the breaker,
-- the budget, the hint's bound, the metrics and the hooks); the gate
-- keeps each copy's record and counts the hedge's own counters.
--
--   g = gate.new(policy, f, o)   o: options.compile's
--   g:start(attempt, kind [, f]) -> true, timeout | false, reason
--       copy `attempt` (1, 2, ... in order) may start now?  kind:
--       "first", "hedge" (while another copy is in flight) or "retry"
--       (after a copy failed: f, its failure, for the budget's cost
--       after a hint).  Copy 1: the breaker's word and the first
--       timeout (engine.begin); later copies: engine.nowait.copy (the
--       policy counts it, the deadline, the breaker, the budget pays it
--       as a retry).  A refusal ends hedging for the request.
--   g:won(attempt, seconds, kind)   the copy whose answer is returned
--   g:failed(attempt, seconds)      a copy that failed (retryable)
--   g:cancelled(attempt)            a copy cancelled: its breaker
--                                   ticket given back, nothing paid back
--   g:hint_stop(hint) -> reason | nil   may the request wait this hint?
--   g:finish(ok, reason, hints, err, res1) the request ended: metrics and
--                                   the hooks (on_success, on_giveup)
--   g:now(), g:attempts(), g.deadline

local engine = require "backoff.engine"
local nowait = require "backoff.engine.nowait"
local util = require "backoff.util"

local setmetatable, type = setmetatable, type
local core_now = util.now

local M = {}

local DOOR = { who = "backoff.hedge.request", waits = false,
               left_timeout = true }

local Gate = {}
Gate.__index = Gate

function M.new(policy, f, b, o)
  return setmetatable({ policy = policy, f = f, b = b, o = o,
    ropts = o.ropts, recs = {}, started = 0 }, Gate)
end

function Gate:now()
  return core_now(self.st and self.st.b or self.b or self.policy)
end

local function count(self, counter)
  local m = self.ropts.metrics
  if m and m.add then m:add(counter, 1) end
end

-- copy 1: the run starts (engine.begin: the breaker, the first timeout;
-- a refusal is counted and told to on_giveup there), its state is built
local function first(self)
  local st, reason = engine.begin(DOOR, self.policy, self.f, self.b,
                                  self.ropts)
  if not st then
    self.finished = true
    return false, reason
  end
  engine.state(st)
  st.max_hint = self.o.max_hint
  self.st, self.deadline = st, st.deadline
  self.recs[1] = nowait.first_copy(st)
  return true, st.timeout
end

function Gate:start(attempt, kind, f)
  local ok, t
  if attempt == 1 then
    ok, t = first(self)
    if not ok then return false, t end
  else
    local rec
    t, rec = nowait.copy(self.st, f and f.hint, f and f.err, f and f.res)
    if type(rec) ~= "table" then            -- refused: rec is why
      if rec == "budget" and kind == "hedge" then
        count(self, "hedge_budget_refusals")
      end
      return false, rec
    end
    self.recs[attempt] = rec
  end
  if attempt > self.started then self.started = attempt end
  if kind == "hedge" then count(self, "hedges") end
  return true, t
end

function Gate:won(attempt, seconds, kind)
  nowait.tell(self.st, self.recs[attempt], true, seconds)
  if kind == "hedge" then count(self, "hedges_won") end
end

function Gate:failed(attempt, seconds)
  nowait.tell(self.st, self.recs[attempt], false, seconds)
end

function Gate:cancelled(attempt)
  nowait.forget(self.st, self.recs[attempt])
  count(self, "hedges_cancelled")
end

-- a copy whose do_request raised: its ticket back, nothing counted
function Gate:forget(attempt)
  nowait.forget(self.st, self.recs[attempt])
end

function Gate:hint_stop(hint)
  if hint == nil then return nil end
  return engine.hint_stop(self.st, hint, self:now())
end

function Gate:finish(ok, reason, hints, err, res1)
  if self.finished then return end
  self.finished = true
  local st = self.st
  if ok then
    engine.ended_well(self.ropts, self.started, hints or 0, st.t0, st.b,
                      res1)
  else
    engine.ended_badly(self.ropts, err, reason, self.started, hints or 0,
                       res1)
  end
end

-- the copies started so far
function Gate:attempts()
  return self.started
end

return M

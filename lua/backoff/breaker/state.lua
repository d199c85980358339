-- backoff.breaker.state: a breaker's state and its transitions
-- (internal; lua/backoff/breaker.lua holds the object and its methods,
-- and passes itself as `self`).  Reading the state record, the epochs,
-- the open interval drawn from the policy, and each transition with the
-- one atomic call that decides it (doc/breaker.md, "Races").

local util = require "backoff.util"
local bmetrics = require "backoff.breaker.metrics"
local store = require "backoff.breaker.store"

local floor, min, type = math.floor, math.min, type
local repr = util.repr
local CLOSED, OPEN = store.CLOSED, store.OPEN
local WHO = "backoff.breaker"

-- forced by hand (br:force): the state key holds one of these texts
-- until force(nil) or reset() writes a closed epoch again
local FORCED = "forced"
local FORCED_TEXT = { open = "F:open", closed = "F:closed" }
local FORCED_OF = { ["F:open"] = OPEN, ["F:closed"] = CLOSED }
-- an escalation (the hung probes in a row) is kept this long with the
-- open record it belongs to
local J_TTL = 3600

-- a half-open epoch's outcome counter: a failure adds BIG, a success 1,
-- so one incr both counts and tells what came before it
local BIG = 2 ^ 32
-- the trip election lives only as long as concurrent trippers need it:
-- one who read the state before the winner wrote it; a stale one finds
-- the state moved on (the guard read in trip)
local ELECT_TTL = 5
-- the longest replay of the policy: the 1,000th opening in a row and
-- every later one wait like the 1,000th
local MAX_REPLAY = 1000

local S = {}

-- the open interval of the k-th opening in a row: the policy's k-th
-- failure delay, drawn now (a policy that gives up keeps its last)
local function interval(self, k)
  local b = self.draws
  b:reset(0)
  local d = 0
  for _ = 1, min(k, MAX_REPLAY) do
    local x = b:failure(0)
    if x == nil then break end
    d = x
  end
  return d
end

-- a new epoch after e (nil: none known), from the breaker's counter
local function epoch_after(self, e, now)
  return store.next_epoch(self.dict, self.nk, e, now, self.name)
end

-- The longest open interval the policy can draw (the most of one replay
-- of MAX_REPLAY openings, twice over for its jitter, and never above
-- its max_delay): an open record asking for more was not written here.
function S.longest(self)
  local b, most = self.draws, 0
  b:reset(0)
  for _ = 1, MAX_REPLAY do
    local x = b:failure(0)
    if x == nil then break end
    if x > most then most = x end
  end
  most = 2 * most
  local cap = b:config().max_delay
  if cap and cap > 0 and cap < most then most = cap end
  return most
end

-- an open record this breaker can have written: opened no later than
-- now (plus a second for clocks read at different times), for no longer
-- than its policy can draw
-- (the longest worked out on the first open record read, not at start)
local function plausible(self, rec)
  local longest = self.longest
  if not longest then
    longest = S.longest(self)
    self.longest = longest
  end
  return rec.t <= self:_now() + 1 and rec.d <= longest
end

-- The state now: CLOSED, epoch (nil when missing) | OPEN, rec |
-- FORCED, "open" or "closed".  A value this module cannot have written
-- is logged and deleted: closed.
local function read(self)
  local v = self.dict:get(self.sk)
  if v == nil then return CLOSED, nil end
  if store.is_epoch(v) then return CLOSED, v end
  if v == self.raw then return OPEN, self.rec end
  local forced = FORCED_OF[v]
  if forced then return FORCED, forced end
  local rec = store.decode(v)
  if rec ~= nil and not plausible(self, rec) then rec = nil end
  if rec == nil then
    store.corrupt(self.dict, self.sk, v, self.name)
    return CLOSED, nil
  end
  self.raw, self.rec = v, rec
  return OPEN, rec
end

-- the closed epoch now, written when the state is missing (add: the
-- first writer wins, the others read its epoch)
local function closed_epoch(self)
  local dict = self.dict
  for _ = 1, 3 do
    local kind, e = read(self)
    if kind ~= CLOSED then return nil end
    if e ~= nil then return e end
    dict:add(self.sk, epoch_after(self, nil, self:_now()))
  end
  return nil
end

-- a transition made by this worker: metrics first (a hook that raises
-- must not lose the count), the log, then the hook
local function changed(self, from, to, info)
  info.key = self.name
  local m = self.metrics
  if m then bmetrics.transition(m, to) end
  store.log(to == OPEN and "WARN" or "NOTICE", WHO, " ", repr(self.name),
            ": ", from, " -> ", to, info.interval and
            (" for %.3f s"):format(info.interval) or "",
            info.reason and " (" .. info.reason .. ")" or "")
  local f = self.on_change
  if f then f(from, to, info) end
end

-- a refusal, counted; in mode "observe" the attempt goes ahead all
-- the same (true, no ticket: its outcome is not counted while open)
local function refused(self)
  local m = self.metrics
  if m then bmetrics.refusal(m) end
  return self.observe
end

-- write an open record after epoch e: the k-th opening in a row, now;
-- its interval is the policy's j-th delay (j: 1 + the hung probes in a
-- row, doc/breaker.md "Recovery"), j kept under K|j<E> when above 1
local function open(self, e, k, now, from, reason, j)
  j = j or 1
  local d = interval(self, j)
  local ne = epoch_after(self, e, now)
  local dict = self.dict
  if j > 1 then dict:set(self.pre .. "j" .. store.etext(ne), j, J_TTL) end
  local ok, err = dict:set(self.sk, store.open_text(ne, k, now, d))
  if not ok then
    store.log("ERR", WHO, " ", repr(self.name), ": cannot open: ", err)
    return
  end
  changed(self, from, OPEN, { opening = k, interval = d, at = now,
                              reason = reason, hung = j - 1 })
end

-- the escalation of open record rec: 1 + the hung probes in a row
local function escalation(self, rec)
  local key = self.pre .. "j" .. rec.etext
  local j = self.dict:get(key)
  if j == nil then return 1 end
  if type(j) == "number" and j >= 1 and j == floor(j) and j < 2 ^ 31 then
    return j
  end
  store.corrupt(self.dict, key, j, self.name)
  return 1
end

------------------------------------------------------------------------
-- transitions.  Each is decided by one atomic call, so exactly one
-- worker makes it; the winner then reads the state once more (the
-- guard) and writes the next epoch only if the state is still the one
-- it decided from.  Nothing else writes the state key: the winner of
-- epoch E is the only writer until epoch E + 1 exists.

-- closed epoch e trips (reason: the rule).  Two workers that both see
-- the rule met (W1, W2 reading epoch e):
--   W1 add(x<e>) ok   W2 add(x<e>) exists -> W2 stops
--   W1 get(s) == e -> W1 set(s, open)   (one opening, one hook call)
-- A worker that read epoch e long ago and wins x<e> after it expired
-- finds s moved on in its guard read and stops.
local function trip(self, e, reason)
  local dict = self.dict
  if not dict:add(self.pre .. "x" .. store.etext(e), 1, ELECT_TTL) then
    return
  end
  if dict:get(self.sk) ~= e then return end
  open(self, e, 1, self:_now(), CLOSED, reason)
  if self.failures then dict:delete(self.pre .. "f" .. store.etext(e)) end
end

-- half-open epoch rec closes (the probes' successes) or reopens (a
-- probe's failure) after the decision in probe_outcome
local function close(self, rec)
  if self.dict:get(self.sk) ~= rec.raw then return end
  local now = self:_now()
  local ok, err = self.dict:set(self.sk, epoch_after(self, rec.epoch, now))
  if not ok then
    store.log("ERR", WHO, " ", repr(self.name), ": cannot close: ", err)
    return
  end
  changed(self, "half_open", CLOSED, { opening = rec.k, at = now })
end

-- a probe's failure reopens: a hung one (it took hung_after seconds or
-- more, or none reported within half_open_timeout) with the policy's
-- next delay, a fast one with its first (doc/breaker.md, "Recovery")
local function reopen(self, rec, hung, reason)
  if self.dict:get(self.sk) ~= rec.raw then return end
  local j = hung and escalation(self, rec) + 1 or 1
  open(self, rec.epoch, rec.k + 1, self:_now(), "half_open",
       reason or "probe", j)
end

-- A probe of half-open epoch rec reports.  One counter decides, c<E>:
-- a success adds 1, a failure BIG.  The success that makes it exactly
-- `probes` closes (no failure came before it: a failure's BIG would be
-- in the sum); the failure whose sum is below 2 BIG (the first) with
-- fewer than `probes` successes before it reopens.  Two probes, P1 a
-- success and P2 a failure, probes = 2, after one success already:
--   P1 incr +1 -> 2 = probes: close     P2 incr +BIG -> BIG + 2: the
--                                       successes came first: no-op
-- or
--   P2 incr +BIG -> BIG + 1: reopen     P1 incr +1 -> BIG + 2: not
--                                       `probes`: no-op
-- Whichever incr lands first decides, and the other sees it in its own
-- result: a success never undoes a failure counted before it, and two
-- failures reopen once (the second sees 2 BIG).  The loser's outcome
-- is then recorded as an attempt without a ticket (it counts if the
-- breaker is closed by now, and is ignored while it is open).
local function probe_outcome(self, rec, good, hung, reason)
  local key = self.pre .. "c" .. rec.etext
  local r = store.incr(self.dict, key, good and 1 or BIG, self.c_ttl,
                       self.name)
  if r == nil then return true end
  -- what the probes can add up to: fewer than 2^16 failures, and no
  -- count below 1
  if not (r >= 1 and r < BIG * 2 ^ 16 and r % 1 == 0) then
    store.corrupt(self.dict, key, r, self.name)
    return true
  end
  if good then
    if r == self.probes then close(self, rec) return true end
    return r < self.probes
  end
  if r < 2 * BIG and r - BIG < self.probes then
    reopen(self, rec, hung, reason)
    return true
  end
  return false
end

-- Is probe slot `slot` held?  A slot holds a probe's token (a worker
-- and a number) for at most probe_timeout; anything else there (another
-- writer's value, one set without an expiry or for longer) would hold
-- the slot for ever: logged, deleted, free.
local function slot_taken(self, slot)
  local dict = self.dict
  local v = dict:get(slot)
  if v == nil then return false end
  local ok = type(v) == "string" and v:match("^%w+:%d+$") ~= nil
  if ok and dict.ttl then
    local t = dict:ttl(slot)
    ok = t == nil or (t > 0 and t <= self.probe_timeout + 1)
  end
  if ok then return true end
  store.corrupt(dict, slot, v, self.name)
  return false
end

-- half-open epoch rec, undecided half_open_timeout after its first
-- probe was admitted (K|h<E> holds that time): true when it is over.
-- The first caller to see it reopens it, through the probes' counter
-- (a hung failure: one reopening however many see it)
-- (a time before the period could start is not one it wrote: ignored)
local function stalled(self, rec, now)
  local key = self.pre .. "h" .. rec.etext
  local t0 = self.dict:get(key)
  if t0 == nil then return false end
  if type(t0) ~= "number" or t0 ~= t0 or t0 > now + 1 then
    store.corrupt(self.dict, key, t0, self.name)  -- not a time it wrote
    return false
  end
  return t0 >= rec.until_ - 1 and now - t0 >= self.half_open_timeout
end

local function end_stalled(self, rec)
  probe_outcome(self, rec, false, true, "half_open_timeout")
end

-- br:force(to): the state written by hand ("open", "closed", nil: a
-- closed epoch again, automatic); from: the state's name before
local function force(self, to, from, now)
  local v = to and FORCED_TEXT[to] or epoch_after(self, nil, now)
  local ok, err = self.dict:set(self.sk, v)
  if not ok then
    return nil, err
  end
  local name = to or CLOSED
  if from ~= name then
    changed(self, from, name, { at = now,
      reason = to and "forced" or "automatic" })
  end
  return true
end

S.read, S.closed_epoch, S.epoch_after = read, closed_epoch, epoch_after
S.changed, S.refused, S.trip, S.probe_outcome, S.slot_taken =
  changed, refused, trip, probe_outcome, slot_taken
S.stalled, S.end_stalled, S.force, S.FORCED =
  stalled, end_stalled, force, FORCED

return S

-- backoff.budget.earned: retries earned by successes, in proportion to
-- the share of recent attempts that succeeded, from a reserve sized by
-- the recent traffic and by the recoveries it saw -- the rule of
-- backoff.budget.recommended.  In-process or shared by the workers of
-- an nginx host.  doc/budget.md has the rule's reasons and figures.
--
-- The rule (defaults in brackets):
--   * the reserve: at most R = B + L tokens may be spent with no
--     success in between.  B = per_request (0.08) x the requests
--     (first attempts) of the last `span` (10) seconds + per_failure
--     (2) x the failures of that span that a later success ended, at
--     least cost, at most capacity (8).  L, the credit = per_recovery
--     (5) x the failed requests of that span's recoveries: a run of at
--     least 3 failed requests of this Lua state, ended by a success and
--     followed by at least 3 successes and no failure until the clock
--     is two slices (span / 10 s each) past the one it ended in;
--   * a retry withdraws cost (1) and is refused, taking nothing, when
--     fewer than cost remain of R; a request's first retry (attempt 2:
--     given, or the one after a failed first attempt this object was
--     just told of) may use B and only half of L, the other half kept
--     for the requests already retrying (a credit running out stops new
--     requests from retrying rather than cutting off the ones on their
--     way to the next up spell);
--   * a success earns earn x s tokens (6 x s), s the success share of
--     the recent attempts: a moving average over about `memory` (200)
--     attempts, before this one, starting at 1.
-- A retry after an overload answer (429, 503 with Retry-After) is
-- withdrawn at throttle_cost() (capacity + 1: never made, no
-- withdrawal above capacity is); one after a timeout at timeout_cost()
-- (6, what a success earns at best: the attempts a hung upstream held
-- time out after it recovered, when successes refill the reserve;
-- priced so, they get s retries per success, not 6 x s).  span = 0: R
-- is always capacity, nothing is lent.
--
-- Tokens are kept in thousandths, one integer under a key (in this Lua
-- state, or in an ngx.shared dict: the incr-only algorithm and
-- guarantees of the token bucket, lua/backoff/budget/token.lua; a
-- missing key is full).  The counter runs from 0 to capacity + LEND
-- and a withdrawal may not take it below that - R: a floor that moves,
-- the counter never needs rewriting.  B's counts (thousandths) go to
-- slices of span / 10 seconds: in this Lua state a ring, shared one
-- dict key per slice (incr, init 0, expiring after span + one slice),
-- each worker adding its counts of a slice in one incr when its clock
-- leaves the slice, when it withdraws, or when a success ends a run of
-- failures; it reads the slices before the last once per slice, the
-- last and the current at each reserve.  L's counts go to a second
-- series, written when a recovery is confirmed (rare).  s, the current
-- run and the streak after it are per Lua state: shared, each worker
-- measures its own attempts.  The good day costs one dict read per
-- success, and a worker whose s is above 0.999 (about 300 successes in
-- a row) that found the budget full reads it only every 16th success: a
-- retry another worker took meanwhile is earned back at that read (or
-- by that worker's own successes), and this worker's failure or
-- withdrawal ends the shortcut at once.

local C = require "backoff.budget.common"
local util = require "backoff.util"
local slices = require "backoff.budget.slices"
local store = require "backoff.store"
local window = require "backoff.store.window"
local rule = require "backoff.check"  -- the option rules

local floor, ceil, getmetatable, setmetatable = math.floor, math.ceil,
      getmetatable, setmetatable
local add, take, read, from_milli = C.add, C.take, C.read, C.from_milli

local CTOR = "backoff.budget.earned"
local SLICES = slices.SLICES            -- a span is 10 slices
local LEND = 2 ^ 20                     -- the most the credit lends
local RUN_MAX = 2 ^ 20                  -- failed requests of a run, counted
local STREAK = 3        -- successes that confirm a recovery, and the
                        -- fewest failed requests a recovery is from
local UP = 0.75         -- a recovery is confirmed once the upstream has
                        -- answered for UP of the time it was down

local Earned = { __name = CTOR }
Earned.__index = Earned

local function check(self, method)
  if getmetatable(self) ~= Earned then
    C.self_check(self, Earned, method)
  end
end

local slice_now, put, flush, advance, count, span_sum = slices.slice_now,
  slices.put, slices.flush, slices.advance, slices.count, slices.span_sum

-- The price of a timeout's retry, by the share T of the recent
-- attempts (the last RECENT slices: this one and the two before) that
-- timed out: cost while T <= T_LO (a half-hung upstream: the others
-- succeed and pay for it), timeout_cost from T_HI on (a hung one: the
-- late timeouts of its last second come back when the successes do),
-- in between on a straight line.  Thousandths.  T_LO is 0.58, not
-- 0.5: a process alone at 10 requests/s sees about 60 attempts in 3
-- slices, and at 50% hung its T is above 0.55 a fifth of the time (a
-- standard deviation of 0.065), which cost it 5 of its 100 requests
-- (bench/outage.lua, 50% hung for 60 s: 94.2% per process, 96.6% at
-- 0.58); at 0.6 the 80% hung spell's last timeouts come back (1 s of
-- overload per process)
local RECENT, T_LO, T_HI = 3, 0.58, 0.7

local function timeout_price(self, i)
  local t, a = slices.recent(self, i, RECENT)
  local lo, hi = self.cost_ * 1000, self.timeout_ * 1000
  if a <= 0 or t >= a then return hi end
  local h = (t / a - self.t_lo) / (self.t_hi - self.t_lo)
  if h <= 0 then return lo end
  if h >= 1 then return hi end
  return lo + floor((hi - lo) * h + 0.5)
end

-- what a withdrawal of `cost` takes (thousandths): a timeout's retry
-- (cost = timeout_cost, above cost) at its price, counted as a timeout
-- when `seen`
local function milli_cost(self, cost, seen)
  if cost ~= self.timeout_ or not self.tshare then return cost * 1000 end
  local i = slice_now(self)
  advance(self, i)
  if seen then self.pt = self.pt + 1 end
  return timeout_price(self, i)
end

-- R now, in thousandths (B + L), and L: B is the units of the span
-- (this worker's pending ones included), at least cost, at most
-- capacity; L the credit's, at most LEND
local function reserve(self)
  local base = self.base
  if self.len == nil then return base, 0 end
  local i = slice_now(self)
  advance(self, i)
  local b = span_sum(self, i) + self.pu
  if b < self.least then b = self.least elseif b > base then b = base end
  local l = 0
  if self.urec > 0 then
    l = span_sum(self, i, true)
    if l > self.lend then l = self.lend end
  end
  return b + l, l
end

-- the attempt a withdrawal pays for: the one given, else the one after
-- the failure this object was last told of (the runner records a
-- failure, then pays for its retry), else a first retry
local function retry_number(self, attempt)
  if attempt == nil then return self.after or 2 end
  return attempt
end

-- the lowest the counter may go for a retry of this attempt: cap - R,
-- and for a request's first retry half the credit higher
local function floor_for(self, attempt, r, l)
  local f = self.cap - r
  if l > 0 and attempt <= 2 then f = f + floor(l / 2) end
  return f
end

------------------------------------------------------------------------
-- the protocol

-- an attempt number argument: nil, or an integer >= 2 (the attempt the
-- retry will be)
local function attempt_arg(v, method)
  if v == nil then return nil end
  if not (C.is_count(v) and v >= 2) then
    error(("bad argument #2 to '%s' (attempt must be an integer >= 2 "
           .. "and <= 2^53 (got %s))"):format(method, C.repr(v)), 3)
  end
  return v
end

-- bud:withdraw([cost [, attempt]]) -> true (cost tokens taken) or false
-- (the reserve is short: takes nothing); false, err when the dict
-- fails or is corrupt
function Earned:withdraw(cost, attempt)
  check(self, "withdraw")
  cost = C.count_arg(cost, "withdraw", "cost", self.cost_)
  attempt = retry_number(self, attempt_arg(attempt, "withdraw"))
  self.skip, self.after = 0, nil
  if cost == 0 then return true end
  if cost > self.capacity_ then return false end
  local c = milli_cost(self, cost, true)
  local r, l = reserve(self)
  local cap = self.cap
  local fl = floor_for(self, attempt, r, l)
  if c > cap - fl then return false end -- never: no write
  local ok, err = flush(self)           -- this worker's counts, seen
  if not ok then return false, err end
  return take(self.dict, self.dkey, c, cap, cap, fl, self.low)
end

-- the tokens a retry of this attempt can take now (thousandths)
local function available(self, attempt)
  local cap = self.cap
  local v = read(self.dict, self.dkey, cap, cap, self.low)
  local r, l = reserve(self)
  local fl = floor_for(self, attempt, r, l)
  v = v - fl
  if v <= 0 then return 0 end            -- a foreign -0 too
  if v > cap - fl then return cap - fl end
  return v
end

-- bud:allows([cost [, attempt]]) -> would withdraw(cost, attempt)
-- succeed now
function Earned:allows(cost, attempt)
  check(self, "allows")
  cost = C.count_arg(cost, "allows", "cost", self.cost_)
  attempt = retry_number(self, attempt_arg(attempt, "allows"))
  if cost == 0 then return true end
  if cost > self.capacity_ then return false end
  return available(self, attempt) >= milli_cost(self, cost, false)
end

-- A worker whose success share is at least this (about 300 successes
-- in a row) takes a full shared budget's word for SKIP successes: it
-- reads the counter once per SKIP + 1 of them, not at each
local QUIET, SKIP = 0.999, 15

-- the counts of a success: a first attempt counts as a request; the
-- end of a run of failures counts each of them (B), and starts the
-- streak that may confirm a recovery (L)
local function counted_success(self, attempt, i)
  local u = attempt == 1 and self.ureq or 0
  local f = self.fails
  if f > 0 then
    -- the end of a run of failures: counted, and written at once
    -- (shared, the other workers see it now; the good day has none)
    self.fails = 0
    count(self, u + f * self.ufail, i)
    flush(self)
  elseif u > 0 then
    count(self, u, i)
  end
  if self.urec == 0 then return end
  local run = self.run
  if run > 0 then                       -- the streak starts
    if run < STREAK then run = 0 end    -- a blip, not an outage
    self.run, self.ended, self.streak, self.since = 0, run, 1, i
    -- up for UP of the time it was down, two slices at least
    local up = ceil(UP * (self.rl - self.rs))
    self.up = up > 2 and up or 2
  elseif self.ended > 0 then            -- a recovery to confirm: it
    local k = self.streak + 1           -- has lasted long enough
    self.streak = k
    if k >= STREAK and i - self.since >= self.up then
      put(self, i, self.ended * self.urec, true)
      self.ended = 0
    end
  end
end

-- a success earns earn x s (before this outcome), up to capacity
local function earn(self, s)
  local skip = self.skip
  if skip > 0 then                       -- the good day, shared
    self.skip = skip - 1
    return
  end
  local n = floor(self.earn_ * s + 0.5)
  local cap = self.cap
  if n > cap then n = cap end
  if n == 0 then return end
  local v = self.dict:get(self.dkey)     -- full stays full: no write
  if v == nil or v == cap then
    if self.shared and s >= QUIET then self.skip = SKIP end
    return
  end
  add(self.dict, self.dkey, n, cap, cap, self.low)
end

-- bud:record(ok [, attempt [, cost]]): a first attempt counts as a
-- request; a success ends this worker's run of failures (each counts)
-- and earns earn x s; every attempt moves s
function Earned:record(ok, attempt, cost)
  check(self, "record")
  attempt = C.record_args(ok, attempt, cost)
  local s = self.s
  -- the clock read once (a bad one raises here, at the caller's line)
  local i = self.len and slice_now(self)
  if ok then
    self.s, self.after = s + (1 - s) * self.alpha, nil
    if i then
      if self.tshare then
        advance(self, i)
        self.pa = self.pa + 1
      end
      counted_success(self, attempt, i)
    end
    return earn(self, s)
  end
  self.s, self.skip, self.after = s - s * self.alpha, 0, attempt + 1
  if i then
    if self.tshare then
      advance(self, i)
      self.pa, self.pbad = self.pa + 1, true
    end
    local f = self.fails
    if f < self.most then self.fails = f + 1 end
    -- a failure before the recovery was confirmed: it was none
    self.ended = 0
    if attempt == 1 then
      if self.ureq > 0 then count(self, self.ureq, i) end
      local run = self.run
      if run == 0 then self.rs = i end  -- the run's first slice
      self.rl = i                       -- and its last
      if run < RUN_MAX then self.run = run + 1 end
    end
  end
end

-- bud:deposit([n]) -> the tokens after: gives back what withdraw(n)
-- took (n tokens, default cost), never beyond the counter's size; nil,
-- err when the dict fails
function Earned:deposit(n)
  check(self, "deposit")
  n = C.count_arg(n, "deposit", "n", self.cost_)
  local cap = self.cap
  local m = n > self.capacity_ and self.base or milli_cost(self, n, false)
  local r, err = add(self.dict, self.dkey, m, cap, cap, self.low)
  if not r then return nil, err end
  return self:tokens()
end

-- bud:tokens() -> what withdraw can take now for a request already
-- retrying: 0 to reserve() (thousandths; a foreign value: read as full)
function Earned:tokens()
  check(self, "tokens")
  return from_milli(available(self, 3))
end

-- bud:reserve() -> R now: the most that can be spent with no success
-- in between (cost to capacity, plus the credit; thousandths)
function Earned:reserve()
  check(self, "reserve")
  return from_milli((reserve(self)))
end

-- bud:credit() -> L now, the part of R lent for recoveries
function Earned:credit()
  check(self, "credit")
  local _, l = reserve(self)
  return from_milli(l)
end

-- bud:timeout_price() -> what a retry after a timeout takes now (a
-- withdrawal of timeout_cost): cost to timeout_cost, by the share of
-- the recent attempts that timed out
function Earned:timeout_price()
  check(self, "timeout_price")
  return from_milli(milli_cost(self, self.timeout_, false))
end

-- bud:success_share() -> s, this Lua state's moving average (0 to 1)
function Earned:success_share()
  check(self, "success_share")
  return self.s
end

C.getter(Earned, "capacity", "capacity_")
C.getter(Earned, "cost", "cost_")
C.getter(Earned, "throttle_cost", "throttle_")
C.getter(Earned, "timeout_cost", "timeout_")
C.getter(Earned, "memory", "memory_")
C.getter(Earned, "span", "span_")
C.getter(Earned, "dict_key", "dkey")

function Earned:earn()
  check(self, "earn")
  return from_milli(self.earn_)
end

function Earned:per_request()
  check(self, "per_request")
  return from_milli(self.ureq)
end

function Earned:per_failure()
  check(self, "per_failure")
  return from_milli(self.ufail)
end

function Earned:per_recovery()
  check(self, "per_recovery")
  return from_milli(self.urec)
end

function Earned:__tostring()
  check(self, "__tostring")
  local v = available(self, 3)
  local r, l = reserve(self)
  return ("%s: %s%s token%s of a reserve of %s (credit %s; capacity %s, "
    .. "earn %s x success share %.3f)"):format(CTOR,
    self.shared and ("shared " .. C.repr(self.dkey) .. ", ") or "",
    C.milli_text(v), v == 1000 and "" or "s", C.milli_text(r),
    C.milli_text(l),
    C.num(self.capacity_), C.milli_text(self.earn_), self.s)
end

local RULES = {
  capacity = rule.count{ default = 8, max = 2 ^ 30, max_text = "2^30" },
  cost = rule.count{ default = 1 },
  earn = rule.number{ default = 6, min = 0, max = 1000 },
  memory = rule.number{ default = 200, min = 1, max = 2 ^ 20,
                         max_text = "2^20" },
  throttle_cost = rule.count{},
  timeout_cost = rule.count{ default = 6 },
  per_request = rule.number{ default = 0.08, min = 0, max = 1000 },
  per_failure = rule.number{ default = 2, min = 0, max = 1000 },
  per_recovery = rule.number{ default = 5, min = 0, max = 1000 },
  span = rule.count{ default = 10, max = 3600 },
  clock = rule.fn(),
  shared = rule.shared("budget"),
}
local EXTRA = { key = true }
-- a checker per name the options are checked under (this kind's, and
-- backoff.budget.recommended's)
local checkers = {}
local function options(ctor, opts)
  local f = checkers[ctor]
  if f == nil then
    rule.RENAMED[ctor] = { window = "memory" }
    f = rule.options(ctor, RULES, EXTRA)
    checkers[ctor] = f
  end
  return f(opts)
end

-- the reserve's window: its slices beside the counter (shared) or in
-- this Lua state
local function reserve_window(self, o)
  self.win = window.new { who = self.ctor, span = o.span, slices = SLICES,
    clock = self.clock, dict = self.shared and self.dict or nil,
    prefix = self.dkey .. ":", lo = 0, hi = slices.MAX, cache = true }
end

-- earned(opts) -> the budget; opts: capacity (8), cost (1), earn (6),
-- memory (200), throttle_cost (capacity + 1), timeout_cost (6),
-- per_request (0.08), per_failure (2), per_recovery (5), span (10),
-- clock (ngx.now in nginx, else backoff.now), shared, key
local function new(opts, ctor)
  ctor = ctor or CTOR
  local o = options(ctor, opts)
  local base = o.capacity * 1000
  local least = o.cost * 1000
  if least > base then least = base end
  local ufail = floor(o.per_failure * 1000 + 0.5)
  local urec = o.span > 0 and floor(o.per_recovery * 1000 + 0.5) or 0
  local lend = urec > 0 and LEND * 1000 or 0
  local self = {
    ctor = ctor, capacity_ = o.capacity, base = base, cap = base + lend,
    -- the lowest the counter goes: SPAN takes of at most capacity
    low = -C.SPAN * base,
    lend = lend, cost_ = o.cost, earn_ = floor(o.earn * 1000 + 0.5),
    memory_ = o.memory, alpha = 1 / o.memory, s = 1, skip = 0,
    throttle_ = o.throttle_cost or o.capacity + 1,
    timeout_ = o.timeout_cost,
    span_ = o.span, ureq = floor(o.per_request * 1000 + 0.5),
    ufail = ufail, urec = urec, least = least, fails = 0, pu = 0,
    run = 0, ended = 0, streak = 0, rs = 0, rl = 0, up = 2, pa = 0, pt = 0,
    pbad = false,
    t_lo = T_LO, t_hi = T_HI,
    -- a longer run of failures adds nothing more to B (capped)
    most = ufail > 0 and math.ceil(base / ufail) or 1,
  }
  if o.span > 0 then
    self.len = o.span / SLICES
    -- timeouts priced by their share (timeout_cost above cost)
    self.tshare = self.timeout_ > self.cost_
    self.clock = o.clock or util.shared_clock()
  end
  if o.shared or o.key ~= nil then
    self.key, self.dkey = C.shared_key(ctor, o, "e",
      { o.capacity, self.earn_, self.ureq, ufail, o.span, urec })
    self.dict, self.shared = o.shared, true
  else
    self.dict, self.dkey = store.dict(), "tokens"
  end
  if self.len then reserve_window(self, o) end
  return setmetatable(self, Earned)
end

return { new = new, metatable = Earned }

-- backoff.budget.earned: retries earned by successes, in proportion to
-- the share of recent attempts that succeeded, from a reserve sized by
-- the recent traffic -- the rule of backoff.budget.recommended.
-- In-process or shared by the workers of an nginx host.  See
-- doc/budget.md.
--
-- The rule (defaults in brackets):
--   * the reserve: at most R tokens may be spent with no success in
--     between, R = per_request (0.08) x the requests (first attempts)
--     of the last `span` (10) seconds + per_failure (2) x the failures
--     of that span that a later success ended, at least cost (one
--     retry), at most capacity (8);
--   * a retry withdraws cost (1) and is refused, taking nothing, when
--     fewer than cost remain of the reserve;
--   * a success earns earn x s tokens (6 x s), s the success share of
--     the recent attempts: a moving average over about `window` (200)
--     attempts, before this one, starting at 1.
-- So:
--   * a dead upstream earns nothing and ends no run of failures: the
--     retries it gets are the reserve it found, 8% of the requests of
--     the 10 s before it (at least 1, at most 8): amplification at most
--     1.08 over any outage of 10 s or more once a budget sees more
--     than 1.25 requests per second;
--   * while the upstream works (s near 1) each success buys up to 6
--     retries: a budget that is full stays full;
--   * half failing: every success ends a run of failures, so the
--     reserve grows to 8 within a few runs, and a success earns 3: the
--     1 retry per success that 50% needs is always there;
--   * 80% failing: a success earns 1.2: about 1.2 retries per success,
--     1 / (1 - 0.2 x 1.2) = 1.3 attempts per request instead of 4.3.
-- A retry after an answer where the server said it is overloaded (429,
-- 503 with Retry-After) should be withdrawn at throttle_cost(): by
-- default capacity + 1, so it is never made.  span = 0: no window, the
-- reserve is always capacity (the rule before the window).
--
-- Tokens are kept in thousandths, one integer under a key (in this Lua
-- state, or in an ngx.shared dict: the same incr-only algorithm and
-- guarantees as the token bucket, lua/backoff/budget/token.lua; a
-- missing key is full).  The counter runs from 0 to capacity and a
-- withdrawal may not take it below capacity - R: R is a floor that
-- moves, the counter itself never needs rewriting.  The counts of the
-- reserve (per_request per request, cost per ended failure, in
-- thousandths) go to slices of span / 10 seconds: in this Lua state a
-- ring, shared one dict key per slice (incr, init 0, expiring after
-- span + one slice), each worker adding its counts of a slice in one
-- incr when its clock leaves the slice, when it withdraws, or when a
-- success ends a run of failures; it reads the slices before the last
-- once per slice, the last and the current at each reserve.  s and the
-- failures of the current run are per Lua state: shared, each worker
-- measures them on its own attempts.  The good day costs one dict read
-- per success, and a worker whose s is above 0.999 (about 300
-- successes in a row) that found the budget full reads it only every
-- 16th success: a retry another worker took meanwhile is earned back
-- at that read (or by that worker's own successes), and this worker's
-- failure or withdrawal ends the shortcut at once.

local C = require "backoff.budget.common"
local core = require "backoff.core"

local floor, getmetatable, rawget, setmetatable, type =
      math.floor, getmetatable, rawget, setmetatable, type
local add, take, read, from_milli = C.add, C.take, C.read, C.from_milli
local short = C.short

local CTOR = "backoff.budget.earned"
local SLICES = 10                       -- a span is 10 slices

local Earned = { __name = CTOR }
Earned.__index = Earned

local function check(self, method)
  if getmetatable(self) ~= Earned then
    C.self_check(self, Earned, method)
  end
end

------------------------------------------------------------------------
-- the reserve's counts: units (thousandths of a token) per slice

-- a slice count this module can have written: an integer from 0 to
-- 2^50 (anything else is corrupt, and counts 0)
local LIMIT = 2 ^ 50
local function ok_count(v)
  return type(v) == "number" and v == floor(v) and v >= 0 and v <= LIMIT
end

-- the slice of now, never before the last one used (a clock that goes
-- back counts as no time passed; a bad clock raises at the caller of
-- the method, 3 levels up from here)
local function slice_now(self)
  local i = C.slice_of(self.ctor, self.clock, self.len, self.pi, 5)
  return i
end

-- add u units to slice i: true, or nil, err (dict error, corrupt value)
local function put(self, i, u)
  if self.shared then
    local dict, k = self.dict, self.dkey .. ":" .. short(i)
    local r, err = dict:incr(k, u, 0, self.ttl)
    if not r then return nil, err end
    if not ok_count(r) then return nil, C.corrupt(dict, k, r) end
  else
    local j = i % SLICES
    local ring = self.ring
    if ring.tag[j] ~= i then ring.tag[j], ring[j] = i, 0 end
    ring[j] = ring[j] + u
  end
  return true
end

-- the units of slice i (missing, expired or corrupt: 0)
local function get(self, i)
  if self.shared then
    local v = self.dict:get(self.dkey .. ":" .. short(i))
    if v == nil or not ok_count(v) then return 0 end
    return v
  end
  local j = i % SLICES
  local ring = self.ring
  if ring.tag[j] == i then return ring[j] end
  return 0
end

-- give the pending units to their slice: true, or nil, err (the units
-- are dropped: fewer counts, a smaller reserve)
local function flush(self)
  local u = self.pu
  if u == 0 then return true end
  self.pu = 0
  return put(self, self.pi, u)
end

-- move to slice i (flushing the units pending for the one before,
-- unless it has left the span)
local function advance(self, i)
  local last = self.pi
  if i ~= last then
    if last and i - last < SLICES then flush(self) end
    self.pi, self.pu = i, 0
  end
end

-- count u units now
local function count(self, u)
  advance(self, slice_now(self))
  self.pu = self.pu + u
end

-- R now, in thousandths: the units of the span (this worker's pending
-- ones included), at least cost, at most capacity
local function reserve(self)
  local cap = self.cap
  if self.len == nil then return cap end
  local i = slice_now(self)
  advance(self, i)
  if self.ci ~= i then                  -- the slices before the last
    local s = 0
    for j = i - SLICES + 1, i - 2 do s = s + get(self, j) end
    self.ci, self.cs = i, s
  end
  -- the last slice read afresh: other workers write theirs when they
  -- move on
  local r = self.cs + get(self, i - 1) + get(self, i) + self.pu
  if r < self.least then return self.least end
  if r > cap then return cap end
  return r
end

------------------------------------------------------------------------
-- the protocol

-- bud:withdraw([cost]) -> true (cost tokens taken) or false (the
-- reserve is short: takes nothing); false, err when the dict fails or
-- is corrupt
function Earned:withdraw(cost)
  check(self, "withdraw")
  cost = C.count_arg(cost, "withdraw", "cost", self.cost_)
  self.skip = 0
  if cost == 0 then return true end
  if cost > self.capacity_ then return false end
  local c = cost * 1000
  local r = reserve(self)
  if c > r then return false end        -- never: no write
  local ok, err = flush(self)           -- this worker's counts, seen
  if not ok then return false, err end
  local cap = self.cap
  return take(self.dict, self.dkey, c, cap, cap, cap - r)
end

-- the tokens withdraw can take now (thousandths), or nil when corrupt
local function available(self)
  local cap = self.cap
  local v = read(self.dict, self.dkey, cap, cap)
  if v == nil then return nil end
  local r = reserve(self)
  v = v - (cap - r)
  if v <= 0 then return 0 end            -- a foreign -0 too
  if v > r then return r end
  return v
end

-- bud:allows([cost]) -> would withdraw(cost) succeed now
function Earned:allows(cost)
  check(self, "allows")
  cost = C.count_arg(cost, "allows", "cost", self.cost_)
  if cost == 0 then return true end
  if cost > self.capacity_ then return false end
  local v = available(self)
  return v ~= nil and v >= cost * 1000
end

-- A worker whose success share is at least this (about 300 successes
-- in a row) takes a full shared budget's word for SKIP successes: it
-- reads the counter once per SKIP + 1 of them, not at each
local QUIET, SKIP = 0.999, 15

-- bud:record(ok [, attempt [, cost]]): a first attempt counts as a
-- request; a success ends this worker's run of failures (each counts)
-- and earns earn x s; every attempt moves s
function Earned:record(ok, attempt, cost)
  check(self, "record")
  attempt = C.record_args(ok, attempt, cost)
  local s = self.s
  if ok then
    self.s = s + (1 - s) * self.alpha
    if self.len then
      local u = attempt == 1 and self.ureq or 0
      local f = self.fails
      if f > 0 then
        -- the end of a run of failures: counted, and written at once
        -- (shared, the other workers see it now; the good day has none)
        self.fails = 0
        count(self, u + f * self.ufail)
        flush(self)
      elseif u > 0 then
        count(self, u)
      end
    end
    local skip = self.skip
    if skip > 0 then                     -- the good day, shared
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
    add(self.dict, self.dkey, n, cap, cap)
  else
    self.s, self.skip = s - s * self.alpha, 0
    if self.len then
      local f = self.fails
      if f < self.most then self.fails = f + 1 end
      if attempt == 1 and self.ureq > 0 then count(self, self.ureq) end
    end
  end
end

-- bud:deposit([n]) -> the tokens after: gives back what withdraw(n)
-- took (n tokens, default cost), never beyond capacity; nil, err when
-- the dict fails
function Earned:deposit(n)
  check(self, "deposit")
  n = C.count_arg(n, "deposit", "n", self.cost_)
  local cap = self.cap
  local m = n > self.capacity_ and cap or n * 1000
  local r, err = add(self.dict, self.dkey, m, cap, cap)
  if not r then return nil, err end
  return self:tokens()
end

-- bud:tokens() -> what withdraw can take now: 0 to reserve()
-- (thousandths; corrupt: 0)
function Earned:tokens()
  check(self, "tokens")
  local v = available(self)
  if v == nil then return 0 end
  return from_milli(v)
end

-- bud:reserve() -> R now: the most that can be spent with no success
-- in between (cost to capacity, thousandths)
function Earned:reserve()
  check(self, "reserve")
  return from_milli(reserve(self))
end

-- bud:success_share() -> s, this Lua state's moving average (0 to 1)
function Earned:success_share()
  check(self, "success_share")
  return self.s
end

C.getter(Earned, "capacity", "capacity_")
C.getter(Earned, "cost", "cost_")
C.getter(Earned, "throttle_cost", "throttle_")
C.getter(Earned, "window", "window_")
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

function Earned:__tostring()
  check(self, "__tostring")
  local v = available(self) or 0
  return ("%s: %s%s tokens of a reserve of %s (capacity %s, earn %s x "
    .. "success share %.3f)"):format(CTOR,
    self.shared and ("shared " .. C.repr(self.dkey) .. ", ") or "",
    C.milli_text(v), C.milli_text(reserve(self)), C.num(self.capacity_),
    C.milli_text(self.earn_), self.s)
end

local RULES = {
  capacity = C.count_rule(8, 2 ^ 30, "2^30"),
  cost = C.count_rule(1),
  earn = C.number_rule(6, 0, 1000, false, "a number >= 0 and <= 1000"),
  window = C.number_rule(200, 1, 2 ^ 20, false,
    "a number >= 1 and <= 2^20"),
  throttle_cost = C.count_rule(nil),
  per_request = C.number_rule(0.08, 0, 1000, false,
    "a number >= 0 and <= 1000"),
  per_failure = C.number_rule(2, 0, 1000, false,
    "a number >= 0 and <= 1000"),
  span = C.count_rule(10, 3600),
  clock = C.function_rule(nil),
}
local EXTRA = { shared = true, key = true }

-- the default clock: ngx.now inside nginx (every worker reads the same
-- one), backoff.now outside
local function default_clock()
  local ngx = rawget(_G, "ngx")
  if type(ngx) == "table" and type(ngx.now) == "function" then
    return ngx.now
  end
  return core.now
end

-- earned(opts) -> the budget; opts: capacity (8), cost (1), earn (6),
-- window (200), throttle_cost (capacity + 1), per_request (0.08), span
-- (10), clock (ngx.now in nginx, else backoff.now), shared, key
local function new(opts, level, ctor)
  level = level or 2          -- the caller's frame, from here
  ctor = ctor or CTOR
  local o = C.options(ctor, opts, RULES, EXTRA, level + 1)
  local cap = o.capacity * 1000
  local least = o.cost * 1000
  if least > cap then least = cap end
  local ufail = floor(o.per_failure * 1000 + 0.5)
  local self = {
    ctor = ctor, capacity_ = o.capacity, cap = cap, cost_ = o.cost,
    earn_ = floor(o.earn * 1000 + 0.5), window_ = o.window,
    alpha = 1 / o.window, s = 1, skip = 0,
    throttle_ = o.throttle_cost or o.capacity + 1,
    span_ = o.span, ureq = floor(o.per_request * 1000 + 0.5),
    ufail = ufail, least = least, fails = 0, pu = 0, cs = 0,
    -- a longer run of failures adds nothing more to R (capped)
    most = ufail > 0 and math.ceil(cap / ufail) or 1,
  }
  if o.span > 0 then
    self.len = o.span / SLICES
    self.ttl = o.span + self.len
    self.clock = o.clock or default_clock()
  end
  if o.shared ~= nil or o.key ~= nil then
    self.key, self.dkey = C.shared_key(ctor, o, "e",
      { o.capacity, self.earn_, self.ureq, ufail, o.span }, level + 1)
    self.dict, self.shared = o.shared, true
  else
    self.dict, self.dkey = C.mini_dict(), "tokens"
    self.ring = { tag = {} }
  end
  return setmetatable(self, Earned)
end

return { new = new, metatable = Earned }

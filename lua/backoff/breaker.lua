-- backoff.breaker: a circuit breaker whose open interval is a backoff
-- policy, shared by the workers of an nginx host (a lua_shared_dict,
-- atomic calls, no lock) or kept by one process.  doc/breaker.md is the
-- reference; the races are drawn there and in backoff.breaker.state.
--
--   local breaker = require "backoff.breaker"
--   local br = breaker.recommended{ shared = ngx.shared.breakers,
--                                   key = "users_api" }
--   backoff.retry(policy, fn, { breaker = br })   -- or by hand:
--   local ok, ticket = br:allow()
--   if ok then br:record(call_upstream(), ticket, seconds) end
--
-- States: closed (attempts go ahead, outcomes counted), open (refused
-- until the open interval has passed), half-open (`probes` attempts
-- admitted across the host; `probes` successes close it, one failure
-- reopens it with the next, longer interval).  The layers below:
-- backoff.breaker.state (the transitions), backoff.breaker.stats (the
-- closed state's rules), backoff.breaker.store (the dict, the record).

local check = require "backoff.check"
local util = require "backoff.util"
local core = require "backoff.core"
local bmetrics = require "backoff.breaker.metrics"
local store = require "backoff.breaker.store"
local now_of = require("backoff.store").now
local stats = require "backoff.breaker.stats"
local overload = require "backoff.breaker.overload"
local state = require "backoff.breaker.state"

local error, getmetatable, ipairs, pcall, rawget, setmetatable,
      tostring, type = error, getmetatable, ipairs, pcall, rawget,
      setmetatable, tostring, type
local floor, huge = math.floor, math.huge
local repr, raise = util.repr, check.raise
local CLOSED, OPEN = store.CLOSED, store.OPEN

local WHO = "backoff.breaker"

------------------------------------------------------------------------
-- options

-- The recommended rules (doc/breaker.md, "The recommended setting"),
-- which are also the rules of a breaker given none: it opens when 90%
-- of at least 20 calls in the last 10 s failed, or after 50 failures in
-- a row (30 opened it at 80% failing, 0.8^30 = 1.2e-3 per attempt,
-- where it cost more than it saved; 0.8^50 = 1.4e-5); the open
-- interval is the policy's first delay after a probe that failed fast,
-- its next after a hung one: exponential from 1 s, doubling to 60 s,
-- +-20% jitter.
local REC = { failure_ratio = 0.9, min_calls = 20, failures = 50 }
local DEFAULT_POLICY = core.exponential { initial_delay = 1,
  max_delay = 60, jitter = "proportional", jitter_factor = 0.2 }

-- the longest window, probe timeout and half-open wait, in seconds: a
-- value of hours is plainly milliseconds (window = 10000)
local MAX_WINDOW, MAX_PROBE = 3600, 600

local RULES = {
  shared = check.shared("breaker"),
  key = check.string { text = "a non-empty string (it names this "
    .. "breaker's state in the dict: one key per upstream)" },
  policy = check.custom("a backoff object (its failure delays are the "
    .. "open intervals)", util.is_backoff),
  failures = check.count { min = 1, max = 2 ^ 31, max_text = "2^31" },
  failure_ratio = check.number { min = 0, max = 1, open_min = true },
  slow_call_duration = check.number { min = 0, open_min = true },
  slow_call_ratio = check.number { min = 0, max = 1, open_min = true },
  window = check.number { min = 0, max = MAX_WINDOW, open_min = true,
    default = 10, text = "a number of seconds > 0 and <= 3600 (an hour; "
      .. "milliseconds are not seconds)" },
  buckets = check.count { min = 1, max = 100, default = 10 },
  min_calls = check.count { min = 1, max = 2 ^ 31, max_text = "2^31",
                            default = REC.min_calls },
  probes = check.count { min = 1, max = 100, default = 1 },
  probe_timeout = check.number { min = 0, max = MAX_PROBE,
    open_min = true, default = 10, text = "a number of seconds > 0 and "
      .. "<= 600 (milliseconds are not seconds)" },
  half_open_timeout = check.number { min = 0, max = MAX_PROBE,
    open_min = true, text = "a number of seconds > 0 and <= 600 "
      .. "(milliseconds are not seconds)" },
  hung_after = check.number { min = 0, max = MAX_PROBE, open_min = true,
    default = 1, text = "a number of seconds > 0 and <= 600 "
      .. "(milliseconds are not seconds)" },
  -- the graded refusal (backoff.breaker.overload): off unless given
  overload_latency = check.custom("a number of seconds > 0 and <= 600, "
    .. "or false (no graded refusal)", function(v)
      return v == false or check.finite(v) and v > 0 and v <= MAX_PROBE
    end),
  -- a run the breaker refuses waits its policy's delays and asks again
  -- for up to `hold` seconds (lua/backoff/engine/hold.lua)
  hold = check.number { min = 0, max = 60, default = 0, text = "a number "
    .. "of seconds >= 0 and <= 60 (milliseconds are not seconds)" },
  mode = check.one_of({ "enforce", "observe" }, { default = "enforce",
    text = '"enforce" (refuses while open) or "observe" (records and '
      .. 'reports, never refuses)' }),
  seed = check.custom("an integer (within +-2^63): the open intervals' "
    .. "jitter", function(v)
      return type(v) == "number" and v == floor(v) and v > -2 ^ 63
             and v < 2 ^ 63 end),
  random = check.fn { text = "a function returning a number in [0, 1] "
    .. "(the open intervals' jitter)" },
  clock = check.fn {},
  on_change = check.fn {},
  metrics = check.custom("a backoff.metrics recorder (metrics.new)",
    bmetrics.is_recorder),
}
local options = check.options(WHO, RULES)

-- what `shared` must also have, beyond check.shared's incr and get
local DICT_METHODS = { "add", "set", "delete" }

local function clock_of(o)
  return o.clock or util.shared_clock()
end

-- the rules between options, checked before anything is built
local function check_rules(o)
  if o.slow_call_ratio and not o.slow_call_duration then
    raise(WHO .. ": option 'slow_call_ratio' needs slow_call_duration "
          .. "(the seconds from which a call is slow)")
  end
  if o.shared and o.key == nil then
    check.fail(WHO, "key", RULES.key.text, nil)
  end
  if o.shared then
    for _, m in ipairs(DICT_METHODS) do
      if not util.has_method(o.shared, m) then
        check.fail(WHO, "shared", RULES.shared.text, o.shared)
      end
    end
  end
end

------------------------------------------------------------------------
-- the object

local Breaker = { __name = WHO }
Breaker.__index = Breaker
local Ticket = { __name = "backoff.breaker ticket" }

local function bad_self(method, self) check.bad_self(method, WHO, self) end

-- arguments are checked like a C function's (luaL_argerror's wording)
local function bad_arg(n, method, msg)
  raise(("bad argument #%d to '%s' (%s)"):format(n, method, msg))
end

-- br:_now() -> the breaker's time (its clock, checked; internal)
function Breaker:_now()
  return now_of(WHO, self.clock)
end

local read, closed_epoch, epoch_after, changed, refused, trip,
      probe_outcome, slot_taken = state.read, state.closed_epoch,
      state.epoch_after, state.changed, state.refused, state.trip,
      state.probe_outcome, state.slot_taken
local stalled, end_stalled, FORCED = state.stalled, state.end_stalled,
      state.FORCED

------------------------------------------------------------------------
-- the four methods the retry engine calls

--- br:allows() -> boolean: would an attempt be allowed now?  Takes
-- nothing.  Closed: one dict get.
function Breaker:allows()
  if getmetatable(self) ~= Breaker then bad_self("allows", self) end
  if self.observe then return true end
  local kind, rec = read(self)
  if kind == CLOSED then return true end
  self.g_shed = false
  if kind == FORCED then return rec == CLOSED end
  local now = self:_now()
  if now < rec.until_ or stalled(self, rec, now) then return false end
  local base = self.pre .. "p" .. rec.etext .. "."
  for i = 1, self.probes do
    if not slot_taken(self, base .. i) then return true end
  end
  return false
end

local seq, process_id = 0, tostring({}):match("0x(%x+)") or "0"

-- a token no other probe holds: this worker's pid (or this process's
-- address) and a sequence number
local function token()
  seq = seq + 1
  local ngx = rawget(_G, "ngx")
  local w = type(ngx) == "table" and ngx.worker
  local pid = w and w.pid and w.pid() or process_id
  return pid .. ":" .. seq
end

-- take a free probe slot of half-open epoch rec: add, which never
-- blocks; the first probe of the epoch announces half-open
local function take_probe(self, rec, now)
  local dict, base = self.dict, self.pre .. "p" .. rec.etext .. "."
  for i = 1, self.probes do
    local slot, tok = base .. i, token()
    if dict:add(slot, tok, self.probe_timeout)
       or not slot_taken(self, slot)
          and dict:add(slot, tok, self.probe_timeout) then
      local ticket = setmetatable({ epoch = rec.epoch, slot = slot,
                                    token = tok }, Ticket)
      if dict:add(self.pre .. "h" .. rec.etext, now, stats.KEEP) then
        local ok, err = pcall(changed, self, OPEN, "half_open",
          { opening = rec.k, interval = rec.d, at = now })
        if not ok then            -- the hook raised: no probe was made
          dict:delete(slot)
          error(err, 0)
        end
      end
      return true, ticket
    end
  end
  return refused(self)
end

--- br:allow() -> true [, ticket] | false: an attempt is about to
-- start.  Closed: true (no ticket).  Open: false.  Half-open: true and
-- a ticket while one of the `probes` slots is free, else false.
function Breaker:allow()
  if getmetatable(self) ~= Breaker then bad_self("allow", self) end
  local kind, rec = read(self)
  -- closed: the epoch it saw (a number; nil: none written yet) is the
  -- ticket, so that record() counts there without reading the state
  -- again (one dict get less on the happy path)
  if kind == CLOSED then
    if self.g_on and overload.refuse(self) then    -- graded: not held
      self.g_shed = true
      return refused(self)
    end
    return true, rec
  end
  self.g_shed = false
  if kind == FORCED then
    if rec == CLOSED then return true end
    return refused(self)
  end
  local now = self:_now()
  self.g_open_at = now        -- the graded refusal's grace starts again
  if now < rec.until_ then return refused(self) end
  if stalled(self, rec, now) then      -- no word from its probes
    end_stalled(self, rec)
    return refused(self)
  end
  return take_probe(self, rec, now)
end

local function check_ticket(ticket, n, method)
  if ticket ~= nil and getmetatable(ticket) ~= Ticket
     and not store.is_epoch(ticket) then
    bad_arg(n, method, "a ticket from allow() or nil expected, got "
            .. repr(ticket))
  end
end

-- an outcome without a (current) ticket: counted in the closed epoch;
-- ignored while open or half-open (an attempt allowed before it opened)
local function closed_outcome(self, ok, slow)
  local e = closed_epoch(self)
  if e == nil then return end
  local why = stats.outcome(self, e, ok, slow)
  if why then trip(self, e, why) end
end

--- br:record(ok, ticket, seconds): the outcome of an allowed attempt.
-- ok: the caller's verdict; ticket: allow()'s; seconds: how long it
-- took (nil: unknown), for the slow-call rule.
local function record_args(ok, ticket, seconds)
  if type(ok) ~= "boolean" then
    bad_arg(1, "record", "boolean expected for 'ok', got " .. repr(ok))
  end
  check_ticket(ticket, 2, "record")
  if seconds ~= nil and not (type(seconds) == "number" and seconds >= 0
                             and seconds < huge) then
    bad_arg(3, "record", "a finite number >= 0 or nil expected for "
            .. "'seconds', got " .. repr(seconds))
  end
end

-- an outcome while open or half-open: a probe of this epoch decides;
-- any other is an attempt allowed before (no ticket, or a stale one):
-- ignored.  A failed probe is hung when it took hung_after seconds or
-- more, or did not say (seconds nil)
local function open_outcome(self, rec, ok, ticket, seconds, slow)
  if ticket ~= nil and ticket.epoch == rec.epoch
     and not probe_outcome(self, rec, ok and not slow,
                           seconds == nil or seconds >= self.hung_after)
  then
    return closed_outcome(self, ok, slow)     -- lost the decision
  end
end

function Breaker:record(ok, ticket, seconds)
  if getmetatable(self) ~= Breaker then bad_self("record", self) end
  record_args(ok, ticket, seconds)
  local slow = seconds ~= nil and self.slow_dur ~= nil
               and seconds >= self.slow_dur
  if self.ol then overload.record(self, ok, seconds) end
  if type(ticket) == "number" then             -- the happy path: closed
    local why = stats.outcome(self, ticket, ok, slow)  -- at allow()
    if why then trip(self, ticket, why) end    -- (trip checks it still is)
    return
  end
  local kind, rec = read(self)
  if kind == CLOSED then
    if rec ~= nil and ticket == nil then       -- the happy path
      local why = stats.outcome(self, rec, ok, slow)
      if why then trip(self, rec, why) end
      return
    end
    return closed_outcome(self, ok, slow)
  end
  if kind == FORCED then return end           -- forced: nothing counted
  return open_outcome(self, rec, ok, ticket, seconds, slow)
end

--- br:release(ticket): an allowed attempt that was not made (or was
-- cancelled): its probe slot, if any, is given back; nothing recorded
function Breaker:release(ticket)
  if getmetatable(self) ~= Breaker then bad_self("release", self) end
  check_ticket(ticket, 1, "release")
  if ticket == nil or type(ticket) == "number" then return end
  local dict = self.dict
  -- only our own token: the slot may have expired and been taken by
  -- another probe since
  if dict:get(ticket.slot) == ticket.token then dict:delete(ticket.slot) end
end

------------------------------------------------------------------------
-- for users

--- br:state() -> "closed" | "open" | "half_open", info: info.opening
-- (the openings in a row), info.interval, info.left (seconds until
-- half-open), info.calls / failures / slow (the window's counts, closed)
function Breaker:state()
  if getmetatable(self) ~= Breaker then bad_self("state", self) end
  local kind, rec = read(self)
  local now = self:_now()
  if kind == FORCED then
    return rec, { opening = 0, forced = rec, mode = self.mode }
  end
  if kind == CLOSED then
    local info = { opening = 0, mode = self.mode,
                   refusing = self.ol and overload.share(self) or 0 }
    if self.len then
      info.calls, info.failures, info.slow = stats.window(self, rec, now)
    end
    return CLOSED, info
  end
  local info = { opening = rec.k, interval = rec.d, since = rec.t,
                 mode = self.mode }
  if now < rec.until_ then
    info.left = rec.until_ - now
    return OPEN, info
  end
  return "half_open", info
end

--- br:reset(): closed now, the escalation and the counts started
-- afresh (an operator's action: it overrides whatever was decided)
function Breaker:reset()
  if getmetatable(self) ~= Breaker then bad_self("reset", self) end
  local kind, rec = read(self)
  local from = kind == CLOSED and CLOSED or self:state()
  local now = self:_now()
  self.dict:set(self.sk, epoch_after(self, kind == OPEN and rec.epoch
                                     or kind == CLOSED and rec or nil, now))
  if from ~= CLOSED then changed(self, from, CLOSED, { at = now }) end
end

--- br:force(to): "open" (every attempt refused), "closed" (every
-- attempt allowed, nothing counted) or nil (automatic again: closed,
-- the counts afresh); in the dict, so every worker of the host sees it
local FORCE_TO = { open = OPEN, closed = CLOSED }
function Breaker:force(to)
  if getmetatable(self) ~= Breaker then bad_self("force", self) end
  if to ~= nil and FORCE_TO[to] == nil then
    bad_arg(1, "force", '"open", "closed" or nil expected, got '
            .. repr(to))
  end
  local kind = read(self)
  if to == nil and kind ~= FORCED then return end  -- automatic already
  local ok, err = state.force(self, to, (self:state()), self:_now())
  if not ok then
    raise(WHO .. ": force: cannot write the state: " .. tostring(err))
  end
end

--- br:hold() -> the seconds a run it refuses is held (the engine waits
-- the policy's delays and asks again; 0: the run ends at once)
function Breaker:hold()
  if getmetatable(self) ~= Breaker then bad_self("hold", self) end
  if self.g_shed then return 0 end   -- a graded refusal: not held
  return self.hold_
end

--- br:key() -> the breaker's name
function Breaker:key()
  if getmetatable(self) ~= Breaker then bad_self("key", self) end
  return self.name
end

function Breaker:__tostring()
  return ("%s: %s (%s)"):format(WHO, repr(self.name),
    self.shared and "shared dict" or "this process")
end

------------------------------------------------------------------------
-- constructors

local M = {}

-- the open intervals' policy: o.policy or the default, reseeded (or
-- given a `random`) when o says so; cloned, never changed
local function draws_of(o)
  local p = o.policy or DEFAULT_POLICY
  if o.seed ~= nil or o.random ~= nil then
    local cfg = p:config()
    cfg.seed, cfg.random = o.seed, o.random
    p = core.new(cfg.strategy, cfg)
  end
  return p:clone(0)
end

-- opts checked, rules between them, defaults: the object
local function new(opts)
  local o = options(opts)
  check_rules(o)
  if not (o.failures or o.failure_ratio or o.slow_call_duration) then
    o.failures, o.failure_ratio = REC.failures, REC.failure_ratio
  end
  local key = o.key or "backoff:breaker"
  local self = setmetatable({
    name = key, pre = key .. "|", sk = key .. "|s", nk = key .. "|n",
    shared = o.shared or nil,
    failures = o.failures, ratio = o.failure_ratio,
    slow_dur = o.slow_call_duration,
    slow_ratio = o.slow_call_duration and (o.slow_call_ratio or 1),
    window = o.window, buckets = o.buckets, min_calls = o.min_calls,
    probes = o.probes, probe_timeout = o.probe_timeout,
    half_open_timeout = o.half_open_timeout or o.probe_timeout,
    hung_after = o.hung_after, mode = o.mode, hold_ = o.hold,
    ol = o.overload_latency or nil, gk = key .. "|g", g_acc = 0,
    observe = o.mode == "observe",
    draws = draws_of(o),
    clock = clock_of(o), on_change = o.on_change, metrics = o.metrics,
  }, Breaker)
  if self.ratio or self.slow_ratio then
    self.len = self.window / self.buckets
  end
  -- a half-open epoch's outcomes matter while its probes can report
  self.c_ttl = 2 * math.max(self.probe_timeout, self.half_open_timeout)
  self.dict = o.shared or store.mini(function() return self:_now() end)
  if self.metrics then bmetrics.watch(self.metrics, self) end
  return self
end

--- breaker.new(opts) -> a breaker (also breaker(opts))
function M.new(opts) return new(opts) end

--- breaker.recommended(opts) -> the recommended breaker: opts takes
-- shared, key, clock, on_change, metrics, mode, hold (default 4 s),
-- overload_latency (default 0.5 s; false: no graded refusal), and
-- the open intervals' policy, seed and random (tune breaker.new instead)
local REC_OPTS = { "shared", "key", "clock", "on_change", "metrics",
                   "mode", "hold", "policy", "seed", "random",
                   "overload_latency" }
local REC_HOLD, REC_OVERLOAD = 4, 0.5
function M.recommended(opts)
  if opts ~= nil and type(opts) ~= "table" then
    raise(WHO .. ".recommended: options must be a table (got "
          .. type(opts) .. ")")
  end
  check.only(WHO .. ".recommended", opts, REC_OPTS, "backoff.breaker.new")
  local o = { hold = REC_HOLD, overload_latency = REC_OVERLOAD }
  for k, v in pairs(opts or {}) do o[k] = v end
  return new(o)
end

--- breaker.default_policy() -> a copy of the default open-interval policy
function M.default_policy() return DEFAULT_POLICY:clone() end

return setmetatable(M, { __call = function(_, opts) return new(opts) end })

-- backoff.fleet.guard: a host's breaker under the fleet's word
-- (internal; made by fleet:breaker(br)).  The same methods as a
-- breaker (allow, allows, record, release, state, key, hold), so it goes
-- wherever one goes (ropts.breaker): while the fleet is open and this
-- host is not its prober, allow() and allows() say false without
-- asking the breaker; otherwise the host's own breaker decides, as it
-- would alone (a prober whose own breaker is closed lets one attempt
-- through every probe_every seconds).  The host's own breaker is never
-- written by the fleet: its state is its own evidence, which is what
-- the host votes with, with the host's failures in a row (counted here,
-- across its workers: a suspect vote), a mark of its last failure (a
-- vote needs one within suspect_window), a mark of its demand (a
-- request refused while the fleet has a word, for one interval: only
-- then it campaigns for prober) and the outcome of its probes for the
-- fleet (kept for the next sync).

local view = require "backoff.fleet.view"
local store = require "backoff.store"

local setmetatable = setmetatable

local G = {}

local Guard = { __name = "backoff.fleet breaker" }
Guard.__index = Guard

local function word(self)
  local fl = self.fleet
  local w = view.read(fl.dict, self.fk, fl.now, fl.hold)
  -- this worker saw that its host probes: record() then looks again
  self.probing = w == "probe"
  return w
end

-- a request this host could not send while the fleet has a word: its
-- demand for one interval, which lets it campaign for prober
local function demand(self)
  local fl = self.fleet
  fl.dict:set(self.dk, 1, fl.interval)
  return false
end

-- the fleet refused (g.refusals counts these only)
local function refused(self)
  self.refusals = self.refusals + 1
  return demand(self)
end

--- g:allow() -> as br:allow(); false while the fleet is open, unless
-- this host probes for it: then its own breaker's half-open probes go,
-- or, its own breaker closed, one attempt every probe_every seconds
function Guard:allow()
  local w = word(self)
  if w == "open" then return refused(self) end
  local ok, ticket = self.br:allow()
  if not ok and w then return demand(self) end
  if not ok or w ~= "probe" or type(ticket) == "table" then
    return ok, ticket
  end
  if self.fleet.dict:add(self.qk, 1, self.fleet.probe_every) then
    return ok, ticket
  end
  self.br:release(ticket)
  return refused(self)
end

--- g:allows() -> as br:allows(); false while the fleet is open
function Guard:allows()
  if word(self) == "open" then return false end
  return self.br:allows()
end

-- the host's failures in a row (all workers; they expire
-- suspect_window after the first): a suspect vote at `suspect`; and
-- its last failure, fresh for suspect_window: without one, the host's
-- own open breaker is no vote (a host without traffic has no evidence)
local function streak(self, ok)
  local fl = self.fleet
  if ok then
    if fl.dict:get(self.nk) ~= nil then fl.dict:delete(self.nk) end
    return
  end
  fl.dict:set(self.ek, 1, fl.suspect_window)
  if fl.suspect > 0 then
    store.incr(fl.dict, self.nk, 1, 0, fl.suspect_window)
  end
end

--- g:record(ok, ticket, seconds): as br:record; and, on the prober,
-- the fleet's probe's outcome for the next sync
function Guard:record(ok, ticket, seconds)
  local r = self.br:record(ok, ticket, seconds)
  streak(self, ok)
  if self.probing and word(self) == "probe" then
    self.fleet.dict:set(self.rk, ok and 1 or 2, self.fleet.hold)
    if ok then self.fleet:soon() end     -- the fleet closes at once
  end
  return r
end

function Guard:release(ticket) return self.br:release(ticket) end

--- g:state() -> br:state(), and info.fleet: "open", "probe" or nil
function Guard:state()
  local name, info = self.br:state()
  info.fleet = word(self)
  return name, info
end

function Guard:key() return self.br:key() end

--- g:hold() -> br:hold(), 0 when br has none: the engine holds a run
-- the guard refuses as it would one the breaker refuses
function Guard:hold()
  local f = self.br.hold
  if type(f) ~= "function" then return 0 end
  return f(self.br)
end

--- g:breaker() -> the host's own breaker
function Guard:breaker() return self.br end

function Guard:__tostring()
  return "backoff.fleet: " .. tostring(self.br)
end

--- guard.new(fleet, br) -> br guarded by fleet's view
function G.new(fleet, br)
  local name = br:key()
  local k = fleet.key
  return setmetatable({ fleet = fleet, br = br, name = name,
    probing = false,
    fk = view.key(k, name), qk = k .. "|Q" .. name,
    rk = k .. "|R" .. name, nk = k .. "|N" .. name,
    ek = k .. "|E" .. name, dk = k .. "|D" .. name, refusals = 0 }, Guard)
end

return G

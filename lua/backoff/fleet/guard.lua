-- backoff.fleet.guard: a host's breaker under the fleet's word
-- (internal; made by fleet:breaker(br)).  The same methods as a
-- breaker (allow, allows, record, release, state, key), so it goes
-- wherever one goes (ropts.breaker): while the fleet is open and this
-- host is not its prober, allow() and allows() say false without
-- asking the breaker; otherwise the host's own breaker decides, as it
-- would alone.  The host's own breaker is never written by the fleet:
-- its state is its own evidence, which is what the host votes with.

local view = require "backoff.fleet.view"
local store = require "backoff.store"

local setmetatable = setmetatable

local G = {}

local Guard = { __name = "backoff.fleet breaker" }
Guard.__index = Guard

local function refuses(self)
  local fl = self.fleet
  return view.refuses(fl.dict, self.fk, store.now("backoff.fleet",
                      fl.clock), fl.hold)
end

--- g:allow() -> as br:allow(); false while the fleet is open (unless
-- this host probes for it)
function Guard:allow()
  if refuses(self) then
    self.refusals = self.refusals + 1
    return false
  end
  return self.br:allow()
end

--- g:allows() -> as br:allows(); false while the fleet is open
function Guard:allows()
  if refuses(self) then return false end
  return self.br:allows()
end

function Guard:record(ok, ticket, seconds)
  return self.br:record(ok, ticket, seconds)
end

function Guard:release(ticket) return self.br:release(ticket) end

--- g:state() -> br:state(), and info.fleet: "open", "probe" or nil
function Guard:state()
  local name, info = self.br:state()
  local fl = self.fleet
  info.fleet = view.read(fl.dict, self.fk, store.now("backoff.fleet",
                         fl.clock), fl.hold)
  return name, info
end

function Guard:key() return self.br:key() end

--- g:breaker() -> the host's own breaker
function Guard:breaker() return self.br end

function Guard:__tostring()
  return "backoff.fleet: " .. tostring(self.br)
end

--- guard.new(fleet, br) -> br guarded by fleet's view
function G.new(fleet, br)
  local name = br:key()
  return setmetatable({ fleet = fleet, br = br, name = name,
    fk = view.key(fleet.key, name), refusals = 0 }, Guard)
end

return G

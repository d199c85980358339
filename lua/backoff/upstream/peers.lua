-- backoff.upstream.peers: the peers of a declared upstream, each with
-- its own breaker, and the per-request pick (internal: backoff.upstream's;
-- doc/upstream.md, "Peers").
--
--   local set = peers.new(up)        once per upstream
--   local pick = set:pick()          per request (or per call)
--   pick:allow() -> true, ticket     a try may start: pick.peer is its
--                                     peer (a breaker of the engine's
--                                     kind: allow, allows, record, release)
--
-- Envoy's outlier detection and previous-hosts predicate: each try goes
-- to the next peer in turn that this request has not tried and whose
-- breaker allows it.  Once every peer was tried, a peer tried already
-- may take another try.  The bound max_ejected: when more than
-- floor(max_ejected x peers) breakers are open, the least recently
-- opened of them are treated as allowed (their breaker is not asked;
-- the outcome of such a try is recorded without a ticket, which an open
-- breaker ignores), so a bad day never ejects every peer.  A lone peer's
-- breaker is the upstream's: it refuses while open.

local breaker = require "backoff.breaker"
local check = require "backoff.check"

local floor, setmetatable, sort, tonumber, type =
      math.floor, setmetatable, table.sort, tonumber, type

local M = {}

local WHO = "backoff.upstream"

--- peers.parse(s) -> host, port | nil: a "host:port" string
function M.parse(s)
  if type(s) ~= "string" then return nil end
  local host, port = s:match("^%[?([^%[%]]+)%]?:(%d+)$")
  port = tonumber(port)
  if not host or host:find("%s") or not port or port < 1 or port > 65535
  then
    return nil
  end
  return host, port
end

local Set = {}
Set.__index = Set

-- the peer named s: { name, host, port, br }, built on first sight
local function peer_of(self, s)
  local p = self.known[s]
  if p then return p end
  local host, port = M.parse(s)
  if not host then
    check.raise(WHO .. ": '" .. self.name .. "': option 'peers' must list "
      .. "\"host:port\" strings (got " .. check.got(s) .. ")")
  end
  -- [1], [2] too: the { host, port } pair hedge.request's clients take
  p = { name = s, host = host, port = port, host, port }
  if self.breaker_opts then
    p.br = self.make_breaker(s)
  end
  self.known[s] = p
  return p
end
M.peer_of = peer_of

--- set:list() -> the peers now (a list of peer records)
function Set:list()
  local fn = self.fn
  if not fn then return self.fixed end
  local names = fn()
  if type(names) ~= "table" or #names == 0 then
    check.raise(WHO .. ": '" .. self.name .. "': the peers function must "
      .. "return a non-empty list of \"host:port\" strings (got "
      .. check.got(names) .. ")")
  end
  local list = {}
  for i = 1, #names do list[i] = peer_of(self, names[i]) end
  return list
end

--- how many breakers may be open at once among n peers
function Set:limit(n)
  if n == 1 then return 1 end
  return floor(self.max_ejected * n + 1e-9)
end

-- the peers whose breaker is open or half-open, least recently opened
-- first: { peer, since }
local function ejected(list)
  local out = {}
  for i = 1, #list do
    local br = list[i].br
    if br then
      local name, info = br:state()
      if name ~= "closed" then
        out[#out + 1] = { i = i, since = info and info.since or 0 }
      end
    end
  end
  sort(out, function(a, b)
    if a.since ~= b.since then return a.since < b.since end
    return a.i < b.i
  end)
  return out
end

--- set:overflow(list) -> { [i] = true } for the peers treated as
-- allowed: the least recently opened of those over the bound
function Set:overflow(list)
  local out = ejected(list)
  local over = #out - self:limit(#list)
  local set = {}
  for k = 1, over do set[out[k].i] = true end
  return set, #out
end

--- peers.new(name, list_or_fn, breaker_opts, make_breaker, max_ejected)
function M.new(name, peers, breaker_opts, make_breaker, max_ejected)
  local self = setmetatable({ name = name, known = {},
    breaker_opts = breaker_opts, make_breaker = make_breaker,
    max_ejected = max_ejected, turn = 0 }, Set)
  if type(peers) == "table" then
    local fixed = {}
    for i = 1, #peers do fixed[i] = peer_of(self, peers[i]) end
    self.fixed = fixed
  else
    self.fn = peers
  end
  return self
end

------------------------------------------------------------------------
-- a request's pick: a breaker in the engine's eyes

local Pick = {}
Pick.__index = Pick
M.Pick = Pick

--- set:pick() -> a new pick for one request: its first try goes to
-- the next peer in turn; the others follow in an order that turns too
-- (shift), so that the tries a refusing or failing peer sends on spread
-- over all the others instead of landing on its neighbour
function Set:pick()
  local list = self:list()
  local n = #list
  local turn = self.turn % n + 1
  self.turn = turn
  local shift = 0
  if n > 2 then
    self.skew = (self.skew or 0) + 1
    shift = self.skew % (n - 1)
  end
  return setmetatable({ set = self, list = list, n = n, start = turn,
    shift = shift, tried = {}, tk = {}, pk = {}, k = 0 }, Pick)
end

-- the j-th peer of the request's order (j = 0 .. n-1)
local function nth(self, j)
  local n, start = self.n, self.start
  if j == 0 then return start end
  return (start + (self.shift + j - 1) % (n - 1)) % n + 1
end

-- the peer i takes the try: its ticket k (a number) names the peer and
-- the breaker's ticket
local function take(self, i, inner)
  local k = self.k + 1
  self.k = k
  self.tk[k], self.pk[k] = inner, i
  self.tried[i] = true
  self.last = i
  self.peer = self.list[i]
  return true, k
end

-- the first peer in the request's order (untried ones only, unless
-- again) whose breaker allows it, or that the bound treats as allowed
-- (the overflow is read only after a refusal)
local function scan(self, again)
  local list, tried, over = self.list, self.tried, nil
  for j = 0, self.n - 1 do
    local i = nth(self, j)
    if again or not tried[i] then
      local br = list[i].br
      if not br then return take(self, i, nil) end
      local ok, ticket = br:allow()
      if ok then return take(self, i, ticket) end
      if over == nil then over = self.set:overflow(list) end
      if over[i] then return take(self, i, nil) end
    end
  end
  return false
end

--- pick:allow() -> true, ticket | false: the next try's peer (pick.peer)
function Pick:allow()
  if scan(self, false) then return true, self.k end
  if self.k >= self.n and scan(self, true) then return true, self.k end
  return false
end

-- may peer i take a try now (nothing taken)?
local function allows(self, i, over)
  local br = self.list[i].br
  if not br or br:allows() then return true end
  if over == nil then over = self.set:overflow(self.list) end
  return over[i] == true, over
end

--- pick:allows() -> would allow() say true now?
function Pick:allows()
  local tried, over = self.tried, nil
  local again = self.k >= self.n
  for i = 1, self.n do
    if again or not tried[i] then
      local ok
      ok, over = allows(self, i, over)
      if ok then return true end
    end
  end
  return false
end

--- pick:record(ok, ticket, seconds): the try's outcome, to its peer's
-- breaker
function Pick:record(ok, k, seconds)
  local i = self.pk[k]
  if not i then return end
  local peer = self.list[i]
  local inner = self.tk[k]
  self.tk[k] = nil
  if peer.br then peer.br:record(ok, inner, seconds) end
  local count = self.set.count
  if count then count(peer.name, ok) end
end

--- pick:release(ticket): a try not made, or cancelled
function Pick:release(k)
  local i = self.pk[k]
  if not i then return end
  local br, inner = self.list[i].br, self.tk[k]
  self.tk[k] = nil
  if br and inner ~= nil then br:release(inner) end
end

--- pick:peer_of(ticket) -> the peer record of a try
function Pick:peer_of(k)
  local i = self.pk[k]
  return i and self.list[i]
end

M.breaker = breaker
return M

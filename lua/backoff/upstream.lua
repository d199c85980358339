-- backoff.upstream: one upstream, declared once from a plain table
-- (JSON-able): the policy, the retry budget, a breaker per peer,
-- hedging, the peers and the metrics under one name and one dict.
-- doc/upstream.md is the reference.
--
--   init_by_lua_block {
--     require("backoff.upstream").new { name = "api",
--       shared = ngx.shared.backoff,
--       peers = { "10.0.0.1:8080", "10.0.0.2:8080" } }
--   }
--   local up = require("backoff.upstream").get("api")
--   up:call(fn)                    fn(attempt, timeout, peer)
--   up:request(do_request, opts)   backoff.http.request (or hedged)
--   up:balancer() / up:log()       balancer_by_lua* / log_by_lua*
--   up:status()                    a table
--
-- Keys in the dict, for an upstream named N: "N|budget..." (the
-- budget), "N|breaker|<peer>..." (each peer's breaker; "N|breaker..."
-- without peers), "N|hedge..." and "N|pace..." (hedging), "N|t..."
-- (the last transitions); the metrics under backoff.metrics' own keys.

local build = require "backoff.upstream.build"
local peers_mod = require "backoff.upstream.peers"
local status = require "backoff.upstream.status"
local counts = require "backoff.upstream.counts"
local backoff = require "backoff"
local http = require "backoff.http"
local token = require "backoff.hedge.token"
local check = require "backoff.check"
local store = require "backoff.store"
local util = require "backoff.util"
local budget_mod = require "backoff.budget"

local error, ipairs, pairs, rawget, setmetatable, tostring, type =
      error, ipairs, pairs, rawget, setmetatable, tostring, type

local WHO = "backoff.upstream"
local M = {}
local Up = {}
Up.__index = Up

local registry = {}          -- name -> upstream, in this Lua state

------------------------------------------------------------------------
-- declaring

local function hook_for(self)
  return function(peer)
    return function(from, to, info)
      status.remember(self.dict, self.name, peer, from, to, info)
    end
  end
end

local function counter_for(self)
  local m = self.metrics
  if not m then return nil end
  local keys = {}
  return function(peer, ok)
    local by = keys[peer]
    if not by then
      by = { [true] = status.try_key(self.name, peer, true),
             [false] = status.try_key(self.name, peer, false) }
      keys[peer] = by
    end
    m:count(by[ok])
  end
end

local function declare(o)
  local self = setmetatable({ name = o.name, shared = o.shared,
    ctx_key = WHO .. ":" .. o.name }, Up)
  self.dict = store.dict(o.shared, o.clock)
  self.policy = build.policy(o.policy, "policy")
  self.budget = build.budget(o)
  local recorder = build.metrics(o)
  self.metrics = recorder and counts.new(recorder, o.clock)
  self.hedge = build.hedge(o, self.budget, self.policy)
  local make = build.breaker(o, o.peers ~= nil, hook_for(self))
  if o.peers ~= nil then
    self.peers = peers_mod.new(o.name, o.peers, make ~= nil,
      make and function(peer)
        return make(o.name .. "|breaker|" .. peer, peer)
      end, o.max_ejected)
    self.peers.count = counter_for(self)
  elseif make then
    self.br = make(o.name .. "|breaker", o.name)
  end
  self.ropts = { budget = self.budget, breaker = self.br,
                 metrics = self.metrics }
  return self
end

--- upstream.new(t) -> the upstream declared by the plain table t
function M.new(t)
  local o = build.options(t)
  if o.name == nil then
    check.raise(WHO .. ": option 'name' must be a name of letters, digits "
      .. "and _ . : - (it names the keys and the metrics) (got nil)")
  end
  if registry[o.name] then
    check.raise(WHO .. ": option 'name': an upstream '" .. o.name
      .. "' is declared already in this Lua state (declare each once, in "
      .. "init_by_lua*, and find it with upstream.get)")
  end
  local self = declare(o)
  registry[o.name] = self
  local list = status.declared
  list[#list + 1] = self
  return self
end

--- upstream.get(name) -> the upstream declared under name, or nil
function M.get(name)
  return registry[name]
end

------------------------------------------------------------------------
-- the doors

-- the options a caller may not give: they are the upstream's
local OWN = { budget = true, breaker = true, metrics = true, peers = true,
              delay = true, pace = true }

local function merged(self, opts, who)
  local ropts = {}
  if opts ~= nil then
    if type(opts) ~= "table" then
      check.raise(WHO .. ":" .. who .. ": options must be a table (got "
        .. type(opts) .. ")")
    end
    for k, v in pairs(opts) do
      if OWN[k] then
        check.raise(WHO .. ":" .. who .. ": option '" .. tostring(k)
          .. "' is the upstream's (declared with it)")
      end
      ropts[k] = v
    end
  end
  ropts.budget, ropts.metrics = self.budget, self.metrics
  ropts.breaker = self.br
  return ropts
end

-- fn(attempt, timeout, peer), called by the engine as fn(attempt,
-- timeout): the pick's peer third
local Call = {}
Call.__call = function(c, attempt, timeout)
  local p = c.pick.peer
  return c.fn(attempt, timeout, p and p.name, p)
end

local function slow_call(self, fn, opts)
  local ropts = merged(self, opts, "call")
  if self.peers then
    local pick = self.peers:pick()
    ropts.breaker = pick
    fn = setmetatable({ fn = fn, pick = pick }, Call)
  end
  return backoff.retry(self.policy, fn, ropts)
end

--- up:call(fn [, opts]): backoff.retry with the upstream's policy,
-- budget, breakers and metrics; fn(attempt, timeout, peer) where peer
-- is the "host:port" of this try (nil without peers)
function Up:call(fn, opts)
  if self.peers == nil and opts == nil then
    return backoff.retry(self.policy, fn, self.ropts)
  end
  return slow_call(self, fn, opts)
end

local function hedged(self, o)
  if not self.hedge or o.hedge == false then return false end
  if o.idempotent ~= nil then return o.idempotent == true end
  if o.method == nil then return false end
  return http.idempotent(o.method, o.headers)
end

--- up:request(do_request, opts): backoff.http.request, or
-- backoff.hedge.request for an idempotent request when the upstream
-- hedges (and opts.hedge is not false); do_request(attempt, t, cancel,
-- peer) as hedge.request's (cancel never cancelled when not hedged;
-- peer nil without peers)
function Up:request(do_request, opts)
  if type(opts) ~= "table" then
    check.raise(WHO .. ":request: opts must be a table with at least "
      .. "'method' (got " .. check.got(opts) .. ")")
  end
  local hedge_it = hedged(self, opts)
  local ropts = merged(self, opts, "request")
  ropts.hedge = nil
  local pick = self.peers and self.peers:pick()
  if pick then ropts.breaker = pick end
  if hedge_it then
    local h = self.hedge
    ropts.delay, ropts.pace, ropts.budget = h.delay, h.pace, h.budget
    if pick then ropts.peers = function() return pick.peer end end
    return require("backoff.hedge").request(self.policy,
      do_request, ropts)
  end
  -- a token that is never cancelled: the same client serves both
  local f = function(attempt, t)
    local peer = pick and pick.peer
    return do_request(attempt, t, token.new(attempt, peer), peer)
  end
  return http.request(self.policy, f, ropts)
end

local nb, balancer

--- up:balancer() in balancer_by_lua*: the try's peer (set with
-- ngx.balancer.set_current_peer) -> true, peer, attempt, timeout | nil,
-- reason (the request was ended: return)
function Up:balancer()
  if not self.peers then
    check.raise(WHO .. ": '" .. self.name .. "': balancer() needs option "
      .. "'peers'")
  end
  balancer = balancer or require "backoff.balancer"
  local ngx = rawget(_G, "ngx")
  local ctx = ngx and ngx.ctx
  local o = ctx and ctx[self.ctx_key]
  if o == nil then
    o = { budget = self.budget, metrics = self.metrics,
          breaker = self.peers:pick(), key = self.ctx_key .. ":try" }
    if ctx then ctx[self.ctx_key] = o end
  end
  local ok, attempt, timeout = balancer(self.policy, o)
  if not ok then return nil, attempt end
  nb = nb or require "ngx.balancer"
  local peer = o.breaker.peer
  local set, err = nb.set_current_peer(peer.host, peer.port)
  if not set then
    error(WHO .. ": set_current_peer(" .. peer.name .. "): "
          .. tostring(err))
  end
  return true, peer.name, attempt, timeout
end

--- up:log([ok]) in log_by_lua*: the outcome of the request's last try
function Up:log(ok)
  balancer = balancer or require "backoff.balancer"
  local ngx = rawget(_G, "ngx")
  local o = ngx and ngx.ctx and ngx.ctx[self.ctx_key]
  if o == nil then return end
  balancer.done(o, ok)
end

------------------------------------------------------------------------
-- status

local function breaker_row(name, br, over)
  if not br then return { peer = name, state = "none", opening = 0 } end
  local state, info = br:state()
  info = info or {}
  return { peer = name, state = state, opening = info.opening or 0,
    since = info.since, left = info.left,
    treated_as_allowed = over or nil }
end

local function budget_row(bud)
  if not bud then return false end
  local row = { kind = budget_mod.kind(bud) or "custom" }
  if util.has_method(bud, "tokens") then row.tokens = bud:tokens() end
  return row
end

local function hedge_row(h)
  if not h then return false end
  local d = h.delay
  if type(d) ~= "number" then d = d:delay() end
  return { delay = d, share = h.pace:share() }
end

--- up:status() -> { name, peers = { { peer, state, opening, since, left
-- } }, ejected, max_ejected, budget, hedge, transitions }
function Up:status()
  local rows, ejected, limit = {}, 0, 1
  if self.peers then
    local list = self.peers:list()
    local over, n = self.peers:overflow(list)
    limit = self.peers:limit(#list)
    -- the peers really kept out: those over the bound are tried as if
    -- closed (marked treated_as_allowed)
    ejected = n < limit and n or limit
    for i, p in ipairs(list) do
      rows[i] = breaker_row(p.name, p.br, over[i])
    end
  else
    rows[1] = breaker_row(self.name, self.br)
    if rows[1].state ~= "closed" and rows[1].state ~= "none" then
      ejected = 1
    end
  end
  return { name = self.name, peers = rows, ejected = ejected,
    max_ejected = limit, budget = budget_row(self.budget),
    hedge = hedge_row(self.hedge),
    transitions = status.array(status.transitions(self.dict, self.name)) }
end

local function all()
  local list = {}
  for i, up in ipairs(status.declared) do list[i] = up:status() end
  return list
end

--- upstream.status_json() -> the JSON text of every upstream declared
-- in this Lua state: { "upstreams": [ up:status(), ... ] }
function M.status_json()
  return status.json { upstreams = status.array(all()) }
end

--- upstream.status_page() -> a self-contained HTML page of them
function M.status_page()
  return status.page(all())
end

--- upstream.serve() in content_by_lua*: the page, or the JSON with
-- ?json (or an Accept of application/json)
function M.serve()
  local ngx = rawget(_G, "ngx")
  if type(ngx) ~= "table" or type(ngx.print) ~= "function" then
    error(WHO .. ".serve: needs content_by_lua* (called outside nginx); "
          .. "status_json() and status_page() return the text", 2)
  end
  local args = ngx.req.get_uri_args()
  local accept = ngx.var.http_accept or ""
  if args.json ~= nil or accept:find("application/json", 1, true) then
    ngx.header["Content-Type"] = "application/json"
    ngx.print(M.status_json())
  else
    ngx.header["Content-Type"] = "text/html; charset=utf-8"
    ngx.print(M.status_page())
  end
end

M.json = status.json         -- the encoder, for tests and handlers

return M

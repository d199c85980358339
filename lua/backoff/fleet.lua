-- backoff.fleet: breakers that see the fleet, through Redis, with no
-- network on the request path.  doc/fleet.md is the reference.
--
--   -- init_by_lua: built once, before the fork
--   local fleet = require("backoff.fleet").new {
--     shared = ngx.shared.fleet, host = "gw-7",
--     redis = { host = "10.0.0.5", port = 6379, password = "..." } }
--   api_breaker = fleet:breaker(backoff.breaker.recommended {
--     shared = ngx.shared.breakers, key = "users_api" })
--   -- init_worker_by_lua
--   fleet:start()
--   -- any request phase: as any breaker
--   backoff.retry(policy, fn, { breaker = api_breaker })
--
-- Each decision reads the host's dicts only: the guarded breaker asks
-- backoff.fleet.view (one dict get) and then the host's own breaker.
-- A timer in one worker per host (elected by dict:add of a lock)
-- syncs every `interval`: one EVALSHA (backoff.fleet.script) says which
-- of its breakers are open on its own evidence (or suspect: `suspect`
-- failures in a row on the host, which the guards count), and answers
-- the fleet's word per breaker (open by quorum, and whether this host
-- probes for the fleet), which the timer writes into the host's dict.
-- Redis down, slow, empty or poisoned: the view is deleted (or expires
-- by itself) and each host is on its own state; one warn per interval.

local check = require "backoff.check"
local util = require "backoff.util"
local store = require "backoff.store"
local view = require "backoff.fleet.view"
local redis = require "backoff.fleet.redis"
local script = require "backoff.fleet.script"
local guard = require "backoff.fleet.guard"
local grant = require "backoff.fleet.grant"

local io, ipairs, pcall, rawget, setmetatable, tostring, type, unpack =
      io, ipairs, pcall, rawget, setmetatable, tostring, type,
      table.unpack or unpack

local WHO = "backoff.fleet"

------------------------------------------------------------------------
-- options

local REDIS_RULES = {
  host = check.string { default = "127.0.0.1" },
  port = check.count { min = 1, max = 65535, default = 6379 },
  database = check.count { min = 0, max = 65535, default = 0 },
  username = check.string {},
  password = check.string {},
  ssl = check.boolean { default = false },
  ssl_verify = check.boolean { default = false },
  server_name = check.string {},
  timeout = check.number { min = 0, max = 10, open_min = true,
                           default = 0.2 },
}
local redis_options = check.options(WHO .. " redis", REDIS_RULES)

local RULES = {
  shared = check.shared("fleet's view (the lock of its timer)"),
  key = check.string { default = "backoff:fleet" },
  redis = check.custom("a table of Redis settings (host, port, database, "
    .. "username, password, ssl, ssl_verify, server_name, timeout)",
    function(v) return type(v) == "table" end, {}),
  prefix = check.string { default = "backoff:fleet:",
    pattern = "^[^%s]+$", text = "a string without spaces (the start "
    .. "of every Redis key)" },
  host = check.string { pattern = "^[%w%._:/%-]+$", text = "a host's "
    .. "name: letters, digits and . _ : / -" },
  interval = check.number { min = 0.1, max = 60, default = 1 },
  open_interval = check.number { min = 0.1, max = 60 },
  quorum = check.number { min = 0, max = 2 ^ 31, open_min = true,
    default = 0.25, text = "a share in (0, 1) of the hosts, or a number "
    .. "of hosts >= 1" },
  min_quorum = check.count { min = 1, max = 2 ^ 31, default = 2 },
  tenure = check.number { min = 0.1, max = 3600, default = 5 },
  suspect = check.count { min = 0, max = 2 ^ 31, default = 3 },
  suspect_quorum = check.number { min = 0, max = 1, default = 0.5 },
  min_suspects = check.count { min = 1, max = 2 ^ 31, default = 10 },
  suspect_window = check.number { min = 0.1, max = 3600, default = 10 },
  max_open = check.number { min = 0.1, max = 86400, default = 60 },
  probe_every = check.number { min = 0.01, max = 3600, default = 1 },
  clock = check.fn {},
  client = check.fn {},
}
local options = check.options(WHO, RULES)

-- this host's default name: the machine's, and nginx's prefix (two
-- nginx on one machine are two hosts)
local function default_host(ngx)
  local name = "host"
  local f = io.open("/proc/sys/kernel/hostname")
  if f then
    name = (f:read("*l") or name):gsub("[^%w%._%-]", "")
    f:close()
  end
  local prefix = ngx and ngx.config and ngx.config.prefix() or ""
  return name .. ":" .. prefix:gsub("[^%w%._/%-]", "")
end

------------------------------------------------------------------------
-- the object

local Fleet = { __name = WHO }
Fleet.__index = Fleet

local function ngx_of() return rawget(_G, "ngx") end

--- fl:breaker(br) -> br guarded by the fleet's view (the object to
-- pass as ropts.breaker); br is synced by the timer from now on
function Fleet:breaker(br)
  if not (type(br) == "table" or type(br) == "userdata")
     or type(br.state) ~= "function" or type(br.key) ~= "function" then
    check.raise(WHO .. ":breaker: a backoff.breaker expected (got "
                .. util.repr(br) .. ")")
  end
  local g = guard.new(self, br)
  self.list[#self.list + 1] = g
  return g
end

local BUDGET_RULES = {
  key = check.string { pattern = "^[^%s]+$", text = "a string without "
    .. "spaces (the budget's name in Redis' keys)" },
  lend = check.number { min = 0, max = 2 ^ 20, default = 32 },
  capacity = check.number { min = 0, max = 2 ^ 20, default = 8 },
}
local budget_options = check.options(WHO .. ":budget", BUDGET_RULES)

--- fl:budget(bud [, opts]) -> bud with the fleet's grant on top (the
-- object to pass as ropts.budget); opts: key (default: the budget's
-- own key, when shared), lend (32), capacity (8 retries):
-- backoff.fleet.grant says what they do
function Fleet:budget(bud, opts)
  if not (type(bud) == "table" or type(bud) == "userdata")
     or type(bud.withdraw) ~= "function" then
    check.raise(WHO .. ":budget: a budget expected (got "
                .. util.repr(bud) .. ")")
  end
  local o = budget_options(opts)
  local name = o.key or (type(bud.key) == "string" and bud.key) or nil
  if not name or name:find("%s") then
    check.raise(WHO .. ":budget: option 'key' must be given (a string "
      .. "without spaces: the budget's name in Redis' keys) for a budget "
      .. "without a shared key")
  end
  local g = grant.new(self, bud, name, o.lend, o.capacity)
  -- one per name is synced: budgets of one name (one per worker, or a
  -- worker's objects of one shared budget) share the host's grant
  if not self.named[name] then
    self.named[name] = g
    self.buds[#self.buds + 1] = g
  end
  return g
end

-- the fleet's view, deleted: each host on its own state
local function forget(self)
  for _, g in ipairs(self.list) do self.dict:delete(g.fk) end
  for _, g in ipairs(self.buds) do g:forget() end
end

-- one warn per interval at most
local function warn(self, now, ...)
  if self.warned and now - self.warned < self.interval * 0.99 then
    return
  end
  self.warned = now
  store.log("WARN", ...)
end

-- a count the guard wrote under key, or nil (a foreign value: logged,
-- deleted)
local function counted(self, key, hi)
  local v = self.dict:get(key)
  if v == nil or store.count(v, 0, hi) then return v end
  store.foreign(self.dict, key, v, WHO, "a count")
  return nil
end

-- what this host says of a breaker: its own state ("o", "h"), a
-- suspect ("s": closed, `suspect` failures in a row on the host) or
-- "c"; and what its probe for the fleet gave since the last sync
local function state_of(self, g)
  local name = g.br:state()
  local st = name == "open" and "o" or name == "half_open" and "h" or "c"
  -- an open breaker without a failure in suspect_window: stale, no vote
  if st ~= "c" and self.dict:get(g.ek) == nil then st = "c" end
  if st == "c" and self.suspect > 0 then
    local n = counted(self, g.nk, 2 ^ 52)
    if n and n >= self.suspect then st = "s" end
  end
  local res = counted(self, g.rk, 2)
  if res ~= nil then self.dict:delete(g.rk) end
  return st, res and tostring(res) or "0"
end

-- a request refused in the last interval (the guard's mark): demand
local function demand(self, g)
  return self.dict:get(g.dk) ~= nil
end

local function states(self)
  local list = {}
  for i, g in ipairs(self.list) do
    local st, res = state_of(self, g)
    list[i] = { name = g.name, state = st, res = res,
                demand = demand(self, g) }
  end
  return list
end

-- what this host tells of its budgets
local function pushes(self)
  local list = {}
  for i, g in ipairs(self.buds) do
    local x, y = g:counts()
    list[i] = { name = g.name, retries = x, saved = y }
  end
  return list
end

-- the fleet's word written into the host's dict
local function apply(self, rep, now)
  for k, g in ipairs(self.buds) do
    local b = rep.budgets[k]
    g:lend(b)
    g.last = b
  end
  for i, g in ipairs(self.list) do
    local r = rep[i]
    g.last = r
    if r.open then
      local u = now + self.hold
      self.dict:set(g.fk, r.probe and -u or u, self.hold)
    else
      self.dict:delete(g.fk)
    end
  end
end

local function talk(self, list, buds)
  local c, err = self.client(self.redis, ngx_of())
  if not c then return nil, err end
  local r, e = c:eval(self.sha, script.TEXT,
                      unpack(script.args(self, list, buds)))
  if r == nil then
    c:close()
    return nil, e
  end
  c:done(60000, 4)
  return r
end

--- fl:sync() -> true, or nil and an error: one sync (what the timer
-- does each interval in the elected worker; never in a request)
function Fleet:sync()
  local now = store.now(WHO, self.clock)
  if #self.list == 0 and #self.buds == 0 then return true end
  local list, buds = states(self), pushes(self)
  local r, err = talk(self, list, buds)
  local rep, foreign
  if r ~= nil then rep, foreign = script.reply(r, #list, #buds) end
  if not rep then
    err = err or foreign
    forget(self)
    self.failures = self.failures + 1
    warn(self, now, WHO, ": Redis at ", self.where, ": ", tostring(err),
      ": each host is on its own state until it answers (said at most ",
      "once per interval)")
    return nil, err
  end
  for _, k in ipairs(foreign) do
    store.log("WARN", WHO, ": a foreign value under Redis key '",
      util.printable(k), "' (not a key of ours, or an expiry longer than ",
      "ours): deleted, ignored")
  end
  self.hosts, self.syncs = rep.hosts, self.syncs + 1
  self.dict:set(self.hk, rep.hosts, self.hold)
  apply(self, rep, now)
  return true
end

--- fl:period() -> seconds until the next sync: `open_interval` while
-- the fleet is open for one of this host's breakers (its prober's
-- success is then followed fast), `interval` otherwise
function Fleet:period()
  for _, g in ipairs(self.list) do
    if self.dict:get(g.fk) ~= nil then return self.open_interval end
  end
  return self.interval
end

-- the timer (every open_interval): one worker per host syncs (the
-- lock's holder; the lock expires when its worker stops), when
-- fl:period() has passed since its last sync
local function tick(premature, self)
  local ngx = ngx_of()
  if premature or self.busy then return end
  local now = ngx.now()
  if self.synced and now - self.synced < self:period() * 0.99 then
    return
  end
  local pid, lk = ngx.worker.pid(), self.lock
  if self.dict:get(lk) == pid then
    self.dict:set(lk, pid, self.hold)
  elseif not self.dict:add(lk, pid, self.hold) then
    return
  end
  self.busy, self.synced = true, now
  local ok, err = pcall(self.sync, self)
  self.busy = false
  if not ok then
    forget(self)
    warn(self, ngx.now(), WHO, ": sync failed: ", tostring(err))
  end
end

--- fl:soon(): a sync now, in a timer of its own (never in the request
-- that asks): what a prober's guard does after its probe, so that the
-- fleet learns of it at once, not at the next interval.  Outside nginx,
-- nothing.
function Fleet:soon()
  local ngx = ngx_of()
  if not (ngx and ngx.timer and ngx.timer.at) then return end
  ngx.timer.at(0, function(premature)
    if premature then return end
    local ok, err = pcall(self.sync, self)
    if not ok then warn(self, ngx.now(), WHO, ": sync failed: ",
                        tostring(err)) end
  end)
end

--- fl:start(): the timer, in init_worker_by_lua (every worker calls
-- it; one per host syncs)
function Fleet:start()
  local ngx = ngx_of()
  if not (ngx and ngx.timer) then
    check.raise(WHO .. ":start: only inside nginx (init_worker_by_lua)")
  end
  local ok, err = ngx.timer.every(self.open_interval, tick, self)
  if not ok then check.raise(WHO .. ":start: " .. tostring(err)) end
  return true
end

--- fl:refuses(key) -> true while the fleet is open for the breaker
-- named key and this host is not its prober: the one read a breaker
-- needs to follow the fleet by itself (one dict get)
function Fleet:refuses(key)
  return view.refuses(self.dict, view.key(self.key, key),
                      store.now(WHO, self.clock), self.hold)
end

--- fl:status() -> a table: hosts (the hosts Redis saw at the last
-- sync of any worker of this host, nil when none in 3 intervals);
-- syncs, failures and per breaker key its last word (open, probe,
-- votes, need): this worker's, when it is the one that syncs
function Fleet:status()
  local hosts = self.dict:get(self.hk)
  local out = { hosts = type(hosts) == "number" and hosts or nil,
                syncs = self.syncs, failures = self.failures,
                breakers = {} }
  for _, g in ipairs(self.list) do out.breakers[g.name] = g.last end
  out.budgets = {}
  for _, g in ipairs(self.buds) do
    local b = g.last or {}
    out.budgets[g.name] = { retries = b.retries, saved = b.saved,
      hosts = b.hosts, grant = g:grant(), lent = g.lent }
  end
  return out
end

function Fleet:__tostring()
  return WHO .. ": '" .. self.host .. "' -> " .. self.where
end

local M = {}

--- fleet.new(opts) -> a fleet
function M.new(opts)
  local o = options(opts)
  local r = redis_options(o.redis)
  local ngx = ngx_of()
  local share, min = 0, o.min_quorum
  if o.quorum < 1 then share = o.quorum
  elseif o.quorum > min then min = o.quorum end
  local hold = 3 * o.interval
  -- no vote counts after a close until every failure before it is
  -- stale (suspect_window): old evidence cannot reopen the fleet
  local cttl = math.max(hold, o.suspect_window)
  local oiv = o.open_interval or math.max(0.1, o.interval / 4)
  if oiv > o.interval then
    check.raise(WHO .. ": option 'open_interval' must be <= 'interval' ("
      .. "got " .. oiv .. " > " .. o.interval .. ")")
  end
  local self = setmetatable({
    dict = store.dict(o.shared or nil, o.clock), key = o.key,
    lock = o.key .. "|L", hk = o.key .. "|H", redis = r,
    where = redis.where(r),
    prefix = o.prefix, host = o.host or default_host(ngx),
    interval = o.interval, open_interval = oiv, hold = hold,
    tenure = o.tenure,
    share = share, min = min, suspect = o.suspect,
    sshare = o.suspect > 0 and o.suspect_quorum or 0,
    mins = o.min_suspects, suspect_window = o.suspect_window,
    max_open = o.max_open, cttl = cttl, probe_every = o.probe_every,
    clock = o.clock or util.shared_clock(),
    client = o.client or redis.connect,
    sha = ngx and ngx.sha1_bin and script.sha1(ngx) or "0",
    list = {}, buds = {}, named = {}, syncs = 0, failures = 0 }, Fleet)
  -- the guard's clock, read only when the fleet has a word
  self.now = function() return store.now(WHO, self.clock) end
  return self
end

M.view = view

return M

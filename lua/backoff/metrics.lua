-- backoff.metrics: what retries do, counted per name, written in the
-- Prometheus text exposition format (version 0.0.4).
--
--   local metrics = require "backoff.metrics"
--   -- nginx.conf: lua_shared_dict backoff_metrics 1m;
--   local m = metrics.new("users_api",
--                         { shared = ngx.shared.backoff_metrics })
--   backoff.retry(policy, fn, { metrics = m })        -- the runner counts
--   ... location = /metrics { content_by_lua_block {
--         require("backoff.metrics").collect(ngx.shared.backoff_metrics)
--       } }
--
-- Counters (each a family backoff_<counter>_total, label name="..."):
--   attempts               attempts made, first ones included
--   retries                attempts after the first
--   successes              runs that succeeded
--   successes_after_retry  runs that succeeded after one or more retries
--   giveups                runs given up; label reason="max_attempts", ...
--   budget_refusals        retries a retry budget refused
--   hints_honoured         retries that waited for a server's hint
-- and backoff.hedge's (a hedge: a copy of a request started while
-- another was in flight, after the hedging delay):
--   hedges                 hedges started
--   hedges_won             requests answered by a hedge
--   hedges_cancelled       copies cancelled once another answered
--   hedge_budget_refusals  hedges a retry budget refused (hedging then
--                          stops for that request)
--
-- Storage: inside nginx, a lua_shared_dict (option `shared`), so that
-- every worker adds to the same counters and /metrics shows them all,
-- whichever worker answers; each addition is one dict:incr (atomic, no
-- lock).  Outside nginx (or with shared = false) a table of this Lua
-- state.  Keys are "backoff\t<counter>\t<name>[\t<reason>]", so the dict
-- may hold other data; metrics.prometheus reads only these keys.

local util = require "backoff.util"
local check = require "backoff.check"
local store = require "backoff.store"
local repr = util.repr              -- short, escaped

local error, floor, getmetatable, ipairs, pairs, rawget,
      setmetatable, sort, concat, type, format, byte =
      error, math.floor, getmetatable, ipairs, pairs, rawget,
      setmetatable, table.sort, table.concat, type, string.format,
      string.byte

local HUGE = math.huge

local M = {}

-- the counters, in the order they are written, and their help texts
local COUNTERS = {
  "attempts", "retries", "successes", "successes_after_retry", "giveups",
  "budget_refusals", "hints_honoured",
  -- backoff.hedge's
  "hedges", "hedges_won", "hedges_cancelled", "hedge_budget_refusals",
}
local HELP = {
  attempts = "Attempts made, first attempts and retries.",
  retries = "Retries made: attempts after the first.",
  successes = "Operations that succeeded.",
  successes_after_retry =
    "Operations that succeeded after one or more retries.",
  giveups = "Operations given up, by reason.",
  budget_refusals = "Retries refused by a retry budget.",
  hints_honoured =
    "Retries that waited for a server's hint (Retry-After, RateLimit-Reset).",
  -- backoff.hedge's
  hedges = "Hedges started: copies of a request sent while another was "
    .. "in flight.",
  hedges_won = "Requests answered by a hedge.",
  hedges_cancelled =
    "Copies of hedged requests cancelled once another answered.",
  hedge_budget_refusals =
    "Hedges refused by a retry budget (hedging then stopped for the "
    .. "request).",
}
local KNOWN = {}
for _, c in ipairs(COUNTERS) do KNOWN[c] = true end

local PREFIX = "backoff\t"
local MAX_NAME = 200

-- this Lua state's counters (outside nginx, or shared = false)
local process = store.dict()

local has_method, incr, printable = util.has_method, store.incr,
                                    util.printable

local function is_dict(v)
  return has_method(v, "incr") and has_method(v, "get")
         and has_method(v, "get_keys")
end

-- s is UTF-8 with no control character (C0, DEL): a label value any
-- Prometheus parser reads back as it was
-- a UTF-8 lead byte c (>= 0x80): how many bytes follow it, and the
-- range of the first (no overlong form, no surrogate, nothing past
-- U+10FFFF); nil for a byte that cannot lead
local function utf8_lead(c)
  if c >= 0xc2 and c <= 0xdf then return 1, 0x80, 0xbf end
  if c == 0xe0 then return 2, 0xa0, 0xbf end
  if c == 0xed then return 2, 0x80, 0x9f end
  if c >= 0xe1 and c <= 0xef then return 2, 0x80, 0xbf end
  if c == 0xf0 then return 3, 0x90, 0xbf end
  if c >= 0xf1 and c <= 0xf3 then return 3, 0x80, 0xbf end
  if c == 0xf4 then return 3, 0x80, 0x8f end
  return nil
end

local function clean_utf8(s)
  local i, n = 1, #s
  while i <= n do
    local c = byte(s, i)
    if c < 0x20 or c == 0x7f then return false end
    if c < 0x80 then
      i = i + 1
    else
      local need, lo, hi = utf8_lead(c)
      if not need then return false end
      local c2 = byte(s, i + 1)
      if not c2 or c2 < lo or c2 > hi then return false end
      for k = 2, need do
        local ck = byte(s, i + k)
        if not ck or ck < 0x80 or ck > 0xbf then return false end
      end
      i = i + need + 1
    end
  end
  return true
end

-- a give-up reason: a name, as the runner's reasons are
local function is_reason(v)
  return type(v) == "string" and #v <= 64 and v:match("^[%a_][%w_]*$") ~= nil
end

local function is_count(v)
  return type(v) == "number" and v >= 0 and v < 2 ^ 53 and v == floor(v)
end

------------------------------------------------------------------------
-- recorders

local Recorder = { __name = "backoff.metrics" }
Recorder.__index = Recorder

local function self_of(self, method)
  if getmetatable(self) ~= Recorder then
    check.bad_self(method, "backoff.metrics recorder", self)
  end
  return self
end

-- why an incr failed, as the error log says it: a full dict, or a value
-- of another writer's under our key
local function lost_because(err, key)
  if err == "not a number" then
    return ("the key '%s' holds a value that is not a number: another "
      .. "user of the lua_shared_dict wrote it (give backoff.metrics a "
      .. "lua_shared_dict of its own)"):format(printable(key))
  elseif err == "no memory" then
    return "no memory (make the lua_shared_dict larger, or give "
      .. "backoff.metrics one of its own)"
  end
  return tostring(err)
end

-- add n to one counter (reason: the giveups label).  A count that
-- cannot be added is lost, never raised into a request, and said once
-- per recorder and cause in the error log; a value another writer put
-- under our key is deleted (store.foreign) and the count made afresh;
-- an addition that evicted other keys is logged by store.incr.
local function add(self, counter, n, reason)
  local key = self.keys[counter]
  if reason then
    local by = self.keys.giveups
    key = by[reason]
    if not key then
      key = self.prefix_giveups .. reason
      by[reason] = key
    end
  end
  local st = self.st
  local ok, err = incr(st, key, n, 0)
  if not ok and err == "not a number" then
    store.foreign(st, key, st:get(key), "backoff.metrics", "a count")
    ok, err = incr(st, key, n, 0)
  end
  if not ok and not self.warned[err or "?"] then
    self.warned[err or "?"] = true
    store.log("WARN", "backoff.metrics: counts lost for '", self.name,
              "': ", lost_because(err, key))
  end
end

--- m:add(counter, n [, reason]): adds n (an integer >= 0) to a counter;
-- reason (a name) is required for "giveups" and refused for the others.
function Recorder:add(counter, n, reason)
  self = self_of(self, "add")
  if not KNOWN[counter] then
    error("bad argument #1 to 'add' (a counter name expected: "
          .. concat(COUNTERS, ", ") .. "; got " .. repr(counter) .. ")", 2)
  end
  if not is_count(n) then
    error("bad argument #2 to 'add' (an integer count >= 0 expected, got "
          .. repr(n) .. ")", 2)
  end
  if counter == "giveups" then
    if not is_reason(reason) then
      error("bad argument #3 to 'add' (a reason expected for 'giveups': "
            .. "letters, digits and _, at most 64 bytes; got "
            .. repr(reason) .. ")", 2)
    end
  elseif reason ~= nil then
    error("bad argument #3 to 'add' (only 'giveups' takes a reason, got "
          .. repr(reason) .. ")", 2)
  end
  if n > 0 then add(self, counter, n, reason) end
end

--- m:run(ok, attempts [, reason [, hints]]): one run ended.  ok: true
-- (success) or false (given up, for reason); attempts made (>= 0);
-- hints: retries that waited for a server's hint (<= attempts).  What
-- the runner calls; by hand for loops of your own.
function Recorder:run(ok, attempts, reason, hints)
  self = self_of(self, "run")
  if type(ok) ~= "boolean" then
    error("bad argument #1 to 'run' (boolean expected for 'ok', got "
          .. repr(ok) .. ")", 2)
  end
  if not is_count(attempts) then
    error("bad argument #2 to 'run' (an integer count >= 0 expected for "
          .. "'attempts', got " .. repr(attempts) .. ")", 2)
  end
  if ok then
    if reason ~= nil then
      error("bad argument #3 to 'run' (a success has no reason, got "
            .. repr(reason) .. ")", 2)
    end
  elseif not is_reason(reason) then
    error("bad argument #3 to 'run' (a reason expected for a give-up: "
          .. "letters, digits and _, at most 64 bytes; got "
          .. repr(reason) .. ")", 2)
  end
  if hints == nil then hints = 0 end
  if not is_count(hints) or hints > attempts then
    error("bad argument #4 to 'run' (an integer count from 0 to attempts "
          .. "expected for 'hints', got " .. repr(hints) .. ")", 2)
  end
  if attempts > 0 then add(self, "attempts", attempts) end
  if attempts > 1 then add(self, "retries", attempts - 1) end
  if ok then
    add(self, "successes", 1)
    if attempts > 1 then add(self, "successes_after_retry", 1) end
  else
    add(self, "giveups", 1, reason)
    if reason == "budget" then add(self, "budget_refusals", 1) end
  end
  if hints > 0 then add(self, "hints_honoured", hints) end
end

-- a stored counter as we write it: a count is a finite number >= 0, so
-- anything else under one of our keys (another writer's NaN, inf, a
-- negative number or a string) reads as nil, never as "-nan" in the
-- exposition
local function count_of(v)
  if type(v) == "number" and v >= 0 and v < HUGE then return v end
  return nil
end

-- the count under key, nil when missing or not a count (deleted: read
-- as missing)
local function stored(st, key)
  local v = st:get(key)
  local c = count_of(v)
  if c == nil and v ~= nil then
    store.foreign(st, key, v, "backoff.metrics", "a count")
  end
  return c
end

--- m:counts() -> { attempts = n, ..., giveups = { reason = n } }: this
-- name's counters now (reads every key of the dict: for tests and
-- debugging, not for every request)
function Recorder:counts()
  self = self_of(self, "counts")
  local t = { giveups = {} }
  for _, c in ipairs(COUNTERS) do
    if c ~= "giveups" then t[c] = stored(self.st, self.keys[c]) or 0 end
  end
  local p = self.prefix_giveups
  for _, k in ipairs(self.st:get_keys(0)) do
    if type(k) == "string" and k:sub(1, #p) == p
       and is_reason(k:sub(#p + 1)) then
      t.giveups[k:sub(#p + 1)] = stored(self.st, k)
    end
  end
  return t
end

function Recorder:__tostring()
  return ("backoff.metrics: %s (%s)"):format(repr(self.name),
    self.dict and "shared dict" or "this process")
end

local options = check.options("backoff.metrics.new", {
  shared = check.shared("counts", "/metrics shows one worker at a time"),
  key = check.custom(("a name: 1 to %d bytes of UTF-8 without control "
    .. "characters"):format(MAX_NAME), function(v)
      return type(v) == "string" and #v > 0 and #v <= MAX_NAME
        and clean_utf8(v)
    end),
})

--- metrics.new(opts) or metrics.new(name [, opts]) -> a recorder for a
-- name (opts.key, as every shared object names itself, or the first
-- argument).  opts.shared: a lua_shared_dict (required inside nginx),
-- or false for counts kept by this Lua state alone.
function M.new(name, opts)
  if type(name) == "table" and opts == nil then
    opts = name
    name = rawget(opts, "key")
    if name == nil then
      check.raise("backoff.metrics.new: option 'key' must be "
        .. "a name (got nil)")
    end
  elseif type(name) ~= "string" or #name == 0 or #name > MAX_NAME
     or not clean_utf8(name) then
    error("bad argument #1 to 'new' (a name expected: 1 to " .. MAX_NAME
          .. " bytes of UTF-8 without control characters; got "
          .. repr(name) .. ")", 2)
  elseif type(opts) == "table" and rawget(opts, "key") ~= nil then
    check.raise("backoff.metrics.new: give the name once: as option "
      .. "'key' or as the first argument, not both")
  end
  local dict = options(opts).shared or nil     -- false: this Lua state
  local keys = { giveups = {} }
  for _, c in ipairs(COUNTERS) do
    if c ~= "giveups" then keys[c] = PREFIX .. c .. "\t" .. name end
  end
  return setmetatable({ name = name, dict = dict, st = dict or process,
    keys = keys,
    prefix_giveups = PREFIX .. "giveups\t" .. name .. "\t", warned = {} },
    Recorder)
end

------------------------------------------------------------------------
-- the exposition

-- a label value as the text format wants it
local function escape(v)
  return (v:gsub('[\\"\n]', { ["\\"] = "\\\\", ['"'] = '\\"',
                              ["\n"] = "\\n" }))
end

local function number(v)
  if v >= HUGE then return "+Inf" end     -- counts that summed past 2^1024
  if v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53 then
    return format("%.0f", v)
  end
  return format("%.17g", v)
end

-- counter, name and reason ("" for none) of one of our keys
local KEY = "^backoff\t([%w_]+)\t([^\t]*)\t?(.*)$"

-- the labels of key k: name="..." (and reason="..." for a give-up); nil
-- for a key metrics.new and add could not have written (an unknown
-- counter, a name that is not clean UTF-8 or too long, a give-up
-- without a reason or a reason that is not a name), so that another
-- writer's key under our prefix never makes the exposition unparsable
local function labels_of(k)
  local counter, name, reason = k:match(KEY)
  if not (counter and KNOWN[counter]) or #name == 0 or #name > MAX_NAME
     or not clean_utf8(name) then
    return nil
  end
  local labels = 'name="' .. escape(name) .. '"'
  if counter == "giveups" then
    if not is_reason(reason) then return nil end
    return counter, labels .. ',reason="' .. reason .. '"'
  end
  if reason ~= "" then return nil end
  return counter, labels
end

-- the keys and values to write: from the dict, or this process's
local function snapshot(dict)
  local st, t = dict or process, {}
  for _, k in ipairs(st:get_keys(0)) do
    if type(k) == "string" and k:sub(1, #PREFIX) == PREFIX then
      t[k] = stored(st, k)
    end
  end
  return t
end

local function check_dict(dict, fn)
  if dict ~= nil and not is_dict(dict) then
    error("bad argument #1 to '" .. fn .. "' (an ngx.shared dict or nil "
          .. "expected, got " .. repr(dict) .. ")", 3)
  end
end

--- metrics.prometheus([dict]) -> the text exposition of every counter
-- kept in dict (nil: this Lua state's own counters)
function M.prometheus(dict)
  check_dict(dict, "prometheus")
  for _, f in ipairs(M._before) do f(dict) end    -- counts held back
  local rows = {}                   -- counter -> { label text -> value }
  for k, v in pairs(snapshot(dict)) do
    local counter, labels = labels_of(k)
    if counter then
      local r = rows[counter] or {}
      rows[counter] = r
      r[labels] = (r[labels] or 0) + v
    end
  end
  local out = {}
  for _, c in ipairs(COUNTERS) do
    local family = "backoff_" .. c .. "_total"
    out[#out + 1] = "# HELP " .. family .. " " .. HELP[c]
    out[#out + 1] = "# TYPE " .. family .. " counter"
    local r, labels = rows[c] or {}, {}
    for l in pairs(r) do labels[#labels + 1] = l end
    sort(labels)
    for _, l in ipairs(labels) do
      out[#out + 1] = family .. "{" .. l .. "} " .. number(r[l])
    end
  end
  for _, w in ipairs(M._writers) do w(out, dict) end   -- other families
  out[#out + 1] = ""
  return concat(out, "\n")
end

--- metrics.collect([dict]): answers a /metrics request with it
-- (content_by_lua*): Content-Type text/plain; version=0.0.4 unless the
-- headers were sent already (after nginx-lua-prometheus's collect())
function M.collect(dict)
  check_dict(dict, "collect")
  local ngx = rawget(_G, "ngx")
  if type(ngx) ~= "table" or type(ngx.print) ~= "function" then
    error("backoff.metrics.collect: needs content_by_lua* (called outside "
          .. "nginx); metrics.prometheus() returns the text", 2)
  end
  if not ngx.headers_sent then
    ngx.header["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8"
  end
  ngx.print(M.prometheus(dict))
end

--- metrics.reset([dict]): removes every counter kept in dict (nil: this
-- Lua state's own)
function M.reset(dict)
  check_dict(dict, "reset")
  local st = dict or process
  for _, k in ipairs(st:get_keys(0)) do
    if type(k) == "string" and k:sub(1, #PREFIX) == PREFIX then
      st:delete(k)
    end
  end
end

-- other modules' families (backoff.breaker's), written after these
M._writers = {}             -- w(out, dict) appends its lines to out
M._before = {}              -- f(dict) writes the counts it holds back
-- one family's lines (other modules' families: the breaker's, the
-- upstreams'), samples sorted; none without a sample
local function family(out, name, kind, help, samples)
  local labels = {}
  for l in pairs(samples) do labels[#labels + 1] = l end
  if #labels == 0 then return end
  sort(labels)
  out[#out + 1] = "# HELP " .. name .. " " .. help
  out[#out + 1] = "# TYPE " .. name .. " " .. kind
  for _, l in ipairs(labels) do
    out[#out + 1] = name .. "{" .. l .. "} " .. number(samples[l])
  end
end

M._ext = { PREFIX = PREFIX, escape = escape, number = number,
  family = family,
  snapshot = snapshot, recorder_mt = Recorder, add = function(m, key)
    m.keys[key] = key      -- a key of its own under PREFIX, added 1
    add(m, key, 1) end,
  add_n = function(m, key, n)
    m.keys[key] = key      -- the same, added n
    add(m, key, n) end }

return M

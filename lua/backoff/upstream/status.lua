-- backoff.upstream.status: what a declared upstream shows (internal:
-- backoff.upstream's): its last transitions kept in its dict, the JSON
-- text (lua-cjson when present, else a small encoder of our own), the
-- HTML page, and the Prometheus families labelled by upstream and peer.

local metrics = require "backoff.metrics"
local store = require "backoff.store"

local concat, floor, format, getmetatable, ipairs, next, pairs, pcall,
      sort, tonumber, tostring, type, setmetatable = table.concat, math.floor,
      string.format, getmetatable, ipairs, next, pairs, pcall, table.sort,
      tonumber, tostring, type, setmetatable

local S = {}

------------------------------------------------------------------------
-- the last transitions: KEEP slots in the upstream's dict, under
-- "<name>|t<slot>", each "<seq>\t<at>\t<peer>\t<from>\t<to>\t<reason>";
-- "<name>|tn" the sequence (one incr per transition)

local KEEP = 8
S.KEEP = KEEP

--- S.remember(dict, name, peer, from, to, info)
function S.remember(dict, name, peer, from, to, info)
  local seq = store.incr(dict, name .. "|tn", 1, 0)
  if not seq then return end
  local at = info and tonumber(info.at) or 0
  dict:set(name .. "|t" .. (seq % KEEP), concat({ format("%d", seq),
    format("%.3f", at), peer, from, to, info and info.reason or "" },
    "\t"), 3600)
end

local FIELDS = "^(%d+)\t([%d.]+)\t([^\t]*)\t(%l[%l_]*)\t(%l[%l_]*)\t(.*)$"

--- S.transitions(dict, name) -> the last transitions, the latest first
function S.transitions(dict, name)
  local out = {}
  for slot = 0, KEEP - 1 do
    local key = name .. "|t" .. slot
    local v = dict:get(key)
    if v ~= nil then
      local seq, at, peer, from, to, reason
      if type(v) == "string" then
        seq, at, peer, from, to, reason = v:match(FIELDS)
      end
      if seq then
        out[#out + 1] = { seq = tonumber(seq), at = tonumber(at),
          peer = peer, from = from, to = to,
          reason = reason ~= "" and reason or nil }
      else
        store.foreign(dict, key, v, "backoff.upstream", "a transition")
      end
    end
  end
  sort(out, function(a, b) return a.seq > b.seq end)
  return out
end

------------------------------------------------------------------------
-- JSON

local ESC = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b",
  ["\f"] = "\\f", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }

local function str(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return ESC[c] or format("\\u%04x", c:byte())
  end) .. '"'
end

local encode

local function is_array(t)
  local n = #t
  for k in pairs(t) do
    if type(k) ~= "number" or k < 1 or k > n or k ~= floor(k) then
      return false
    end
  end
  return n > 0 or next(t) == nil and getmetatable(t) ~= nil
    and getmetatable(t) == S.ARRAY
end

local function object(t, out)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  sort(keys)
  out[#out + 1] = "{"
  for i, k in ipairs(keys) do
    if i > 1 then out[#out + 1] = "," end
    out[#out + 1] = str(k) .. ":"
    local v = t[k]
    if v == nil then v = t[tonumber(k)] end
    encode(v, out)
  end
  out[#out + 1] = "}"
end

function encode(v, out)
  local t = type(v)
  if t == "string" then
    out[#out + 1] = str(v)
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then
      out[#out + 1] = "null"
    elseif v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53 then
      out[#out + 1] = format("%d", v)
    else
      -- 14 significant digits, as lua-cjson writes them: a time of day
      -- in seconds since the epoch keeps its milliseconds
      out[#out + 1] = format("%.14g", v)
    end
  elseif t == "boolean" then
    out[#out + 1] = tostring(v)
  elseif t == "table" then
    if is_array(v) then
      out[#out + 1] = "["
      for i = 1, #v do
        if i > 1 then out[#out + 1] = "," end
        encode(v[i], out)
      end
      out[#out + 1] = "]"
    else
      object(v, out)
    end
  else
    out[#out + 1] = "null"
  end
end

local cjson_ok, cjson = pcall(require, "cjson.safe")
-- lua-cjson without empty_array_mt would write an empty list as {}
if not cjson_ok or type(cjson.empty_array_mt) ~= "table" then cjson = nil end

-- the metatable of an empty table meant as [] (cjson's when it is used)
S.ARRAY = cjson and cjson.empty_array_mt or {}

--- S.array(t) -> t, written as a JSON array even when empty
function S.array(t) return setmetatable(t, S.ARRAY) end

--- S.json(v) -> JSON text (lua-cjson's when it is installed)
function S.json(v)
  if cjson then
    local s = cjson.encode(v)
    if s then return s end
  end
  local out = {}
  encode(v, out)
  return concat(out)
end
S.encode_own = function(v)
  local out = {}
  encode(v, out)
  return concat(out)
end

------------------------------------------------------------------------
-- the page: server-rendered, refreshed by a small script from the JSON

local function html(s)
  return (tostring(s):gsub("[&<>\"']", { ["&"] = "&amp;", ["<"] = "&lt;",
    [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }))
end

local function num(v)
  if type(v) ~= "number" then return "" end
  return format("%.3g", v)
end

-- a time since the epoch as a clock time (UTC, with milliseconds); a
-- time that is not one (a test's fake clock) as it is
local function clock(v)
  if type(v) ~= "number" then return "" end
  if v < 1e9 then return format("%.3f", v) end
  return os.date("!%H:%M:%S", floor(v)) .. format(".%03dZ",
    floor((v - floor(v)) * 1000))
end

local function rows(u)
  local out = {}
  for _, p in ipairs(u.peers) do
    out[#out + 1] = format('<tr class="%s" data-peer="%s"><td>%s</td>'
      .. '<td class="state">%s</td><td>%s</td><td>%s</td></tr>',
      html(p.state), html(p.peer), html(p.peer),
      html(p.state) .. (p.treated_as_allowed
        and " (allowed: over the ejection bound)" or ""),
      html(p.opening or 0), p.left and num(p.left) .. " s" or "")
  end
  return concat(out, "\n")
end

local function section(u)
  local bud = u.budget and (html(u.budget.kind or "budget") .. " "
    .. num(u.budget.tokens)) or "none"
  local hedge = u.hedge and ("delay " .. num(u.hedge.delay) .. " s, share "
    .. num(u.hedge.share)) or "off"
  local tr = {}
  for _, t in ipairs(u.transitions) do
    tr[#tr + 1] = format("<li>%s %s: %s &rarr; %s</li>", clock(t.at),
      html(t.peer), html(t.from), html(t.to))
  end
  return format([[<section id="up-%s"><h2>%s</h2>
<p>budget: %s &middot; hedging: %s &middot; ejected %d of at most %d</p>
<table><tr><th>peer</th><th>state</th><th>openings</th><th>reopens in</th></tr>
%s
</table><ul>%s</ul></section>]], html(u.name), html(u.name), bud, hedge,
    u.ejected or 0, u.max_ejected or 0, rows(u), concat(tr))
end

local PAGE = [[<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>backoff: upstreams</title>
<style>
body{font:14px sans-serif;margin:1em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 8px}
tr.open td.state{background:#f88}tr.half_open td.state{background:#fd8}
tr.closed td.state{background:#8d8}
</style></head><body><h1>upstreams</h1><div id="all">
%s
</div>
<script>
// refresh every 2 s from the same route's JSON (?json)
setInterval(function () {
  fetch(location.pathname + "?json").then(function (r) { return r.json() })
    .then(function (all) {
      all.upstreams.forEach(function (u) {
        u.peers.forEach(function (p) {
          var row = document.querySelector('#up-' + CSS.escape(u.name) +
            ' tr[data-peer="' + p.peer + '"]')
          if (!row) return
          row.className = p.state
          row.querySelector(".state").textContent = p.state
        })
      })
    }).catch(function () {})
}, 2000)
</script></body></html>
]]

--- S.page(list) -> the HTML of every upstream's status
function S.page(list)
  local parts = {}
  for _, u in ipairs(list) do parts[#parts + 1] = section(u) end
  return format(PAGE, concat(parts, "\n"))
end

------------------------------------------------------------------------
-- Prometheus: per upstream and peer

local X = metrics._ext
local PREFIX, escape = X.PREFIX, X.escape
local STATE = { closed = 0, open = 1, half_open = 2 }

--- S.try_key(name, peer, ok) -> the counter key of a peer's tries
function S.try_key(name, peer, ok)
  return PREFIX .. "upstream_tries\t" .. name .. "\t" .. peer .. "\t"
    .. (ok and "success" or "failure")
end

local family = X.family

local TRY = "^" .. PREFIX .. "upstream_tries\t([^\t]+)\t([^\t]+)\t(%l+)$"

-- the upstreams whose families go into the text of a dict
S.declared = {}

local function write(out, dict)
  local tries = {}
  for k, v in pairs(X.snapshot(dict)) do
    local up, peer, outcome = k:match(TRY)
    if up and (outcome == "success" or outcome == "failure") then
      tries[format('upstream="%s",peer="%s",outcome="%s"', escape(up),
        escape(peer), outcome)] = v
    end
  end
  family(out, "backoff_upstream_tries_total", "counter",
    "Tries of a declared upstream, by peer and outcome.", tries)
  local states, ejected = {}, {}
  for _, up in ipairs(S.declared) do
    if up.metrics and up.metrics.dict == dict then
      local ok, st = pcall(up.status, up)
      if ok then
        for _, p in ipairs(st.peers) do
          states[format('upstream="%s",peer="%s"', escape(st.name),
            escape(p.peer))] = STATE[p.state]
        end
        ejected[format('upstream="%s"', escape(st.name))] = st.ejected
      end
    end
  end
  family(out, "backoff_upstream_peer_state", "gauge", "A peer's breaker: "
    .. "0 closed, 1 open, 2 half-open.", states)
  family(out, "backoff_upstream_ejected", "gauge",
    "Peers whose breaker is open or half-open.", ejected)
end

local writers = metrics._writers
writers[#writers + 1] = write

-- before the text of a dict: the counts this worker holds back
local function flush(dict)
  for _, up in ipairs(S.declared) do
    local m = up.metrics
    if m and m.dict == dict and m.flush then pcall(m.flush, m) end
  end
end
local before = metrics._before
before[#before + 1] = flush

return S

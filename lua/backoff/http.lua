-- backoff.http: HTTP requests retried the way RFC 9110 allows, with the
-- server's hints and per-try timeouts.  doc/http.md is the reference.
--
--   local http = require "backoff.http"
--   local res, err, reason = http.request(policy, function(attempt, t)
--     local httpc = require("resty.http").new()     -- lua-resty-http
--     if t then httpc:set_timeouts(t.connect, t.send, t.read) end
--     return httpc:request_uri(url, { method = "GET" })
--   end, { method = "GET", metrics = m, budget = bud })
--
-- The decision after each try:
--   * a response (a table with a numeric status: lua-resty-http's res,
--     ngx.location.capture's res, or a plain function's status number)
--     whose status is not retryable is the result, as it came;
--   * a retryable status (default 408 429 502 503 504) is a failure
--     with the server's hint (Retry-After, RateLimit-Reset,
--     X-RateLimit-Reset: backoff.http.hint), bounded by max_hint;
--   * nil, err [, stage] is a transport failure; it certainly did not
--     reach the server when stage is "connect" or err says so
--     (connection refused, no route, DNS): not_sent();
--   * a request that is not idempotent (RFC 9110 9.2.2: GET HEAD
--     OPTIONS TRACE PUT DELETE are; or an Idempotency-Key header; or
--     opts.idempotent) is retried only after a failure that certainly
--     did not reach the server; otherwise it gives up at once with
--     reason "not_idempotent".  The method is never guessed: without
--     `method` (or `idempotent`) request raises.
--   * a final 5xx (not retryable) is returned as it came, and counted
--     as a failure (reason "error_status"), never as a success.
--
-- The door makes the tries and waits; lua/backoff/engine.lua decides.

local engine = require "backoff.engine"
local setup = require "backoff.setup"
local check = require "backoff.check"
local util = require "backoff.util"
local hint_mod = require "backoff.http.hint"

local error, floor, ipairs, max, next, pairs, pcall, setmetatable, type =
      error, math.floor, ipairs, math.max, next, pairs, pcall, setmetatable,
      type
local find, lower = string.find, string.lower
local repr, raise = util.repr, check.raise

local M = {
  hint = hint_mod.hint,
  header = hint_mod.header,
}
local header, hint_of = hint_mod.header, hint_mod.hint

------------------------------------------------------------------------
-- idempotency (RFC 9110, 9.2.2)

local IDEMPOTENT = { GET = true, HEAD = true, OPTIONS = true,
                     TRACE = true, PUT = true, DELETE = true }

-- nginx's method constants (ngx.HTTP_GET, ...; ngx.location.capture's
-- `method` option), by value: the same in every lua-nginx-module
local NGX_METHODS = {
  [2] = "GET", [4] = "HEAD", [8] = "POST", [16] = "PUT", [32] = "DELETE",
  [64] = "MKCOL", [128] = "COPY", [256] = "MOVE", [512] = "OPTIONS",
  [1024] = "PROPFIND", [2048] = "PROPPATCH", [4096] = "LOCK",
  [8192] = "UNLOCK", [16384] = "PATCH", [32768] = "TRACE",
}

-- the method's name, or nil, message
local function method_name(method)
  if type(method) == "number" then
    local m = NGX_METHODS[method]
    if m then return m end
    return nil, "an ngx.HTTP_* method constant"
  end
  if type(method) ~= "string" or not method:match("^[%w!#$%%&'*+.^_`|~-]+$")
     or #method > 64 then
    return nil, "a method name (an HTTP token) or an ngx.HTTP_* constant"
  end
  return method
end

--- idempotent(method [, headers]) -> boolean: RFC 9110's idempotent
-- methods (case-sensitive, as methods are), or an Idempotency-Key
-- header with a value in headers (the request's).
function M.idempotent(method, headers)
  local name, want = method_name(method)
  if not name then
    error("bad argument #1 to 'idempotent' (" .. want .. " expected, got "
          .. repr(method) .. ")", 2)
  end
  if headers ~= nil and type(headers) ~= "table" then
    error("bad argument #2 to 'idempotent' (table or nil expected for "
          .. "'headers', got " .. type(headers) .. ")", 2)
  end
  if IDEMPOTENT[name] then return true end
  local key = headers and header(headers, "Idempotency-Key")
  return key ~= nil and key:match("%S") ~= nil
end
local idempotent = M.idempotent

------------------------------------------------------------------------
-- did the request reach the server?

-- errors that only connecting can give (cosocket messages, lowercase)
local NOT_SENT = { "connection refused", "no route to host",
                   "network is unreachable", "could not be resolved",
                   "no resolver defined" }

--- not_sent(err [, stage]) -> boolean: the request certainly did not
-- reach the server: stage "connect" (the caller knows), or an error
-- only connecting gives.  A timeout without a stage may have been a
-- read timeout: false.
function M.not_sent(err, stage)
  if stage ~= nil and type(stage) ~= "string" then
    error("bad argument #2 to 'not_sent' (string or nil expected for "
          .. "'stage', got " .. type(stage) .. ")", 2)
  end
  if stage == "connect" then return true end
  if type(err) ~= "string" then return false end
  local e = lower(err)
  for _, s in ipairs(NOT_SENT) do
    if find(e, s, 1, true) then return true end
  end
  return false
end
local not_sent = M.not_sent

------------------------------------------------------------------------
-- per-try timeouts

-- the table handed to do_request; factors already checked.  Whole
-- milliseconds, at least 1, at most the longest timeout nginx takes (a
-- huge timeout x 1000 would otherwise overflow to inf).
local MAX_MS = util.MAX_TIMEOUT_MS
local function ms(s)
  if s == nil then return nil end
  local v = s * 1000
  if v >= MAX_MS then return MAX_MS end
  return max(1, floor(v))
end

local function make_timeouts(timeout, factors)
  local c, s, r = util.sides(timeout, factors)
  return { connect = ms(c), send = ms(s), read = ms(r), timeout = timeout }
end

--- timeouts(timeout [, factors]) -> { connect, send, read (ms), timeout
-- (s) } | nil: a try's timeout (seconds) in the shape of lua-resty-http's
-- set_timeouts(connect, send, read) and cosockets' settimeouts.  Each is
-- timeout x its factor (default 1; false: nil, keep the client's own),
-- rounded down to whole milliseconds, at least 1.
function M.timeouts(timeout, factors)
  if timeout == nil then return nil end
  if type(timeout) ~= "number" or not (timeout > 0 and timeout < 1 / 0) then
    error("bad argument #1 to 'timeouts' (a finite number > 0 or nil "
          .. "expected, got " .. repr(timeout) .. ")", 2)
  end
  local problem = util.factors_problem(factors)
  if problem then
    error("bad argument #2 to 'timeouts' (" .. problem .. ")", 2)
  end
  return make_timeouts(timeout, factors)
end

------------------------------------------------------------------------
-- options of request

local WHO = "backoff.http.request"
local USAGE = "; usage: backoff.http.request(policy, do_request [, opts])"
local DOOR = { who = WHO, waits = true, left_timeout = true }

local DEFAULT_STATUSES = { [408] = true, [429] = true, [502] = true,
                           [503] = true, [504] = true }
local DEFAULT_MAX_HINT = 60

-- statuses: a list of codes, or a set { [503] = true }; nil, the
-- offending value and what it should be when it is neither
local function status_set(v)
  if type(v) ~= "table" then return nil, v, "a list of status codes" end
  local set = {}
  for k, x in next, v do
    local code = x
    if x == true then code = k
    elseif not (type(k) == "number" and k == floor(k) and k >= 1) then
      return nil, x, "a list of status codes or a set { [code] = true }"
    end
    if type(code) ~= "number" or code ~= floor(code) or code < 100
       or code > 599 then
      return nil, code, "status codes from 100 to 599"
    end
    set[code] = true
  end
  return set
end

-- a rule whose test is f(v) -> ok, and whose message says what f says
local function rule(f, text)
  local r = check.custom(text, function(v) return (f(v)) ~= nil end)
  r.fail = function(ctor, k, v)
    local _, bad, want = f(v)
    if bad == nil then bad = v end
    check.fail(ctor, k, want or text, bad)
  end
  return r
end

local function refused(msg)
  local r = check.custom("", function() return false end)
  r.fail = function() raise(WHO .. ": option " .. msg) end
  return r
end

local check_opts = check.validator(WHO, setup.rules {
  method = rule(function(v)
    local name, want = method_name(v)
    return name, v, want
  end, "a method"),
  headers = check.custom("a table (the request's headers)", function(v)
    return type(v) == "table" end),
  idempotent = check.boolean(),
  statuses = rule(status_set, "a list of status codes"),
  timeouts = setup.timeouts_rule(),
  -- the hint comes from the response's headers
  retry_after = refused("'retry_after' is not taken: the hint comes from "
                        .. "the response's headers (see max_hint)"),
  server_hint = refused("'server_hint' is not taken: the hint comes from "
                        .. "the response's headers (see max_hint)"),
})

-- a statuses table compiled once (weak: by the caller's table)
local compiled = setmetatable({}, { __mode = "k" })
local function statuses_of(v)
  if v == nil then return DEFAULT_STATUSES end
  local set = compiled[v]
  if set == nil then
    set = status_set(v)
    compiled[v] = set
  end
  return set
end

-- the request's settings from opts (checked): may it be retried after
-- it reached the server, and which statuses are retried
local function settings(opts)
  local method, idem = opts.method, opts.idempotent
  if idem == nil then
    if method == nil then
      raise(WHO .. ": option 'method' is required: the method decides "
        .. "whether a request that reached the server may be sent again "
        .. "(GET, HEAD, OPTIONS, TRACE, PUT and DELETE may; POST and PATCH "
        .. "may not, unless an Idempotency-Key header is set); or say "
        .. "idempotent = true or false")
    end
    idem = idempotent(method_name(method), opts.headers)
  end
  return idem, statuses_of(opts.statuses)
end

------------------------------------------------------------------------
-- one request

-- the status and headers of what do_request returned: a response
-- table (lua-resty-http's res.headers, ngx.location.capture's
-- res.header), or a status number and headers; nil, message for
-- anything else.  nil, nil for nil/false (a transport failure).
local function read_status(r1, second)
  local t = type(r1)
  if t == "number" then return r1, second end
  if t ~= "table" then
    if r1 == nil or r1 == false then return nil, nil end
    return nil, "do_request must return a response (a table with a "
                .. "status), a status number, or nil and an error (got "
                .. repr(r1) .. ")"
  end
  local ok, s, h = pcall(function()
    local hs = r1.headers
    if hs == nil then hs = r1.header end        -- ngx.location.capture
    return r1.status, hs
  end)
  if not ok or type(s) ~= "number" then
    return nil, "do_request returned a table without a numeric 'status' "
                .. "(got " .. repr(ok and s or nil) .. ")"
  end
  return s, h
end

-- The first value do_request returned, judged:
--   "ok": the result as it came (a status not retried, < 500)
--   "error_status", err: the result as it came, a 5xx not retried
--   "fail", err, res, hint, sent: a retryable status or a transport
--     failure
--   "bad", message: not a response at all
local function judge(st, r1, ...)
  local status, headers = read_status(r1, (...))
  if status == nil then
    if headers ~= nil then return "bad", headers end
    local err, stage = ...
    if stage ~= nil and type(stage) ~= "string" then stage = nil end
    return "fail", err, nil, nil, not not_sent(err, stage)
  end
  if status ~= floor(status) or status < 100 or status > 999 then
    return "bad", "do_request returned a bad status " .. repr(status)
  end
  if not st.statuses[status] then
    if status >= 500 then return "error_status", "HTTP " .. status end
    return "ok"
  end
  if type(headers) ~= "table" then headers = nil end
  return "fail", "HTTP " .. status, r1, headers and hint_of(headers, status),
         true
end

-- the try's timeouts for do_request
local function timeouts_of(st, timeout)
  if timeout == nil then return nil end
  return make_timeouts(timeout, st.ropts.timeouts)
end

local after

-- try st.attempt failed: the next one, or give up with the last error
-- and response
local function failed(st, do_request, err, res, hint, sent)
  if not st.ready then
    engine.state(st)
    st.max_hint = st.ropts.max_hint or DEFAULT_MAX_HINT
  end
  local stop = sent and not st.idem and "not_idempotent" or nil
  local delay, t = engine.failed(st, err, res, hint, stop)
  if delay == nil then
    engine.gave_up(st, err, t, res)
    return nil, err, t, res
  end
  st.sleep(delay)
  local attempt, timeout = engine.next(st, t)
  if attempt == nil then
    engine.gave_up(st, err, timeout, res)
    return nil, err, timeout, res
  end
  return after(st, do_request,
               setup.call(st, do_request, attempt, timeouts_of(st, timeout)))
end

-- the results of a try: passed on, or the next try
after = function(st, do_request, r1, ...)
  local kind, err, res, hint, sent = judge(st, r1, ...)
  if kind == "ok" then
    engine.succeeded(st, r1)
    return r1, ...
  elseif kind == "fail" then
    return failed(st, do_request, err, res, hint, sent)
  elseif kind == "bad" then
    error(WHO .. ": " .. err, 0)
  end
  -- a final 5xx: the response as it came, counted as a failure
  if not st.ready then engine.state(st) end
  engine.record(st, false)
  engine.gave_up(st, err, "error_status", r1)
  return r1, ...
end

--- request(policy, do_request [, opts]) -> the response as do_request
-- returned it | nil, err, reason, res
function M.request(policy, do_request, opts)
  local f, b = setup.policy(WHO, policy, USAGE)
  if not util.callable(do_request) then
    raise(WHO .. ": argument 'do_request' must be a function (got "
          .. type(do_request) .. ")" .. USAGE)
  end
  opts = check_opts(opts) or {}
  local idem, statuses = settings(opts)
  setup.need_stop(WHO, f, opts)
  local st, reason = engine.begin(DOOR, policy, f, b, opts)
  if not st then return nil, nil, reason end
  st.idem, st.statuses = idem, statuses
  return after(st, do_request,
               setup.call(st, do_request, 1, timeouts_of(st, st.timeout)))
end

-- the defaults, for the docs' sake and tests: fresh copies
function M.defaults()
  local s = {}
  for code in pairs(DEFAULT_STATUSES) do s[#s + 1] = code end
  table.sort(s)
  return { statuses = s, max_hint = DEFAULT_MAX_HINT }
end

return M

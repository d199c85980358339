-- backoff.http.rules: RFC 9110's rules for a request and what a try
-- returned, shared by the HTTP doors (backoff.http.request and
-- backoff.hedge; internal: backoff.http exports idempotent and
-- not_sent).  Pure functions: no nginx, no state.

local check = require "backoff.check"
local setup = require "backoff.setup"
local util = require "backoff.util"
local hint_mod = require "backoff.http.hint"

local error, floor, ipairs, max, next, pcall, setmetatable, type =
      error, math.floor, ipairs, math.max, next, pcall, setmetatable, type
local find, lower = string.find, string.lower
local repr, raise = util.repr, check.raise
local header, hint_of = hint_mod.header, hint_mod.hint

local R = {}

R.DEFAULT_STATUSES = { [408] = true, [429] = true, [502] = true,
                       [503] = true, [504] = true }
local DEFAULT_STATUSES = R.DEFAULT_STATUSES

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
function R.idempotent(method, headers)
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
local idempotent = R.idempotent

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
function R.not_sent(err, stage)
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
local not_sent = R.not_sent

------------------------------------------------------------------------
-- a try's timeouts, in the clients' milliseconds

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

--- R.timeouts(timeout, factors) -> the table handed to do_request
function R.timeouts(timeout, factors)
  local c, s, r = util.sides(timeout, factors)
  return { connect = ms(c), send = ms(s), read = ms(r), timeout = timeout }
end

------------------------------------------------------------------------
-- the options of an HTTP door

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

-- an option a door does not take, and why
local function refused(msg)
  local r = check.custom("", function() return false end)
  r.fail = function(ctor) raise(ctor .. ": option " .. msg) end
  return r
end


--- R.OPTIONS: the rules of the HTTP doors' own options (their
-- validator adds the runner's, setup.rules)
-- RFC 9110's methods (section 9) and PATCH: `method = "get"` is not
-- GET (methods are case-sensitive, and "get" is never retried as
-- idempotent), and is almost surely a typo: the doors refuse it
local STANDARD = { GET = true, HEAD = true, POST = true, PUT = true,
                   DELETE = true, CONNECT = true, OPTIONS = true,
                   TRACE = true, PATCH = true }

local function door_method(v)
  local name, want = method_name(v)
  if name and STANDARD[name:upper()] and not STANDARD[name] then
    return nil, v, ('%s (methods are case-sensitive, RFC 9110 9.1: %s '
      .. 'is not %s, and would never be retried as idempotent; write '
      .. '"%s")'):format(want or "a method name", repr(v), name:upper(),
      name:upper())
  end
  return name, v, want
end

R.OPTIONS = {
  method = rule(door_method, "a method"),
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
}

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

--- R.settings(who, opts) -> idem, statuses: from a door's checked
-- options, may the request be sent again once it reached the server,
-- and which statuses are retried.  The method is never guessed: without
-- `method` (or `idempotent`) it raises, naming the door.
function R.settings(who, opts)
  local method, idem = opts.method, opts.idempotent
  if idem == nil then
    if method == nil then
      raise(who .. ": option 'method' is required: the method decides "
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
-- what a try returned

-- the status and headers of what do_request returned: a response
-- table (lua-resty-http's res.headers, ngx.location.capture's
-- res.header), or a status number and headers; nil, message for
-- anything else.  nil, nil for nil/false (a transport failure).
-- a response's status and headers (indexing a user's table may raise)
local function status_fields(r1)
  local hs = r1.headers
  if hs == nil then hs = r1.header end          -- ngx.location.capture
  return r1.status, hs
end

local function read_status(r1, second)
  local t = type(r1)
  if t == "number" then return r1, second end
  if t ~= "table" then
    if r1 == nil or r1 == false then return nil, nil end
    return nil, "do_request must return a response (a table with a "
                .. "status), a status number, or nil and an error (got "
                .. repr(r1) .. ")"
  end
  local ok, s, h = pcall(status_fields, r1)
  if not ok or type(s) ~= "number" then
    return nil, "do_request returned a table without a numeric 'status' "
                .. "(got " .. repr(ok and s or nil) .. ")"
  end
  return s, h
end

--- R.judge(statuses, r1, ...) -> what do_request's results r1, ... are:
--   "ok": the result as it came (a status not retried, < 500)
--   "error_status", err: the result as it came, a 5xx not retried
--   "fail", err, res, hint, sent [, status]: a retryable status (its
--     response, the server's hint, the status) or a transport failure
--   "bad", message: not a response at all
function R.judge(statuses, r1, ...)
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
  if not statuses[status] then
    if status >= 500 then return "error_status", "HTTP " .. status end
    return "ok"
  end
  if type(headers) ~= "table" then headers = nil end
  return "fail", "HTTP " .. status, r1, headers and hint_of(headers, status),
         true, status
end


return R

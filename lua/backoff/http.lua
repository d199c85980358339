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
--     reason "not_idempotent".

local backoff = require "backoff"
local hint_mod = require "backoff.http.hint"
local util = require "backoff.util"

local core = require "backoff.core"
local repr, core_now = core._repr, core._now
local backoff_mt = core._metatable

local error, floor, getmetatable, ipairs, max, next, pairs, pcall,
      rawget, setmetatable, tostring, type =
      error, math.floor, getmetatable, ipairs, math.max, next, pairs, pcall,
      rawget, setmetatable, tostring, type
local find, lower = string.find, string.lower

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

local SIDES = { connect = true, send = true, read = true }

-- nil when f is nil or good factors, else what is wrong
local function factors_problem(f)
  if f == nil then return nil end
  if type(f) ~= "table" then
    return "a table of factors expected, got " .. type(f)
  end
  for k, v in next, f do          -- read raw: no metamethod runs
    if not SIDES[k] or v ~= false and (type(v) ~= "number"
                                       or not (v > 0 and v < 1 / 0)) then
      return "takes connect, send and read: a factor > 0 or false; got "
             .. repr(k) .. " = " .. repr(v)
    end
  end
  return nil
end

-- the table handed to do_request; factors already checked.  At most
-- the longest timeout nginx takes (a huge timeout x 1000 would
-- otherwise overflow to inf).
local MAX_MS = util.MAX_TIMEOUT_MS
local function make_timeouts(timeout, f)
  f = f or SIDES
  local function ms(side)
    local x = rawget(f, side)
    if x == false then return nil end
    if x == nil or x == true then x = 1 end
    local v = timeout * x * 1000
    if v >= MAX_MS then return MAX_MS end
    return max(1, floor(v))
  end
  return { connect = ms("connect"), send = ms("send"), read = ms("read"),
           timeout = timeout }
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
  local problem = factors_problem(factors)
  if problem then
    error("bad argument #2 to 'timeouts' (" .. problem .. ")", 2)
  end
  return make_timeouts(timeout, factors)
end

------------------------------------------------------------------------
-- options of request

local DEFAULT_STATUSES = { [408] = true, [429] = true, [502] = true,
                           [503] = true, [504] = true }
local DEFAULT_MAX_HINT = 60

local HTTP_KEYS = { method = true, headers = true, idempotent = true,
                    statuses = true, max_hint = true, timeouts = true }

-- option errors are raised at level 0 inside a pcall, and raised again
-- by request at its caller
local function bad_opt(msg, v)
  error("backoff.http.request: option " .. msg .. " (got " .. repr(v)
        .. ")", 0)
end

-- statuses: a list of codes, or a set { [503] = true }
local function status_set(v)
  if type(v) ~= "table" then
    bad_opt("'statuses' must be a list of status codes", v)
  end
  local set = {}
  local function add(code)
    if type(code) ~= "number" or code ~= floor(code) or code < 100
       or code > 599 then
      bad_opt("'statuses' must hold status codes from 100 to 599", code)
    end
    set[code] = true
  end
  for k, x in next, v do
    if x == true then add(k)
    elseif type(k) == "number" and k == floor(k) and k >= 1 then add(x)
    else bad_opt("'statuses' must be a list of status codes or a set "
                 .. "{ [code] = true }", x) end
  end
  return set
end

-- opts -> the HTTP settings and the runner's own options (ropts)
local function compile(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then
    error("bad argument #3 to 'request' (table or nil expected for "
          .. "'opts', got " .. type(opts) .. ")", 0)
  end
  local o, ropts = { statuses = DEFAULT_STATUSES,
                     max_hint = DEFAULT_MAX_HINT }, {}
  for k, v in next, opts do       -- read raw: no metamethod runs
    if k == "retry_after" then
      error("backoff.http.request: option 'retry_after' is not taken: the "
            .. "hint comes from the response's headers (see max_hint)", 0)
    elseif HTTP_KEYS[k] then
      o[k] = v
    else
      ropts[k] = v
    end
  end
  local method = o.method
  if method == nil then method = "GET" end
  local name, want = method_name(method)
  if not name then bad_opt("'method' must be " .. want, method) end
  if o.headers ~= nil and type(o.headers) ~= "table" then
    bad_opt("'headers' must be a table (the request's headers)", o.headers)
  end
  if o.idempotent ~= nil and type(o.idempotent) ~= "boolean" then
    bad_opt("'idempotent' must be a boolean", o.idempotent)
  end
  if rawget(opts, "statuses") ~= nil then
    o.statuses = status_set(rawget(opts, "statuses"))
  end
  local mh = o.max_hint
  if type(mh) ~= "number" or not (mh >= 0 and mh < 1 / 0) then
    bad_opt("'max_hint' must be a finite number >= 0 (seconds)", mh)
  end
  local problem = factors_problem(o.timeouts)
  if problem then
    error("backoff.http.request: option 'timeouts' " .. problem, 0)
  end
  if o.idempotent == nil then
    o.idem = idempotent(name, o.headers)
  else
    o.idem = o.idempotent
  end
  local ok, err = pcall(backoff._check_ropts, ropts)
  if not ok then
    error((tostring(err):gsub("^backoff%.retry:", "backoff.http.request:")),
          0)
  end
  return o, ropts
end

-- the policy with max_hint (the smaller of its own and the given one),
-- and the facts about its deadline: { duration, start }.  Derived
-- templates are kept per policy object and max_hint (weak).
local derived = setmetatable({}, { __mode = "k" })

local function with_max_hint(policy, max_hint)
  local is_obj = type(policy) == "userdata"
                 and getmetatable(policy) == backoff_mt
  if not is_obj and type(policy) ~= "table" then
    error("bad argument #1 to 'request' (a backoff object or an options "
          .. "table expected for 'policy', got " .. type(policy) .. ")", 0)
  end
  if is_obj then
    local by = derived[policy]
    if not by then
      by = {}
      derived[policy] = by
    end
    local d = by[max_hint]
    if d then return d[1], d[2] end
  end
  local c
  if is_obj then
    c = policy:config()
  else
    if type(rawget(policy, "strategy")) ~= "string" then
      error("backoff.http.request: policy table needs a 'strategy' field",
            0)
    end
    c = {}
    for k, v in next, policy do c[k] = v end
  end
  -- a bad max_hint of a policy table stays, for backoff.new to refuse
  local own = c.max_hint
  if own == nil or type(own) == "number" and own > max_hint
     and own < 1 / 0 then
    c.max_hint = max_hint
  end
  local ok, b = pcall(backoff.new, c.strategy, c)
  if not ok then error(b, 0) end
  local facts = false
  local dur = b:config().max_actual_duration
  if dur and dur > 0 then facts = { duration = dur, start = c.start } end
  if is_obj then derived[policy][max_hint] = { b, facts } end
  return b, facts
end

------------------------------------------------------------------------
-- one request

-- a failed try: err (string or the client's error), status and res
-- (for a retryable status), stage, sent, hint
local Failure = {}
Failure.__index = Failure

-- the first value do_request returned, judged: a success is passed on
-- as it came; a failure becomes nil, a Failure
local function judge(st, r1, ...)
  local status, headers
  local t = type(r1)
  if t == "table" then
    local ok, s, h = pcall(function()
      local hs = r1.headers
      if hs == nil then hs = r1.header end      -- ngx.location.capture
      return r1.status, hs
    end)
    if not ok or type(s) ~= "number" then
      st.fatal = "do_request returned a table without a numeric 'status' "
                 .. "(got " .. repr(ok and s or nil) .. ")"
      return nil, setmetatable({ err = st.fatal }, Failure)
    end
    status, headers = s, h
  elseif t == "number" then
    status, headers = r1, (...)
  elseif r1 == nil or r1 == false then
    local err, stage = ...
    if stage ~= nil and type(stage) ~= "string" then stage = nil end
    local f = setmetatable({ err = err, stage = stage,
                             sent = not not_sent(err, stage) }, Failure)
    return nil, f
  else
    st.fatal = "do_request must return a response (a table with a "
               .. "status), a status number, or nil and an error (got "
               .. repr(r1) .. ")"
    return nil, setmetatable({ err = st.fatal }, Failure)
  end
  if status ~= floor(status) or status < 100 or status > 999 then
    st.fatal = "do_request returned a bad status " .. repr(status)
    return nil, setmetatable({ err = st.fatal }, Failure)
  end
  if not st.o.statuses[status] then return r1, ... end
  if type(headers) ~= "table" then headers = nil end
  local h = headers and hint_of(headers, status)
  return nil, setmetatable({ err = "HTTP " .. status, status = status,
    res = r1, sent = true, hint = h }, Failure)
end

-- the try's timeouts: the runner's per-try timeout, else (a deadline
-- without per-try timeouts) the time left
local function try_timeouts(st, attempt, timeout)
  local facts = st.facts
  if timeout == nil and facts then
    local now = core_now(st.policy)
    if attempt == 1 then st.t0 = now end
    timeout = (facts.start or st.t0) + facts.duration - now
    if timeout <= 0 then timeout = 0.001 end
  end
  if timeout == nil then return nil end
  return make_timeouts(timeout, st.o.timeouts)
end

-- the runner's failure value: a Failure, or what do_request raised
local function failure_of(err)
  if getmetatable(err) == Failure then return err end
  return setmetatable({ err = err, sent = true, raised = true }, Failure)
end

-- the user's hooks get err, ..., res instead of the Failure
local function wrap_hooks(st, ropts)
  local on_retry, on_giveup, retry_on = ropts.on_retry, ropts.on_giveup,
                                        ropts.retry_on
  ropts.retry_on = function(err, attempt)
    local f = failure_of(err)
    st.last = f
    if st.fatal then return false, "bad_response" end
    if f.sent and not st.o.idem then return false, "not_idempotent" end
    if retry_on then
      local yes, why = retry_on(f.err, attempt, f.res)
      if not yes then return false, why end
    end
    return true
  end
  ropts.retry_after = function(err)
    return failure_of(err).hint
  end
  if on_retry then
    ropts.on_retry = function(err, delay, attempt)
      local f = failure_of(err)
      return on_retry(f.err, delay, attempt, f.res)
    end
  end
  if on_giveup then
    ropts.on_giveup = function(err, reason, attempts)
      local f = err ~= nil and failure_of(err) or nil
      return on_giveup(f and f.err, reason, attempts, f and f.res)
    end
  end
end

-- the runner's results: a success as it came; a give-up as
-- nil, err, reason, res
local function results(st, r1, ...)
  if r1 then return r1, ... end
  if st.fatal then error("backoff.http.request: " .. st.fatal, 2) end
  local err, reason = ...
  if err == nil then return nil, nil, reason end
  local f = failure_of(err)
  return nil, f.err, reason, f.res
end

--- request(policy, do_request [, opts]) -> the response as do_request
-- returned it | nil, err, reason, res
-- compile and with_max_hint, their errors raised at the caller of request
local function setup(policy, opts)
  local o, ropts = compile(opts)
  return o, ropts, with_max_hint(policy, o.max_hint)
end

function M.request(policy, do_request, opts)
  local mt = getmetatable(do_request)
  if type(do_request) ~= "function"
     and not (type(mt) == "table" and mt.__call ~= nil) then
    error("bad argument #2 to 'request' (a function expected for "
          .. "'do_request', got " .. type(do_request) .. ")", 2)
  end
  local ok, o, ropts, p, facts = pcall(setup, policy, opts)
  if not ok then error(o, 2) end
  local st = { o = o, policy = p, facts = facts }
  wrap_hooks(st, ropts)
  return results(st, backoff.retry(p, function(attempt, timeout)
    return judge(st, do_request(attempt,
                                try_timeouts(st, attempt, timeout)))
  end, ropts))
end

-- the defaults, for the docs' sake and tests: fresh copies
function M.defaults()
  local s = {}
  for code in pairs(DEFAULT_STATUSES) do s[#s + 1] = code end
  table.sort(s)
  return { statuses = s, max_hint = DEFAULT_MAX_HINT }
end

return M

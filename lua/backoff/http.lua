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
local rules = require "backoff.http.rules"
local setup = require "backoff.setup"
local check = require "backoff.check"
local util = require "backoff.util"
local hint_mod = require "backoff.http.hint"

local error, pairs, type = error, pairs, type
local repr, raise = util.repr, check.raise

local M = {
  hint = hint_mod.hint,
  header = hint_mod.header,
  idempotent = rules.idempotent,
  not_sent = rules.not_sent,
}

------------------------------------------------------------------------
-- per-try timeouts

local make_timeouts = rules.timeouts

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
local DEFAULT_STATUSES = rules.DEFAULT_STATUSES
local DEFAULT_MAX_HINT = 60
local DOOR = { who = WHO, waits = true, left_timeout = true,
               max_hint = DEFAULT_MAX_HINT }

local check_opts = check.validator(WHO, setup.rules(rules.OPTIONS))

------------------------------------------------------------------------
-- one request

-- the try's timeouts for do_request
local function timeouts_of(run, timeout)
  if timeout == nil then return nil end
  return make_timeouts(timeout, run.ropts.timeouts)
end

-- the results of a try: passed on, or the next try
local function after(run, statuses, do_request, r1, ...)
  local kind, err, res, hint, sent = rules.judge(statuses, r1, ...)
  if kind == "ok" then
    run:succeeded(r1)
    return r1, ...
  elseif kind == "fail" then
    local attempt, timeout = run:retry(err, res, hint, sent)
    if attempt == nil then return nil, err, timeout, res end
    return after(run, statuses, do_request, setup.call(run,
                 do_request, attempt, timeouts_of(run, timeout)))
  elseif kind == "bad" then
    error(WHO .. ": " .. err, 0)
  end
  -- a final 5xx: the response as it came, counted as a failure
  run:record(false)
  run:finish(false, err, "error_status", r1)
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
  local idem, statuses = rules.settings(WHO, opts)
  setup.need_stop(WHO, f, opts)
  local run, reason, err = engine.run(DOOR, policy, f, b, opts, idem)
  if not run then return nil, err, reason end
  return after(run, statuses, do_request,
               setup.call(run, do_request, 1, timeouts_of(run, run.timeout)))
end

-- the defaults, for the docs' sake and tests: fresh copies
function M.defaults()
  local s = {}
  for code in pairs(DEFAULT_STATUSES) do s[#s + 1] = code end
  table.sort(s)
  return { statuses = s, max_hint = DEFAULT_MAX_HINT }
end

return M

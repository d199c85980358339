-- backoff.hedge: hedged requests for OpenResty.  A request that has not
-- answered within the hedging delay is sent again, up to the policy's
-- max_attempts copies; the first answer wins and the other copies are
-- cancelled at once (their light threads killed, their connections
-- closed).  doc/hedge.md is the reference.
--
--   local hedge = require "backoff.hedge"
--   local res, err, reason = hedge.request(policy, function(attempt, t,
--                                                           cancel)
--     local sock = cancel:on_cancel(ngx.socket.tcp())
--     ...                      -- connect, send, read: return res
--   end, { method = "GET", delay = lat, budget = hedges_budget })
--
-- The rules (backoff.http's, so a hedge is never what a retry would not
-- be):
--   * only an idempotent request is hedged (http.idempotent: the
--     method, or an Idempotency-Key); any other runs unhedged, one copy
--     at a time, another only after a failure that certainly did not
--     reach the server;
--   * a response whose status is not retryable ends the request (it
--     is returned as it came); a retryable status or a transport error
--     lets another copy start at once (after the server's hint, if it
--     gave one; a hint over max_hint starts none);
--   * every copy after the first is paid to the budget as a retry, and
--     asks the breaker and the policy (max_attempts, the deadline): a
--     refusal ends hedging for the request (gate.lua: the one place
--     these rules are applied);
--   * copies run in light threads: only where nginx can spawn them.

local rules = require "backoff.http.rules"
local setup = require "backoff.setup"
local check = require "backoff.check"
local util = require "backoff.util"
local gate_mod = require "backoff.hedge.gate"
local latency = require "backoff.hedge.latency"
local pace_mod = require "backoff.hedge.pace"
local options = require "backoff.hedge.options"
local token = require "backoff.hedge.token"
local peers_mod = require "backoff.hedge.peers"
local wait = require "backoff.hedge.wait"
local hint_mod = require "backoff.http.hint"

local error, pcall, select, tonumber, type =
      error, pcall, select, tonumber, type
local unpack = table.unpack or unpack       -- luacheck: ignore
local huge = math.huge
local callable, repr = util.callable, util.repr
local new_token, close = token.new, token.close
local is_timeout = require("backoff.budget").is_timeout
local tpcall = setup.tpcall

local M = {}

local WHO = "backoff.hedge.request"

------------------------------------------------------------------------
-- one copy's results, judged by backoff.http's rules

local function pack(...) return { n = select("#", ...), ... } end

-- r: pack(tpcall(do_request, ...)), from index i.  Returns "answer"
-- (and for a final 5xx, which ends the request as a retry would but is
-- no success, "HTTP 5xx"); or "failure",
-- { err, status, res, hint, sent, timeout }; or "bad", the message
local function judge(o, r, i)
  local kind, err, res, hint, sent, status = rules.judge(o.statuses,
                                                 unpack(r, i, r.n))
  if kind == "ok" then return "answer" end
  if kind == "error_status" then return "answer", err end
  if kind == "bad" then return "bad", err end
  return "failure", { err = err, status = status, res = res, hint = hint,
    sent = sent, timeout = status == nil and is_timeout(err) }
end

-- the response's headers in r (from index i), or nil
local function fields(r1) return r1.headers or r1.header end
local function headers_of(r, i)
  local r1 = r[i]
  if type(r1) == "number" then return r[i + 1] end
  if type(r1) ~= "table" then return nil end
  local ok, hs = pcall(fields, r1)
  return ok and hs or nil
end

-- the server's pushback (option pushback: a header of milliseconds),
-- read from any copy's response: no more hedges for this request, and
-- for the pace's upstream none for that long (gRFC A6: a value that is
-- not a count of milliseconds stops this request's hedges only)
local function pushback(st, r, i)
  local name = st.o.pushback
  if not name then return end
  local v = hint_mod.header(headers_of(r, i), name)
  if v == nil then return end
  st.no_hedge = "pushback"
  local n = tonumber(v)
  local pace = st.o.pace
  if pace and n and n >= 0 and n < 2 ^ 31 and n == math.floor(n)
     and v:match("^%s*%d+%s*$") then
    pace:pause(n / 1000)
  end
end

------------------------------------------------------------------------
-- the end of a request

-- the pace learns whether this request's hedges paid
local function outcome(st, won)
  local pace, n = st.o.pace, st.hedges
  if pace and n and n > 0 then
    st.hedges = 0
    pace:outcome(n, won)
  end
end

local function give_up(st, f, reason)
  outcome(st, false)
  local err, res = f and f.err, f and f.res
  st.gate:finish(false, reason, st.hints, err, res)
  return nil, err, reason, res
end

-- what a copy's latency teaches the estimator: an answer's (a retryable
-- status included) always; a copy cut short (cancelled, timed out) only
-- when it ran at least the delay: it lasted longer than it ran, so it
-- counts above an estimate at most that long, and shorter it says
-- nothing
local function observe(st, seconds, censored)
  local est = st.o.estimator
  if est and (not censored or seconds >= st.delay) then
    est:observe(seconds < 0 and 0 or seconds)
  end
end

-- the try's timeouts for do_request, from the gate's seconds
local function timeouts_of(st, t)
  if t == nil then return nil end
  return rules.timeouts(t, st.o.timeouts)
end

------------------------------------------------------------------------
-- the copies' ends: cancelled, or the answer

-- cancel copy c: its thread killed first (a cosocket waiting in it is
-- closed by nginx; close() would say "socket busy"), then what it
-- registered closed
local function cancel(st, c)
  local tok = c.token
  tok.cancelled = true
  st.ngx.thread.kill(c.thread)
  if st.peers then
    local now = st.gate:now()
    st.peers:done(c.peer_i, now - c.t0, now)
  end
  local list = tok.list
  for i = 1, #list do close(list[i]) end
  st.gate:cancelled(c.attempt)
  observe(st, st.gate:now() - c.t0, true)
end

local function cancel_all(st)
  local live = st.live
  for i = #live, 1, -1 do
    local c = live[i]
    live[i] = nil
    cancel(st, c)
  end
end

-- copy c answered (r from index i): told first, then the others
-- cancelled, then the run counted
local function answered(st, c, r, i, err)
  local g = st.gate
  pushback(st, r, i)
  outcome(st, c.kind == "hedge" and not err)
  if err then                      -- a final 5xx: returned, not a success
    g:failed(c.attempt, g:now() - c.t0)
    cancel_all(st)
    g:finish(false, "error_status", st.hints, err, r[i])
  else
    g:won(c.attempt, g:now() - c.t0, c.kind)
    cancel_all(st)
    g:finish(true, nil, st.hints, nil, r[i])
  end
  return unpack(r, i, r.n)
end

local function remove(live, c)
  for i = 1, #live do
    if live[i] == c then table.remove(live, i) return end
  end
end

-- the request ends with an error: do_request raised (err, passed on as
-- it came) or returned something of the wrong shape (a message).  As
-- in every door (lua/backoff/setup.lua, E.call): nothing is counted,
-- the copy's breaker ticket is given back, the others are cancelled
local function failed_hard(st, c, _took, err, message)
  local g = st.gate
  outcome(st, false)
  g:forget(c.attempt)
  cancel_all(st)
  g.finished = true
  if message then error(WHO .. ": " .. message, 0) end
  error(err, 0)
end

------------------------------------------------------------------------
-- unhedged: one copy at a time, in the caller's coroutine (the cancel
-- token it gets is never cancelled)

local function run_alone(st)
  local g, o = st.gate, st.o
  local attempt, kind, f = 1, "first", nil
  while true do
    local ok, t = g:start(attempt, kind, f)
    if not ok then return give_up(st, f, t) end
    if attempt > 1 and o.on_hedge then o.on_hedge(f.err, attempt, f.res) end
    local t0 = g:now()
    local pk, peer, pi = st.peers, nil, nil
    if pk then peer, pi = pk:choose(attempt, t0) end
    local r = pack(tpcall(st.do_request, attempt, timeouts_of(st, t),
                          new_token(attempt, peer), peer))
    local took = g:now() - t0
    if pk then pk:done(pi, took, t0 + took) end
    local c = { attempt = attempt, t0 = t0, kind = kind }
    if not r[1] then failed_hard(st, c, took, r[2]) end
    local verdict, info = judge(o, r, 2)
    if verdict == "answer" then
      observe(st, took)
      return answered(st, c, r, 2, info)
    elseif verdict == "bad" then
      failed_hard(st, c, took, nil, info)
    end
    f = info
    local stop = g:failed(attempt, took, f.sent)
    if f.status then observe(st, took) end
    if stop then return give_up(st, f, stop) end
    attempt, kind = attempt + 1, "retry"
  end
end

------------------------------------------------------------------------
-- hedged: each copy in a light thread

-- a copy's thread: the copy, its pcall'd results kept in c.r, and the
-- semaphore posted
local function copy_main(st, c, t)
  c.r = pack(tpcall(st.do_request, c.attempt, t, c.token, c.token.peer))
  local sem = st.sem
  if sem then sem:post(1) end
  return c
end

-- may a hedge start now (the pace, the pushback)?  Once refused, no
-- other hedge of this request starts (copies after a failure may)
local function hedge_allowed(st)
  if st.no_hedge then return false end
  local pace = st.o.pace
  if not pace then return true end
  local ok, why = pace:allow()
  if not ok then st.no_hedge = why end
  return ok
end

-- start the next copy: true, or false with st.stopped set
local function start(st, kind, f)
  local g = st.gate
  local attempt = g:attempts() + 1
  local hint = f and f.hint
  if kind == "hedge" and not hedge_allowed(st) then return false end
  local ok, t = g:start(attempt, kind, f)
  if not ok then
    st.stopped = t
    return false
  end
  if hint and hint > 0 then st.hints = st.hints + 1 end
  if kind == "hedge" then
    st.hedges = st.hedges + 1
    if st.o.pace then st.o.pace:hedged() end
  end
  local pk, peer, pi = st.peers, nil, nil
  local t0 = g:now()
  if pk then peer, pi = pk:choose(attempt, t0) end
  local c = { attempt = attempt, kind = kind, t0 = t0, peer_i = pi,
              token = new_token(attempt, peer) }
  local live = st.live
  live[#live + 1] = c
  c.thread = st.ngx.thread.spawn(copy_main, st, c, timeouts_of(st, t))
  local on_hedge = st.o.on_hedge
  if attempt > 1 and on_hedge then
    on_hedge(f and f.err, attempt, f and f.res)
  end
  return true
end

-- a copy ended with r (pack(pcall ok, results...)): the
-- request's results, or nothing to go on
local function ended(st, c, r)
  local g, o = st.gate, st.o
  remove(st.live, c)
  if st.peers then
    local now = st.gate:now()
    st.peers:done(c.peer_i, now - c.t0, now)
  end
  local took = g:now() - c.t0
  if not r[1] then failed_hard(st, c, took, r[2]) end
  local verdict, info = judge(o, r, 2)
  if verdict == "answer" then
    observe(st, took)
    return true, answered(st, c, r, 2, info)
  elseif verdict == "bad" then
    failed_hard(st, c, took, nil, info)
  end
  g:failed(c.attempt, took)
  if info.res ~= nil then pushback(st, r, 2) end
  if info.status then
    observe(st, took)
  elseif info.timeout then
    observe(st, took, true)
  end
  st.last = info
  local hint = info.hint
  local stop = g:hint_stop(hint)
  if stop then
    st.stopped = stop
  elseif not st.stopped then
    -- another copy at once (after the hint): the failed one's place
    st.next = { at = g:now() + (hint or 0), kind = "retry", f = info }
  end
  return false
end

-- the next start planned, if it may still happen
local function planned(st)
  local nx = st.next
  if nx and (st.stopped or st.gate.run:spent()
             or nx.kind == "hedge" and st.no_hedge) then
    st.next, nx = nil, nil
  end
  return nx
end

-- wait for the first copy to end, the next start (nx) or the deadline:
-- true and the request's results, or false (nothing to return yet)
local function await(st, nx, now)
  local run = st.gate.run
  local pause, left = nx and nx.at - now, run:left(now)
  if left and not (pause and pause < left) then pause = left end
  local c = wait.first(st, pause)
  if c ~= wait.SLEPT then return ended(st, c, c.r) end
  if run:overdue() then
    cancel_all(st)
    return true, give_up(st, st.last or { err = "timeout" },
                         "max_actual_duration")
  end
  return false
end

-- no hedge can start (the pace refuses one now, or a pushback holds):
-- copy 1 runs in the request's coroutine, with no thread and no wait;
-- true and the results, or false (it failed: the loop goes on)
local function inline_first(st)
  local g = st.gate
  local ok, t = g:start(1, "first")
  if not ok then return true, give_up(st, nil, t) end
  local pk, peer, pi = st.peers, nil, nil
  local t0 = g:now()
  if pk then peer, pi = pk:choose(1, t0) end
  local c = { attempt = 1, kind = "first", t0 = t0, peer_i = pi,
              token = new_token(1, peer) }
  c.r = pack(tpcall(st.do_request, 1, timeouts_of(st, t), c.token, peer))
  return ended(st, c, c.r)
end

-- the first copy, in a thread with the hedge planned after the delay,
-- or inline: true and the results when the request ended already
local function first_copy(st)
  local g = st.gate
  if st.no_hedge then
    return inline_first(st)
  end
  if not start(st, "first") then return true, give_up(st, nil, st.stopped) end
  if not g.run:spent() then
    st.next = { at = g:now() + st.delay, kind = "hedge" }
  end
  return false
end

-- the loop: start the copy that is due, else wait
local function hedged(st)
  local g = st.gate
  local done = pack(first_copy(st))
  if done[1] then return unpack(done, 2, done.n) end
  while true do
    local nx, now = planned(st), g:now()
    if nx and now >= nx.at then
      st.next = nil
      if start(st, nx.kind, nx.f) then
        st.next = { at = g:now() + st.delay, kind = "hedge" }
      end
    elseif not nx and #st.live == 0 then
      return give_up(st, st.last, st.stopped or "max_attempts")
    else
      done = pack(await(st, nx, now))
      if done[1] then return unpack(done, 2, done.n) end
    end
  end
end

local function run_hedged(st) return pack(hedged(st)) end

------------------------------------------------------------------------
-- the door

--- request(policy, do_request, opts) -> the winning copy's results, as
-- do_request returned them | nil, err, reason, res
function M.request(policy, do_request, opts)
  local f, b = options.policy(policy)
  if not callable(do_request) then
    check.raise(options.WHO .. ": argument 'do_request' must be a "
                .. "function (got " .. type(do_request) .. ")"
                .. options.USAGE)
  end
  local o = options.compile(opts, f, policy)
  local ngx, phase = options.threads()
  local st = { o = o, f = f, do_request = do_request, ngx = ngx,
    gate = gate_mod.new(policy, f, b, o), live = {}, hints = 0,
    hedges = 0, peers = peers_mod.chooser(o.peers) }
  if not o.idem then return run_alone(st) end
  if o.pace then o.pace:request() end
  local d = o.estimator and o.estimator:delay() or o.delay
  if type(d) ~= "number" or not (d >= 0 and d < huge) then
    check.raise(options.WHO .. ": the estimator's delay() must return a "
                .. "number of seconds >= 0 (got " .. repr(d) .. ")")
  end
  st.delay = d
  -- may a hedge start at all?  When the pace already refuses one (or
  -- the policy allows one copy), copy 1 runs without a thread
  if f.max_attempts <= 1 then
    st.no_hedge = "max_attempts"
  elseif hedge_allowed(st) then
    st.sem = wait.semaphore(phase)
  end
  local fine, r = setup.ypcall(run_hedged, st)
  if not fine then
    cancel_all(st)
    error(r, 0)
  end
  wait.release(st)
  return unpack(r, 1, r.n)
end

--- latency(opts) -> an estimator of the hedging delay (latency.lua)
function M.latency(opts)
  return (latency.new(opts))
end

--- pace(opts) -> how fast hedges may start, and whether they still
-- pay (pace.lua)
function M.pace(opts)
  return (pace_mod.new(opts))
end

return M

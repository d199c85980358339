-- backoff.phase: what the doors know of nginx's phases (internal):
-- where a wait can yield, where it may block, the default sleep of a
-- door, and the errors for a wait or a call in the wrong phase.  Nothing
-- in backoff ever blocks an nginx worker in a request phase.

local util = require "backoff.util"
local check = require "backoff.check"

local tostring, type = tostring, type

local M = {}

-- Phases where ngx.sleep yields (lua-nginx-module's
-- NGX_HTTP_LUA_CONTEXT_YIELDABLE, and the stream module's preread), and
-- the two where a blocking sleep stalls no request (Kong's rule:
-- nothing is served yet).  In every other phase (set, header_filter,
-- body_filter, log, balancer, exit_worker, ...) there is no way to wait.
M.YIELD = {
  rewrite = true, server_rewrite = true, access = true, content = true,
  timer = true, ssl_cert = true, ssl_session_fetch = true,
  ssl_client_hello = true, preread = true,
}
M.BLOCK = { init = true, init_worker = true }

local ngx_phase = util.ngx_phase
M.current = ngx_phase

-- The default sleep, for a door that waits: ngx.sleep where it can
-- yield, the blocking sleep outside nginx and in init / init_worker;
-- elsewhere in nginx none, and the phase (a positive delay raises).
-- ngx.sleep counts in milliseconds and ngx.sleep(0) only yields: a
-- positive delay under 1 ms sleeps 1 ms, a zero delay not at all.
local function nop() end

function M.default_sleep()
  local phase, ngx = ngx_phase()
  if phase == nil or M.BLOCK[phase] then return util.core_sleep end
  if M.YIELD[phase] and type(ngx.sleep) == "function" then
    local ngx_sleep = ngx.sleep
    return function(d)
      if d > 0 then return ngx_sleep(d < 0.001 and 0.001 or d) end
    end
  end
  return nop, phase
end

M.NO_YIELD = "ngx.sleep cannot yield there and a blocking sleep "
  .. "would stall every request of this worker; "

-- seconds as a message says them: 3 significant digits (a jittered
-- delay has 15), whole seconds from 1000 on
local function seconds_text(d)
  if d < 1000 then return ("%.3g"):format(d) end
  return ("%.0f"):format(d)
end
M.seconds_text = seconds_text

--- phase.wait_error(who, phase, d, advice): the error for a wait in a
-- phase that cannot wait, raised at the caller
function M.wait_error(who, phase, d, advice)
  check.raise(("%s: cannot wait %s s in nginx's %s phase: %s"):format(who,
    seconds_text(d), tostring(phase), advice))
end

--- phase.need(who, want, directive) -> ngx: raises at the caller unless
-- called in phase `want` (balancer, log, ...)
function M.need(who, want, directive)
  local p, ngx = ngx_phase()
  if p ~= want then
    check.raise(("%s needs %s (called %s)"):format(who, directive,
      p and "in the " .. tostring(p) .. " phase" or "outside nginx"))
  end
  return ngx
end

return M

-- backoff.hedge.token: the cancel token each copy of a hedged request
-- gets (internal: backoff.hedge's; doc/hedge.md, cancel:on_cancel):
-- cancel.cancelled (a field to poll), cancel.attempt (the copy: 1, 2
-- ...), cancel.peer (its peer, with option peers), cancel:on_cancel(x)
-- (x closed, or called, when the copy is cancelled).

local util = require "backoff.util"
local check = require "backoff.check"

local error, getmetatable, pcall, setmetatable, type =
      error, getmetatable, pcall, setmetatable, type
local has_method, repr = util.has_method, util.repr

local M = {}

------------------------------------------------------------------------
local Token = { __name = "backoff.hedge.cancel" }
Token.__index = Token

local function close(x)
  if type(x) == "function" then return pcall(x) end
  return pcall(x.close, x)
end

--- cancel:on_cancel(x) -> x: x (a cosocket, a lua-resty-http client:
-- anything with a close method; or a function) is closed (called) if
-- the copy is cancelled; at once when it already is
function Token:on_cancel(x)
  if getmetatable(self) ~= Token then
    check.bad_self("on_cancel", "backoff.hedge cancel token", self)
  end
  if type(x) ~= "function" and not has_method(x, "close") then
    error("bad argument #1 to 'on_cancel' (a socket, a client with a "
          .. "close method or a function expected, got " .. repr(x) .. ")",
          2)
  end
  if self.cancelled then
    close(x)
  else
    local list = self.list
    list[#list + 1] = x
  end
  return x
end

function M.new(attempt, peer)
  return setmetatable({ cancelled = false, attempt = attempt, peer = peer,
                        list = {} }, Token)
end

M.close = close
M.metatable = Token

return M


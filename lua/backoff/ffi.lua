-- backoff.ffi: the LuaJIT FFI fast path of b:failure() and b:success().
--
-- require("backoff.ffi")(methods) installs it into the methods table of
-- backoff.core (lua/backoff.lua does this once, at load).
--
-- Under LuaJIT, b:failure() and b:success() go through the FFI to
-- lbackoff_ffi_step (see csrc/lbackoff_ffi.c): the JIT compiles that into a
-- direct call, where calling a Lua C function ends the trace.  Only
-- userdata carrying the module's metatable are passed (Lua code cannot
-- put it on a userdata of its own), and the step checks their owner;
-- anything the step does not handle (a bad argument, a Lua clock, a
-- hint) runs the C method itself, so results and errors are the same
-- either way.  Set BACKOFF_NO_FFI=1 to turn it off.  Returns true when
-- installed.

local util = require "backoff.util"

local getenv, getmetatable, pcall, rawget, require, type =
      os.getenv, getmetatable, pcall, rawget, require, type

return function(methods)
  if not rawget(_G, "jit") or getenv("BACKOFF_NO_FFI") then return false end
  local has_ffi, ffi = pcall(require, "ffi")
  local path = has_ffi and package.searchpath
               and package.searchpath("backoff.core", package.cpath)
  if not path then return false end
  pcall(ffi.cdef, [[
    int lbackoff_ffi_step(void *ud, const void *owner, int op, double ts,
                          double *out);
    const void *lbackoff_ffi_token(void);
  ]])                           -- fails harmlessly when already declared
  local ok, step = pcall(function()
    local lib = ffi.load(path)
    -- the library loaded must be the one require loaded, not a namesake
    if lib.lbackoff_ffi_token() ~= ffi.cast("const void *", util.ffi.token)
    then return nil end
    return lib.lbackoff_ffi_step
  end)
  if not ok or not step then return false end

  local reasons, owner = util.ffi.reasons()
  local mt = util.backoff_mt
  if not reasons then return false end  -- installed already (a 2nd load)
  owner = ffi.cast("const void *", owner)  -- a cdata: compiled as a constant
  local out = ffi.new("double[2]")
  local FAILURE, SUCCESS, NOW = 0, 1, 2

  -- The step op (FAILURE or SUCCESS) for self, else slow (the method,
  -- through which an object joins the set the step knows).  Only
  -- userdata carrying the module's metatable are passed: other values
  -- never reach the FFI.  (A Lua-side set of objects, checked here, made
  -- LuaJIT sometimes compile an object's first call as the main path:
  -- success() then ran at twice its cost in most make bench runs.)
  local function run(self, ts, op, slow)
    local r = -1
    if type(self) == "userdata" and getmetatable(self) == mt then
      if ts == nil then r = step(self, owner, op + NOW, 0, out)
      elseif type(ts) == "number" then r = step(self, owner, op, ts, out) end
    end
    if r == 0 then return out[0] end
    if r == 1 then return out[0], out[1] end
    if r > 1 then return nil, reasons[r] end
    return slow(self, ts)
  end
  -- A hint (failure's third argument) always goes to the C method.
  local c_failure = methods.failure
  local slow_failure, slow_success = util.ffi.failure, util.ffi.success
  methods.failure = function(self, ts, hint)
    if hint ~= nil then return c_failure(self, ts, hint) end
    return run(self, ts, FAILURE, slow_failure)
  end
  methods.success = function(self, ts)
    return run(self, ts, SUCCESS, slow_success)
  end
  return true
end

-- backoff.ffi: the LuaJIT FFI fast path of b:failure() and b:success().
--
-- require("backoff.ffi")(core, methods) installs it into the methods
-- table of backoff.core (lua/backoff.lua does this once, at load).
--
-- Under LuaJIT, b:failure() and b:success() go through the FFI to
-- lbackoff_ffi_step (see csrc/lbackoff_ffi.c): the JIT compiles that into a
-- direct call, where calling a Lua C function ends the trace.  Only
-- objects in the module's own weak set are passed; anything the step
-- does not handle (a bad argument, a Lua clock, a hint) runs the C
-- method itself, so results and errors are the same either way.  Set
-- BACKOFF_NO_FFI=1 to turn it off.  Returns true when installed.

local getenv, pcall, rawget, require, type =
      os.getenv, pcall, rawget, require, type

return function(core, methods)
  if not rawget(_G, "jit") or getenv("BACKOFF_NO_FFI") then return false end
  local has_ffi, ffi = pcall(require, "ffi")
  local path = has_ffi and package.searchpath
               and package.searchpath("backoff.core", package.cpath)
  if not path then return false end
  pcall(ffi.cdef, [[
    int lbackoff_ffi_step(void *ud, int op, double ts, double *out);
    const void *lbackoff_ffi_token(void);
  ]])                           -- fails harmlessly when already declared
  local ok, step = pcall(function()
    local lib = ffi.load(path)
    -- the library loaded must be the one require loaded, not a namesake
    if lib.lbackoff_ffi_token() ~= ffi.cast("const void *", core._ffi_token)
    then return nil end
    return lib.lbackoff_ffi_step
  end)
  if not ok or not step then return false end

  local objects, reasons = core._ffi_objects()
  local trust = core._ffi_trust
  if not objects then return false end  -- handed out already (a 2nd load)
  local out = ffi.new("double[2]")
  local FAILURE, SUCCESS, NOW = 0, 1, 2

  -- the method op (FAILURE or SUCCESS), falling back to c_method; a
  -- hint (failure's third argument) always goes to c_method
  local function method(op, c_method)
    return function(self, ts, hint)
      if hint ~= nil then return c_method(self, ts, hint) end
      local r = -1
      -- an object joins the set on its first fast call
      if objects[self] or (objects[self] == nil and trust(self)) then
        if ts == nil then r = step(self, op + NOW, 0, out)
        elseif type(ts) == "number" then r = step(self, op, ts, out) end
      end
      if r == 0 then return out[0] end
      if r == 1 then return out[0], out[1] end
      if r > 1 then return nil, reasons[r] end
      return c_method(self, ts)
    end
  end
  methods.failure = method(FAILURE, methods.failure)
  methods.success = method(SUCCESS, methods.success)
  return true
end

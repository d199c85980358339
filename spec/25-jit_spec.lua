-- The retry doors (backoff.retry, b:retry) and the JIT.  A door is a
-- vararg function, so that LuaJIT never starts a trace at its entry
-- (CONTRIBUTING.md, "The JIT and the doors"): a trace that started there
-- either aborted ("leaving loop in root trace": the door passes fn's
-- results on through a vararg function) until the door was blacklisted
-- for the life of the process, or, recorded on a first call's setup
-- path, left a loop calling the door running through that trace and its
-- side trace, never compiled as a loop.  The checks read the bytecode
-- and the traces (jit.util), never a clock.
local backoff = require "backoff"

local OPTS = { initial_delay = 0.001, max_delay = 10, jitter = "full",
  max_attempts = 6 }

describe("the retry doors", function()
  it("ignore extra arguments, as they always did", function()
    local b = backoff.exponential(OPTS)
    local function fn(attempt) return "done", attempt end
    assert.same({ "done", 1 }, { backoff.retry(b, fn, nil, "extra", 2) })
    assert.same({ "done", 1 }, { b:retry(fn, nil, "extra") })
  end)
end)

-- PUC 5.1 gives a vararg function that never names `...` an `arg`
-- table, built on every call (LUA_COMPAT_VARARG): the doors name it.
-- Its flag is the byte after numparams in string.dump's function header.
if _VERSION == "Lua 5.1" and not rawget(_G, "jit") then
  describe("the retry doors on PUC Lua 5.1", function()
    local function is_vararg_byte(f)
      local s = string.dump(f)
      -- header: 12 bytes; size_t and int sizes are at bytes 9 and 8
      local size_t, int = s:byte(9), s:byte(8)
      local len = 0
      for i = size_t, 1, -1 do len = len * 256 + s:byte(12 + i) end
      if s:byte(7) == 0 then  -- big endian
        len = 0
        for i = 1, size_t do len = len * 256 + s:byte(12 + i) end
      end
      -- source, linedefined, lastlinedefined, nups, numparams
      return s:byte(12 + size_t + len + 2 * int + 3)
    end

    it("build no arg table (VARARG_NEEDSARG unset)", function()
      local methods = getmetatable(backoff.constant { delay = 1 }).__index
      for _, door in ipairs({ backoff.retry, methods.retry }) do
        local flags = is_vararg_byte(door)
        assert.equal(1, flags % 2)                    -- VARARG_HASARG
        assert.equal(0, math.floor(flags / 4) % 2)    -- VARARG_NEEDSARG
      end
      -- the reader itself: a vararg function that never names `...`
      local needs = is_vararg_byte(loadstring("return function(...) end")())
      assert.equal(1, math.floor(needs / 4) % 2)
    end)
  end)
end

if not rawget(_G, "jit") then return end

local jutil = require "jit.util"
local vmdef = require "jit.vmdef"
-- fn: a builtin, which has no hot counter of its own.  A local: busted
-- runs a spec in an environment whose globals are read through a
-- metamethod, which a loop would call (and link its trace to)
local max = math.max

-- the name of the bytecode at pc of f, and its D operand
local function op(f, pc)
  local ins = jutil.funcbc(f, pc)
  if not ins then return nil end
  local o = ins % 256
  return (vmdef.bcnames:sub(o * 6 + 1, o * 6 + 6):gsub(" ", "")),
         math.floor(ins / 65536)
end

-- how the one numeric for loop of f ran: "loop trace", or what it is
local function loop_state(f)
  for pc = 1, 100 do
    local o, d = op(f, pc)
    if o == nil then break end
    if o == "JFORL" then
      local info = jutil.traceinfo(d)
      return info and info.linktype == "loop" and "loop trace"
        or ("trace " .. d .. ", " .. tostring(info and info.linktype))
    elseif o == "FORL" then return "never compiled"
    elseif o == "IFORL" then return "blacklisted"
    end
  end
  return "no loop"
end

-- no trace, no penalty, every hot counter fresh
local function fresh_jit()
  jit.off()
  jit.flush()
  jit.on()
end

describe("the retry doors under LuaJIT", function()
  local methods = getmetatable(backoff.constant { delay = 1 }).__index

  it("are vararg functions: no trace starts at their entry", function()
    assert.equal("FUNCV", (op(backoff.retry, 0)))
    assert.equal("FUNCV", (op(methods.retry, 0)))
  end)

  it("called 300,000 times outside any loop, are never blacklisted, "
     .. "and a loop calling them then compiles as one loop trace", function()
    fresh_jit()
    local policy = backoff.exponential(OPTS)
    -- straight-line calls (a vararg main chunk has no hot counter)
    local calls = assert(loadstring("local retry, p, fn = ... "
      .. ("retry(p, fn) "):rep(3000)))
    for _ = 1, 100 do calls(backoff.retry, policy, max) end
    assert.equal("FUNCV", (op(backoff.retry, 0)))
    local function loop(n)
      for _ = 1, n do backoff.retry(policy, max) end
    end
    loop(10000)
    assert.equal("loop trace", loop_state(loop))
  end)

  it("made hot on first calls (the setup path of new policies), leave a "
     .. "loop calling them free to compile as one loop trace", function()
    fresh_jit()
    local calls = assert(loadstring("local retry, new, o, fn = ... "
      .. ("retry(new(o), fn) "):rep(400)))
    calls(backoff.retry, backoff.exponential, OPTS, max)
    local policy = backoff.exponential(OPTS)
    local function loop(n)
      for _ = 1, n do backoff.retry(policy, max) end
    end
    loop(10000)
    assert.equal("loop trace", loop_state(loop))
    local function method_loop(n)
      for _ = 1, n do policy:retry(max) end
    end
    method_loop(10000)
    assert.equal("loop trace", loop_state(method_loop))
  end)
end)

-- The retry doors (backoff.retry, b:retry) and the JIT.  Under LuaJIT a
-- door is a vararg function, so that no trace starts at its entry
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

  it("are vararg functions: LuaJIT counts no hot entry there", function()
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

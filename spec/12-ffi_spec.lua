-- The LuaJIT FFI fast path of failure() and success() (lua/backoff/ffi.lua,
-- lbackoff_ffi_step in csrc/lbackoff_ffi.c): on when it should be, and
-- giving exactly what the C methods give.  Registered only under LuaJIT.
if not rawget(_G, "jit") then return end

local backoff = require "backoff"
local core = require "backoff.core"
local helpers = require "spec.helpers"

local methods = getmetatable(backoff.constant { delay = 1 }).__index
local kind = debug.getinfo(methods.failure, "S").what

if os.getenv("BACKOFF_NO_FFI") then
  describe("the LuaJIT FFI fast path with BACKOFF_NO_FFI set", function()
    it("is off: failure and success are the C methods", function()
      assert.equal("C", kind)
      assert.equal("C", debug.getinfo(methods.success, "S").what)
    end)
  end)
  return
end

describe("the LuaJIT FFI fast path", function()
  it("is on: failure and success are the Lua wrappers", function()
    assert.equal("Lua", kind)
    assert.equal("Lua", debug.getinfo(methods.success, "S").what)
  end)

  it("is installed once per lua_State", function()
    assert.equal(0, select("#", core._ffi_reasons()))
  end)

  -- the upvalue called name of function f, and a setter for it
  local function upvalue(f, name)
    for i = 1, math.huge do
      local n, v = debug.getupvalue(f, i)
      if n == nil then error("no upvalue " .. name) end
      if n == name then
        return v, function(x) debug.setupvalue(f, i, x) end
      end
    end
  end

  it("passes the FFI only userdata carrying the module's metatable",
    function()
      local mt = getmetatable(backoff.constant { delay = 1 })
      local run = upvalue(methods.failure, "run")
      local step, set_step = upvalue(run, "step")
      local seen = {}
      -- compiled traces may hold the step as a constant: interpret
      jit.off()
      jit.flush()
      set_step(function(self) seen[self] = true return -1 end)  -- a spy
      local bad = { setmetatable({}, mt), io.stdout, {}, 1, "x" }
      local ok_all = pcall(function()
        for _, self in ipairs(bad) do
          for _, op in ipairs { "failure", "success" } do
            local ok, err = pcall(methods[op], self, 0)
            assert.is_false(ok)
            assert.matches("bad argument #1 to '" .. op
              .. "' (backoff.Backoff expected", err, nil, true)
          end
        end
      end)
      local real = backoff.constant { delay = 1 }
      real:failure(0)                -- the spy sees a real object
      set_step(step)
      jit.on()
      assert.is_true(ok_all)
      for _, self in ipairs(bad) do assert.is_nil(seen[self]) end
      assert.is_true(seen[real])
    end)

  it("steps only objects it knows: each joins on its first call",
    function()
      local run = upvalue(methods.failure, "run")
      local step, set_step = upvalue(run, "step")
      local log = {}
      jit.off()
      jit.flush()
      set_step(function(...)      -- the real step, its answers logged
        local r = step(...)
        log[#log + 1] = r
        return r
      end)
      local ok_all, err = pcall(function()
        local b = backoff.constant { delay = 1 }
        assert.equal(1, b:failure(0))   -- unknown: the method, which
        assert.equal(1, b:failure(1))   -- adds it; then the fast path
        getmetatable(b).__gc(b)         -- forgotten: the method again
        assert.equal(0, b:success(2))
        assert.equal(0, b:success(3))
        -- another library's userdata given the metatable: the step
        -- answers "not mine" without reading it, the method refuses it
        local f = assert(io.tmpfile())
        debug.setmetatable(f, getmetatable(b))
        local ok = pcall(methods.failure, f, 0)
        debug.setmetatable(f, getmetatable(io.stdout))
        f:close()
        assert.is_false(ok)
      end)
      set_step(step)
      jit.on()
      assert(ok_all, err)
      assert.same({ -1, 0, -1, 0, -1 }, log)
    end)

  -- the C methods behind the wrappers (their slow path)
  local C = { failure = core._ffi_failure, success = core._ffi_success }

  -- two identical objects: one driven through the wrappers, one through
  -- the C methods directly
  local function twins(strategy, opts, clock_start)
    assert.equal("C", debug.getinfo(C.failure, "S").what)
    assert.equal("C", debug.getinfo(C.success, "S").what)
    -- both start at 0 (unless the clock gives them a start): a start
    -- read from the monotonic clock at two instants would differ, and
    -- the timestamps below would then be before or after it depending on
    -- the machine's uptime
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    if o.start == nil and o.clock == nil and not clock_start then
      o.start = 0
    end
    local fast, slow = backoff.new(strategy, o), backoff.new(strategy, o)
    local s = setmetatable({}, { __index = function(_, name)
      local f = C[name] or methods[name]
      return function(_, ...) return f(slow, ...) end
    end })
    return fast, s
  end

  local function same(a, b)
    assert.equal(select("#", unpack(a)), select("#", unpack(b)))
    assert.same(a, b)
  end

  it("gives what the C methods give, value for value", function()
    local configs = {
      { "exponential", { initial_delay = 0.5, jitter = "full", max_delay = 30,
        seed = 1 } },
      { "decorrelated", { initial_delay = 1, max_delay = 50, seed = 2 } },
      { "limd", { initial_delay = 1, delay_increment_on_failure = 2,
        delay_multiple_on_success = 0.5, consider_actual_delay = true,
        jitter_factor = 0.2, seed = 3 } },
      { "retry_timeouts", { max_actual_duration = 40, seed = 4,
        timeout_jitter_factor = 0.1 } },
      { "constant", { delay = 2, max_attempts = 5, seed = 5 } },
      { "fibonacci", { initial_delay = 1, max_actual_duration = 30,
        start = 0, seed = 6 } },
      { "exponential", { initial_delay = 1, jitter = "equal", seed = 7,
        clock = function() return 5 end } },
    }
    for _, c in ipairs(configs) do
      local fast, slow = twins(c[1], c[2])
      local ts = 0
      for i = 1, 300 do
        ts = ts + (i % 7) - 2          -- sometimes steps back
        local op = (i % 5 == 0) and "success" or "failure"
        local arg = ts
        -- the clock option (the default clock would be read at two
        -- different instants: see the next test)
        if i % 11 == 0 and c[2].clock then arg = nil end
        local a = { fast[op](fast, arg) }
        same(a, { slow[op](slow, arg) })
        for k = 1, #a do
          if type(a[k]) == "number" then
            assert.is_true(helpers.is_delay(a[k]))
          end
        end
        assert.equal(slow:attempts(), fast:attempts())
      end
    end
  end)

  it("reads the default clock when given no timestamp", function()
    local fast, slow = twins("retry_timeouts", { max_actual_duration = 100,
      seed = 1 }, true)
    local d1, t1 = fast:failure()
    local d2, t2 = slow:failure()
    assert.is_true(helpers.is_delay(d1) and helpers.is_delay(t1))
    assert.is_true(helpers.is_delay(d2) and helpers.is_delay(t2))
    -- both read backoff.now() a moment after their start
    assert.is_true(fast:elapsed() >= 0 and fast:elapsed() < 1)
    assert.is_true(math.abs(d1 - d2) < 0.01 and math.abs(t1 - t2) < 0.1)
    local s1, u1 = fast:success()
    local s2, u2 = slow:success()
    assert.is_true(math.abs(s1 - s2) < 0.01 and math.abs(u1 - u2) < 0.1)
  end)

  it("raises the C methods' errors and changes nothing", function()
    local fast = twins("exponential", { initial_delay = 1, seed = 1 })
    fast:failure(0)
    for _, bad in ipairs { "1", 0 / 0, math.huge, -math.huge, {}, true } do
      for _, op in ipairs { "failure", "success" } do
        local ok, err = pcall(fast[op], fast, bad)
        assert.is_false(ok)
        assert.matches("bad argument #2 to '" .. op ..
          "' (timestamp must be a finite number", err, nil, true)
      end
    end
    assert.equal(1, fast:attempts())
    for _, self in ipairs { {}, "x", 1, io.stdout, false } do
      local ok, err = pcall(methods.failure, self, 0)
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'failure' (backoff.Backoff "
        .. "expected", err, nil, true)
    end
  end)

  it("gives up with the reason, as the C method does", function()
    local fast, slow = twins("constant", { delay = 1, max_attempts = 2 })
    same({ fast:failure(0) }, { slow:failure(0) })
    same({ fast:failure(0) }, { slow:failure(0) })
    assert.same({ nil, "max_attempts" }, { fast:failure(0) })
  end)

  it("keeps taking the fast path inside compiled loops", function()
    local b = backoff.exponential { initial_delay = 1, max_delay = 8, seed = 9 }
    local sum = 0
    for i = 1, 20000 do
      sum = sum + b:failure(i)
      if i % 4 == 0 then b:success(i) end
    end
    -- attempts cycle 1..4 then reset: 1 + 2 + 4 + 8 per four failures
    -- (the 4th is followed by the success)
    assert.equal(20000 / 4 * (1 + 2 + 4 + 8), sum)
  end)
end)

-- The first hour works as written (issue 33): the stumbles a newcomer
-- met, each one checked.  Milliseconds given as seconds where the value
-- cannot be meant as seconds; the uncalled constructor; backoff.wrap's
-- own name; the sleep's error at the caller's line; a lower-case method;
-- the recommended policy's per-try timeouts; messages that read well.
local backoff = require "backoff"
local http = require "backoff.http"
local hedge = require "backoff.hedge"
local budget = require "backoff.budget"
local phase = require "backoff.phase"

local HERE = debug.getinfo(1, "S").short_src

-- f's error, which must be raised at this file's line
local function raised_here(f)
  local ok, err = pcall(f)
  assert.is_false(ok)
  assert.equal("string", type(err))
  assert.equal(1, err:find(HERE, 1, true), err)
  return err
end

local nosleep = function() end

describe("backoff.recommended", function()
  it("has per-try timeouts: half the time left, at least 1 s", function()
    local c = backoff.recommended():config()
    assert.equal(0.5, c.adjust_timeout_factor)
    assert.equal(1, c.min_adjust_timeout)
    local b = backoff.recommended()
    assert.equal(5, b:timeout())
    local seen = {}
    local r = backoff.retry(b, function(attempt, timeout)
      seen[attempt] = timeout
      if attempt < 3 then return nil, "refused" end
      return "ok"
    end, { sleep = nosleep })
    assert.equal("ok", r)
    assert.equal(5, seen[1])
    for i = 2, 3 do
      assert.is_true(seen[i] >= 1 and seen[i] <= 5, tostring(seen[i]))
    end
  end)

  it("suggests the option a misspelt name was meant as", function()
    local err = raised_here(function()
      backoff.recommended { max_attepts = 3 } end)
    assert.matches("backoff.recommended: unknown option 'max_attepts' "
      .. "(did you mean 'max_attempts'?)", err, 1, true)
  end)

  it("refuses a time that cannot be seconds there, naming the option",
     function()
    for _, case in ipairs {
      { { max_delay = 5000 }, "max_delay", "5 for 5000 ms" },
      { { max_actual_duration = 3000 }, "max_actual_duration",
        "3 for 3000 ms" },
      { { initial_delay = 100, max_delay = 5000 }, "initial_delay",
        "0.1 for 100 ms" },
      -- alone, above the default max_delay: still said as milliseconds
      { { initial_delay = 100 }, "initial_delay", "0.1 for 100 ms" },
      { { min_adjust_timeout = 2000 }, "min_adjust_timeout", "2 for" },
    } do
      local err = raised_here(function() backoff.recommended(case[1]) end)
      assert.matches("backoff.recommended: option '" .. case[2] .. "'",
                     err, 1, true)
      assert.matches(case[3], err, 1, true)
      assert.matches("backoff.exponential", err, 1, true)
    end
  end)

  it("takes long values that are seconds up to the bounds", function()
    local c = backoff.recommended { max_delay = 60,
                                    max_actual_duration = 600 }:config()
    assert.equal(60, c.max_delay)
    assert.equal(600, c.max_actual_duration)
    -- the strategies' constructors take any seconds (a poller may wait
    -- minutes): only recommended() and the doors know the context
    c = backoff.exponential { initial_delay = 100, max_delay = 5000 }
      :config()
    assert.equal(5000, c.max_delay)
  end)
end)

describe("an object option given a function", function()
  local p = backoff.recommended()

  it("hints at the uncalled constructor, by name", function()
    for _, case in ipairs {
      { "budget", budget.recommended, "backoff.budget.recommended()" },
      { "budget", budget.earned, "backoff.budget.earned()" },
      { "breaker", backoff.breaker.recommended,
        "backoff.breaker.recommended()" },
    } do
      local err = raised_here(function()
        backoff.retry(p, function() return true end, { [case[1]] = case[2] })
      end)
      assert.matches("option '" .. case[1] .. "'", err, 1, true)
      assert.matches("got function: did you mean " .. case[3] .. "?)",
                     err, 1, true)
    end
  end)

  it("says to call it when it is not the library's", function()
    local err = raised_here(function()
      http.request(p, function() return true end,
                   { method = "GET", metrics = function() end })
    end)
    assert.matches("option 'metrics'", err, 1, true)
    assert.matches("got function: an object is wanted here; call its "
                   .. "constructor", err, 1, true)
  end)

  it("hints for the policy too", function()
    local err = raised_here(function()
      backoff.retry(backoff.recommended, function() return true end)
    end)
    assert.matches("argument 'policy'", err, 1, true)
    assert.matches("did you mean backoff.recommended()?", err, 1, true)
  end)
end)

describe("backoff.wrap", function()
  it("names itself and its usage in its errors", function()
    local p = backoff.recommended()
    local err = raised_here(function() backoff.wrap(p, 5) end)
    assert.matches("^[^\n]-: backoff.wrap: argument 'fn'", err)
    assert.matches("usage: backoff.wrap(policy, fn [, ropts])", err, 1, true)
    assert.not_matches("backoff.retry", err, 1, true)
    err = raised_here(function() backoff.wrap(p, print, { tries = 3 }) end)
    assert.matches("backoff.wrap: unknown option 'tries'", err, 1, true)
    err = raised_here(function() backoff.wrap(nil, print) end)
    assert.matches("backoff.wrap: argument 'policy'", err, 1, true)
    err = raised_here(function()
      backoff.wrap(backoff.constant { delay = 0 }, print)
    end)
    assert.matches("backoff.wrap: the policy has no stop condition", err,
                   1, true)
  end)
end)

describe("backoff.sleep", function()
  it("raises at the caller's line, in the C function's words", function()
    for _, v in ipairs { -5, 0 / 0, math.huge, "1" } do
      local err = raised_here(function() backoff.sleep(v) end)
      assert.matches("bad argument #1 to 'sleep' (seconds must be a finite "
                     .. "number >= 0 (got ", err, 1, true)
    end
    assert.matches("(got -5))", raised_here(function() backoff.sleep(-5) end),
                   1, true)
  end)
end)

describe("a lower-case method", function()
  it("is refused by the HTTP doors, naming the method to write",
     function()
    local calls = 0
    local err = raised_here(function()
      http.request(backoff.recommended(), function()
        calls = calls + 1
        return nil, "x"
      end, { method = "get" })
    end)
    assert.equal(0, calls)
    assert.matches("option 'method'", err, 1, true)
    assert.matches("case-sensitive", err, 1, true)
    assert.matches('write "GET"', err, 1, true)
    err = raised_here(function()
      hedge.request(backoff.recommended(), function() end,
                    { method = "Post", delay = 0.05, budget = false })
    end)
    assert.matches('write "POST"', err, 1, true)
  end)

  it("leaves other methods as they are written", function()
    local r = http.request(backoff.recommended(), function()
      return { status = 200 }
    end, { method = "PROPFIND" })
    assert.equal(200, r.status)
    -- an extension method in lower case is a method of its own
    r = http.request(backoff.recommended(), function()
      return { status = 200 }
    end, { method = "purge" })
    assert.equal(200, r.status)
  end)
end)

describe("a hedge delay", function()
  local function hedged(p, delay)
    return raised_here(function()
      hedge.request(p, function() end,
                    { method = "GET", delay = delay, budget = false })
    end)
  end

  it("not below the policy's deadline is an error naming 'delay'",
     function()
    local err = hedged(backoff.recommended(), 50)
    assert.matches("option 'delay' is 50 s, not below the policy's "
                   .. "deadline (max_actual_duration 10 s)", err, 1, true)
    assert.matches("0.05 for 50 ms", err, 1, true)
    err = hedged(backoff.recommended(), 10)
    assert.matches("not below the policy's deadline", err, 1, true)
  end)

  it("above a minute without a deadline is an error", function()
    local p = backoff.constant { delay = 0, max_attempts = 2 }
    local err = hedged(p, 200)
    assert.matches("option 'delay' is 200 s: a hedge waits at most 60 s",
                   err, 1, true)
  end)

  it("below the deadline goes on (to the phase check, outside nginx)",
     function()
    local err = hedged(backoff.recommended(), 0.05)
    assert.matches("needs nginx's light threads", err, 1, true)
  end)

  it("of an estimator: its min_delay is held to the same bound",
     function()
    local est = hedge.latency { min_delay = 0.5, max_delay = 20,
                                shared = false }
    local p = backoff.recommended { max_actual_duration = 0.4 }
    local err = hedged(p, est)
    assert.matches("the estimator's min_delay (option 'delay') is 0.5 s",
                   err, 1, true)
  end)

  it("hedge.latency's min_delay in milliseconds is an error", function()
    local ok, err = pcall(hedge.latency, { min_delay = 5, shared = false })
    assert.is_false(ok)
    assert.matches("option 'min_delay'", err, 1, true)
    assert.matches("times are seconds (0.005 for 5 ms)", err, 1, true)
  end)
end)

describe("messages that read well", function()
  it("a wait refused in a phase gives 3 digits, not 15", function()
    assert.equal("0.123", phase.seconds_text(0.12345678901234))
    assert.equal("0.5", phase.seconds_text(0.5))
    assert.equal("12.3", phase.seconds_text(12.345678))
    assert.equal("1235", phase.seconds_text(1234.5678))
    local saved = rawget(_G, "ngx")
    rawset(_G, "ngx", { get_phase = function() return "log" end })
    local ok, err = pcall(backoff.retry, backoff.recommended { seed = 3 },
      function() return nil, "x" end)
    rawset(_G, "ngx", saved)
    assert.is_false(ok)
    local d = err:match("cannot wait (%S+) s in nginx's log phase")
    assert.is_truthy(d, err)
    -- at most 3 significant digits
    assert.is_true(#(d:gsub("^0%.0*", ""):gsub("%.", "")) <= 3, d)
  end)

  it("one token is a token", function()
    local s = tostring(budget.recommended())
    assert.matches(": 1 token of a reserve of 1 ", s, 1, true)
    local b = budget.earned { span = 0, capacity = 8 }
    assert.matches(": 8 tokens of a reserve of 8 ", tostring(b), 1, true)
  end)
end)

-- (spec/rock/run.sh runs the specs against an installed rock, in a
-- folder with no bin/ and no build: these two are a checkout's, run by
-- the five busted suites of make test)
local cwd = io.popen("pwd"):read("*l")
local in_checkout = io.open(cwd .. "/bin/backoff-delays") ~= nil
  and io.open(cwd .. "/lua/backoff/cli.lua") ~= nil

;(in_checkout and describe or function() end)(
"bin/backoff-delays from a checkout", function()
  local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
  local root = cwd
  local tmp = os.tmpname()
  os.remove(tmp)

  local function run(cmd)
    local p = io.popen(cmd .. " 2>&1; echo \"exit $?\"")
    local out = p:read("*a")
    p:close()
    return out
  end

  it("runs a Lua whose module is built, whatever `lua` is", function()
    -- a `lua` first in PATH that is not one (Debian's lua -> 5.2)
    assert(os.execute("mkdir -p " .. q(tmp .. "/fake")))
    local f = assert(io.open(tmp .. "/fake/lua", "w"))
    f:write("#!/bin/sh\necho 'the wrong lua' >&2\nexit 1\n")
    f:close()
    os.execute("chmod +x " .. q(tmp .. "/fake/lua"))
    local out = run("cd " .. q(tmp) .. " && env -u LUA_PATH -u LUA_CPATH "
      .. "PATH=" .. q(tmp .. "/fake") .. ":\"$PATH\" "
      .. q(root .. "/bin/backoff-delays") .. " -a constant --delay 2 0 0")
    assert.equal("2\n2\nexit 0\n", out)
  end)

  it("says what to build when nothing is built", function()
    assert(os.execute("mkdir -p " .. q(tmp .. "/co/bin") .. " "
      .. q(tmp .. "/co/lua/backoff")))
    assert(os.execute("cp " .. q(root .. "/bin/backoff-delays") .. " "
      .. q(tmp .. "/co/bin/") .. " && cp " .. q(root
      .. "/lua/backoff/cli.lua") .. " " .. q(tmp .. "/co/lua/backoff/")))
    local out = run(q(tmp .. "/co/bin/backoff-delays") .. " -a constant "
      .. "--delay 2 0")
    assert.matches("no module built in " .. tmp .. "/co/build/", out, 1,
                   true)
    assert.matches("run make (Lua 5.4), or make LUA_VERSION=5.1", out, 1,
                   true)
    assert.matches("exit 2\n$", out)
  end)

  teardown(function() os.execute("rm -rf " .. q(tmp)) end)
end)

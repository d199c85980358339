-- The runner is safe by default: no policy that retries for ever, no
-- raised error retried as if it were an outage, no forgotten policy
-- taken for something else, no hint hook that can be mistaken for
-- backoff.retry_after; and the first five minutes: backoff.wrap and
-- backoff.recommended.  Fake time throughout.
local backoff = require "backoff"
local http = require "backoff.http"

local HERE = debug.getinfo(1, "S").short_src
local function pack(...) return { n = select("#", ...), ... } end
local nosleep = function() end

-- f's error, which must be raised at this file's line
local function raised_here(f)
  local ok, err = pcall(f)
  assert.is_false(ok)
  assert.equal("string", type(err))
  assert.equal(1, err:find(HERE, 1, true), err)
  return err
end

describe("a policy with no stop condition", function()
  local forever = { backoff.constant { delay = 0 },
                    backoff.exponential { initial_delay = 1, max_delay = 2 },
                    backoff.eventsauce { initial_delay = 0.1, max_tries = -1 },
                    backoff.cenkalti { max_elapsed_time = 0 } }

  it("is refused by backoff.retry, b:retry and http.request, naming "
     .. "the way out", function()
    for _, p in ipairs(forever) do
      local calls = 0
      local fn = function() calls = calls + 1 return true end
      -- (no tail calls: they would take the caller's line away)
      for _, call in ipairs {
        function() local r = backoff.retry(p, fn) return r end,
        function() local r = p:retry(fn, { sleep = nosleep }) return r end,
        function() local r = backoff.retry(p:config(), fn) return r end,
        function()
          local r = http.request(p, fn, { method = "GET" })
          return r
        end,
      } do
        local err = raised_here(call)
        assert.matches("no stop condition", err, 1, true)
        assert.matches("unlimited = true", err, 1, true)
      end
      assert.equal(0, calls)
    end
  end)

  it("runs when unlimited retries are asked for", function()
    local r, n = backoff.retry(backoff.constant { delay = 0 }, function(a)
      if a < 50 then return nil, "again" end
      return "done", a
    end, { unlimited = true, sleep = nosleep })
    assert.same({ "done", 50 }, { r, n })
  end)

  it("is accepted when the system stops by itself", function()
    for _, p in ipairs {
      backoff.google {},                            -- 900 s
      backoff.cenkalti { max_elapsed_time = 0, max_retries = 2 },
      backoff.eventsauce { initial_delay = 0, max_tries = 3 },
      backoff.polly { delay = 0 },
      backoff.constant { delay = 0, max_actual_duration = 5 },
    } do
      assert.equal("ok", (backoff.retry(p, function() return "ok" end)))
    end
  end)

  it("is still driven by hand as the Perl reference drives it", function()
    local b = backoff.constant { delay = 1 }
    for _ = 1, 1000 do assert.equal(1, (b:failure(0))) end
  end)
end)

describe("an error raised by fn", function()
  it("is not retried: it reaches the caller as raised, its traceback "
     .. "whole", function()
    local calls = 0
    local function buggy()
      calls = calls + 1
      local t = nil
      return t.field                               -- a bug, not an outage
    end
    local ok, trace = xpcall(function()
      return backoff.retry(backoff.constant { delay = 0, max_attempts = 5 },
                           buggy, { sleep = nosleep })
    end, debug.traceback)
    assert.is_false(ok)
    assert.equal(1, calls)
    assert.matches("attempt to index", trace, 1, true)
    -- the traceback still goes through fn's own frame
    assert.matches("in function <" .. HERE, trace, 1, true)
  end)

  it("passes an error value on as it is", function()
    local e = { code = 42 }
    local ok, got = pcall(backoff.retry,
      backoff.constant { delay = 0, max_attempts = 5 },
      function() error(e) end)
    assert.is_false(ok)
    assert.equal(e, got)
  end)

  it("is a failure with retry_raised, and the hooks see the traceback",
    function()
      local seen = {}
      local r = pack(backoff.retry(backoff.constant { delay = 0,
        max_attempts = 2 }, function() error("boom") end, {
        sleep = nosleep, retry_raised = true,
        on_retry = function(err) seen[#seen + 1] = err end,
        on_giveup = function(err) seen[#seen + 1] = err end }))
      assert.is_nil(r[1])
      assert.equal("max_attempts", r[3])
      assert.equal(2, #seen)
      for _, err in ipairs(seen) do
        assert.matches(": boom\nstack traceback:", err, 1, true)
      end
      assert.equal(seen[2], r[2])
    end)

  it("is refused as an option that is not a boolean", function()
    local err = raised_here(function()
      backoff.retry(backoff.constant { delay = 0, max_attempts = 2 },
        function() return true end, { retry_raised = 1 })
    end)
    assert.matches("option 'retry_raised' must be a boolean (got 1)", err, 1,
                   true)
  end)
end)

describe("the natural wrong calls", function()
  it("backoff.retry(fn) says the policy is missing, with the usage", function()
    local err = raised_here(function()
      backoff.retry(function() return true end)
    end)
    assert.matches("backoff.retry: argument 'policy' must be a backoff "
      .. "object or an options table (got function); usage: "
      .. "backoff.retry(policy, fn [, ropts])", err, 1, true)
  end)

  it("a policy and no fn names fn, with the usage", function()
    local err = raised_here(function()
      backoff.retry(backoff.constant { delay = 0, max_attempts = 2 })
    end)
    assert.matches("argument 'fn' must be a function (got nil); usage:",
                   err, 1, true)
  end)
end)

describe("the hint hook", function()
  local p = backoff.constant { delay = 0.1, max_attempts = 3 }
  local function busy(a) if a < 3 then return nil, "busy" end return a end

  it("is server_hint(err, attempt), and retry_after still works", function()
    for _, key in ipairs { "server_hint", "retry_after" } do
      local slept, asked = {}, {}
      local r = backoff.retry(p, busy, {
        sleep = function(d) slept[#slept + 1] = d end,
        [key] = function(err, attempt)
          asked[#asked + 1] = { err, attempt }
          return attempt == 1 and 2 or nil
        end })
      assert.equal(3, r)
      assert.same({ 2, 0.1 }, slept)
      assert.same({ { "busy", 1 }, { "busy", 2 } }, asked)
    end
  end)

  it("cannot be backoff.retry_after, whose second argument is the time",
    function()
      for _, key in ipairs { "server_hint", "retry_after" } do
        local err = raised_here(function()
          backoff.retry(p, busy, { [key] = backoff.retry_after })
        end)
        assert.matches("backoff.retry_after takes (value, now)", err, 1,
                       true)
      end
    end)

  it("is bounded by ropts.max_hint", function()
    local r = pack(backoff.retry(p, busy, { sleep = nosleep, max_hint = 1,
      server_hint = function() return 1.5 end }))
    assert.same({ n = 3, nil, "busy", "retry_after" }, r)
  end)
end)

describe("backoff.wrap", function()
  it("returns a function that retries fn with its own arguments", function()
    local calls = {}
    local add = backoff.wrap(backoff.constant { delay = 0, max_attempts = 3 },
      function(a, b)
        calls[#calls + 1] = { a, b }
        if #calls < 2 then return nil, "flaky" end
        return a + b, "sum"
      end, { sleep = nosleep })
    assert.same({ 5, "sum" }, { add(2, 3) })
    assert.same({ { 2, 3 }, { 2, 3 } }, calls)
  end)

  it("gives up as backoff.retry does", function()
    local f = backoff.wrap(backoff.constant { delay = 0, max_attempts = 2 },
      function() return nil, "down" end, { sleep = nosleep })
    assert.same({ n = 3, nil, "down", "max_attempts" }, pack(f()))
  end)

  it("passes nil arguments and many results through", function()
    local f = backoff.wrap(backoff.constant { delay = 0, max_attempts = 1 },
      function(...) return select("#", ...), ... end)
    assert.same({ n = 4, 3, nil, 2, nil }, pack(f(nil, 2, nil)))
  end)

  it("checks its arguments when it wraps", function()
    local err = raised_here(function()
      backoff.wrap(backoff.constant { delay = 0 }, print)
    end)
    assert.matches("no stop condition", err, 1, true)
    err = raised_here(function() backoff.wrap(print) end)
    assert.matches("argument 'policy'", err, 1, true)
  end)
end)

describe("backoff.recommended", function()
  it("is the documented policy", function()
    local c = backoff.recommended():config()
    assert.equal("exponential", c.strategy)
    assert.equal(0.1, c.initial_delay)
    assert.equal(5, c.max_delay)
    assert.equal("full", c.jitter)
    assert.equal(4, c.max_attempts)
    assert.equal(10, c.max_actual_duration)
  end)

  it("takes any option of backoff.exponential as an override", function()
    local c = backoff.recommended { max_attempts = 6, seed = 7 }:config()
    assert.equal(6, c.max_attempts)
    assert.equal(7, c.seed)
    assert.equal("full", c.jitter)
  end)

  it("names itself in its errors", function()
    local err = raised_here(function()
      backoff.recommended { max_attemps = 3 }
    end)
    assert.matches("backoff.recommended: unknown option 'max_attemps'", err,
                   1, true)
    err = raised_here(function() backoff.recommended(5) end)
    assert.matches("backoff.recommended: options must be a table", err, 1,
                   true)
  end)
end)

describe("times are seconds", function()
  it("refuses an initial delay above the largest delay", function()
    local err = raised_here(function()
      backoff.exponential { initial_delay = 100, max_delay = 10 }
    end)
    assert.matches("initial_delay", err, 1, true)
  end)
end)

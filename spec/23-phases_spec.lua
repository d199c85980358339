-- OpenResty phases: no wait ever blocks an nginx worker in a request
-- phase.  A fake ngx whose get_phase the test sets.
local backoff = require "backoff"

local function pack(...) return { n = select("#", ...), ... } end

describe("nginx phases", function()
  local saved, fake
  before_each(function()
    saved = rawget(_G, "ngx")
    fake = { slept = {}, phase = "content" }
    fake.get_phase = function() return fake.phase end
    fake.sleep = function(d) fake.slept[#fake.slept + 1] = d end
    rawset(_G, "ngx", fake)
  end)
  after_each(function() rawset(_G, "ngx", saved) end)

  local no_yield = { "set", "header_filter", "body_filter", "log",
                     "balancer", "exit_worker", "ssl_session_store",
                     "some_future_phase" }
  local yields = { "rewrite", "server_rewrite", "access", "content",
                   "timer", "ssl_cert", "ssl_session_fetch",
                   "ssl_client_hello", "preread" }

  local function failing() return nil, "down" end

  describe("backoff.retry with the default sleep", function()
    it("raises in a phase that cannot yield, naming the phase and what "
       .. "to do, before anything is paid", function()
      for _, phase in ipairs(no_yield) do
        fake.phase = phase
        local calls, retried, withdrawn = 0, 0, 0
        local bud = { withdraw = function()
          withdrawn = withdrawn + 1 return true end,
          deposit = function() end }
        local ok, err = pcall(backoff.retry,
          backoff.constant { delay = 0.5, max_attempts = 3 },
          function() calls = calls + 1 return nil, "down" end,
          { budget = bud, on_retry = function() retried = retried + 1 end })
        assert.is_false(ok)
        assert.matches("backoff.retry: cannot wait 0.5 s in nginx's "
          .. phase .. " phase", err, 1, true)
        assert.matches("pass ropts.sleep, or retry from a timer "
          .. "(ngx.timer.at)", err, 1, true)
        assert.is_nil(err:find("\n"))
        assert.same({ 1, 0, 0 }, { calls, retried, withdrawn })
        assert.same({}, fake.slept)
      end
    end)

    it("retries without waiting when the delay is 0", function()
      fake.phase = "log"
      local r = pack(backoff.retry(backoff.constant { delay = 0,
        max_attempts = 3 }, failing))
      assert.same({ n = 3, nil, "down", "max_attempts" }, r)
    end)

    it("uses ropts.sleep where given", function()
      for _, phase in ipairs(no_yield) do
        fake.phase = phase
        local got = {}
        backoff.retry(backoff.constant { delay = 0.5, max_attempts = 2 },
          failing, { sleep = function(d) got[#got + 1] = d end })
        assert.same({ 0.5 }, got)
      end
    end)

    it("uses ngx.sleep where it yields", function()
      for _, phase in ipairs(yields) do
        fake.phase, fake.slept = phase, {}
        backoff.retry(backoff.constant { delay = 0.25, max_attempts = 2 },
          failing)
        assert.same({ 0.25 }, fake.slept, phase)
      end
    end)

    it("blocks only in init and init_worker", function()
      for _, phase in ipairs { "init", "init_worker" } do
        fake.phase = phase
        local r = pack(backoff.retry(backoff.constant { delay = 0.001,
          max_attempts = 2 }, failing))
        assert.same({ n = 3, nil, "down", "max_attempts" }, r)
        assert.same({}, fake.slept)         -- the blocking sleep, not ngx's
      end
    end)
  end)

  describe("backoff.sleep", function()
    it("refuses to block a request phase", function()
      for _, phase in ipairs(no_yield) do
        fake.phase = phase
        assert.error_matches(function() backoff.sleep(0.01) end,
          "backoff.sleep: cannot wait 0.01 s in nginx's " .. phase
          .. " phase", nil, true)
        assert.error_matches(function() backoff.sleep(0.01) end,
          "wait in a timer (ngx.timer.at)", nil, true)
      end
      for _, phase in ipairs(yields) do
        fake.phase = phase
        assert.error_matches(function() backoff.sleep(1) end,
          "use ngx.sleep, which yields", nil, true)
      end
    end)

    it("sleeps in init, init_worker and outside nginx; 0 anywhere",
      function()
        for _, phase in ipairs { "init", "init_worker" } do
          fake.phase = phase
          assert.has_no.errors(function() backoff.sleep(0.001) end)
        end
        fake.phase = "log"
        assert.has_no.errors(function() backoff.sleep(0) end)
        rawset(_G, "ngx", nil)
        assert.has_no.errors(function() backoff.sleep(0.001) end)
      end)

    it("still refuses bad arguments by name", function()
      fake.phase = "log"
      for _, bad in ipairs { -1, 0 / 0, "1", {} } do
        assert.has_error(function() backoff.sleep(bad) end)
      end
    end)
  end)
end)
